"""sparcml.torch's device path (issue 35) against the host path, on CPU tensors
(``device_path=True``): the same gradients and parameters bit for bit after every step, the
same residuals, and host copies per step of O(k) (the k entries sent, the exchange's result and
a flag byte), where the host path copies the whole bucket each way.

Run with ``python -m mpi4py`` (rank 0 prints ``TORCH-DEVICE-PATH <n> OK``), or call
:func:`check_all` with ``MPI.COMM_SELF`` in process (P = 1).
"""

import numpy as np
import torch
from mpi4py import MPI

import sparcml.torch as st
from sparcml._errors import IncompatibleOptionsError
from sparcml.compression import (Compression, DGCCompressor, DGCMemory, NoneMemory,
                                 RandomKCompressor, ThresholdCompressor, TopKCompressor)
from sparcml import QSGD

from _mpi_checks import ok, passed

STEPS = 3
N = 50 * 40 + 40 + 40 * 10 + 10  # the model's values (2,450)


def cases():
    """(name, compression, optimizer keywords): every compressor of the device path."""
    return [
        ("topk", Compression(TopKCompressor(density=0.01)), {}),
        ("topk per tensor", Compression(TopKCompressor(density=0.01, per_tensor=True)), {}),
        ("randomk", Compression(RandomKCompressor(density=0.01, shared=False)), {}),
        ("randomk shared", Compression(RandomKCompressor(density=0.01)), {}),
        ("randomk unbiased", Compression(RandomKCompressor(density=0.01, rescale=True),
                                         memory=NoneMemory()), {}),
        ("threshold", Compression(ThresholdCompressor(0.05)), {}),
        ("dgc", Compression(DGCCompressor(0.01), memory=DGCMemory()), {}),
        ("dgc warm-up", Compression(DGCCompressor(0.01, warmup_steps=2, initial_density=0.02),
                                    memory=DGCMemory()),
         {"warmup_steps": 1, "bucket_bytes": 4000}),
    ]


