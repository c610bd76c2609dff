"""README's extension how-tos match the code: "Adding an algorithm" and "Adding a compressor".

Each section's code block runs as written (the algorithm on simulated ranks, through a plain
call and through a plan with one bad rank; the compressor through the deep apps' parser, the
cost model and ``build``), the files it names exist, and every declared attribute of the
records (``sparcml.Algorithm``, ``sparcml.compression.CompressorSpec``) and the documented
class attributes of ``Compressor`` are named in it.
"""

from __future__ import annotations

import dataclasses
import re

import numpy as np
import pytest

import sparcml
import sparcml.sim
from mpirun import REPO
from sparcml._registry import unregister
from sparcml.compression import Compressor, CompressorSpec


def _section(title: str) -> str:
    text = (REPO / "README.md").read_text()
    body = text.split(f"## {title}\n", 1)[1]
    return body.split("\n## ", 1)[0]


def _code(section: str) -> str:
    blocks = re.findall(r"```python\n(.*?)```", section, re.S)
    assert len(blocks) == 1, f"expected one python block, found {len(blocks)}"
    return blocks[0]


def _named_paths(section: str) -> list[str]:
    return re.findall(r"`((?:comm|tests|sparcapps)/[\w/.]+)`", section)


@pytest.mark.parametrize("title", ["Adding an algorithm", "Adding a compressor"])
def test_the_files_a_how_to_names_exist(title):
    paths = _named_paths(_section(title))
    assert len(paths) >= 2, paths
    missing = [p for p in paths if not (REPO / p).exists()]
    assert not missing, f"README's {title!r} names what is not there: {missing}"


def _mentioned(section: str) -> set[str]:
    return set(re.findall(r"`([\w.]+)", section))


def test_the_algorithm_how_to_names_every_declared_field():
    section = _section("Adding an algorithm")
    words = _mentioned(section)
    fields = {f.name for f in dataclasses.fields(sparcml.Algorithm)}
    missing = sorted(fields - words)
    assert not missing, f"fields of sparcml.Algorithm that README does not explain: {missing}"


def test_the_compressor_how_to_names_every_declared_field_and_hook():
    section = _section("Adding a compressor")
    words = _mentioned(section)
    fields = {f.name for f in dataclasses.fields(CompressorSpec)}
    hooks = {"compress", "num_sent", "predicted_seconds", "takes_shapes", "default_memory",
             "lossless", "compress_in", "reduce_in"}
    missing = sorted((fields | hooks) - words)
    assert not missing, f"README's compressor how-to does not explain: {missing}"
    for hook in hooks - {"compress_in", "reduce_in"}:  # looked up with getattr: documented
        assert hasattr(Compressor, hook), hook
    source = (REPO / "comm/sparcml/compression/_objects.py").read_text()
    assert "``compress_in(ctx, g, key)" in source and "``reduce_in(ctx, g, key" in source


@pytest.mark.parametrize("title", ["Adding an algorithm", "Adding a compressor"])
def test_the_how_tos_point_to_the_public_context(title):
    """Both how-tos name the context their plugins receive (whose docstring is the contract),
    and the algorithm's names everything it holds."""
    section = _section(title)
    assert "`sparcml.CallContext`" in section
    if title == "Adding an algorithm":
        held = {n for n in dir(sparcml.CallContext) if not n.startswith("_")} - {"allreduce"}
        missing = sorted(n for n in held if f"`ctx.{n}" not in section)
        assert not missing, f"README's algorithm how-to does not name ctx.{missing}"
    else:
        assert "`ctx.allreduce(" in section


def test_the_algorithm_how_to_runs_as_written():
    namespace: dict = {}
    exec(compile(_code(_section("Adding an algorithm")), "README.md", "exec"), namespace)
    name = namespace["NAME"]
    try:
        record = sparcml.get_algorithm(name)
        assert name in sparcml.ALGORITHMS and not record.routes_through_ops
        assert isinstance(record.tags.gather, int)

        def ranks(comm):
            r = comm.Get_rank()
            vec = sparcml.SparseVector(50, [r, 10], np.ones(2, np.float32))
            total = sparcml.allreduce(vec, comm, algorithm=name).to_dense()
            plan = sparcml.plan(50, np.float32, comm, algorithm=name)
            bad = sparcml.SparseVector(51, [1], np.ones(1, np.float32))
            try:
                plan.allreduce(bad if r == 1 else vec)
                outcome = "no exception"
            except sparcml.SparcmlError as exc:
                outcome = type(exc).__name__
            return total, outcome, plan.allreduce(vec).to_dense()

        results = sparcml.sim.run(3, ranks, timeout=120).results
        want = np.zeros(50, np.float32)
        want[[0, 1, 2]] = 1
        want[10] = 3
        for total, outcome, after in results:
            assert np.array_equal(total, want) and np.array_equal(after, want)
            assert outcome == "PlanInputError", outcome  # on every rank, no hang
        assert sparcml.CostModel().predict(name, P=4, N=1000, k=10) > 0
    finally:
        unregister(name)
    assert name not in sparcml.ALGORITHMS


def test_the_compressor_how_to_runs_as_written():
    from sparcml.compression import (COMPRESSORS, build, predicted_seconds,
                                     unregister_compressor)
    from sparcapps.deep import cnn
    from sparcapps.deep.compressor_table import _name
    from sparcapps.deep.train import compression_from_args

    namespace: dict = {}
    exec(compile(_code(_section("Adding a compressor")), "README.md", "exec"), namespace)
    try:
        assert "head" in COMPRESSORS
        args = cnn.build_parser().parse_args(["--compressor", "head", "--head-count", "5"])
        c = compression_from_args(args)
        assert c.compressor.count == 5 and _name({"config": vars(args)}) == "head (first 5)"
        model = sparcml.CostModel()
        assert predicted_seconds(c, model, P=4, n=1000) == model.allreduce(5 * 4)
        x = np.arange(8, dtype=np.float32)
        ctx_free = build("head", count=3).fresh().reduce(x, key=0)
        assert ctx_free.result.to_dense().tolist() == [0, 1, 2, 0, 0, 0, 0, 0]
    finally:
        unregister_compressor("head")
    assert "head" not in COMPRESSORS
