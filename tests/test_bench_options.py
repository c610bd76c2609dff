"""sparc-bench's call options (index coding, partitions, node-aware, top-k) have the same
effect under ``--simulate`` as under ``mpiexec``: the same rows, the same bytes per rank
(issue 22); and calibration leaves no partition state behind (the real run calibrates, the
simulated one is given its model)."""

import json
import sys

import numpy as np
import pytest

import sparcml
import sparcml.sim as sim
from mpirun import run_mpi

P = 3
ARGS = ["--N", "20000", "--density", "0.01", "--pattern", "powerlaw",
        "--algorithms", "ssar_recursive_double", "ssar_split_allgather",
        "--index-coding", "raw", "coded", "--partitions", "balanced", "equal",
        "--hierarchical", "--topk", "50", "--reps", "1", "--warmup", "0", "--no-model"]


def _rows(path):
    rows = {}
    for line in path.read_text().splitlines():
        rec = json.loads(line)
        m = rec["metrics"]
        key = (rec["algorithm"], m["index_coding"], m["partitions"], bool(m["hierarchical"]),
               m["topk"])
        assert key not in rows, key
        rows[key] = (rec["bytes"]["sent_per_rank_max"], rec["bytes"]["sent_per_rank_mean"])
    return rows


@pytest.mark.mpi
def test_every_call_option_acts_the_same_simulated_and_real(tmp_path):
    real, simulated = tmp_path / "real.jsonl", tmp_path / "sim.jsonl"
    run_mpi(P, args=[sys.executable, "-m", "sparcapps.bench.cli", *ARGS, "--output", str(real)],
            timeout=300)
    from sparcapps.bench import cli

    # one node of P ranks, as mpiexec on this machine
    assert cli.main(["--simulate", str(P), "--network", f"1x1gbit,ppn={P}", *ARGS,
                     "--output", str(simulated)]) == 0
    want, got = _rows(real), _rows(simulated)
    assert set(got) == set(want)
    # dense; 2 algorithms x 2 codings x 2 partitions (recursive doubling: 2 codings) + their
    # node-aware rows; top-k x 2 x 2
    assert len(want) == 1 + (2 + 4) + 2 + 4
    assert got == want
    # and every option changed something, so the test can tell
    assert want[("ssar_split_allgather", "raw", "balanced", False, None)] != \
        want[("ssar_split_allgather", "coded", "balanced", False, None)]
    assert want[("ssar_split_allgather", "raw", "balanced", False, None)] != \
        want[("ssar_split_allgather", "raw", "equal", False, None)]
    assert want[("ssar_recursive_double", "raw", "balanced", True, None)] != \
        want[("ssar_recursive_double", "raw", "balanced", False, None)]


