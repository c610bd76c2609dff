"""Options resolved once, at the entry points (issue 34, item 2).

A call's :class:`sparcml.Options` is resolved after its agreement into the
:class:`~sparcml._options.CallOptions` its codec carries (index coding split into
``code_indices`` and link costs, partitions, native phases); nothing below the entry points
reads the context variable or writes per-call fields onto the long-lived context. Also: the
other collectives weigh the link costs under ``index_coding="auto"`` as their docstrings say
(before, they passed none, so ``"auto"`` acted as ``"coded"``), and the apps' options come
from the library's process defaults, a bad one being a usage error.
"""

from __future__ import annotations

import ast
import pathlib

import numpy as np
import pytest

import sparcml
import sparcml.sim as sim
from sparcml._runtime.context import CommContext

PACKAGE = pathlib.Path(sparcml.__file__).parent


def _calls_and_writes(path: pathlib.Path):
    """``(names called, attributes assigned)`` in one module (``x.partitions = ...`` gives
    ``partitions``)."""
    tree = ast.parse(path.read_text(), str(path))
    called, written = [], []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            f = node.func
            called.append(f.id if isinstance(f, ast.Name) else
                          f.attr if isinstance(f, ast.Attribute) else None)
        elif isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                for sub in ast.walk(t):
                    if isinstance(sub, ast.Attribute) and isinstance(sub.ctx, ast.Store):
                        written.append(sub.attr)
    return called, written


def test_nothing_below_the_entry_points_reads_the_call_options_or_writes_them_on_a_context():
    """``current_options()`` is called only by ``resolve_options`` (the entry points' own
    helper, in ``_options.py``), and no module sets a per-call ``partitions`` on a context."""
    readers, writers = [], []
    for path in sorted(PACKAGE.rglob("*.py")):
        called, written = _calls_and_writes(path)
        if "current_options" in called and path.name != "_options.py":
            readers.append(str(path.relative_to(PACKAGE)))
        if "partitions" in written:
            writers.append(str(path.relative_to(PACKAGE)))
    assert readers == [] and writers == []
    assert not hasattr(CommContext(None, 0, 1, None), "partitions")


class _Comm:
    def __init__(self, node_size):
        self.node_size, self.splits = node_size, 0

    def Split_type(self, kind):
        self.splits += 1
        comm = self

        class _Node:
            def Get_size(self):
                return comm.node_size

            def Free(self):
                pass

        return _Node()


class _Ctx:
    def __init__(self, size, node_size):
        self.size, self.comm = size, _Comm(node_size)
        self.model = self.link_costs = None


def test_call_options_split_the_index_coding_once_per_options_object():
    from sparcml._model.link_costs import SHARED_MEMORY_BYTE_SECONDS, call_options

    ctx = _Ctx(4, 4)  # one node
    auto = sparcml.Options()
    resolved = call_options(ctx, auto)
    assert resolved.code_indices and resolved.link_costs[0] == SHARED_MEMORY_BYTE_SECONDS
    assert resolved.options is auto and resolved.partitions == "balanced"
    assert call_options(ctx, auto) is resolved  # cached: no second resolution
    assert ctx.comm.splits == 1
    equal = call_options(ctx, sparcml.Options(index_coding="coded", partitions="equal",
                                              native_min_ranks=3))
    assert equal.code_indices and equal.link_costs is None and equal.partitions == "equal"
    assert equal.native(3) and not equal.native(2)
    assert not call_options(ctx, sparcml.Options(index_coding="raw")).code_indices
    assert ctx.comm.splits == 1  # the links were assumed once per context
    ctx.model = sparcml.CostModel(beta=3e-9, gamma_code=2e-9)  # calibrated: resolved again
    assert call_options(ctx, auto).link_costs == (3e-9, 2e-9)
    assert call_options(_Ctx(1, 1), auto).link_costs is None  # one rank: nothing travels


def _other_collectives(comm, dim, nnz):
    """Each of allgather, reduce_scatter and bcast under each index coding: this rank's
    bytes sent and the results (dense), per coding."""
    rng = np.random.default_rng([5, comm.Get_rank()])
    vec = sparcml.SparseVector(dim, np.sort(rng.choice(dim, nnz, replace=False)),
                               rng.standard_normal(nnz).astype(np.float32))
    out = {}
    for coding in ("auto", "raw", "coded"):
        opts = sparcml.Options(index_coding=coding)
        for name, call in (("allgather", lambda s: sparcml.allgather(vec, comm, stats=s,
                                                                       options=opts)),
                           ("reduce_scatter", lambda s: [sparcml.reduce_scatter(
                               vec, comm, stats=s, options=opts)]),
                           ("bcast", lambda s: [sparcml.bcast(vec, 0, comm, stats=s,
                                                              options=opts)])):
            stats = sparcml.TrafficStats()
            got = call(stats)
            out[name, coding] = (stats.bytes_sent, [v.to_dense().tobytes() for v in got])
    return out


