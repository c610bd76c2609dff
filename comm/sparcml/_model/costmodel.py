"""The cost model of the allreduce algorithms: pure arithmetic, no MPI.

Each algorithm's time is predicted from its structure (messages, bytes, merged items) by the
``cost`` function of its registry record (:mod:`sparcml._registry`), on machine parameters that
:mod:`sparcml._model.auto` measures on a communicator:

- ``alpha``, ``beta``: point-to-point latency (s) and time per byte (s/B), from concurrent
  pairwise exchanges through the same send/probe/receive path the algorithms use;
- ``gamma_merge``: seconds per input item of a sparse merge; ``gamma_dense``: seconds per
  element of dense work (add, scatter, copy); ``gamma_code``: seconds to encode and decode
  one index (what :mod:`sparcml._model.link_costs` weighs against the bytes a code saves);
- ``allreduce_alpha/beta`` and ``allgather_alpha/beta``: the MPI collectives the baselines and
  the second phases use, fitted as latency + time per byte (their internal algorithm is MPI's);
- ``alpha_node``, ``beta_node``: the same inside a node (shared memory), for the node phases of
  the node-aware allreduce (:mod:`sparcml._collectives.hierarchical`, :meth:`CostModel.predict_hierarchical`);
- ``overhead[name]``, ``scale[name]``: per algorithm, the measured time on a tiny input (every
  fixed cost) and the measured / analytic growth on a medium input (empty: not calibrated);
- ``collective_alpha``: seconds per round inside an MPI collective (link latency and MPI's
  own per-message cost, no Python; 0: ``allgather_alpha / ceil(log2 P)``), and
  ``part_overhead``: sparcml's Python per part of a phase that runs as one vector collective
  (encoding and decoding it): the terms of the phases that exchange with every rank from
  ``Options.native_min_ranks`` ranks (``Alltoallv``, ``Allgatherv``, ``Gatherv``, formulas of
  :mod:`sparcml._model.mpi_collectives`); below, they are ``P - 1`` messages at ``alpha``.

Bytes on the wire: a sparse item costs its index's expected coded size (:func:`index_bytes`,
a function of the stream's density: Elias-Fano gaps or a bitmap, see :mod:`sparcml._wire.codec`)
plus ``s_val``; whether a stream is dense still follows the switch rule on the raw sizes
``c = s_idx + s_val``, as the algorithms do.

The result size K is not known before the call: it is estimated from the largest input nnz k
and an overlap factor q (the share of a further input's items that are new), learnt from the
results of earlier calls on the same communicator (default: independent random supports).
Reference volumes reported beside each measurement (DESIGN 3.7): the *floor* ``(K - k) c`` bytes
every rank must receive, and the reduce-scatter + allgather volume ``(P-1)/P (k + K) c``.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, fields

from .._registry import algorithm_names, get_algorithm
from . import mpi_collectives as mpi
from . import tuning
from .._options import default_options
from .._lazy import lazy_module
select_kernels = lazy_module("sparcml._topk.select_kernels")

__all__ = ["CostModel", "union_size", "overlap_from_result", "stream_bytes", "index_bytes",
           "split_phase_one", "topk_allreduce_cost", "topk_sync_steps", "TOPK_STEP", "TINY_N",
           "MEDIUM_N"]

TINY_N = 1024  # the input of the overhead calibration: dim 1024, one nonzero per rank
MEDIUM_N = 1 << 20  # the input of the growth calibration: 2% random nonzeros per rank
TOPK_STEP = "topk_allreduce"  # what CostModel.choose_topk_step returns for the global top-k


def union_size(k: float, m: int, dim: int, q: float = 1.0) -> float:
    """Expected support of the sum of m inputs of k items each (q: share of new items)."""
    if dim == 0 or k <= 0:
        return 0.0
    k = min(k, dim)
    keep_first = 1.0 - k / dim
    keep_next = max(0.0, 1.0 - q * k / dim)
    return dim * (1.0 - keep_first * keep_next ** max(0, m - 1))


def overlap_from_result(k: float, K: float, P: int, dim: int) -> float:
    """The q of :func:`union_size` that explains a result of K items from P inputs of k."""
    if P < 2 or k <= 0 or dim == 0:
        return 1.0
    ratio = (1.0 - min(K, dim - 0.5) / dim) / (1.0 - min(k, dim - 0.5) / dim)
    ratio = min(max(ratio, 0.0), 1.0)
    q = dim / k * (1.0 - ratio ** (1.0 / (P - 1)))
    return float(min(max(q, 0.0), 1.0))


def index_bytes(items: float, span: float, s_idx: int, coded: bool = True) -> float:
    """Expected bytes per index of a sparse message of ``items`` indices over ``span``
    positions: the smallest of ``s_idx`` (raw), the Elias-Fano code (about
    ``L + 1 + 2^-L (span / items - 1)`` bits, ``L = floor(log2(span / items))``) and the bitmap
    (``span / items`` bits), as :func:`sparcml._wire.codec.index_layout` chooses (headers and byte
    rounding aside). ``coded``: the call's ``options.code_indices`` (False: raw indices, as
    ``index_coding="raw"`` sends them)."""
    if not coded or items <= 0 or span <= 0:
        return float(s_idx)
    ratio = max(span / items, 1.0)
    low = max(0, math.floor(math.log2(max(ratio - 1.0, 1.0))))
    ef = (low + 1 + (ratio - 1.0) / 2**low) / 8
    return min(float(s_idx), ef, ratio / 8)


def stream_bytes(items: float, N: int, s_idx: int, s_val: int,
                 coded: bool = True) -> float:
    """Bytes of a stream of ``items`` entries by the switch rule (dense past it; sparse items
    with their indices coded, :func:`index_bytes`, whose ``coded`` this is)."""
    c = s_idx + s_val
    if items >= N * s_val / c:
        return N * s_val
    return items * (index_bytes(items, N, s_idx, coded) + s_val)


def split_phase_one(model: "CostModel", *, P: int, N: int, k: float, s_idx: int,
                    s_val: int, options) -> float:
    """Phase 1 of the split algorithms: a 1/P block of the input to every other rank (P - 1
    messages, or from ``options.native_min_ranks`` ranks one ``Alltoall`` of the sizes and
    one ``Alltoallv``, with sparcml's Python once per part)."""
    c = s_idx + s_val
    moved = (P - 1) * stream_bytes(k, N, s_idx, s_val, options.code_indices) / P
    if options.native(P):
        step = model.collective_step(P)
        return (P * model.part_overhead + mpi.alltoall_time(P, mpi.SIZE_BYTES, step, model.beta)
                + mpi.alltoallv_time(P, moved, moved, step, model.beta)
                + model.gamma_dense * k * c / 4)
    return (P - 1) * model.alpha + model.beta * moved + model.gamma_dense * k * c / 4


def gather_selection(model: "CostModel", *, P: int, nbytes: float, options) -> float:
    """``topk_allreduce``'s allgather of ``nbytes`` selected bytes in all: P - 1 messages of
    every rank's share, or from ``options.native_min_ranks`` ranks an ``Allgather`` of the
    sizes and an ``Allgatherv`` (Python once per part)."""
    if options.native(P):
        step = model.collective_step(P)
        return (P * model.part_overhead + mpi.allgatherv_time(P, 8 * P, 8, step, model.beta)
                + mpi.allgatherv_time(P, nbytes, nbytes / P, step, model.beta))
    return (P - 1) * model.alpha + model.beta * (P - 1) / P * nbytes


def topk_sync_steps(remembered: bool = True) -> int:
    """Synchronizing steps of one :func:`sparcml.topk_allreduce` call on typical data (steps
    where a rank waits for the others): the agreement, the reduce-scatter, one histogram
    round unless the threshold of an earlier call of the same shape is remembered, the
    allgather of the selection (the call records its own count, ``sparcml._topk.topk_allreduce``'s
    ``ctx.topk.steps``; a test holds the two together)."""
    return 3 if remembered else 4


GUESS_EXTRA = 0.1  # entries a remembered threshold's guess gathers beyond k (its margin)


def _options(options):
    """The options a prediction is made under: ``options`` (an :class:`~sparcml.Options` or
    a call's resolved options), or for None the process defaults (the ``SPARCML_*``
    variables, :func:`sparcml.default_options`): resolved once per public method."""
    return default_options() if options is None else options


def topk_allreduce_cost(model: "CostModel", *, P: int, N: int, k_local: float, k: float,
                        q: float = 1.0, s_idx: int = 4, s_val: int = 4,
                        remembered: bool = True, options=None) -> float:
    """Predicted seconds of :func:`sparcml.topk_allreduce` (P >= 2): each synchronizing step
    (:func:`topk_sync_steps`) at the latency of a small collective (``allreduce_alpha``: on
    a node with more ranks than cores it holds the scheduling round every step pays), the
    reduce-scatter of inputs of ``k_local`` items, the merge of the P parts and their keys,
    the histogram round (unless ``remembered``), the point-to-point allgather of the k
    selected items (plus the guess's margin, or the candidates), the pick and ``dropped``.
    ``options``: the call's (None: the process defaults, :func:`sparcml.default_options`)."""
    options = _options(options)
    c = s_idx + s_val
    owned = union_size(k_local, P, N, q) / P
    gathered = min(k * (1 + GUESS_EXTRA), P * owned)
    t = topk_sync_steps(remembered) * model.allreduce_alpha
    t += split_phase_one(model, P=P, N=N, k=k_local, s_idx=s_idx, s_val=s_val, options=options)
    t += model.gamma_merge * k_local * max(1.0, math.log2(P)) + model.gamma_dense * owned
    if not remembered:
        bits = select_kernels.digit_bits(int(k), c)
        t += model.allreduce_beta * ((1 << bits) + 3) * 8 + model.gamma_dense * owned
    t += gather_selection(model, P=P, options=options,
                          nbytes=stream_bytes(gathered, N, s_idx, s_val, options.code_indices))
    return t + 3 * model.gamma_dense * gathered * c / 4 + model.gamma_merge * k_local


@dataclass
class CostModel:
    """Machine parameters (seconds, bytes) and the per-algorithm predictions.

    Build one with :func:`sparcml.calibrate` (measured on a communicator) or
    :func:`sparcml.sim.network_cost_model` (from a network spec); the default values are
    rough guesses. Pure arithmetic, no MPI. Besides the predictions, the model's size
    arithmetic: :meth:`union_size` (expected support of a sum), :meth:`overlap_from_result`
    (the overlap that explains a result's size), :meth:`stream_bytes` and :meth:`index_bytes`
    (bytes of a sparse message and of its coded indices).
    """

    union_size = staticmethod(union_size)
    overlap_from_result = staticmethod(overlap_from_result)
    stream_bytes = staticmethod(stream_bytes)
    index_bytes = staticmethod(index_bytes)

    alpha: float = 5e-6
    beta: float = 1e-10
    gamma_merge: float = 3e-9
    gamma_dense: float = 1e-9
    gamma_code: float = 6e-9  # seconds to encode and decode one index (Elias-Fano)
    allreduce_alpha: float = 2e-5
    allreduce_beta: float = 2e-10
    allgather_alpha: float = 2e-5
    allgather_beta: float = 1e-10
    alpha_node: float = 1e-6
    beta_node: float = 1e-10
    collective_alpha: float = 0.0  # per round inside an MPI collective; 0: from allgather_alpha
    part_overhead: float = 5e-6  # sparcml's Python per part of a vector collective
    overhead: dict = field(default_factory=dict)  # name -> seconds on a tiny input
    scale: dict = field(default_factory=dict)     # name -> measured / analytic growth

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def scalar_fields(cls) -> list[str]:
        """The names of the scalar parameters, in order."""
        return [f.name for f in fields(cls) if f.name not in ("overhead", "scale")]

    # -- building blocks (used by the algorithms' cost functions) -----------------------------

    def message(self, nbytes: float) -> float:
        """One point-to-point message."""
        return self.alpha + self.beta * nbytes

    def allgather(self, total_bytes: float) -> float:
        """An MPI allgather of ``total_bytes`` in all."""
        return self.allgather_alpha + self.allgather_beta * total_bytes

    def allreduce(self, nbytes: float) -> float:
        """An MPI allreduce of ``nbytes``."""
        return self.allreduce_alpha + self.allreduce_beta * nbytes

    def collective_step(self, P: int) -> float:
        """Seconds per round inside an MPI collective of P ranks: ``collective_alpha`` when
        set, else the fitted ``allgather_alpha`` over its ``ceil(log2 P)`` rounds."""
        if self.collective_alpha > 0:
            return self.collective_alpha
        return self.allgather_alpha / max(1, mpi.rounds_log2(P))

    def exchange(self, items: float, N: int, s_idx: int, s_val: int,
                 coded: bool = True) -> float:
        """Send a stream of ``items``, receive one alike, add them (encode, transfer, merge);
        ``coded``: as in :func:`stream_bytes`."""
        c = s_idx + s_val
        if items >= N * s_val / c:
            return self.gamma_dense * N + self.message(N * s_val) + 2 * self.gamma_dense * N
        return (self.gamma_dense * items * c / 4
                + self.message(stream_bytes(items, N, s_idx, s_val, coded))
                + self.gamma_merge * 2 * items)

    # -- predictions -------------------------------------------------------------------------

    def predict(self, algorithm: str, *, P: int, N: int, k: float, K: float | None = None,
                q: float = 1.0, s_idx: int = 4, s_val: int = 4, check: bool = True,
                options=None) -> float:
        """Predicted seconds of one allreduce (see :meth:`analytic`).

        Once calibrated, the fixed cost is the one measured for the algorithm on a tiny input
        (``overhead[algorithm]``), and what grows with the sizes is the analytic model's
        growth times the factor measured on a medium input (``scale[algorithm]``).
        ``options``: the call's :class:`~sparcml.Options` (its index coding and
        ``native_min_ranks`` change the bytes and the phases); None: the process defaults
        (:func:`sparcml.default_options`), as every prediction method here.
        """
        options = _options(options)
        t = self.analytic(algorithm, P=P, N=N, k=k, K=K, q=q, s_idx=s_idx, s_val=s_val,
                          check=check, options=options)
        overhead = self.overhead.get(algorithm, 0.0)
        if overhead > 0 and P > 1:
            t = overhead + self.scale.get(algorithm, 1.0) * self.growth(
                algorithm, t, P=P, s_idx=s_idx, s_val=s_val, check=check, options=options)
        return t

    def growth(self, algorithm, t, *, P, s_idx, s_val, check, options=None) -> float:
        """The analytic time ``t`` less the analytic time of the tiny calibration input."""
        tiny = self.analytic(algorithm, P=P, N=TINY_N, k=1, K=min(P, TINY_N), q=1.0,
                             s_idx=s_idx, s_val=s_val, check=check, options=options)
        return max(0.0, t - tiny)

    def analytic(self, algorithm: str, *, P: int, N: int, k: float, K: float | None = None,
                 q: float = 1.0, s_idx: int = 4, s_val: int = 4, check: bool = True,
                 options=None) -> float:
        """Predicted seconds of one allreduce by the algorithm's cost function. ``k``: the
        largest input nnz; ``K``: result nnz (estimated from ``k`` and ``q`` when not given);
        ``check``: include the agreement check's small allreduce; ``options``: as in
        :meth:`predict`."""
        options = _options(options)
        record = get_algorithm(algorithm)
        if K is None:
            K = union_size(k, P, N, q)
        t = self.allreduce_alpha if check and P > 1 else 0.0
        if P == 1:
            return t + self.gamma_dense * (N if record.writes_out else k)
        return t + record.cost(self, P=P, N=N, k=k, K=K, q=q, s_idx=s_idx, s_val=s_val,
                               options=options)

    def predict_hierarchical(self, inner: str, *, P: int, nodes: int, ranks_per_node: int,
                             N: int, k: float, K: float | None = None, q: float = 1.0,
                             s_idx: int = 4, s_val: int = 4, check: bool = True,
                             options=None) -> float:
        """Predicted seconds of the node-aware allreduce (:mod:`sparcml._collectives.hierarchical`) of P
        ranks on ``nodes`` nodes of at most ``ranks_per_node`` ranks, with ``inner`` among the
        leaders. ``self`` is the model of the *leaders'* communicator (its alpha, beta and
        per-algorithm factors are those of the inter-node links, one sender per node) with the
        node link's ``alpha_node`` / ``beta_node``: the node reduce (R - 1 messages into the
        leader, one R-way merge), the inner algorithm on the node sums (their union K_node of
        R inputs), the node broadcast (binomial: ceil(log2 R) hops of the result)."""
        options = _options(options)
        coded = options.code_indices
        R = max(1, int(ranks_per_node))
        c = s_idx + s_val
        if K is None:
            K = union_size(k, P, N, q)
        k_node = union_size(k, R, N, q)
        node_dense = k_node >= N * s_val / c
        t = self.allreduce_alpha if check and P > 1 else 0.0
        if R > 1 and options.native(R):  # Gather of the sizes, Gatherv of the inputs
            t += (R * self.part_overhead + mpi.gather_time(R, mpi.SIZE_BYTES, self.alpha_node, 0.0)
                  + mpi.gatherv_time(R, (R - 1) * stream_bytes(k, N, s_idx, s_val, coded),
                                     self.alpha_node, self.beta_node))
        elif R > 1:
            t += (R - 1) * (self.alpha_node
                            + self.beta_node * stream_bytes(k, N, s_idx, s_val, coded))
        if R > 1:
            t += (self.gamma_dense * (N + R * k) if node_dense
                  else self.gamma_merge * R * k * max(1.0, math.log2(R)))
            hops = math.ceil(math.log2(R))
            t += hops * (self.alpha_node + self.beta_node * stream_bytes(K, N, s_idx, s_val, coded))
            t += self.gamma_dense * (N if K >= N * s_val / c else K * c / 4)
        if nodes > 1:
            t += self.predict(inner, P=nodes, N=N, k=k_node, K=K, q=q, s_idx=s_idx,
                              s_val=s_val, check=False, options=options)
        return t

    def choose(self, *, P: int, N: int, k: float, q: float = 1.0, s_idx: int = 4,
               s_val: int = 4, candidates=None, options=None) -> str:
        """The candidate with the smallest predicted time (ties: the first listed); default
        candidates: every registered algorithm that ``auto`` may pick."""
        options = _options(options)
        if candidates is None:
            candidates = algorithm_names(in_auto_only=True)
        return min(candidates, key=lambda a: self.predict(a, P=P, N=N, k=k, q=q, s_idx=s_idx,
                                                          s_val=s_val, options=options))

    def contenders(self, *, P: int, N: int, k: float, q: float = 1.0, s_idx: int = 4,
                   s_val: int = 4, candidates=None, options=None) -> list[str]:
        """The algorithms ``algorithm="auto"`` measures for a shape before it settles: the
        candidates (default: every registered algorithm ``auto`` may pick) predicted within
        a factor of 4 of the best, at most 4, best first (one name: the model's choice)."""
        options = _options(options)
        if candidates is None:
            candidates = algorithm_names(in_auto_only=True)
        return tuning.contenders_of(
            (self.predict(a, P=P, N=N, k=k, q=q, s_idx=s_idx, s_val=s_val, options=options), a)
            for a in candidates)

    def predict_topk(self, *, P: int, N: int, k_local: float, k: float, q: float = 1.0,
                     s_idx: int = 4, s_val: int = 4, remembered: bool = True,
                     options=None) -> float:
        """Predicted seconds of :func:`sparcml.topk_allreduce` of inputs of ``k_local`` items
        keeping ``k`` (:func:`topk_allreduce_cost`; ``remembered``: a call after the first of
        its shape). Once calibrated (``overhead[TOPK_STEP]``, ``scale[TOPK_STEP]``, measured
        by :func:`sparcml._model.auto.calibrate_topk` through the real code, as for the allreduce
        algorithms), the measured fixed cost plus the measured factor times the growth."""
        if P == 1:
            return self.gamma_dense * k_local
        options = _options(options)
        t = topk_allreduce_cost(self, P=P, N=N, k_local=k_local, k=k, q=q, s_idx=s_idx,
                                s_val=s_val, remembered=remembered, options=options)
        overhead = self.overhead.get(TOPK_STEP, 0.0)
        if overhead > 0:
            tiny = topk_allreduce_cost(self, P=P, N=TINY_N, k_local=1, k=P, q=1.0, s_idx=s_idx,
                                       s_val=s_val, remembered=True, options=options)
            t = overhead + self.scale.get(TOPK_STEP, 1.0) * max(0.0, t - tiny)
        return t

    def choose_topk_step(self, *, P: int, N: int, k: float, q: float = 1.0, s_idx: int = 4,
                         s_val: int = 4, candidates=None, options=None) -> str:
        """For a top-k SGD step whose ranks each select ``k`` entries: :data:`TOPK_STEP`
        (reduce with :func:`sparcml.topk_allreduce`, keeping ``k`` of the sum) when it is
        predicted faster than the best allreduce of the local selections (whose result holds
        up to P k entries), else that allreduce algorithm's name."""
        options = _options(options)
        best = self.choose(P=P, N=N, k=k, q=q, s_idx=s_idx, s_val=s_val, candidates=candidates,
                           options=options)
        mine = self.predict_topk(P=P, N=N, k_local=k, k=k, q=q, s_idx=s_idx, s_val=s_val,
                                 options=options)
        other = self.predict(best, P=P, N=N, k=k, q=q, s_idx=s_idx, s_val=s_val,
                             options=options)
        return TOPK_STEP if mine < other else best

    @staticmethod
    def references(*, P: int, k: float, K: float, s_idx: int = 4, s_val: int = 4) -> dict:
        """Byte volumes per rank: the floor and the reduce-scatter + allgather volume."""
        c = s_idx + s_val
        return {"floor_bytes": max(0.0, K - k) * c,
                "rs_ag_bytes": (P - 1) / P * (k + K) * c}
