"""``SimComm``: the subset of mpi4py's ``Comm`` that sparcml uses, for one virtual rank.

Every rank of a simulation holds its own ``SimComm`` handle (as every MPI process holds its
own communicator object); the handles of one communicator share a group in the
:class:`~sparcml.sim._world.World`. Supported:

- ``Get_rank``/``Get_size`` (``rank``/``size``), ``Dup``, ``Split(color, key)``,
  ``Split_type(MPI.COMM_TYPE_SHARED, key)`` (ranks of one simulated node), ``Free``,
  ``Set_attr``/``Get_attr``/``Delete_attr``, ``Abort``;
- point-to-point on bytes or typed NumPy buffers: ``Isend``, ``Send``, ``Irecv``, ``Recv``,
  ``Mprobe``/``Improbe`` + ``Message.Irecv``/``Message.Recv``, with ``ANY_SOURCE``/``ANY_TAG``
  and MPI's non-overtaking order per source;
- collectives: ``Barrier``, ``Allreduce`` (SUM, MAX, MIN, BOR, BAND, user-defined ``MPI.Op.Create``;
  ``IN_PLACE``), ``Exscan``, ``Allgather``,
  ``Allgatherv``, ``Alltoall``, ``Alltoallv``, ``Gather``, ``Gatherv``, ``Bcast`` and their
  ``I``-forms, and the pickle-based ``allreduce``, ``allgather``, ``bcast``, ``barrier``. Each
  is one event (its data combined directly, its time modeled: :mod:`sparcml.sim._collective_cost`),
  not its internal messages.

Deviations from MPI, harmless for sparcml's code (which uses requests only through
:class:`sparcml._runtime.progress.Waiter`): ``Test``, ``Testall`` and ``Improbe`` wait until the
operation can complete (a rank that polls in a simulation has nothing else to progress, and
waiting costs no real CPU); ``MPI.Request.Waitall`` on simulated requests returns at once (the
requests are subclasses of ``MPI.Request`` with null handles) -- a send's completion only
matters to the virtual clock, which charges it at the rank's next collective and at its end.
A sent buffer is delivered without a copy: the sender must not change it until the receiver
has it (sparcml never writes to a buffer it has sent).

Over 400 lines: one class mirroring one mpi4py interface (point-to-point, collectives,
communicator management share its rendezvous and clock state); splitting it would split one
object across modules.
"""

from __future__ import annotations

import time

import numpy as np
from mpi4py import MPI

from . import _collective_cost as cc
from ._credit import discount, helper_scope
from ._world import RankState, SimAborted, World

__all__ = ["SimComm", "SimRequest", "SimMessage", "SimAbortCalled"]


_WINDOW = 16  # ANY_SOURCE receives choose among this many waiting messages


class SimAbortCalled(SimAborted):
    """A rank called ``Abort``: the whole simulated job ends."""


def _array(spec) -> np.ndarray | None:
    if spec is MPI.IN_PLACE or spec is None:
        return None
    arr = spec[0] if isinstance(spec, (list, tuple)) else spec
    return np.asarray(arr)


def _mpich_order(parts: list, ufunc) -> np.ndarray:
    """``ufunc`` over the ranks' arrays associated as MPICH's allreduce does (recursive
    doubling, and Rabenseifner's recursive halving, whose first partners are also at distance
    1): with ``rem = P - pof2``, ranks ``2i`` and ``2i+1`` below ``2 rem`` are folded first,
    then the ``pof2`` partial results are combined pairwise, ``(0, 1), (2, 3), ...``, then
    their pairs, and so on. Floating-point sums thus equal a real MPICH run's bit for bit
    (IEEE addition is commutative, not associative: the order within a pair is immaterial)."""
    P = len(parts)
    if P == 1:
        return parts[0].copy()
    pof2 = 1 << (P.bit_length() - 1)
    rem = P - pof2
    vals = [ufunc(parts[2 * i], parts[2 * i + 1]) for i in range(rem)] + list(parts[2 * rem:])
    while len(vals) > 1:
        vals = [ufunc(vals[i], vals[i + 1]) for i in range(0, len(vals), 2)]
    return vals[0] if vals[0] is not parts[-1] else vals[0].copy()


def _bytes(arr: np.ndarray) -> np.ndarray:
    return arr.reshape(-1).view(np.uint8)


