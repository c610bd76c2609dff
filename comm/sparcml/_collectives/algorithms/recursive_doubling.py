"""``ssar_recursive_double``: small data, latency bound (DESIGN 3.4).

``log2 P`` rounds; in round t, rank r exchanges its whole current stream with ``r XOR 2^t`` and
adds. Streams stay sparse until the switch rule fires, then go dense. Non-power-of-two P (the
MPICH scheme): with ``pof2 = 2^floor(log2 P)`` and ``rem = P - pof2``, among ranks
``< 2 rem`` the even ones hand their input to rank + 1 and sit out; the result goes back to
them at the end. Adds in the order of the butterfly, so the result may differ from the rank-
order sum in the last bits.
"""

from __future__ import annotations

from functools import lru_cache
from typing import NamedTuple

from .. import arith
from ..._model.costmodel import stream_bytes, union_size
from ..exchange import exchange_vector, recv_vector, send_vector
from ..._registry import Algorithm, register

# the kinds of a step of the schedule (see schedule())
FOLD_SEND, FOLD_RECV, ROUND, UNFOLD_SEND, UNFOLD_RECV = range(5)


class Step(NamedTuple):
    """One step of a rank's schedule: ``kind`` (:data:`FOLD_SEND`: hand the input to ``peer``
    and sit out; :data:`FOLD_RECV`: add ``peer``'s input to this rank's, ``received + own``;
    :data:`ROUND`: exchange the streams with ``peer`` and add, the lower new rank's stream
    first: ``lower`` says whether that is this rank's; :data:`UNFOLD_SEND` /
    :data:`UNFOLD_RECV`: the result back to the rank that sat out), ``mask`` (a round's
    ``2^t``; ``group``: this rank's butterfly group in it, ``newrank // mask``), ``role``
    (the scratch role the step's sum is written in, alternating ``rd0`` / ``rd1`` so that a
    sum never overwrites the stream it reads), ``last`` (the step's sum is the result: no
    round follows)."""

    kind: int
    peer: int
    mask: int = 0
    group: int = 0
    lower: bool = False
    role: str = ""
    last: bool = False


@lru_cache(maxsize=256)
def schedule(rank: int, size: int) -> tuple[Step, ...]:
    """Rank ``rank``'s steps of recursive doubling at ``size`` ranks: the one schedule of the
    algorithm (:func:`run`) and of its fast path on a plan's buffers
    (:class:`sparcml._collectives.plan_fast.FastRecursiveDoubling`)."""
    pof2 = 1 << (size.bit_length() - 1)
    rem = size - pof2
    steps = []
    if rank < 2 * rem:
        if rank % 2 == 0:
            steps.append(Step(FOLD_SEND, rank + 1))
            newrank = -1
        else:
            # the sum is an intermediate when rounds follow (role rd0; round t writes rd{t+1})
            steps.append(Step(FOLD_RECV, rank - 1, role="rd0", last=pof2 == 1))
            newrank = rank // 2
    else:
        newrank = rank - rem
    if newrank >= 0:
        mask, step = 1, 0
        while mask < pof2:
            newpeer = newrank ^ mask
            step += 1
            steps.append(Step(ROUND, newpeer * 2 + 1 if newpeer < rem else newpeer + rem,
                              mask, newrank // mask, newrank < newpeer, f"rd{step % 2}",
                              mask << 1 >= pof2))
            mask <<= 1
    if rank < 2 * rem:
        steps.append(Step(UNFOLD_SEND, rank - 1) if rank % 2 == 1 else
                     Step(UNFOLD_RECV, rank + 1))
    return tuple(steps)


def run(ctx, vec, *, stats, codec, out=None, sent=None):
    cur = vec
    for st in schedule(ctx.rank, ctx.size):
        kind = st.kind
        if kind == ROUND:
            # after round t the 2^t ranks of a group hold the same stream; with a quantizer
            # they must also send the same message, so the random stream is the group's
            group_seed = group_stream_seed(codec.seed, st.mask, st.group) \
                if codec.lossy else None
            first_own = sent if (st.mask == 1 and cur is vec) else None
            mine, other = exchange_vector(ctx, cur, st.peer, _TAG_ROUND, stats, codec,
                                          seed=group_seed, sent=first_own)
            # every round's sum but the last is an intermediate, in its role's scratch
            scratch = {"workspace": ctx.workspace, "intermediate": not st.last,
                       "role": st.role}
            cur = ctx.ops.add(mine, other, codec, **scratch) if st.lower \
                else ctx.ops.add(other, mine, codec, **scratch)
        elif kind == FOLD_SEND:
            send_vector(ctx, cur, st.peer, _TAG_FOLD, stats, codec, sent=sent)
        elif kind == FOLD_RECV:
            if sent is not None:  # this input travels only inside a sum: nothing attributable
                sent.append(arith.as_part(vec))
            cur = ctx.ops.add(recv_vector(ctx, st.peer, _TAG_FOLD, vec.dim, stats), cur, codec,
                              workspace=ctx.workspace, intermediate=not st.last, role=st.role)
        elif kind == UNFOLD_SEND:
            # the result goes back unquantized: the ranks of the butterfly hold it as is
            send_vector(ctx, cur, st.peer, _TAG_UNFOLD, stats, codec.lossless())
        else:
            cur = recv_vector(ctx, st.peer, _TAG_UNFOLD, vec.dim, stats)
    return cur


def group_stream_seed(seed: int, mask: int, group: int) -> int:
    """A 64-bit stream seed shared by the ranks of one butterfly group in one round."""
    z = (seed + 0x9E3779B97F4A7C15 * (mask * 1_000_003 + group + 1)) & 0xFFFFFFFFFFFFFFFF
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & 0xFFFFFFFFFFFFFFFF  # splitmix64 finalizer
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & 0xFFFFFFFFFFFFFFFF
    return z ^ (z >> 31)


def cost(model, *, P, N, k, K, q, s_idx, s_val, options):
    """Per round: an exchange of the expected union of the inputs so far (log P rounds)."""
    coded = options.code_indices
    t = 0.0
    pof2 = 1 << (P.bit_length() - 1)
    rem = P - pof2
    inputs = 1.0
    if rem:
        # one way: the extra rank sends, its partner adds
        t += model.exchange(k, N, s_idx, s_val, coded) / 2
        inputs = 2.0 if 2 * rem >= P else 1.0 + 2.0 * rem / P
    mask = 1
    while mask < pof2:
        t += model.exchange(union_size(k, int(round(inputs * mask)), N, q), N, s_idx, s_val,
                            coded)
        mask <<= 1
    if rem:
        t += model.message(stream_bytes(K, N, s_idx, s_val, coded))
    return t


ALGORITHM = register(Algorithm(
    name="ssar_recursive_double", run=run, cost=cost, order=10,
    tags=("fold", "round", "unfold"), routes_through_ops=True,
    summary="recursive doubling of sparse streams (small data, latency bound)"))
# the tags the registry allocated: fold (non-power-of-two: an extra rank hands its input to its
# partner), round (the rounds of the butterfly), unfold (the result goes back to the extra rank)
TAGS = ALGORITHM.tags
_TAG_FOLD, _TAG_ROUND, _TAG_UNFOLD = TAGS.fold, TAGS.round, TAGS.unfold
