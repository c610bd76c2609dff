"""sparc-cnn / sparc-lstm ``--simulate P``: the same weights, losses and accuracies as
``mpiexec -n P``, bit for bit (P = 2, 3, 4; top-k + 4-bit QSGD and dense), modeled times that
do not change from one run to the next, the estimate printed, bad combinations refused, and
one shared model updated once per step (divergent ranks refused).

Runs: one mpiexec job per P (tests/mpi_cases/deep_simulate.py runs the four configurations),
one process for every simulated run (no MPI launch)."""

import json
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from mpirun import REPO, run_mpi

pytest.importorskip("torch")

PS = (2, 3, 4)
# every recorded figure of an epoch that a simulation reproduces exactly (not its seconds)
EXACT = ("epoch", "loss", "train_accuracy", "test_accuracy", "test_loss", "steps",
         "bytes_per_step", "sent_density", "result_density")

SIMULATED = """
import sys
NET = "1x10gbit,ppn=4"  # one node, as mpiexec runs here: sparcml's node-aware paths alike
sys.path.insert(0, {cases!r})
from deep_simulate import APPS, CONFIGS
d = {d!r}
for name, (app, options) in CONFIGS.items():
    assert APPS[app].main(options + ["--simulate", "2", "3", "4", "--network", NET,
                                     "--output", f"{{d}}/{{name}}.sim.jsonl"]) == 0, name
app, options = CONFIGS["cnn-sparse"]
assert APPS[app].main(options + ["--simulate", "3", "--network", NET,
                                 "--output", f"{{d}}/again.sim.jsonl"]) == 0
assert APPS[app].main(options + ["--simulate", "2", "--network", NET, "--step-seconds", "0.05",
                                 "--compute-scale", "2", "--output", f"{{d}}/given.sim.jsonl"]) == 0
assert APPS[app].main(options + ["--simulate", "64", "--sim-memory", "0.01"]) == 2
print("SIMULATED OK", flush=True)
"""


def read(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.mark.mpi
@pytest.mark.slow
def test_simulated_deep_apps_equal_mpiexec_bitwise(tmp_path):
    for P in PS:
        real = tmp_path / f"P{P}"
        real.mkdir()
        proc = run_mpi(P, args=[sys.executable, "-m", "mpi4py",
                                str(REPO / "tests" / "mpi_cases" / "deep_simulate.py"),
                                str(real)], timeout=300, env={"OMP_NUM_THREADS": "1"})
        assert "DEEP-SIMULATE OK" in proc.stdout, proc.stdout + proc.stderr
    code = SIMULATED.format(cases=str(REPO / "tests" / "mpi_cases"), d=str(tmp_path))
    sim = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                         text=True, timeout=400, env={**_env(), "OMP_NUM_THREADS": "1"})
    assert "SIMULATED OK" in sim.stdout, sim.stdout + sim.stderr
    names = ("cnn-sparse", "cnn-dense", "lstm-sparse", "lstm-dense")
    for name in names:
        simulated = {rec["P"]: rec for rec in read(tmp_path / f"{name}.sim.jsonl")}
        assert sorted(simulated) == list(PS), name
        for P in PS:
            (real,) = read(tmp_path / f"P{P}" / f"{name}.jsonl")
            sim_rec = simulated[P]
            assert "simulated" not in real and sim_rec["simulated"] is True
            assert sim_rec["network"].startswith("1x10gbit,ppn=4")
            assert sim_rec["compute"] == "model"
            assert sim_rec["metrics"]["time_kind"] == "modeled"
            assert sim_rec["metrics"]["params_sha256"] == real["metrics"]["params_sha256"], \
                (name, P)
            assert len(sim_rec["metrics"]["epochs"]) == len(real["metrics"]["epochs"]) == 1
            for mine, theirs in zip(sim_rec["metrics"]["epochs"], real["metrics"]["epochs"]):
                for key in EXACT:
                    assert mine[key] == theirs[key], (name, P, key, mine[key], theirs[key])
            assert sim_rec["bytes"] == real["bytes"], (name, P)
            assert sim_rec["metrics"]["virtual_seconds"] > 0
            # it trained: a loss under chance's (ln 10) and better than chance at test
            assert real["metrics"]["epochs"][0]["loss"] < 2.3, (name, P)
            assert real["metrics"]["test_accuracy"] > 0.15, (name, P)
    # modeled times: the same run twice gives the same virtual seconds
    (again,) = read(tmp_path / "again.sim.jsonl")
    first = {rec["P"]: rec for rec in read(tmp_path / "cnn-sparse.sim.jsonl")}[3]
    assert again["metrics"]["params_sha256"] == first["metrics"]["params_sha256"]
    for key in ("epoch_seconds", "comm_seconds", "compute_seconds", "wall_seconds"):
        assert again["metrics"]["epochs"][0][key] == first["metrics"]["epochs"][0][key], key
    assert again["timings"] == first["timings"]
    # --step-seconds S --compute-scale F: each step's compute is S x F, the weights unchanged
    (given,) = read(tmp_path / "given.sim.jsonl")
    epoch = given["metrics"]["epochs"][0]
    assert given["compute"] == "given" and given["metrics"]["params_sha256"] == \
        {rec["P"]: rec for rec in read(tmp_path / "cnn-sparse.sim.jsonl")}[2]["metrics"][
            "params_sha256"]
    assert epoch["compute_seconds"] == pytest.approx(epoch["steps"] * 0.05 * 2, rel=1e-9)
    # sparse sends fewer bytes than dense, and the modeled epoch says so
    sparse = first["metrics"]["epochs"][0]
    dense = {rec["P"]: rec for rec in read(tmp_path / "cnn-dense.sim.jsonl")}[3]
    assert sparse["bytes_per_step"] < dense["metrics"]["epochs"][0]["bytes_per_step"]
    # the estimate before each P; the refusal over --sim-memory, one line, exit 2
    for P in PS:
        assert f"sparc-cnn --simulate: P = {P}: about " in sim.stderr, sim.stderr
        assert f"sparc-lstm --simulate: P = {P}: about " in sim.stderr, sim.stderr
    refused = [line for line in sim.stderr.splitlines() if "--simulate 64 needs" in line]
    assert len(refused) == 1 and refused[0].startswith("sparc-cnn: error: ")
    assert "over the 0.01 GiB allowed (--sim-memory)" in refused[0]