def _vspec(spec):
    """``(array, counts, displs)`` of a vector collective's buffer spec."""
    arr = np.asarray(spec[0])
    if len(spec) == 4:
        counts, displs = spec[1], spec[2]
    else:
        counts, displs = spec[1]
    return arr, np.asarray(counts, np.int64), np.asarray(displs, np.int64)


_OPS = {"sum": (np.add, lambda a, b: a + b), "max": (np.maximum, max),
        "min": (np.minimum, min), "bor": (np.bitwise_or, lambda a, b: a | b),
        "band": (np.bitwise_and, lambda a, b: a & b)}


def _op_name(op) -> str:
    for name, mpi_op in (("sum", MPI.SUM), ("max", MPI.MAX), ("min", MPI.MIN),
                         ("bor", MPI.BOR), ("band", MPI.BAND)):
        if op == mpi_op:
            return name
    raise NotImplementedError(f"sparcml.sim: reduction {op!r} is not simulated "
                              f"(SUM, MAX, MIN, BOR, BAND are)")


class SimRequest(MPI.Request):
    """A simulated request; ``Wait``/``Test`` complete it (see the module docstring)."""

    def __init__(self, *args, **kwargs):
        super().__init__()

    def _setup(self, comm, finish):
        self._comm = comm
        self._finish = finish  # called once, lock held, in the waiting rank's thread
        self._completed = finish is None
        return self

    def Wait(self, status=None):
        if not self._completed:
            self._comm._complete(self)
        return True

    def Test(self, status=None):  # waits: see the module docstring
        return self.Wait(status)

    wait = Wait
    test = Test


class SimMessage:
    """A matched message (``Mprobe``'s result): receive it with ``Irecv`` or ``Recv``."""

    def __init__(self, comm, msg):
        self._comm, self._msg = comm, msg

    @property
    def payload(self) -> np.ndarray:
        """The message's bytes as the sender posted them (uint8; the sender never writes to a
        sent buffer): what the simulator's sharing operations hand a receiver, read-only,
        instead of a copy."""
        return self._msg["data"]

    def Recv(self, buf, status=None):
        t0 = time.thread_time()
        dst = _bytes(_array(buf))
        data = self._msg["data"]
        if dst.nbytes < data.nbytes:
            raise MPI.Exception(MPI.ERR_TRUNCATE)
        dst[:data.nbytes] = data
        discount(time.thread_time() - t0)  # the copy is the transfer, charged as n beta
        if status is not None:
            self._comm._fill_status(status, self._msg)

    def Irecv(self, buf):
        self.Recv(buf)
        return SimRequest()._setup(self._comm, None)