def run(comm, compression, device_path, **kwargs):
    """STEPS steps of a small MLP; per step the gradients, the host copies (to the host, to
    the device) and the values sent; the final parameters and residuals."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(50, 40), torch.nn.ReLU(),
                                torch.nn.Linear(40, 10))
    opt = st.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                  model.named_parameters(), compression=compression, comm=comm,
                                  device_path=device_path, **kwargs)
    gen = torch.Generator().manual_seed(1 + comm.Get_rank())
    grads, copies, sent = [], [], []
    for _ in range(STEPS):
        x, y = torch.randn(32, 50, generator=gen), torch.randint(0, 10, (32,), generator=gen)
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
        copies.append((opt.last_step.to_host_bytes, opt.last_step.to_device_bytes))
        grads.append(torch.cat([p.grad.reshape(-1) for p in model.parameters()]).clone())
        sent.append([(b["sent"].nnz, b["sent"].indices.dtype.itemsize) if b["sent"] is not None
                     else (b["numel"], 0) for b in opt.buckets])
    residuals = [b["residual"] for b in opt.buckets]
    return grads, [p.detach().clone() for p in model.parameters()], copies, sent, residuals


def _model_opt(comm, compression, device_path=True):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(50, 40), torch.nn.ReLU(),
                                torch.nn.Linear(40, 10))
    return model, st.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                          model.named_parameters(), compression=compression,
                                          comm=comm, device_path=device_path)


def _step(comm, model, opt, s, scale=1.0):
    gen = torch.Generator().manual_seed(100 * s + comm.Get_rank())
    x, y = torch.randn(32, 50, generator=gen), torch.randint(0, 10, (32,), generator=gen)
    opt.zero_grad()
    (torch.nn.functional.cross_entropy(model(x), y) * scale).backward()
    opt.step()


def check_resume_and_nonfinite(comm) -> None:
    """A run resumed from ``state_dict()`` (the device memory exported, then loaded back to the
    device) continues bitwise as the uninterrupted one; an Inf gradient gives NaN gradients on
    every rank and leaves the memory as the host path leaves it (zeros compensated)."""
    make = lambda: Compression(DGCCompressor(0.01), memory=DGCMemory())  # noqa: E731
    model, opt = _model_opt(comm, make())
    for s in range(2):
        _step(comm, model, opt, s)
    saved = opt.state_dict()
    params = [p.detach().clone() for p in model.parameters()]
    for s in range(2, 4):
        _step(comm, model, opt, s)
    model2, opt2 = _model_opt(comm, make())
    with torch.no_grad():
        for p, q in zip(model2.parameters(), params):
            p.copy_(q)
    opt2.load_state_dict(saved)
    for s in range(2, 4):
        _step(comm, model2, opt2, s)
    ok(all(torch.equal(p, q) for p, q in zip(model.parameters(), model2.parameters())),
       "a device-path run resumed from state_dict() differs from the uninterrupted one")
    hosts = []
    for device_path in (True, False):
        model, opt = _model_opt(comm, make(), device_path)
        _step(comm, model, opt, 0)
        _step(comm, model, opt, 1, scale=float("inf") if comm.Get_rank() == 0 else 1.0)
        ok(all(torch.isnan(p.grad).all() for p in model.parameters()),
           f"device_path={device_path}: an Inf on rank 0 did not make every gradient NaN")
        hosts.append([b["residual"] for b in opt.buckets])
    ok(all(np.array_equal(a, b) for a, b in zip(*hosts)),
       "after an Inf step the device path's residuals differ from the host path's")


def check_all(comm) -> int:
    check_resume_and_nonfinite(comm)
    P = comm.Get_size()
    for name, compression, kwargs in cases():
        gh, ph, ch, _, rh = run(comm, compression, False, **kwargs)
        gd, pd, cd, sd, rd = run(comm, compression, True, **kwargs)
        for s in range(STEPS):
            ok(torch.equal(gh[s], gd[s]), f"{name}: step {s}'s gradient differs from the host "
                                          f"path's")
            ok(ch[s] == (N * 4, N * 4), f"{name}: the host path copies the whole gradient "
                                        f"each way, counted {ch[s]}")
            k = sum(nnz for nnz, _ in sd[s])
            if kwargs.get("warmup_steps", 0) > s:
                ok(cd[s][0] == N * 4 + len(sd[s]), f"{name}: a warm-up step sends all")
                continue
            # to the host: the k entries (index + float32 value) and one flag byte per bucket
            want = sum(nnz * (size + 4) + 1 for nnz, size in sd[s])
            if name.startswith("randomk"):  # its positions are drawn on the host
                want -= sum(nnz * size for nnz, size in sd[s])
            ok(cd[s][0] == want, f"{name}: step {s} copied {cd[s][0]} bytes to the host, "
                                 f"expected {want} (k = {k})")
            # to the device: the result, at most P k entries (index + value); random-k's k
            # positions
            ok(cd[s][1] <= (P + 1) * k * 12 and cd[s][1] < N * 4,
               f"{name}: step {s} copied {cd[s][1]} bytes to the device (k = {k}, N = {N})")
            ok(k < N // 10, f"{name}: k = {k} is not small against N = {N}")
        for a, b in zip(ph, pd):
            ok(torch.equal(a, b), f"{name}: the parameters differ from the host path's")
        for a, b in zip(rh, rd):
            ok((a is None and b is None) or np.array_equal(a, b),
               f"{name}: the residuals differ from the host path's")
    try:
        run(comm, Compression(TopKCompressor(density=0.01), quantizer=QSGD(4)), True)
        ok(False, "device_path=True with a quantizer did not raise")
    except IncompatibleOptionsError as exc:
        ok("quantizer" in str(exc), f"the refusal names the quantizer: {exc}")
    from sparcml.torch._hooks import SparcmlHookState

    try:
        SparcmlHookState(Compression(TopKCompressor(density=0.01), quantizer=QSGD(4)),
                         comm=comm, device_path=True)
        ok(False, "SparcmlHookState(device_path=True) with a quantizer did not raise")
    except IncompatibleOptionsError as exc:
        ok("quantizer" in str(exc), f"the hook's refusal names the quantizer: {exc}")
    return passed()


if __name__ == "__main__":
    comm = MPI.COMM_WORLD
    torch.set_num_threads(1)
    total = comm.reduce(check_all(comm), root=0)
    if comm.Get_rank() == 0:
        print(f"TORCH-DEVICE-PATH {total} OK", flush=True)