def _env():
    import os

    return dict(os.environ)


@pytest.mark.parametrize("argv, message", [
    (["--network", "10gbit"], "--network needs --simulate"),
    (["--step-seconds", "0.1"], "--step-seconds needs --simulate"),
    (["--simulate", "4", "--network", "2x10gbit"], "fewer than --simulate 4"),
    (["--simulate", "2", "--network", "10parsec"], "--network"),
    (["--simulate", "2", "--resume", "x.ckpt"], "does not checkpoint or resume"),
    (["--simulate", "2", "--checkpoint-every-epochs", "1"], "does not checkpoint or resume"),
    (["--simulate", "0"], "--simulate"),
])
def test_simulate_refuses_bad_combinations(argv, message, capsys):
    """Usage errors before any work: exit 2, one line (no torch needed to say so)."""
    from sparcapps.deep import cnn, lstm

    for app in (cnn, lstm):
        with pytest.raises(SystemExit) as exc:
            app.main(argv)
        assert exc.value.code == 2
        err = capsys.readouterr().err
        assert message in err, err


def test_ranks_share_one_model_and_apply_each_update_once():
    """sparcapps.deep.simranks on 3 simulated ranks: every rank's parameters alias one storage,
    an SGD step with momentum is applied once (not 3 times), and ranks whose averaged
    gradients differ raise ReplicaDivergedError instead of training on one rank's."""
    import torch
    from sparcml import sim

    from sparcapps.deep.simranks import SharedStep, build_model_once

    class Task:
        def __init__(self):
            self.model = torch.nn.Linear(3, 2)

    def body(comm, diverge):
        task = build_model_once(comm, 7, Task)
        opt = SharedStep.make(comm, task.model, torch.optim.SGD, lr=0.5, momentum=0.9,
                              weight_decay=0.0)
        before = [p.detach().clone() for p in task.model.parameters()]
        for p in task.model.parameters():
            p.grad = torch.full_like(p, 1.0 + (comm.Get_rank() if diverge else 0))
        comm.Barrier()
        opt.step()
        comm.Barrier()
        return ([p.data_ptr() for p in task.model.parameters()],
                [(p.detach() - b).numpy().copy() for p, b in zip(task.model.parameters(),
                                                                  before)])

    res = sim.run(3, body, args=(False,), network="1x10gbit,ppn=3", timeout=60)
    ptrs = [r[0] for r in res.results]
    assert ptrs[0] == ptrs[1] == ptrs[2]
    for _, deltas in res.results:  # SGD's first step: -lr * g, once
        for d in deltas:
            assert (d == -0.5).all(), d
    with pytest.raises(sim.SimulationError) as exc:
        sim.run(3, body, args=(True,), network="1x10gbit,ppn=3", timeout=60)
    assert isinstance(exc.value.__cause__, sim.ReplicaDivergedError), exc.value
    # a real rank (no simulation): the plain optimizer over its own parameters
    from mpi4py import MPI

    plain = SharedStep.make(MPI.COMM_SELF, torch.nn.Linear(2, 1), torch.optim.SGD, lr=0.1)
    assert type(plain) is torch.optim.SGD


