"""``ssar_recursive_double``: small data, latency bound (DESIGN 3.4).

``log2 P`` rounds; in round t, rank r exchanges its whole current stream with ``r XOR 2^t`` and
adds. Streams stay sparse until the switch rule fires, then go dense. Non-power-of-two P (the
MPICH scheme): with ``pof2 = 2^floor(log2 P)`` and ``rem = P - pof2``, among ranks
``< 2 rem`` the even ones hand their input to rank + 1 and sit out; the result goes back to
them at the end. Adds in the order of the butterfly, so the result may differ from the rank-
order sum in the last bits.
"""

from __future__ import annotations

from .. import arith
from ..._model.costmodel import stream_bytes, union_size
from ..exchange import exchange_vector, recv_vector, send_vector
from ..registry import Algorithm, register

def run(ctx, vec, *, stats, codec, out=None, sent=None):
    rank, size = ctx.rank, ctx.size
    cur = vec
    pof2 = 1 << (size.bit_length() - 1)
    rem = size - pof2
    if rank < 2 * rem:
        if rank % 2 == 0:
            send_vector(ctx, cur, rank + 1, _TAG_FOLD, stats, codec, sent=sent)
            newrank = -1
        else:
            if sent is not None:  # this input travels only inside a sum: nothing attributable
                sent.append(arith.as_part(vec))
            # the sum is an intermediate when rounds follow (role rd0; round t writes rd{t+1})
            cur = ctx.ops.add(recv_vector(ctx, rank - 1, _TAG_FOLD, vec.dim, stats), cur, codec,
                              workspace=ctx.workspace, intermediate=pof2 > 1, role="rd0")
            newrank = rank // 2
    else:
        newrank = rank - rem
    if newrank >= 0:
        mask = 1
        step = 0
        while mask < pof2:
            newpeer = newrank ^ mask
            peer = newpeer * 2 + 1 if newpeer < rem else newpeer + rem
            # after round t the 2^t ranks of a group hold the same stream; with a quantizer
            # they must also send the same message, so the random stream is the group's
            group_seed = group_stream_seed(codec.seed, mask, newrank // mask) \
                if codec.lossy else None
            first_own = sent if (mask == 1 and cur is vec) else None
            mine, other = exchange_vector(ctx, cur, peer, _TAG_ROUND, stats, codec,
                                          seed=group_seed, sent=first_own)
            step += 1
            # every round's sum but the last is an intermediate: two roles, alternating, so that
            # a round never writes over the stream it reads
            scratch = {"workspace": ctx.workspace, "intermediate": mask << 1 < pof2,
                       "role": f"rd{step % 2}"}
            cur = ctx.ops.add(mine, other, codec, **scratch) if newrank < newpeer \
                else ctx.ops.add(other, mine, codec, **scratch)
            mask <<= 1
    if rank < 2 * rem:
        if rank % 2 == 1:
            # the result goes back unquantized: the ranks of the butterfly hold it as is
            send_vector(ctx, cur, rank - 1, _TAG_UNFOLD, stats, codec.lossless())
        else:
            cur = recv_vector(ctx, rank + 1, _TAG_UNFOLD, vec.dim, stats)
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
