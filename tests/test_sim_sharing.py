"""The simulator shares memory through the operations it passes in, never by patching.

- no assignment to an attribute of an imported module or class, and no ``setattr``, anywhere
  in ``comm/sparcml/sim`` (the operations travel on the context: ``ctx.ops``);
- the algorithm modules (every module of ``_collectives`` and ``_topk`` but the operations
  themselves) receive, gather, encode, decode and add only through ``ctx.ops``: no import of
  ``decode``/``recv_bytes``/``allgather_in_place``, no ``codec.encode(...)``, no
  ``arith.add/fold_parts/assemble(...)`` (so a new algorithm is shared without a list);
- at run time, the paths that used to bypass the simulator's patch (``topk_allreduce``'s point
  to point allgather, the node-aware reduce) now call the sharing operations;
- no import cycle among the simulator's modules, counting imports inside functions;
- at P = 256, N = 1M, density 1%, every algorithm but ``dense`` (flat and node-aware) and
  ``topk_allreduce`` stay within a constant times the N + P k bound (``slow``).
"""

import ast
import threading
import tracemalloc
from pathlib import Path

import numpy as np
import pytest

import sparcml
import sparcml.sim as sim
from sparcml._collectives.hierarchical import _TAG_NODE_REDUCE as TAG_NODE_REDUCE
from sparcml._collectives.ops import PLAIN, Ops
from sparcml._topk.topk_allreduce import TAG_DIRECT
from sparcml.sim import _runner, _sharing

from mpirun import REPO

PACKAGE = REPO / "comm" / "sparcml"
SIM = PACKAGE / "sim"