def test_step_charge_holds_synchronizes_own_work():
    """The calibration (sparcapps.deep.steprates.step_rates' measurement) trains the run's own
    task on this rank alone, warm-up then timed steps, on consecutive batches through a real
    DistributedOptimizer (its hooks, its synchronize()) and the SGD at the run's learning rate,
    and charges what its other rates do not hold (checks, copies, statistics, Python) before
    backward with them; it leaves the model free of its hooks. ``--dense``: no Numba
    compilation, a fraction of a second."""
    import torch

    import sparcml.torch as st
    from sparcapps.deep import cnn, steprates

    args = cnn.build_parser().parse_args(["--batch-size", "8", "--dense"])
    made, seen = [], []

    def make_task(a, comm):
        task = cnn.make_task(a, comm)
        loss = task.loss

        def counted(batch):
            seen.append(batch)
            return loss(batch)

        task.loss = counted
        made.append((task, [p.detach().clone() for p in task.model.parameters()]))
        return task

    rates = steprates._measure("sparc-cnn", args, make_task)
    assert set(rates) == set(steprates.RATE_NAMES) and "synchronize" in rates
    assert rates["synchronize"] > 0 and all(v >= 0 for v in rates.values()), rates
    # a training run: every step on the next batch of the epoch, the weights updated
    steps = steprates._WARMUP_STEPS + steprates._TIMED_STEPS
    task, before = made[-1]
    batches = task.start_epoch(0)
    assert len(batches) >= steps and len(seen) == steps
    assert all(np.array_equal(b, batches[i]) for i, b in enumerate(seen))
    assert not any(torch.equal(a, b) for a, b in zip(before, task.model.parameters()))
    charge = steprates.StepCharge(rates)
    assert charge.before_backward == pytest.approx(
        rates["forward_backward"] + rates["flatten"] + rates["select"] + rates["synchronize"])
    assert charge.before_update == rates["update"]
    assert steprates.StepCharge(rates, step_seconds=0.5).before_backward == 0.5
    # what a real synchronize() holds of it (its own work, the last bucket's selection) is
    # counted in a simulated record's comm_seconds, as a measured record counts it
    fake = dict(rates, select=0.004, synchronize=0.008)
    assert steprates.StepCharge(fake).inside_synchronize(0.25) == pytest.approx(0.009)
    assert steprates.StepCharge(fake).inside_synchronize(1.0) == pytest.approx(0.012)
    assert steprates.StepCharge(fake, step_seconds=0.5).inside_synchronize(1.0) == 0.0
    # the calibration's optimizer let go of the parameters: a new one may take them
    model = task.model
    st.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                            model.named_parameters()).remove_hooks()


def test_calibration_selects_on_the_optimizers_buckets(monkeypatch):
    """The calibration times the selection on the DistributedOptimizer's own buckets: its
    parameters in launch order, cut at its sizes (a copy of the cutting rule had drifted: at
    ``--bucket-mb 0.01`` the CNN's six cuts against the optimizer's four)."""
    import torch
    from mpi4py import MPI

    import sparcml.torch as st
    from sparcapps.deep import cnn, steprates

    args = cnn.build_parser().parse_args(["--batch-size", "8", "--bucket-mb", "0.01"])
    seen = {}

    def fake_train(a, task, dist, params, selection):
        seen.update(model=task.model, params=params, sizes=selection.sizes,
                    active=selection.active)
        return {k: [1e-3] for k in steprates._PARTS}

    monkeypatch.setattr(steprates, "_train_and_time", fake_train)
    rates = steprates._measure("sparc-cnn", args, cnn.make_task)
    assert set(rates) == set(steprates.RATE_NAMES)
    model = seen["model"]
    ref = st.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                  model.named_parameters(), bucket_bytes=int(0.01 * 2**20),
                                  comm=MPI.COMM_SELF)
    try:
        buckets = ref.buckets
    finally:
        ref.remove_hooks()
    assert seen["active"] and len(buckets) > 1
    assert seen["sizes"] == [b["numel"] for b in buckets]
    by_name = dict(model.named_parameters())
    order = [by_name[n] for b in buckets for n in b["names"]]
    assert [id(p) for p in seen["params"]] == [id(p) for p in order]
    assert sum(seen["sizes"]) == sum(p.numel() for p in seen["params"])


def test_calibration_is_announced_when_it_runs_not_when_cached(tmp_path, monkeypatch, capsys):
    """The calibration (the first compiles the kernels: seconds before any estimate) says on
    stderr that it runs and how long it took; a cached calibration says nothing."""
    from sparcml.sim import _app_rates
    from sparcapps.deep import cnn, steprates

    monkeypatch.setenv("SPARCML_SIM_RATES", str(tmp_path / "rates.json"))
    _app_rates._reset_for_tests()
    fake = dict.fromkeys(steprates.RATE_NAMES, 1e-3)
    calls = []
    monkeypatch.setattr(steprates, "_measure", lambda *a: calls.append(a) or dict(fake))
    args = cnn.build_parser().parse_args(["--batch-size", "8"])
    assert steprates.step_rates("sparc-cnn", args, cnn.make_task) == fake
    err = capsys.readouterr().err
    assert "sparc-cnn --simulate: calibrating this machine's step" in err
    assert "sparc-cnn --simulate: calibrated in " in err and len(calls) == 1
    _app_rates._reset_for_tests()  # a new process: read from the file, nothing said
    assert steprates.step_rates("sparc-cnn", args, cnn.make_task) == fake
    assert capsys.readouterr().err == "" and len(calls) == 1
    _app_rates._reset_for_tests()
