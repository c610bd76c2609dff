"""Fingerprints of results that a refactoring must not change: run before and after, compare.

    mpiexec -n 3 python scripts/bits_fingerprint.py      # prints one "case sha256" line per case

Covers every allreduce algorithm (float32 and float64, sparse and dense-ish inputs, with and
without QSGD, node-aware with forced nodes of 2 ranks), ``topk_allreduce`` (result and dropped
part), ``allgather``/``reduce_scatter``/``bcast``, and a short training curve of
``sparcml.torch.DistributedOptimizer`` with top-k + QSGD and error feedback (skipped when torch
is missing). Uses only the public API, so the same script runs on any version of the package.
Every rank must get the same bits (checked; ``dropped``, ``reduce_scatter`` and the losses are per rank): rank 0 prints the hashes.
"""

from __future__ import annotations

import hashlib
import sys

import numpy as np
from mpi4py import MPI

import sparcml

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
lines: list[str] = []


def digest(*arrays) -> str:
    h = hashlib.sha256()
    for a in arrays:
        a = np.ascontiguousarray(a)
        h.update(a.dtype.str.encode() + str(a.shape).encode() + a.tobytes())
    return h.hexdigest()[:16]


def record(name: str, *arrays, same: bool = True) -> None:
    """One hash of ``arrays``: equal on every rank (checked) or, with ``same=False``, the
    hash of every rank's hash in rank order (a per-rank result such as ``dropped``)."""
    d = digest(*arrays)
    every = comm.allgather(d)
    if same and len(set(every)) != 1:
        raise SystemExit(f"{name}: ranks differ: {every}")
    if not same:
        d = hashlib.sha256(" ".join(every).encode()).hexdigest()[:16]
    lines.append(f"{name} {d}")


def vector(dim, density, dtype, seed):
    rng = np.random.default_rng(seed * 1000 + rank)
    k = max(1, int(dim * density))
    idx = np.sort(rng.choice(dim, k, replace=False))
    return sparcml.SparseVector(dim, idx, rng.standard_normal(k).astype(dtype))


def dense_of(v):
    return v.to_dense()


def main() -> int:
    for name in sorted(sparcml.ALGORITHMS):
        for dtype in (np.float32, np.float64):
            for density in (0.001, 0.2):
                v = vector(100_003, density, dtype, 1)
                r = sparcml.allreduce(v, comm, algorithm=name)
                record(f"allreduce/{name}/{np.dtype(dtype).name}/{density}", dense_of(r))
        if name != sparcml.DENSE_BASELINE:
            v = vector(50_000, 0.3, np.float32, 2)
            r = sparcml.allreduce(v, comm, algorithm=name, quantizer=sparcml.QSGD(4, seed=7))
            record(f"allreduce/{name}/qsgd4", dense_of(r))
        v = vector(100_003, 0.01, np.float32, 3)
        r = sparcml.allreduce(v, comm, algorithm=name, hierarchical=True)
        record(f"allreduce/{name}/hierarchical", dense_of(r))
    for k in (1, 100, 5000):
        v = vector(200_000, 0.02, np.float32, 4)
        got, dropped = sparcml.topk_allreduce(v, k, comm)
        record(f"topk_allreduce/k={k}", dense_of(got))
        record(f"topk_allreduce/k={k}/dropped", dense_of(dropped), same=False)
    v = vector(10_000, 0.05, np.float64, 5)
    record("allgather", *[dense_of(x) for x in sparcml.allgather(v, comm)])
    record("reduce_scatter", dense_of(sparcml.reduce_scatter(v, comm)), same=False)
    record("bcast", dense_of(sparcml.bcast(v, 0, comm)))
    train_curve()
    if rank == 0:
        print("\n".join(lines))
    return 0


def train_curve() -> None:
    try:
        import torch
    except ImportError:
        return
    import sparcml.torch as st
    from sparcml.compression import Compression, TopKCompressor

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.Tanh(), torch.nn.Linear(64, 4))
    opt = st.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9),
                                  model.named_parameters(),
                                  compression=Compression(TopKCompressor(density=0.05),
                                                          sparcml.QSGD(4)),
                                  seed=1, comm=comm)
    losses = []
    for step in range(10):
        g = torch.Generator().manual_seed(100 * step + rank)
        x = torch.randn(16, 32, generator=g)
        y = torch.randint(0, 4, (16,), generator=g)
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    opt.remove_hooks()
    params = torch.cat([p.detach().reshape(-1) for p in model.parameters()]).numpy()
    record("torch/topk+qsgd/params", params)
    record("torch/topk+qsgd/losses", np.array(losses), same=False)


if __name__ == "__main__":
    sys.exit(sparcml.abort_on_error(main)() or 0)
