"""One rank's software time in a split allreduce: P messages one by one vs packed, side by side.

    python scripts/packed_vs_parts.py [--P 64 256 1024] [--N 16777216] [--density 0.001]
                                      [--reps 5]

What rank 0 computes in ``ssar_split_allgather`` at P ranks (no MPI: the other ranks' messages
are encoded here from their own random inputs, density per rank, float32, seed [rank]): phase 1
encodes its P parts and sums the P parts it receives; phase 2 assembles the P blocks of the
allgather. Each step timed both ways on the same bytes (best of ``--reps``, thread CPU time):
the per-message path (``Codec.encode`` / ``decode`` per message, ``fold_parts``, ``assemble``)
and the packed kernels (``encode_split``, ``fold_packed``, ``assemble_packed``); the results
are checked bitwise equal. Printed beside them: what the simulator charges each step under
``compute="model"`` (``sparcml.sim._rates``, this machine's cached rates), so that the
model's per-message and per-call rates can be checked against the measured times.
"""

import argparse
import time

import numpy as np

from sparcml import SparseVector, block_bounds
from sparcml._collectives import arith
from sparcml._collectives.exchange import split_parts
from sparcml._wire.codec import Codec
from sparcml._wire.packed import encode_split


def _best(fn, reps):
    best, out = float("inf"), None
    for _ in range(reps):
        t0 = time.thread_time()
        out = fn()
        best = min(best, time.thread_time() - t0)
    return best, out


def _same(a, b):
    ai, bi = getattr(a, "indices", None), getattr(b, "indices", None)
    return (ai is None) == (bi is None) and (ai is None or ai.tobytes() == bi.tobytes()) \
        and a.values.tobytes() == b.values.tobytes()


def _inputs(P, N, density):
    k = max(1, int(N * density))
    for rank in range(P):
        rng = np.random.default_rng([rank])
        yield SparseVector.unchecked(N, np.sort(rng.choice(N, k, replace=False))
                                     .astype(np.int32), rng.standard_normal(k)
                                     .astype(np.float32))


def _pack(bufs):
    sizes = np.array([b.nbytes for b in bufs], np.int64)
    displs = np.zeros_like(sizes)
    np.cumsum(sizes[:-1], out=displs[1:])
    return np.concatenate(bufs), displs, sizes


def _modeled(ops, charged, fn):
    """Seconds the simulator charges for ``fn(ops)`` under ``compute="model"``."""
    charged.clear()
    fn(ops)
    return sum(charged)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--P", type=int, nargs="+", default=[64, 256, 1024])
    ap.add_argument("--N", type=int, default=1 << 24)
    ap.add_argument("--density", type=float, default=0.001)
    ap.add_argument("--reps", type=int, default=5)
    a = ap.parse_args()
    import sparcml.sim._model_ops as model_ops
    from sparcml._collectives.ops import PLAIN
    from sparcml.sim import run
    from sparcml.sim._rates import kernel_rates

    rates = kernel_rates(run)
    charged: list = []
    model_ops.modeled = lambda: True  # this thread stands for a simulated rank
    model_ops.charge_work = charged.append
    ops = model_ops.ModelOps(PLAIN, rates)
    codec = Codec(np.int32, np.float32)
    print(f"N = {a.N}, density {a.density:g}, float32; rank 0's work; best of {a.reps}; "
          f"ms (thread CPU) / modeled ms")
    print(f"{'P':>5} {'step':<18} {'per message':>12} {'packed':>10} {'speed-up':>9} "
          f"{'model, per msg':>15} {'model, packed':>14}", flush=True)
    for P in a.P:
        bounds = block_bounds(a.N, P)
        lo, hi = int(bounds[0]), int(bounds[1])
        inputs = list(_inputs(P, a.N, a.density))
        cut = [split_parts(v, bounds) for v in inputs]
        parts = cut[0]
        t_old, bufs = _best(lambda: [codec.encode(p) for p in parts], a.reps)
        t_new, packed = _best(lambda: encode_split(codec, inputs[0], bounds), a.reps)
        assert all(packed.message(j).tobytes() == bufs[j][0].tobytes() for j in range(P))
        rows = [("phase 1 encode", t_old, t_new,
                 _modeled(ops, charged, lambda o: [o.encode(codec, p) for p in parts]),
                 _modeled(ops, charged, lambda o: o.encode_split(codec, inputs[0], bounds)))]

        buf, displs, sizes = _pack([codec.encode(c[0])[0] for c in cut])

        def per_message_fold(o):
            decoded = [o.decode(buf[int(d):int(d + n)]) for d, n in zip(displs, sizes)]
            return o.fold_parts(decoded, lo, hi - lo, codec)

        def packed_fold(o):
            return o.fold_packed(buf, displs, sizes, lo, hi - lo, codec)

        t_old, want = _best(lambda: per_message_fold(PLAIN), a.reps)
        t_new, got = _best(lambda: packed_fold(PLAIN), a.reps)
        assert _same(want, got)
        rows.append(("phase 1 fold", t_old, t_new, _modeled(ops, charged, per_message_fold),
                     _modeled(ops, charged, packed_fold)))

        blocks = []
        for j in range(P):  # every owner's sum (computed here as the owner would)
            b, d, s = _pack([codec.encode(c[j])[0] for c in cut])
            a_j, z_j = int(bounds[j]), int(bounds[j + 1])
            blocks.append(codec.encode(arith.fold_packed(b, d, s, a_j, z_j - a_j, codec))[0])
        del cut
        gathered, gdispls, gsizes = _pack(blocks)

        def per_message_assemble(o):
            decoded = [o.decode(gathered[int(d):int(d + n)]) for d, n in zip(gdispls, gsizes)]
            return o.assemble(decoded, a.N, codec)

        def packed_assemble(o):
            return o.assemble_packed(gathered, gdispls, gsizes, a.N, codec)

        t_old, want = _best(lambda: per_message_assemble(PLAIN), a.reps)
        t_new, got = _best(lambda: packed_assemble(PLAIN), a.reps)
        assert _same(want, got)
        rows.append(("phase 2 assemble", t_old, t_new,
                     _modeled(ops, charged, per_message_assemble),
                     _modeled(ops, charged, packed_assemble)))
        rows.append(("total", *[sum(r[i] for r in rows) for i in range(1, 5)]))
        for name, t_old, t_new, m_old, m_new in rows:
            print(f"{P:>5} {name:<18} {t_old * 1e3:12.3f} {t_new * 1e3:10.3f} "
                  f"{t_old / max(t_new, 1e-9):8.1f}x {m_old * 1e3:15.3f} {m_new * 1e3:14.3f}",
                  flush=True)


if __name__ == "__main__":
    main()
