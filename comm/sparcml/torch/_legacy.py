"""The keyword arguments of ``DistributedOptimizer`` before ``compression=`` (deprecated).

``density``, ``k``, ``bits``, ``bucket_size`` (bytes), ``algorithm``, ``error_feedback``,
``topk_bucket_size`` and ``quantizer_bucket_size`` still work for one release: they warn with a
:class:`DeprecationWarning` that spells the call with :class:`~sparcml.compression.Compression`,
and build that object. They keep their old errors (:class:`~sparcml.IncompatibleOptionsError`
for ``density`` outside (0, 1] or both ``density`` and ``k``).
"""

from __future__ import annotations

import warnings

from .._collectives.algorithms import DEFAULT_ALGORITHM
from ..compression._objects import (Compression, NoneCompressor, NoneMemory, ResidualMemory,
                                    TopKCompressor)
from .._errors import IncompatibleOptionsError
from .._quant.qsgd import QSGD

__all__ = ["DEPRECATED", "check_names", "warn", "translate"]

DEPRECATED = ("density", "k", "bits", "bucket_size", "algorithm", "error_feedback",
              "topk_bucket_size", "quantizer_bucket_size")
_QSGD_BUCKET = 1024  # QSGD's default bucket_size, which quantizer_bucket_size defaulted to


#: Horovod's DistributedOptimizer keywords that sparcml has no counterpart for, and why
HOROVOD_ONLY = {
    "op": "sparcml always averages (the sum over ranks divided by P)",
    "gradient_predivide_factor": "the sum is divided by P once, after the reduction",
    "num_groups": "buckets are cut by size: pass bucket_bytes=",
    "groups": "buckets are cut by size: pass bucket_bytes=",
    "sparse_as_dense": "sparse gradients are not reduced: build the layers with sparse=False",
    "process_set": "pass an mpi4py communicator as comm=",
}


def check_names(kwargs: dict) -> None:
    """TypeError, as Python's own, for a keyword that never existed; for a Horovod keyword
    without a counterpart, :class:`~sparcml.IncompatibleOptionsError` saying what to do."""
    for name in kwargs:
        if name in HOROVOD_ONLY:
            raise IncompatibleOptionsError(f"Horovod's {name}= has no sparcml counterpart: "
                                           f"{HOROVOD_ONLY[name]}")
        if name not in DEPRECATED:
            raise TypeError(f"DistributedOptimizer() got an unexpected keyword argument "
                            f"{name!r}")


def _spelling(kw: dict) -> str:
    """The new call, as text, from the old keywords (never raises)."""
    density, k, bits = kw.get("density"), kw.get("k"), kw.get("bits")
    topk = density is not None or k is not None
    chunk = kw.get("topk_bucket_size")
    if topk:
        what = f"density={density!r}" if density is not None else f"k={k!r}"
        compressor = f"TopKCompressor({what}" + (f", chunk={chunk!r})" if chunk else ")")
    else:
        compressor = "NoneCompressor()"
    args = [compressor]
    imports = {compressor.split("(")[0]}
    if bits is not None:
        qbs = kw.get("quantizer_bucket_size", _QSGD_BUCKET)
        args.append(f"quantizer=QSGD({bits!r}" + (
            f", bucket_size={qbs!r})" if qbs != _QSGD_BUCKET else ")"))
    memory = "ResidualMemory()" if topk and kw.get("error_feedback", True) else "NoneMemory()"
    args.append(f"memory={memory}")
    imports.add(memory[:-2])
    if kw.get("algorithm", DEFAULT_ALGORITHM) != DEFAULT_ALGORITHM:
        args.append(f"algorithm={kw['algorithm']!r}")
    call = f"compression=Compression({', '.join(args)})"
    if "bucket_size" in kw:
        call += f", bucket_bytes={kw['bucket_size']!r}"
    names = ", ".join(["Compression", *sorted(imports)])
    return (f"DistributedOptimizer(optimizer, named_parameters, {call})  (from "
            f"sparcml.compression import {names}" + ("; from sparcml import QSGD)"
                                                      if bits is not None else ")"))


def warn(kwargs: dict, stacklevel: int) -> None:
    old = ", ".join(f"{name}=" for name in kwargs)
    warnings.warn(f"DistributedOptimizer({old}...) is deprecated and will be removed after the "
                  f"next release; write {_spelling(kwargs)}", DeprecationWarning,
                  stacklevel=stacklevel + 1)


def translate(kw: dict, compression, bucket_bytes: int, default_bucket_bytes: int):
    """``(Compression, bucket_bytes)`` from the old keywords; raises what the old call did."""
    if compression is not None:
        raise IncompatibleOptionsError(
            f"give compression=... or the deprecated keywords ({', '.join(kw)}), not both")
    if "bucket_size" in kw:
        if bucket_bytes != default_bucket_bytes:
            raise IncompatibleOptionsError("give bucket_bytes (the new name), not also "
                                           "bucket_size")
        bucket_bytes = kw["bucket_size"]
        if isinstance(bucket_bytes, bool) or not isinstance(bucket_bytes, int) \
                or bucket_bytes < 1:
            raise IncompatibleOptionsError(f"bucket_size must be a number of bytes >= 1, "
                                           f"got {bucket_bytes!r}")
    density, k, bits = kw.get("density"), kw.get("k"), kw.get("bits")
    if density is not None and k is not None:
        raise IncompatibleOptionsError(
            f"give density or k, not both (got density={density}, k={k})")
    if density is not None and not (isinstance(density, (int, float)) and 0 < density <= 1):
        raise IncompatibleOptionsError(f"density must be in (0, 1], got {density!r}")
    topk = density is not None or k is not None
    compressor = (TopKCompressor(density=density, k=k, chunk=kw.get("topk_bucket_size"))
                  if topk else NoneCompressor())
    quantizer = None if bits is None else QSGD(bits, bucket_size=kw.get(
        "quantizer_bucket_size", _QSGD_BUCKET))
    memory = ResidualMemory() if topk and kw.get("error_feedback", True) else NoneMemory()
    algorithm = kw.get("algorithm", DEFAULT_ALGORITHM)
    return Compression(compressor, quantizer, memory, algorithm), bucket_bytes
