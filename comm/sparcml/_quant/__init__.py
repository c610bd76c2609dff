"""QSGD quantization and its kernels.

Internal: the public API is ``sparcml``'s ``__all__``."""
