"""The wire format: message codec, headers, compressed index codes.

Internal: the public API is ``sparcml``'s ``__all__``."""
