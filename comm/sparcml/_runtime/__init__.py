"""Per-communicator runtime: context, waiting, the non-blocking engine, agreement, aborting,
scratch buffers, shared-memory windows.

Internal: the public API is ``sparcml``'s ``__all__``."""