# ---- no patching -----------------------------------------------------------------------------
def _imported_names(tree) -> set[str]:
    """Names bound by imports anywhere in ``tree`` (modules, classes, functions alike)."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                names.add((alias.asname or alias.name).split(".")[0])
    return names


def _patches(path: Path) -> list[str]:
    """Assignments to attributes of imported names (``mod.f = ...``, ``Cls.m = ...``, also
    augmented and deleted) and ``setattr`` calls in ``path``."""
    tree = ast.parse(path.read_text(), str(path))
    imported = _imported_names(tree)
    found = []

    def base(expr):
        while isinstance(expr, ast.Attribute):
            expr = expr.value
        return expr.id if isinstance(expr, ast.Name) else None

    for node in ast.walk(tree):
        targets = []
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        elif isinstance(node, ast.Delete):
            targets = node.targets
        for t in targets:
            for sub in ast.walk(t):
                if isinstance(sub, ast.Attribute) and base(sub) in imported:
                    found.append(f"{path.name}:{node.lineno}: {ast.unparse(sub)}")
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
                and node.func.id in ("setattr", "delattr"):
            found.append(f"{path.name}:{node.lineno}: {ast.unparse(node)}")
    return found


def test_the_detector_finds_a_patch(tmp_path):
    """The check below can fail: it flags the kinds of patch the simulator used to make."""
    path = tmp_path / "probe.py"
    path.write_text("from sparcml._collectives import arith\nfrom sparcml._wire.codec import "
                    "Codec\nimport sparcml._collectives.exchange as ex\n"
                    "def install(obj):\n    arith.add = None\n    Codec.encode = None\n"
                    "    ex.recv_bytes = None\n    setattr(arith, 'fold_parts', None)\n"
                    "    obj.flags.writeable = False\n")
    assert len(_patches(path)) == 4


def test_the_simulator_swaps_no_module_or_class_attribute():
    found = [p for path in sorted(SIM.glob("*.py")) for p in _patches(path)]
    assert found == []


# ---- everything goes through ctx.ops ---------------------------------------------------------
_RAW_NAMES = {"decode", "recv_bytes", "allgather_in_place"}
_ARITH = {"add", "fold_parts", "assemble"}


def _bypasses(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(), str(path))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            for alias in node.names:
                if alias.name in _RAW_NAMES:
                    found.append(f"{path.name}:{node.lineno}: imports {alias.name}")
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            owner = ast.unparse(node.func.value)
            attr = node.func.attr
            if attr == "encode" and node.args and not owner.endswith("ops") \
                    and "quantizer" not in owner:  # (str.encode() takes no part)
                found.append(f"{path.name}:{node.lineno}: {owner}.encode(...)")
            if attr in _ARITH and owner == "arith":
                found.append(f"{path.name}:{node.lineno}: arith.{attr}(...)")
            if attr in _RAW_NAMES and not owner.endswith("ops"):
                found.append(f"{path.name}:{node.lineno}: {owner}.{attr}(...)")
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
                and node.func.id in _RAW_NAMES:
            found.append(f"{path.name}:{node.lineno}: {node.func.id}(...)")
    return found


def test_the_algorithms_reach_the_shared_operations_only_through_ctx_ops():
    # ops.py and flag_ops.py are operations objects; plan_fast.py is the plan's real-ranks-only
    # path (taken only when the context holds the plain operations: checked below)
    modules = [p for sub in ("_collectives", "_topk") for p in (PACKAGE / sub).rglob("*.py")
               if p.name not in ("ops.py", "flag_ops.py", "arith.py", "plan_fast.py")]
    assert any(p.name == "hierarchical.py" for p in modules)
    assert any(p.name == "topk_allreduce.py" for p in modules)
    found = [b for p in sorted(modules) for b in _bypasses(p)]
    assert found == []


def test_plans_take_their_fast_path_on_real_ranks_only():
    """Simulated plans run the algorithm through the shared (and modeled) operations."""
    import numpy as np

    import sparcml

    def body(comm):
        plan = sparcml.plan(64, np.float32, comm)
        vec = sparcml.SparseVector(64, np.array([comm.Get_rank()]), np.ones(1, np.float32))
        total = plan.allreduce(vec).to_dense()
        from sparcml._runtime.context import context_for

        return plan.fast, plan._state(context_for(comm)).fast is None, float(total.sum())

    for P in (2, 3):
        assert sim.run(P, body).results == [(True, True, float(P))] * P


def test_the_bypass_detector_finds_direct_calls(tmp_path):
    path = tmp_path / "algo.py"
    path.write_text("from ..exchange import recv_bytes\nfrom ..._wire.codec import decode\n"
                    "def run(ctx, codec, part, a, b):\n    codec.encode(part)\n"
                    "    arith.add(a, b, codec)\n    ctx.ops.add(a, b, codec)\n"
                    "    ctx.ops.encode(codec, part)\n")
    assert len(_bypasses(path)) == 4


# ---- at run time -----------------------------------------------------------------------------
class _Recording(_sharing.SharingOps):
    """The sharing operations, counting the calls made in rank threads per operation."""

    calls: dict = {}
    lock = threading.Lock()

    def _count(self, name):
        with self.lock:
            self.calls[name] = self.calls.get(name, 0) + 1

    def recv_bytes(self, ctx, source, tag, status=None):
        self._count(("recv_bytes", tag))
        return super().recv_bytes(ctx, source, tag, status)

    def decode(self, buf, out=None, **kwargs):
        self._count("decode")
        return super().decode(buf, out, **kwargs)

    def fold_parts(self, *args, **kwargs):
        self._count("fold_parts")
        return super().fold_parts(*args, **kwargs)

    def bcast_bytes(self, *args, **kwargs):
        self._count("bcast_bytes")
        return super().bcast_bytes(*args, **kwargs)


def _body(comm, case, N, density, fresh):
    rank = comm.Get_rank()
    k = max(1, int(N * density))
    rng = np.random.default_rng([rank])
    vec = sparcml.SparseVector(N, np.sort(rng.choice(N, k, replace=False)).astype(np.int32),
                               rng.standard_normal(k).astype(np.float32))
    if case == "topk":
        res = sparcml.topk_allreduce(vec, k, comm).result
    else:
        name, _, hier = case.partition("+")
        res = sparcml.allreduce(vec, comm, algorithm=name, hierarchical=bool(hier))
    del vec
    if fresh:  # a private copy: what the run holds at its end is then the same for all cases
        return res.to_dense().copy()
    return int(np.count_nonzero(res.values)) if res.is_dense else res.nnz


def _network(case, P, ppn=8):
    return f"{max(1, P // ppn)}x10gbit,ppn={ppn}" if case.endswith("+hier") else f"{P}x10gbit"


@pytest.mark.parametrize("case, tag", [("topk", TAG_DIRECT),
                                       ("ssar_recursive_double+hier", TAG_NODE_REDUCE),
                                       ("allgather+hier", TAG_NODE_REDUCE)])
def test_the_paths_that_bypassed_the_patch_now_share(monkeypatch, case, tag):
    """``topk_allreduce`` up to P = 16 (its point-to-point allgather, ``tag``) and the
    node-aware reduce received with their own imported ``recv_bytes``; they now call the
    run's operations, and the results are those of a run without sharing."""
    monkeypatch.setattr(_runner, "SharingOps", _Recording)
    _Recording.calls = {}
    P = 8
    shared = sim.run(P, _body, args=(case, 4000, 0.05, True), network=_network(case, P, 4))
    assert _Recording.calls.get(("recv_bytes", tag), 0) > 0, _Recording.calls
    assert _Recording.calls.get("decode", 0) > 0, _Recording.calls
    if case.endswith("+hier"):
        assert _Recording.calls.get("bcast_bytes", 0) > 0, _Recording.calls
    _Recording.calls = {}
    alone = sim.run(P, _body, args=(case, 4000, 0.05, True), network=_network(case, P, 4),
                    share=False)
    assert _Recording.calls == {}  # without sharing: the plain operations
    assert all(a.tobytes() == b.tobytes() for a, b in zip(shared.results, alone.results))
    assert shared.wire_bytes == alone.wire_bytes


