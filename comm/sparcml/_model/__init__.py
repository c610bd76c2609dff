"""The cost model, ``auto`` and its measured tuning, what links and index codes cost.

Internal: the public API is ``sparcml``'s ``__all__``."""
