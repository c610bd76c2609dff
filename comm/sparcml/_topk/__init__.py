"""``topk_allreduce``: the global top-k of a sum, its selection rule and kernels, the local
selection (``TopK``) and the one-node shared-memory exchange.

Internal: the public API is ``sparcml``'s ``__all__``."""
