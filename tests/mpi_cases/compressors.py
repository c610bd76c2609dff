"""Every named compressor (sparcml.compression.COMPRESSORS) on P ranks, torch-free: a few
steps of SGD on a small least-squares problem, each rank with its own data, the gradient
reduced by the compressor:

- every rank gets the same result and so ends with identical parameters (bytes compared);
- the result is the sum of what the ranks sent (the sum-type compressors: each rank's
  ``sent`` gathered and added; signSGD / signum: ``P * sign(sum of the ranks' signs)``; the
  16-bit casts: within the rounding of a 16-bit sum);
- with error feedback the residual is exactly ``g - sent``;
- random-k with shared indices: every rank sends the same positions; without: not;
- the bytes counted are those of the compressor's wire format.

Run with ``python -m mpi4py``; rank 0 prints ``COMPRESSORS <n> OK``.
"""

import numpy as np
from mpi4py import MPI

from sparcml import TrafficStats
from sparcml._runtime.context import context_for
from sparcml.compression import COMPRESSORS, build

from _mpi_checks import ok, passed

comm = MPI.COMM_WORLD
rank, P = comm.Get_rank(), comm.Get_size()
ctx = context_for(comm)
N = 409
A = np.random.default_rng([5, rank]).standard_normal((16, N)).astype(np.float32)
y = np.random.default_rng([6, rank]).standard_normal(16).astype(np.float32)


def same_everywhere(arr) -> bool:
    mine = np.ascontiguousarray(arr).tobytes()
    return all(x == mine for x in comm.allgather(mine))


cases = [(name, {}) for name in COMPRESSORS] + [("randomk", {"shared": True}),
                                                ("topk", {"bits": 4}),
                                                ("threshold", {"bits": 2})]
for name, extra in cases:
    opts = {"density": 0.05, "threshold": 0.5, "rank": 2, **extra}
    if name == "qsgd":
        opts["bits"] = 4
    c = build(name, **opts).fresh(seed=11)
    w = np.zeros(N, np.float32)
    what = f"{name} {extra}"
    for step in range(3):
        grad = (A.T @ (A @ w - y)) / 16
        old = c.memory.residual(0)
        stats = TrafficStats()
        r = c.allreduce_in(ctx, grad, key=0, stats=stats)
        res = r.result.to_dense()
        ok(same_everywhere(res), f"{what} step {step}: ranks differ")
        sent = r.sent.to_dense()
        everyone = comm.allgather(sent.astype(np.float64))
        if name in ("signsgd", "signum"):
            ok(np.array_equal(res, P * np.sign(sum(np.sign(s) for s in everyone))),
               f"{what}: the majority vote (sign(0) = 0 abstains)")
        elif name in ("fp16", "bf16"):
            ok(np.allclose(res, sum(everyone), rtol=2 ** -6, atol=1e-3 * P), f"{what}: ~ sum")
        elif c.quantizer is not None and P > 2:
            pass  # quantized sums at P = 3 are checked in tests/mpi_cases/compression.py
        else:
            ok(np.allclose(res, sum(everyone), rtol=1e-4, atol=1e-4),
               f"{what}: result == sum of sent")
        if c.memory.error_feedback and name != "dgc":  # DGC's g: tests/test_compressors.py
            g = grad + old if old is not None else grad
            ok(np.allclose(c.memory.residual(0), g - sent, rtol=0, atol=1e-6),
               f"{what}: residual == g - sent")
        if name == "randomk" and P > 1:
            idx = comm.allgather(r.sent.indices.tobytes())
            ok((len(set(idx)) == 1) == bool(extra.get("shared")), f"{what}: index sets")
        if name == "efsignsgd" and P > 1:
            ok(stats.bytes_sent == (P - 1) * (2 * ((N + 7) // 8) + 4),
               f"{what}: 2 bits per value + a scale")
        if name == "signsgd" and P > 1:
            ok(stats.bytes_sent == (P - 1) * 2 * ((N + 7) // 8), f"{what}: 2 bits per value")
        if name == "terngrad" and P > 1:
            ok(stats.bytes_sent == (P - 1) * (2 * ((N + 7) // 8) + 4),
               f"{what}: 2 bits per value + a scaler")
        w -= np.float32(0.01) * res / P
    ok(np.isfinite(w).all() and same_everywhere(w), f"{what}: parameters identical")

total = comm.allreduce(passed())
if rank == 0:
    print(f"COMPRESSORS {total // P} OK", flush=True)
