"""The operations of a simulation under ``compute="model"``: each kernel charged its rate
times its exact work (:mod:`sparcml.sim._rates`), whatever it took on this machine.

Package-internal. :class:`ModelOps` wraps the run's operations (the sharing ones of
:mod:`sparcml.sim._sharing`, or the plain ones): every method is the wrapped one's, and the
kernels (``add``, ``fold_parts``, ``assemble``, ``encode``, ``decode``) also charge the calling
rank ``op + rate x work``. A memoized kernel (computed once for many ranks) is charged to every
rank that calls it, as a real rank would compute it. Methods it does not know (moving bytes,
the sharing operations' own) are passed through unchanged.
"""

from __future__ import annotations

from ._credit import charge_work, modeled

__all__ = ["ModelOps", "work_add", "work_fold", "work_assemble"]


def _n(x) -> int:
    return int(x.values.shape[0])


def work_add(a, b, out) -> int:
    """Entries an ``add`` reads and writes."""
    return _n(a) + _n(b) + _n(out)


def work_fold(parts, out) -> int:
    """Entries a ``fold_parts`` reads and writes."""
    return sum(_n(p) for p in parts) + _n(out)


def work_assemble(blocks, out) -> int:
    """Entries an ``assemble`` reads and writes."""
    return sum(_n(b) for b in blocks) + _n(out)


class ModelOps:
    """``inner``'s operations; the kernels charge their modeled cost in rank threads."""

    def __init__(self, inner, rates: dict):
        self._inner = inner
        self._rates = rates

    def __getattr__(self, name):
        return getattr(self._inner, name)

    def _charge(self, kernel: str, work: float) -> None:
        if modeled():
            r = self._rates
            charge_work(r["op"] + r[kernel] * work)

    def encode(self, codec, part, *, known_dense=False, seed=None):
        out = self._inner.encode(codec, part, known_dense=known_dense, seed=seed)
        self._charge("encode", out[0].nbytes)
        return out

    def decode(self, buf, out=None, *, streaming=False, check=False):
        part = self._inner.decode(buf, out, streaming=streaming, check=check)
        self._charge("decode", buf.nbytes)
        return part

    def add(self, a, b, codec, *, workspace=None, intermediate=False, role="add"):
        out = self._inner.add(a, b, codec, workspace=workspace, intermediate=intermediate,
                              role=role)
        self._charge("add", work_add(a, b, out))
        return out

    def fold_parts(self, parts, offset, length, codec, force_dense=False, *, workspace=None,
                   intermediate=False, role="fold"):
        out = self._inner.fold_parts(parts, offset, length, codec, force_dense,
                                     workspace=workspace, intermediate=intermediate, role=role)
        self._charge("fold", work_fold(parts, out))
        return out

    def assemble(self, blocks, dim, codec):
        out = self._inner.assemble(blocks, dim, codec)
        self._charge("assemble", work_assemble(blocks, out))
        return out
