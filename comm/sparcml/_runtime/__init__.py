"""Per-communicator runtime: context, the public per-call context plugins receive
(:class:`sparcml.CallContext`), waiting, the non-blocking engine, agreement, aborting,
scratch buffers, shared-memory windows.

Internal: the public API is ``sparcml``'s ``__all__``."""