@pytest.mark.parametrize("P", [1, 2, 3, 5])
def test_the_other_collectives_weigh_the_link_costs_under_auto(P):
    """``index_coding="auto"`` on allgather / reduce_scatter / bcast: raw indices between
    ranks of one node (a byte costs less than coding an index), coded between nodes (1 Gbit/s:
    the bytes saved are worth more), as in the allreduce; the results are the same bits
    whatever the coding."""
    dim, nnz = 1 << 18, 256  # 0.1%: Elias-Fano takes about a third of the raw bytes
    one_node = sim.run(P, _other_collectives, args=(dim, nnz),
                       network=f"1x1gbit,ppn={P}").results
    nodes = sim.run(P, _other_collectives, args=(dim, nnz), network=f"{P}x1gbit").results
    for name in ("allgather", "reduce_scatter", "bcast"):
        for results, same_as in ((one_node, "raw"), (nodes, "coded")):
            for r in results:
                sent = {c: r[name, c][0] for c in ("auto", "raw", "coded")}
                assert r[name, "auto"][1] == r[name, "raw"][1] == r[name, "coded"][1], name
                if P == 1:
                    assert set(sent.values()) == {0}
                elif name != "bcast" or r is results[0]:  # (bcast: the root sends)
                    assert sent["coded"] < sent["raw"], (name, sent)  # the test can tell
                    assert sent["auto"] == sent[same_as], (name, same_as, sent)


# ---- the apps' options: the library's process defaults, the flag wins ----------------------

def _apps():
    """prog -> (its parser, its main, the least command line it runs with)."""
    from sparcapps.deep import cnn, lstm
    from sparcapps.linear import cli as linear

    synth = ["--synth", "url"]
    return {"sparc-linear": (linear.build_parser("sparc-linear"), linear.main, synth),
            "sparc-svm": (linear.build_parser("sparc-svm", "hinge"), linear.svm_main, synth),
            "sparc-cnn": (cnn.build_parser(), cnn.main, []),
            "sparc-lstm": (lstm.build_parser(), lstm.main, [])}


def test_the_apps_options_follow_the_sparcml_environment_and_the_flag_wins(monkeypatch,
                                                                           capsys):
    from sparcapps.cli_args import options_from_args

    for prog, (parser, main, argv) in _apps().items():
        monkeypatch.setenv("SPARCML_INDEX_CODING", "raw")
        monkeypatch.setenv("SPARCML_PARTITIONS", "equal")
        args = parser.parse_args(argv)
        opts = options_from_args(args, parser)
        assert (opts.index_coding, opts.partitions) == ("raw", "equal"), prog
        # filled in, so that the run's record says what ran
        assert (args.index_coding, args.partitions) == ("raw", "equal"), prog
        args = parser.parse_args([*argv, "--index-coding", "coded", "--partitions", "balanced"])
        opts = options_from_args(args, parser)
        assert (opts.index_coding, opts.partitions) == ("coded", "balanced"), prog
        assert (args.index_coding, args.partitions) == ("coded", "balanced"), prog
        text = " ".join(parser.format_help().split())
        for flag, var in (("--index-coding", "SPARCML_INDEX_CODING"),
                          ("--partitions", "SPARCML_PARTITIONS")):
            action = next(a for a in parser._actions if flag in a.option_strings)
            said = " ".join(action.help.split())
            assert said in text and f"${var} if set" in said and "the flag wins" in said, \
                (prog, said)
        # a bad variable is a usage error of the app: one line naming it, exit 2, no run
        monkeypatch.setenv("SPARCML_INDEX_CODING", "zip")
        capsys.readouterr()
        with pytest.raises(SystemExit) as exit_info:
            main(argv)
        assert exit_info.value.code == 2, prog
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "SPARCML_INDEX_CODING='zip'" in err[0], (prog, err)
        assert err[0].startswith(f"{prog}: error: "), (prog, err)
        with pytest.raises(sparcml.InvalidOptionError, match="SPARCML_INDEX_CODING"):
            options_from_args(parser.parse_args(argv))  # no parser: the library's error