def test_contexts_on_simulated_communicators_hold_the_runs_operations():
    def body(comm):
        from sparcml._runtime.context import context_for

        ops = context_for(comm).ops
        # compute="model": the run's operations wrapped by the kernels' charging
        inner = getattr(ops, "_inner", None)
        return type(ops).__name__, None if inner is None else type(inner).__name__

    measured = {"compute": "measured"}
    assert sim.run(2, body, **measured).results == [("SharingOps", None)] * 2
    assert sim.run(2, body, share=False, **measured).results == [("Ops", None)] * 2
    assert sim.run(2, body).results == [("ModelOps", "SharingOps")] * 2
    assert sim.run(2, body, share=False).results == [("ModelOps", "Ops")] * 2
    assert type(PLAIN) is Ops


# ---- no cycle in the simulator ---------------------------------------------------------------
def _sim_imports(path: Path) -> set[str]:
    """The simulator's modules ``path`` imports, at any depth (inside functions too)."""
    tree = ast.parse(path.read_text(), str(path))
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            if node.module:
                out.add(node.module.split(".")[0])
            else:
                out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("sparcml.sim."):
            out.add(node.module.split(".")[2])
    return out


def test_no_import_cycle_in_the_simulator_counting_function_level_imports():
    modules = {p.stem: p for p in SIM.glob("*.py") if p.stem != "__init__"}
    graph = {m: _sim_imports(p) & set(modules) for m, p in modules.items()}
    assert graph["_runner"] >= {"_comm", "_sharing", "_world"}  # the walk sees them
    state: dict = {}

    def visit(m, stack):
        state[m] = 1
        for t in sorted(graph[m]):
            assert state.get(t) != 1, "import cycle: " + " -> ".join(stack + [m, t])
            if t not in state:
                visit(t, stack + [m])
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m, [])


# ---- memory at scale -------------------------------------------------------------------------
BOUND_FACTOR = 16
_SPARSE = ("ssar_recursive_double", "ssar_split_allgather", "dsar_split_allgather", "allgather")
# (case, P, N): the algorithms of P (P - 1) messages or P decodes per rank at P = 128 (the
# split ones took 60-70 s each at 256, with tracemalloc on); the others at 256
_AT_128 = ("ssar_split_allgather", "dsar_split_allgather", "allgather", "topk")
MEMORY_CASES = [(case, *((128, 1 << 19) if case in _AT_128 else (256, 1 << 20)))
                for case in (*_SPARSE, *(f"{a}+hier" for a in _SPARSE), "topk")]


@pytest.mark.slow
@pytest.mark.parametrize("case, P, N", MEMORY_CASES)
def test_memory_at_scale_stays_within_n_plus_p_k(case, P, N):
    """P = 256, N = 2^20 (or P = 128, N = 2^19), density 1% per rank (k = 10,485 or 5,242;
    results fill in to ~92%): the traced heap's peak (every NumPy array) stays under
    ``BOUND_FACTOR x (N + P k) x 8`` bytes (an int32 index and a float32 value per entry).
    Why 16: sharing keeps the recent sums (up to ``RECENT_BYTES``) for the slowest rank of a
    group, a round's P / 2^r distinct sums of 2^r k entries (P k per round) live at once, and
    a dense result is N values; the measured peaks are 3-13x (BENCHMARKS.md, "Memory per
    algorithm with the operations passed in"); one dense result per rank (what the node-aware
    broadcast and ``dsar``'s allgather held before) is P N x 4 bytes = 36x the bound at P =
    256 (28x at 128), so the factor separates the two. ``dense`` is left out: its
    MPI_Allreduce needs every rank's full vector (P N; sparc-bench models it without data)."""
    density = 0.01
    net = _network(case, P)
    sim.run(4, _body, args=(case, 1 << 12, density, False),
            network=_network(case, 4, 2))  # compile the kernels first
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        res = sim.run(P, _body, args=(case, N, density, False), network=net)
        peak = tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()
    k = int(N * density)
    bound = (N + P * k) * 8
    assert len(set(res.results)) == 1
    assert res.results[0] == k if case == "topk" else res.results[0] > 0.5 * N
    assert peak < BOUND_FACTOR * bound, \
        f"{case}: peak heap {peak / 2**20:.0f} MiB = {peak / bound:.1f} x (N + P k) x 8 B"
