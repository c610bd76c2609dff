"""The SparCML reference applications: microbenchmark, linear models, deep models, reports."""

__all__: list[str] = []