class SimComm:
    """One rank's handle of a simulated communicator (see the module docstring)."""

    def __init__(self, world: World, gid: int, members: list[int], rank: int):
        self._world = world
        self._gid = gid
        self._members = members          # world ranks, in this communicator's rank order
        self.rank = rank
        self.size = len(members)
        self._st: RankState = world.ranks[members[rank]]
        self._seq = 0
        self._attrs: dict = {}

    # ---- identity ----------------------------------------------------------------------------
    def Get_rank(self) -> int:
        return self.rank

    def Get_size(self) -> int:
        return self.size

    @property
    def world_rank(self) -> int:
        return self._members[self.rank]

    @property
    def network(self):
        return self._world.network

    @property
    def sparcml_ops(self):
        """The operations sparcml's contexts on this communicator use
        (:func:`sparcml._collectives.ops.ops_of`): the run's sharing ones, or None (plain)."""
        return self._world.ops

    def sparcml_helper_scope(self):
        """For a thread that sparcml starts to work for this rank (the non-blocking engine of
        :mod:`sparcml._runtime.nonblocking`; called in the rank's thread): the context manager
        under which that thread's compute is the rank's
        (:func:`sparcml.sim._credit.helper_scope`)."""
        return helper_scope()

    def clock(self) -> float:
        """This rank's virtual time (seconds), its compute so far included."""
        w = self._world
        with w.lock:
            w.enter(self._st, call=False)
            w.leave(self._st)
            return self._st.clock

    def Set_attr(self, keyval, value) -> None:
        self._attrs[keyval] = value

    def Get_attr(self, keyval):
        return self._attrs.get(keyval)

    def Delete_attr(self, keyval) -> None:
        self._attrs.pop(keyval, None)

    def Free(self) -> None:
        self._attrs.clear()

    def Abort(self, errorcode: int = 1):
        exc = SimAbortCalled(f"rank {self.world_rank} called Abort({errorcode})")
        self._world.fail(exc)
        raise exc

    def __repr__(self):
        return f"<SimComm {self._gid} rank {self.rank}/{self.size}>"

    # ---- point-to-point ----------------------------------------------------------------------
    def Isend(self, buf, dest: int, tag: int = 0):
        w, st = self._world, self._st
        data = _bytes(_array(buf))
        dst_world = self._members[dest]
        with w.lock:
            w.enter(st)
            w.check(st)
            start = w.inject(st.rank, dst_world, data.nbytes, st.clock)
            w.sequence += 1
            msg = {"src": self.rank, "tag": tag, "data": data, "start": start,
                   "src_world": st.rank, "seq": w.sequence}
            w.mailboxes.setdefault((self._gid, dst_world), []).append(msg)
            st.wire_bytes += data.nbytes
            st.messages += 1
            w.ranks[dst_world].cond.notify()
            w.leave(st)
        return SimRequest()._setup(self, None)

    def Send(self, buf, dest: int, tag: int = 0) -> None:
        self.Isend(buf, dest, tag)

    def _match(self, source, tag):
        """Index of the message to receive: from a given source the first posted (MPI's
        non-overtaking rule); from ANY_SOURCE the earliest injected among the first
        ``_WINDOW`` matching ones (a bounded scan: the receive order is then approximate in
        virtual time when more than that many messages wait)."""
        box = self._world.mailboxes.get((self._gid, self._st.rank))
        if not box:
            return None
        best = None
        seen = 0
        any_tag = tag == MPI.ANY_TAG
        for i, m in enumerate(box):
            if (any_tag or m["tag"] == tag) and (source == MPI.ANY_SOURCE or m["src"] == source):
                if source != MPI.ANY_SOURCE:
                    return i
                if best is None or m["start"] < box[best]["start"]:
                    best = i
                seen += 1
                if seen >= _WINDOW:
                    break
        return best

    def _take(self, source, tag):
        """Block until a matching message is there; remove it and charge its arrival (lock
        held)."""
        w, st = self._world, self._st
        found = []

        def ready():
            i = self._match(source, tag)
            if i is not None:
                found.append(i)
                return True
            return False

        w.wait_until(st, ready)
        msg = w.mailboxes[(self._gid, st.rank)].pop(found[-1])
        arrival = w.deliver(msg["src_world"], st.rank, msg["data"].nbytes, msg["start"])
        st.clock = max(st.clock, arrival)
        return msg

    def _fill_status(self, status, msg) -> None:
        status.Set_source(msg["src"])
        status.Set_tag(msg["tag"])
        status.Set_elements(MPI.BYTE, int(msg["data"].nbytes))

    def Mprobe(self, source=MPI.ANY_SOURCE, tag=MPI.ANY_TAG, status=None):
        w, st = self._world, self._st
        with w.lock:
            w.enter(st)
            try:
                msg = self._take(source, tag)
            finally:
                w.leave(st)
        if status is not None:
            self._fill_status(status, msg)
        return SimMessage(self, msg)

    Improbe = Mprobe  # waits: see the module docstring

    def Recv(self, buf, source=MPI.ANY_SOURCE, tag=MPI.ANY_TAG, status=None) -> None:
        self.Mprobe(source, tag, status).Recv(buf)

    def Irecv(self, buf, source=MPI.ANY_SOURCE, tag=MPI.ANY_TAG):
        def finish():
            msg = self._take(source, tag)
            SimMessage(self, msg).Recv(buf)

        return SimRequest()._setup(self, finish)

    def _complete(self, req: SimRequest) -> None:
        w, st = self._world, self._st
        with w.lock:
            w.enter(st)
            try:
                req._finish()
                req._completed = True
            finally:
                w.leave(st)

    # ---- collectives -------------------------------------------------------------------------
    def _collective(self, payload, combine, cost):
        """Every rank deposits ``payload``; the last one computes ``combine(payloads)``; each
        rank gets that result and the clock ``max(entry clocks) + cost(result, rank)``."""
        w, st = self._world, self._st
        with w.lock:
            w.enter(st)
            try:
                w.check(st)
                key = (self._gid, self._seq)
                self._seq += 1
                rv = w.rendezvous.get(key)
                if rv is None:
                    rv = w.rendezvous[key] = {"payloads": [None] * self.size, "arrived": 0,
                                              "t0": 0.0, "done": False, "left": 0}
                rv["payloads"][self.rank] = payload
                rv["t0"] = max(rv["t0"], st.clock, st.send_done)
                rv["arrived"] += 1
                if rv["arrived"] == self.size:
                    rv["result"] = combine(rv["payloads"])
                    rv["done"] = True
                    for r in self._members:
                        w.ranks[r].cond.notify_all()
                else:
                    w.wait_until(st, lambda: rv["done"])
                result = rv["result"]
                rv["left"] += 1
                if rv["left"] == self.size:
                    del w.rendezvous[key]
                alpha, beta = w.network.collective_link(self._members)
                st.clock = rv["t0"] + cost(result, alpha, beta)
                return result
            finally:
                w.leave(st)

    def shared_collective(self, payload, combine, cost, wire_bytes: int):
        """A collective whose one result every rank receives as it is (no copy per rank; for
        the sharing operations, :mod:`sparcml.sim._sharing`): ``payload``, ``combine`` and
        ``cost`` as for the collectives below; ``wire_bytes`` what this rank puts on the
        wire, as the collective it stands for counts it."""
        result = self._collective(payload, combine, cost)
        self._st.wire_bytes += int(wire_bytes)
        return result

    def Barrier(self) -> None:
        self._collective(None, lambda p: None, lambda r, a, b: cc.barrier_time(self.size, a))

    barrier = Barrier

    def Allreduce(self, sendbuf, recvbuf, op=MPI.SUM) -> None:
        recv = _array(recvbuf)
        send = _array(sendbuf)
        mine = (recv if send is None else send).copy()
        if not op.is_predefined:  # a user-defined operation (MPI.Op.Create): applied as MPI would
            def combine(parts):
                acc = parts[0].copy()
                for p in parts[1:]:
                    op.Reduce_local(p, acc)
                return acc
        else:
            ufunc, _ = _OPS[_op_name(op)]

            def combine(parts):
                return _mpich_order(parts, ufunc)

        gamma = self._world.gamma_add
        result = self._collective(mine, combine, lambda r, a, b: cc.allreduce_time(
            self.size, r.nbytes, a, b, gamma))
        recv[...] = result.reshape(recv.shape)
        self._st.wire_bytes += 2 * (self.size - 1) * recv.nbytes // max(1, self.size)

    def Exscan(self, sendbuf, recvbuf, op=MPI.SUM) -> None:
        """Rank r > 0 receives ``op`` over ranks 0 .. r-1; rank 0's ``recvbuf`` is left as it
        is (MPI leaves it undefined). Charged as an allreduce of the same size (MPICH's
        recursive doubling takes log P rounds for either)."""
        recv = _array(recvbuf)
        send = _array(sendbuf)
        mine = (recv if send is None else send).copy()
        ufunc, _ = _OPS[_op_name(op)]

        def combine(parts):
            prefixes, acc = [None], parts[0].copy()
            for p in parts[1:]:
                prefixes.append(acc.copy())
                ufunc(acc, p, out=acc)
            return prefixes

        gamma = self._world.gamma_add
        result = self._collective(mine, combine, lambda r, a, b: cc.allreduce_time(
            self.size, mine.nbytes, a, b, gamma))
        if self.rank > 0:
            recv[...] = result[self.rank].reshape(recv.shape)
        self._st.wire_bytes += 2 * (self.size - 1) * mine.nbytes // max(1, self.size)

    def allreduce(self, obj, op=MPI.SUM):
        _, pyop = _OPS[_op_name(op)]

        def combine(parts):
            acc = parts[0]
            for p in parts[1:]:
                acc = pyop(acc, p)
            return acc

        return self._collective(obj, combine, lambda r, a, b: cc.allreduce_time(
            self.size, 8, a, b))

    def Allgather(self, sendbuf, recvbuf) -> None:
        recv = _array(recvbuf)
        send = _array(sendbuf)
        n = recv.size // self.size
        mine = (recv.reshape(-1)[self.rank * n:(self.rank + 1) * n] if send is None
                else send.reshape(-1)).copy()
        result = self._collective(mine, np.concatenate, lambda r, a, b: cc.allgather_time(
            self.size, r.nbytes, mine.nbytes, a, b))
        recv.reshape(-1)[:] = result
        self._st.wire_bytes += result.nbytes - mine.nbytes

    def Allgatherv(self, sendbuf, recvbuf) -> None:
        recv, counts, displs = _vspec(recvbuf)
        flat = recv.reshape(-1)
        send = _array(sendbuf)
        lo = int(displs[self.rank])
        mine = flat[lo:lo + int(counts[self.rank])] if send is None else send.reshape(-1)
        own_bytes = mine.nbytes

        def combine(parts):
            out = np.empty(int(counts.sum()), flat.dtype)
            pos = np.concatenate([[0], np.cumsum(counts)])
            for j, p in enumerate(parts):
                out[pos[j]:pos[j + 1]] = p
            return out

        result = self._collective(mine, combine, lambda r, a, b: cc.allgather_time(
            self.size, r.nbytes, own_bytes, a, b))
        pos = np.concatenate([[0], np.cumsum(counts)])
        for j in range(self.size):
            if j != self.rank or send is not None:
                d = int(displs[j])
                flat[d:d + int(counts[j])] = result[pos[j]:pos[j + 1]]
        self._st.wire_bytes += result.nbytes - own_bytes

    def Alltoall(self, sendbuf, recvbuf) -> None:
        """Fixed-size blocks (``IN_PLACE`` not simulated): block j of ``sendbuf`` to rank j."""
        send = _array(sendbuf).reshape(-1)
        recv = _array(recvbuf).reshape(-1)
        n = send.size // self.size
        mine = send.copy()
        nbytes = n * send.itemsize

        result = self._collective(mine, np.stack, lambda r, a, b: cc.alltoall_time(
            self.size, nbytes, a, b))  # one table: row j is what rank j sends
        recv[:] = result[:, self.rank * n:(self.rank + 1) * n].reshape(-1)
        self._st.wire_bytes += (self.size - 1) * nbytes

    def Alltoallv(self, sendbuf, recvbuf) -> None:
        """Variable blocks: ``sendbuf``'s block j (counts, displacements) to rank j, received
        into ``recvbuf``'s block of the source. Time: the largest bytes any rank sends or
        receives (:func:`~sparcml._model.mpi_collectives.alltoallv_time`)."""
        send, scounts, sdispls = _vspec(sendbuf)
        recv, rcounts, rdispls = _vspec(recvbuf)
        flat = send.reshape(-1).copy()  # the sender may reuse its buffer once it returns
        blocks = [flat[int(d):int(d) + int(c)] for d, c in zip(sdispls, scounts)]
        item = flat.itemsize
        out_bytes = (int(scounts.sum()) - int(scounts[self.rank])) * item
        in_bytes = (int(rcounts.sum()) - int(rcounts[self.rank])) * item

        def combine(parts):
            peak = max(max(o, i) for _, o, i in parts)
            return [b for b, _, _ in parts], peak

        result, peak = self._collective((blocks, out_bytes, in_bytes), combine,
                                        lambda r, a, b: cc.alltoallv_time(
                                            self.size, r[1], r[1], a, b))
        dst = recv.reshape(-1)
        for j, blocks_j in enumerate(result):
            got = blocks_j[self.rank]
            if got.size != int(rcounts[j]):
                raise MPI.Exception(MPI.ERR_TRUNCATE)
            dst[int(rdispls[j]):int(rdispls[j]) + got.size] = got
        self._st.wire_bytes += out_bytes

    def Gather(self, sendbuf, recvbuf, root: int = 0) -> None:
        send = _array(sendbuf).reshape(-1).copy()
        nbytes = send.nbytes
        result = self._collective(send, np.concatenate, lambda r, a, b: cc.gather_time(
            self.size, nbytes, a, b))
        if self.rank == root:
            _array(recvbuf).reshape(-1)[:] = result
        else:
            self._st.wire_bytes += nbytes

    def Gatherv(self, sendbuf, recvbuf, root: int = 0) -> None:
        """Rank j's ``sendbuf`` into the root's block j (linear: the root receives every
        block, :func:`~sparcml._model.mpi_collectives.gatherv_time`)."""
        send = _array(sendbuf).reshape(-1)
        mine = send.copy()
        nbytes = mine.nbytes

        def combine(parts):
            return parts, sum(p.nbytes for p in parts) - parts[root].nbytes

        result, received = self._collective(mine, combine, lambda r, a, b: cc.gatherv_time(
            self.size, r[1] if self.rank == root else nbytes, a, b))
        if self.rank == root:
            recv, counts, displs = _vspec(recvbuf)
            dst = recv.reshape(-1)
            for j, p in enumerate(result):
                if p.size != int(counts[j]):
                    raise MPI.Exception(MPI.ERR_TRUNCATE)
                dst[int(displs[j]):int(displs[j]) + p.size] = p
        else:
            self._st.wire_bytes += nbytes

    def allgather(self, obj) -> list:
        import pickle

        size = len(pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL))
        return self._collective(obj, list, lambda r, a, b: cc.allgather_time(
            self.size, size * self.size, size, a, b))

    def Bcast(self, buf, root: int = 0) -> None:
        arr = _array(buf)
        payload = arr.copy() if self.rank == root else None
        result = self._collective(payload, lambda p: p[root], lambda r, a, b: cc.bcast_time(
            self.size, r.nbytes, a, b))
        if self.rank != root:
            arr.reshape(-1)[:] = result.reshape(-1)
        else:
            self._st.wire_bytes += arr.nbytes

    def bcast(self, obj, root: int = 0):
        import pickle

        size = len(pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)) if self.rank == root \
            else 0
        return self._collective(obj if self.rank == root else None, lambda p: p[root],
                                lambda r, a, b: cc.bcast_time(self.size, size, a, b))

    def _done(self):
        return SimRequest()._setup(self, None)

    def Ibarrier(self):
        self.Barrier()
        return self._done()

    def Iallreduce(self, sendbuf, recvbuf, op=MPI.SUM):
        self.Allreduce(sendbuf, recvbuf, op)
        return self._done()

    def Iexscan(self, sendbuf, recvbuf, op=MPI.SUM):
        self.Exscan(sendbuf, recvbuf, op)
        return self._done()

    def Iallgather(self, sendbuf, recvbuf):
        self.Allgather(sendbuf, recvbuf)
        return self._done()

    def Iallgatherv(self, sendbuf, recvbuf):
        self.Allgatherv(sendbuf, recvbuf)
        return self._done()

    def Ialltoall(self, sendbuf, recvbuf):
        self.Alltoall(sendbuf, recvbuf)
        return self._done()

    def Ialltoallv(self, sendbuf, recvbuf):
        self.Alltoallv(sendbuf, recvbuf)
        return self._done()

    def Igather(self, sendbuf, recvbuf, root: int = 0):
        self.Gather(sendbuf, recvbuf, root)
        return self._done()

    def Igatherv(self, sendbuf, recvbuf, root: int = 0):
        self.Gatherv(sendbuf, recvbuf, root)
        return self._done()

    def Ibcast(self, buf, root: int = 0):
        self.Bcast(buf, root)
        return self._done()

    # ---- communicator management -------------------------------------------------------------
    def Split(self, color: int = 0, key: int = 0):
        w = self._world

        def combine(parts):
            groups: dict[int, list] = {}
            for r, (c, k) in enumerate(parts):
                if c != MPI.UNDEFINED:
                    groups.setdefault(c, []).append((k, r))
            out = {}
            for c in sorted(groups):
                ranks = [r for _, r in sorted(groups[c])]
                gid = w.next_comm_id
                w.next_comm_id += 1
                members = [self._members[r] for r in ranks]
                for i, r in enumerate(ranks):
                    out[r] = (gid, members, i)
            return out

        table = self._collective((color, key), combine,
                                 lambda r, a, b: cc.allreduce_time(self.size, 8, a, b))
        if self.rank not in table:
            return MPI.COMM_NULL
        gid, members, rank = table[self.rank]
        return SimComm(w, gid, members, rank)

    def Split_type(self, split_type, key: int = 0, info=None):
        if split_type != MPI.COMM_TYPE_SHARED:
            raise NotImplementedError("sparcml.sim: only Split_type(MPI.COMM_TYPE_SHARED) is "
                                      "simulated")
        return self.Split(self._world.network.node_of(self.world_rank), key)

    def Dup(self):
        return self.Split(0, self.rank)

    Clone = Dup
