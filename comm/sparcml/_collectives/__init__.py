"""The sparse collectives: the allreduce entry point, the algorithm registry and its
algorithms, partitions, the node-aware path, local arithmetic and exchanges, allgather /
reduce_scatter / bcast, argument validation.

Internal: the public API is ``sparcml``'s ``__all__``."""
