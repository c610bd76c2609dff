"""sparcml.torch (imports torch): one mpiexec job per process count, many checks in each, and the
deprecated keyword arguments in this process (P = 1).

See ``tests/mpi_cases/torch_adapter.py`` for what is checked: the wrapped optimizer without
compression equals plain SGD on the concatenated batch; top-k (+ QSGD) keeps the parameters
bitwise identical on all ranks for every algorithm; the residual of every bucket is exactly
``g + r - sent`` (``sent`` as the other ranks received it: quantized once, by the wire); a run
resumed from ``state_dict()`` continues bitwise; collective errors; the deprecated keywords
train bitwise as the ``compression=`` they translate to.
"""

import re
import sys
import warnings

import pytest

from mpirun import REPO, run_mpi

torch = pytest.importorskip("torch")

CASE = REPO / "tests" / "mpi_cases" / "torch_adapter.py"
# checks per run with the five built-in algorithms (another registered one adds its own)
MIN_CHECKS = {1: 234, 2: 239, 3: 215}


@pytest.mark.mpi
@pytest.mark.parametrize("nprocs", [1, 2, 3])
def test_distributed_optimizer(nprocs):
    proc = run_mpi(nprocs, args=[sys.executable, "-m", "mpi4py", str(CASE)], timeout=240,
                   env={"OMP_NUM_THREADS": "1"})
    found = re.search(r"TORCH-ADAPTER (\d+) OK", proc.stdout)
    assert found and int(found.group(1)) >= MIN_CHECKS[nprocs], proc.stdout + proc.stderr


@pytest.mark.mpi
@pytest.mark.parametrize("nprocs", [1, 2, 3])
def test_load_state_dict_is_collective(nprocs):
    """Rank 0's state on every rank, other options or another step on one rank: every rank
    raises and keeps its state, and the next steps run (no -m mpi4py: a rank that raised
    alone would leave the others waiting until the timeout)."""
    proc = run_mpi(nprocs, args=[sys.executable, str(REPO / "tests" / "mpi_cases" /
                                                     "optimizer_state.py")],
                   timeout=240, env={"OMP_NUM_THREADS": "1"})
    assert "OPTIMIZER-STATE OK" in proc.stdout, proc.stdout + proc.stderr


def _optimizer(**kwargs):
    from mpi4py import MPI

    import sparcml.torch as st

    model = torch.nn.Linear(3, 2)
    return st.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   model.named_parameters(), comm=MPI.COMM_SELF, **kwargs)


@pytest.mark.parametrize("kwargs, spelled", [
    ({"density": 0.5, "bits": 4},
     "compression=Compression(TopKCompressor(density=0.5), quantizer=QSGD(4), "
     "memory=ResidualMemory())"),
    ({"k": 3, "topk_bucket_size": 512, "error_feedback": False, "algorithm": "allgather"},
     "compression=Compression(TopKCompressor(k=3, chunk=512), memory=NoneMemory(), "
     "algorithm='allgather')"),
    ({"bits": 2, "quantizer_bucket_size": 64, "bucket_size": 128},
     "compression=Compression(NoneCompressor(), quantizer=QSGD(2, bucket_size=64), "
     "memory=NoneMemory()), bucket_bytes=128"),
])
def test_deprecated_keywords_warn_with_the_new_spelling(kwargs, spelled):
    with pytest.warns(DeprecationWarning, match=re.escape(spelled)) as record:
        opt = _optimizer(**kwargs)
    assert record[0].filename == __file__, "the warning points at the caller"
    opt.remove_hooks()


def test_new_keywords_do_not_warn_and_unknown_ones_fail():
    from sparcml import QSGD
    from sparcml.compression._objects import Compression, TopKCompressor

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        opt = _optimizer(compression=Compression(TopKCompressor(density=0.5), QSGD(4)),
                         bucket_bytes=64, warmup_steps=1)
    assert opt.bucket_bytes == 64 and opt.compression.quantizer.bits == 4
    assert "TopKCompressor(density=0.5)" in repr(opt)
    opt.remove_hooks()
    with pytest.raises(TypeError, match="unexpected keyword argument 'densty'"):
        _optimizer(densty=0.5)


