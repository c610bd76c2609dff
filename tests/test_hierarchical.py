"""The node-aware allreduce's cost model and bench rows (its multi-rank correctness cases:
tests/matrix/hierarchical.py)."""

import sys

import pytest

from mpirun import run_mpi
from sparcml import ALGORITHMS, CostModel


def test_the_model_prefers_node_aware_where_the_node_link_is_shared():
    """4 nodes x 2 ranks at 1 Gbit, 1% overlapping supports of 16M: the flat algorithms' ranks
    share their node's link (twice the time per byte each), the leaders have it to themselves."""
    link = 8e-9  # 1 Gbit/s
    flat = CostModel(beta=2 * link, allgather_beta=2 * link, allreduce_beta=2 * link)
    leaders = CostModel(beta=link, allgather_beta=link, allreduce_beta=link, beta_node=1e-10)
    shape = {"N": 1 << 24, "k": 167772, "q": 0.1}
    for name in ALGORITHMS:
        hier = leaders.predict_hierarchical(name, P=8, nodes=4, ranks_per_node=2, **shape)
        assert hier < flat.predict(name, P=8, **shape), name
    # no node phase with one rank per node; only node phases with one node
    name = ALGORITHMS[0]
    assert leaders.predict_hierarchical(name, P=4, nodes=4, ranks_per_node=1, **shape) == \
        pytest.approx(leaders.predict(name, P=4, **shape))
    one_node = leaders.predict_hierarchical(name, P=4, nodes=1, ranks_per_node=4, **shape)
    slow_node = CostModel(beta=link, beta_node=100 * link).predict_hierarchical(
        name, P=4, nodes=1, ranks_per_node=4, **shape)
    assert 0 < one_node < slow_node


@pytest.mark.mpi
def test_bench_times_each_algorithm_flat_and_node_aware_side_by_side(tmp_path):
    import json

    out = tmp_path / "hier.jsonl"
    proc = run_mpi(4, args=[sys.executable, "-m", "sparcapps.bench.cli", "--N", "16384",
                            "--density", "0.01", "--pattern", "overlap", "--algorithms",
                            "ssar_split_allgather", "--hierarchical", "--reps", "2", "--no-model",
                            "--output", str(out)], timeout=120,
                   env={"SPARCML_RANKS_PER_NODE": "2"})
    assert "node-aware (2 node(s) of 2/2 ranks, 2 per node forced)" in proc.stdout, proc.stdout
    assert "ssar_split_allgather+h" in proc.stdout
    assert "node-aware speedup over flat (flat / +h median): ssar_split_allgather" in proc.stdout
    records = [json.loads(line) for line in out.read_text().splitlines()]
    by_kind = {(r["algorithm"], r["metrics"]["hierarchical"]): r for r in records}
    assert set(by_kind) == {("dense", False), ("ssar_split_allgather", False),
                            ("ssar_split_allgather", True)}
    hier = by_kind[("ssar_split_allgather", True)]
    assert hier["metrics"]["speedup_over_flat"] > 0
    # the leaders send less over the network than the flat algorithm's ranks
    flat = by_kind[("ssar_split_allgather", False)]
    assert hier["bytes"]["inter_node_per_rank_max"] < flat["bytes"]["inter_node_per_rank_max"]