def _split_bytes(comm, calibrate):
    from sparcml._model.costmodel import MEDIUM_N

    if calibrate:
        sparcml.calibrate(comm, reps=1)
    rng = np.random.default_rng([3, comm.Get_rank()])
    idx = np.sort(rng.choice(MEDIUM_N, MEDIUM_N // 1000, replace=False))
    vec = sparcml.SparseVector(MEDIUM_N, idx, np.ones(idx.size, np.float32))
    stats = sparcml.TrafficStats()
    sparcml.allreduce(vec, comm, algorithm="ssar_split_allgather", stats=stats,
                      options=sparcml.Options(index_coding="raw"))
    return stats.bytes_sent


def test_calibrating_leaves_the_partitions_of_its_inputs_dim_alone():
    """The calibration's split calls at its medium N used to leave their partitions on the
    context, kept for a user's calls of that N: a real run (calibrated) cut differently from
    the simulator (given a model), 31,872 against 31,648 bytes at P = 4 (issue 22)."""
    plain = sim.run(4, _split_bytes, args=(False,), network="4x1gbit").results
    calibrated = sim.run(4, _split_bytes, args=(True,), network="4x1gbit").results
    assert calibrated == plain


QUANTIZED = ["--N", "20000", "--density", "0.01", "--pattern", "random",
             "--algorithms", "ssar_recursive_double", "ssar_split_allgather",
             "dsar_split_allgather", "allgather", "--bits", "4", "--nonblocking",
             "--reps", "1", "--warmup", "0", "--no-model"]


def _quantized_rows(path):
    rows = {}
    for line in path.read_text().splitlines():
        rec = json.loads(line)
        m = rec["metrics"]
        key = (rec["algorithm"], m["bits"], m["nonblocking"])
        assert key not in rows, key
        rows[key] = (rec["bytes"]["sent_per_rank_max"], rec["bytes"]["sent_per_rank_mean"],
                     m["result_density"])
    return rows


@pytest.mark.mpi
@pytest.mark.parametrize("P", [1, 3])
def test_quantized_and_nonblocking_runs_simulate_with_the_real_bytes(tmp_path, P):
    """Issue 33: ``--simulate`` refused ``--bits`` and ``--nonblocking``. Now the quantized rows
    (QSGD 4-bit, seeded as in the real sweep) and ``iallreduce`` + ``wait`` simulate, with the
    bytes per rank and the result of ``mpiexec -n P``."""
    real, simulated = tmp_path / "real.jsonl", tmp_path / "sim.jsonl"
    run_mpi(P, args=[sys.executable, "-m", "sparcapps.bench.cli", *QUANTIZED, "--output",
                     str(real)], timeout=300)
    from sparcapps.bench import cli

    assert cli.main(["--simulate", str(P), "--network", f"1x1gbit,ppn={P}", *QUANTIZED,
                     "--output", str(simulated)]) == 0
    want, got = _quantized_rows(real), _quantized_rows(simulated)
    # dense (not quantized here: the sweep quantizes the sparse algorithms' dense messages)
    # and each algorithm at full precision and with 4 bits, all non-blocking
    assert len(want) == 1 + 4 * 2 and all(nb for _, _, nb in want)
    assert got == want
    if P > 1:  # quantizing changed the bytes of an algorithm with dense messages
        assert want[("dsar_split_allgather", 4, True)][0] < \
            want[("dsar_split_allgather", None, True)][0]


def test_unset_coding_and_partitions_follow_the_sparcml_environment(tmp_path, monkeypatch,
                                                                     capsys):
    """Issue 34, item 2: ``SPARCML_INDEX_CODING=raw sparc-bench ...`` recorded ``auto`` (the
    CLI's own default overrode the process default); the flag still wins; a bad value in the
    environment is a usage error (exit 2), as a bad flag is."""
    from sparcapps.bench import cli

    base = ["--simulate", "2", "--network", "2x10gbit", "--N", "4000", "--density", "0.01",
            "--algorithms", "ssar_split_allgather", "--reps", "1", "--no-model"]

    def recorded(path, *flags):
        assert cli.main([*base, *flags, "--output", str(path)]) == 0
        rows = [json.loads(line) for line in path.read_text().splitlines()]
        return {(r["metrics"]["index_coding"], r["metrics"]["partitions"]) for r in rows
                if r["algorithm"] == "ssar_split_allgather"}  # (dense has neither)

    monkeypatch.setenv("SPARCML_INDEX_CODING", "raw")
    monkeypatch.setenv("SPARCML_PARTITIONS", "equal")
    assert recorded(tmp_path / "env.jsonl") == {("raw", "equal")}
    assert recorded(tmp_path / "flag.jsonl", "--index-coding", "coded",
                    "--partitions", "balanced") == {("coded", "balanced")}
    monkeypatch.setenv("SPARCML_INDEX_CODING", "zip")
    with pytest.raises(SystemExit) as exit_info:
        cli.main([*base, "--output", str(tmp_path / "bad.jsonl")])
    assert exit_info.value.code == 2
    assert "SPARCML_INDEX_CODING" in capsys.readouterr().err
    assert not (tmp_path / "bad.jsonl").exists()