def test_the_last_bucket_is_reduced_by_synchronize_on_the_calling_thread(monkeypatch):
    """The step's last bucket (its gradients are the last of backward()) is reduced by
    synchronize() on the calling thread, the earlier ones on the communication thread during
    backward(); every step alike, the averaged gradients unchanged (P = 1: the rank's own)."""
    import threading

    from mpi4py import MPI

    import sparcml.torch as st
    import sparcml.torch._optimizer as optimizer_module

    seen = []
    reduce_bucket = optimizer_module._reduce_bucket

    def spy(ctx, b, *args):
        seen.append((b.index, threading.current_thread().name))
        return reduce_bucket(ctx, b, *args)

    monkeypatch.setattr(optimizer_module, "_reduce_bucket", spy)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Linear(4, 2))
    opt = st.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                  model.named_parameters(), comm=MPI.COMM_SELF, bucket_bytes=1)
    try:
        assert len(opt.buckets) == 4
        for _ in range(2):
            opt.zero_grad()
            model(torch.randn(5, 3)).square().sum().backward()
            local = [p.grad.clone() for p in model.parameters()]
            opt.synchronize()
            assert all(torch.equal(p.grad, g) for p, g in zip(model.parameters(), local))
            opt.step()
            step, seen[:] = sorted(seen), []
            main = threading.current_thread().name
            assert step == [(0, "sparcml-comm"), (1, "sparcml-comm"), (2, "sparcml-comm"),
                            (3, main)], step
    finally:
        opt.remove_hooks()


def test_compression_stats_of_a_stretch_of_steps():
    from sparcml.torch import CompressionStats

    stats = CompressionStats(steps=2, values=20, sent_values=2, bytes_sent=100,
                             wait_seconds=0.5)
    before = stats.snapshot()
    stats._add(CompressionStats(steps=1, values=10, sent_values=5, bytes_sent=40,
                                wait_seconds=0.25))
    assert before.steps == 2 and before is not stats
    epoch = stats.since(before)
    assert (epoch.steps, epoch.values, epoch.sent_values, epoch.bytes_sent) == (1, 10, 5, 40)
    assert epoch.sent_density == 0.5 and epoch.bytes_per_step == 40
    assert epoch.wait_seconds == 0.25 and stats.since(stats.snapshot()) == CompressionStats()
    with pytest.raises(TypeError, match="snapshot"):
        stats.since({"steps": 1})


COMPRESSOR_STATES = [("dgc", {"density_warmup_steps": 4}), ("powersgd", {}), ("randomk", {}),
                     ("randomk", {"shared": True}), ("signum", {}), ("topk", {"bits": 4}),
                     ("efsignsgd", {})]


@pytest.mark.parametrize("name,extra", COMPRESSOR_STATES,
                         ids=[f"{n}{sorted(e)}" for n, e in COMPRESSOR_STATES])
def test_compressor_state_resumes_bitwise_in_process(name, extra):
    """k steps, state_dict() of the model and of the optimizer, k more steps; a new model and
    optimizer loading those states make the same k steps bit for bit (P = 1). Without the
    compressor's entry the stateful compressors take other steps (the test can fail)."""
    import copy

    import sparcml.torch as st
    from sparcml.compression import build

    def make():
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(6, 10), torch.nn.Tanh(),
                                    torch.nn.Linear(10, 3))
        inner = torch.optim.SGD(model.parameters(), lr=0.1,
                                momentum=0.0 if name in ("dgc", "signum") else 0.9)
        opt = st.DistributedOptimizer(inner, model.named_parameters(), seed=3,
                                      bucket_bytes=128,  # two buckets
                                      compression=build(name, density=0.2, rank=2, **extra))
        return model, opt

    def steps(model, opt, start, n):
        for s in range(start, start + n):
            g = torch.Generator().manual_seed(s)
            X, y = torch.randn(8, 6, generator=g), torch.randint(0, 3, (8,), generator=g)
            torch.nn.functional.cross_entropy(model(X), y).backward()
            opt.step()
            opt.zero_grad()
        return torch.cat([p.detach().reshape(-1) for p in model.parameters()])

    model, opt = make()
    assert len(opt.buckets) == 2
    steps(model, opt, 0, 3)
    saved_model = copy.deepcopy(model.state_dict())
    saved = copy.deepcopy(opt.state_dict())
    straight = steps(model, opt, 3, 4)
    opt.remove_hooks()
    assert set(saved["sparcml"]) >= {"memory", "compressor", "quantizer", "step"}

    model, opt = make()
    model.load_state_dict(saved_model)
    opt.load_state_dict(saved)
    resumed = steps(model, opt, 3, 4)
    opt.remove_hooks()
    assert torch.equal(straight, resumed), f"{name}: the resumed run differs"

    if saved["sparcml"]["compressor"]:  # DGC, PowerSGD, random-k, signum
        model, opt = make()
        model.load_state_dict(saved_model)
        without = copy.deepcopy(saved)
        del without["sparcml"]["compressor"]  # as a state of an earlier release
        opt.load_state_dict(without)
        assert not torch.equal(straight, steps(model, opt, 3, 4)), \
            f"{name}: the compressor's state made no difference"
        opt.remove_hooks()
