"""The CUDA half of ``scripts/gpu-check.sh`` (run under ``mpiexec -n 2``; see there).

1. CUDA tensors through :class:`sparcml.torch.DistributedOptimizer` (float64 models, so that
   the device's and the host's arithmetic agree far below the tolerance) give the parameters
   of the same run on the CPU, for the dense baseline, full gradients and top-k + QSGD with
   error feedback; identical on both ranks.
2. The device path (issue 35: top-k, random-k, threshold and DGC compress on the device, only
   the k entries cross to the host) gives the host path's parameters on CUDA (float64; the
   same selection and elementwise arithmetic: equal far below the tolerance).
3. Top-k of 16M float32 values: ``torch.topk`` on the device against the host path the
   adapter took before (copy to pinned host memory + sparcml's Numba top-k), timed.
4. The optimizer's step time of both paths on a 16M-value model (one ``Linear(4096, 4096)``,
   top-k 1% with error feedback): ``backward()`` + ``step()``, median of 10 after 2 warm-up
   steps, with the bytes each copies between device and host per step.

Prints ``GPU-CHECK ...`` lines; rank 0 ends with ``GPU-CHECK OK`` and exit 0; a failed check
aborts both ranks with its message (:func:`sparcml.abort_on_error`).
"""

from __future__ import annotations

import statistics
import sys
import time


def pick_device(rank: int, device_count: int) -> str:
    """The CUDA device of this rank: ranks share the node's devices round-robin; "cpu" when
    there are none."""
    return f"cuda:{rank % device_count}" if device_count > 0 else "cpu"


def train(device, compression, comm, steps=5, device_path=None):
    import torch

    import sparcml.torch as st

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.Tanh(),
                                torch.nn.Linear(256, 10)).double().to(device)
    opt = st.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9),
                                  model.named_parameters(), compression=compression,
                                  bucket_bytes=64 << 10, seed=1, comm=comm,
                                  device_path=device_path)
    for s in range(steps):
        g = torch.Generator().manual_seed(100 * s + comm.Get_rank())
        x = torch.randn(32, 64, generator=g, dtype=torch.float64).to(device)
        y = torch.randint(0, 10, (32,), generator=g).to(device)
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
    opt.remove_hooks()
    return torch.cat([p.detach().reshape(-1).cpu() for p in model.parameters()]).numpy()


def time_topk(device, n=16 << 20, density=0.01, reps=10):
    import numpy as np
    import torch

    from sparcml import TopK

    x = torch.randn(n, device=device)
    k = int(n * density)
    dev = []
    for _ in range(reps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        torch.topk(x.abs(), k, sorted=False)
        torch.cuda.synchronize()
        dev.append(time.perf_counter() - t0)
    host_buf = torch.empty(n, pin_memory=True)
    topk = TopK(density=density, error_feedback=False)
    host = []
    for _ in range(reps):
        t0 = time.perf_counter()
        host_buf.copy_(x)
        topk.compress(host_buf.numpy())
        host.append(time.perf_counter() - t0)
    return statistics.median(dev), statistics.median(host), np.dtype(np.float32).itemsize * n


def time_steps(device, compression, comm, device_path, reps=10, warm=2):
    """Median seconds of ``backward()`` + ``step()`` on a 16M-value model, and the bytes
    copied between device and host per step (the last step)."""
    import torch

    import sparcml.torch as st

    torch.manual_seed(0)
    model = torch.nn.Linear(4096, 4096).to(device)
    opt = st.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.01),
                                  model.named_parameters(), compression=compression, comm=comm,
                                  device_path=device_path)
    x = torch.randn(64, 4096, device=device)
    times = []
    for s in range(warm + reps):
        opt.zero_grad()
        comm.Barrier()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        model(x).square().mean().backward()
        opt.step()
        torch.cuda.synchronize()
        if s >= warm:
            times.append(time.perf_counter() - t0)
    opt.remove_hooks()
    return statistics.median(times), (opt.last_step.to_host_bytes
                                      + opt.last_step.to_device_bytes)


def main() -> int:
    import numpy as np
    import torch
    from mpi4py import MPI

    import sparcml
    from sparcml.compression import Compression, TopKCompressor

    comm = MPI.COMM_WORLD
    rank = comm.Get_rank()
    device = pick_device(rank, torch.cuda.device_count())
    if device == "cpu":
        print("gpu-check: no CUDA device on this rank", file=sys.stderr)
        return 2
    torch.cuda.set_device(device)
    for name, compression in (("dense", Compression.none()), ("full", Compression()),
                              ("topk+qsgd", Compression(TopKCompressor(density=0.05),
                                                        sparcml.QSGD(4)))):
        on_gpu, on_cpu = train(device, compression, comm), train("cpu", compression, comm)
        diff = float(np.abs(on_gpu - on_cpu).max())
        same = all(np.array_equal(a, on_gpu) for a in comm.allgather(on_gpu))
        if rank == 0:
            print(f"GPU-CHECK {name}: max |cuda - cpu| = {diff:.3g}, ranks identical: {same}",
                  flush=True)
        assert same and diff < 1e-9, f"{name}: the CUDA path differs from the CPU path"
    from sparcml.compression import (DGCCompressor, DGCMemory, NoneMemory, RandomKCompressor,
                                     ThresholdCompressor)

    for name, compression in (
            ("device path topk", Compression(TopKCompressor(density=0.01))),
            ("device path topk per tensor", Compression(TopKCompressor(density=0.01,
                                                                       per_tensor=True))),
            ("device path randomk", Compression(RandomKCompressor(density=0.01, shared=False))),
            ("device path randomk unbiased", Compression(RandomKCompressor(
                density=0.01, rescale=True), memory=NoneMemory())),
            ("device path threshold", Compression(ThresholdCompressor(1e-3))),
            ("device path dgc", Compression(DGCCompressor(0.01), memory=DGCMemory()))):
        on_dev = train(device, compression, comm)  # CUDA: the device path by default
        on_host = train(device, compression, comm, device_path=False)
        diff = float(np.abs(on_dev - on_host).max())
        same = all(np.array_equal(a, on_dev) for a in comm.allgather(on_dev))
        if rank == 0:
            print(f"GPU-CHECK {name}: max |device path - host path| = {diff:.3g}, "
                  f"ranks identical: {same}", flush=True)
        assert same and diff < 1e-9, f"{name}: the device path differs from the host path"
    dev, host, nbytes = time_topk(device)
    if rank == 0:
        print(f"GPU-CHECK topk 16M float32, density 0.01 ({torch.cuda.get_device_name()}): "
              f"device torch.topk {dev * 1e3:.2f} ms, host path (pinned copy {nbytes >> 20} MiB"
              f" + Numba top-k) {host * 1e3:.2f} ms, ratio host/device {host / dev:.1f}",
              flush=True)
    topk = Compression(TopKCompressor(density=0.01))
    t_host, b_host = time_steps(device, topk, comm, False)
    t_dev, b_dev = time_steps(device, topk, comm, None)
    if rank == 0:
        print(f"GPU-CHECK step 16M float32, topk 0.01, P = {comm.Get_size()}: host path "
              f"{t_host * 1e3:.2f} ms ({b_host >> 20} MiB copied), device path "
              f"{t_dev * 1e3:.2f} ms ({b_dev >> 10} KiB copied), ratio {t_host / t_dev:.1f}",
              flush=True)
        print("GPU-CHECK OK", flush=True)
    return 0


if __name__ == "__main__":
    import sparcml

    sys.exit(sparcml.abort_on_error(main)() or 0)
