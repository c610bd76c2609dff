"""Sharing identical buffers among simulated ranks, so memory grows like N + P k, not P N.

In sparse allreduce, ranks hold identical data most of the time: the ranks of a recursive-
doubling group after each round, every rank after an allgather. A simulation that gave each
virtual rank its own copy would need P N memory at the end; this module makes the copies one.

:class:`SharingOps` is the simulator's :class:`~sparcml._collectives.ops.Ops`: a run that
shares (``sparcml.sim.run(share=True)``, the default) gives one to its communicators, and every
sparcml context on them calls it where a real run calls the plain operations (nothing is
swapped: the algorithms reach these operations through ``ctx.ops`` only). In simulated rank
threads (other threads, e.g. the communication thread of ``iallreduce``, get the plain ones):

1. ``recv_bytes`` hands the receiver the sender's buffer, read-only, instead of a private copy
   (the bytes are the same; the sender counts them as before).
2. ``allgather_in_place`` gathers into one buffer that every rank views, ``allgather_values``
   (a dense allgather into a fresh array) into one array every rank views, ``bcast_bytes``
   (into a fresh buffer) gives the ranks one copy of the root's bytes, ``alltoallv_bytes`` and
   ``gather_bytes`` hand each receiver the senders' buffers, read-only, as ``recv_bytes``
   does (the same bytes and modeled time as the collectives of
   :class:`~sparcml.sim.SimComm`: one event each, the size exchange included).
3. ``encode``, ``add``, ``fold_parts`` and ``assemble`` are memoized by the *provenance* of
   their inputs: the identity of the arrays they read (a decoded view of a lossless message
   counts as the array it was encoded from). The first rank computes (without the context's
   workspace, so that no rank's workspace grows to N) and its measured thread CPU time is
   remembered; every other rank that makes the same call gets the same read-only result and
   is charged the same compute time on its virtual clock; outputs are also interned by
   content (a rank that comes after the first copy has gone shares the bytes, not a copy).
   With a quantizer (lossy codec) nothing is memoized.
4. ``decode``: a buffer several ranks decode (a memoized encode's, a slot of a shared allgather
   buffer) is decoded once while its result is held, each later rank charged the measured
   time; coded indices (Elias-Fano, bitmap), which decode into a new array, stand for the
   array the sender encoded, so that the sums of a group's ranks keep one provenance (without
   this every rank kept its own sum: P N memory).
5. What a rank's function returns is interned by content (:meth:`SharingOps.intern_result`: a
   sample fingerprint, then a full bitwise comparison), so P identical results are held once.

Entries are held by weak references: an intermediate that no rank holds any more is freed.
The tables belong to the run's :class:`SharingOps` and go with it. Results are read-only
arrays; bitwise equal to what the unshared code computes (the same kernels on the same inputs
in the same order; tests compare with ``share=False`` and with real ``mpiexec`` runs).

Over 400 lines: the operations, the provenance memo and the content interning share one lock,
one table and one notion of provenance; apart they would need to export their internals to
each other.
"""

from __future__ import annotations

import collections
import threading
import time
import weakref

import numpy as np
from mpi4py import MPI

from . import _collective_cost as cc
from .._collectives.ops import Ops, exchange_sizes
from .._vector import SparseVector
from .._wire.codec import (_INDEX_BY_SIZE, _VALUE_BY_SIZE, DENSE, RAW, Part, _pad8,
                           index_section_nbytes, read_header)
from ._credit import charge, discount, sharing
from .._lazy import lazy_module
pk = lazy_module("sparcml._wire.packed_kernels")

__all__ = ["SharingOps", "SMALL_BYTES", "RECENT_BYTES"]

# the most recent outputs, held strongly up to RECENT_BYTES: the rank that computed a sum may
# drop it (its next round) before the slowest rank of its group has fetched it
RECENT_BYTES = 1 << 30
SMALL_BYTES = 1 << 20  # inputs below: computed by every rank, outputs interned by content


# ---- provenance ------------------------------------------------------------------------------
def _root(arr: np.ndarray) -> np.ndarray:
    while isinstance(arr.base, np.ndarray):
        arr = arr.base
    return arr


def _pack(out):
    """Weak form of a memoized output: its arrays by weak reference."""
    if isinstance(out, SparseVector):
        return ("vec", out.dim, _wref(out.indices), weakref.ref(out.values))
    if isinstance(out, Part):
        return ("part", (out.offset, out.length), _wref(out.indices), weakref.ref(out.values))
    buf, dense = out
    return ("enc", dense, None, weakref.ref(buf))


def _wref(arr):
    return None if arr is None else weakref.ref(arr)


def _unpack(packed):
    kind, meta, widx, wval = packed
    idx = None if widx is None else widx()
    val = wval()
    if val is None or (widx is not None and idx is None):
        return None
    if kind == "vec":
        return SparseVector.unchecked(meta, idx, val)
    if kind == "part":
        return Part(meta[0], meta[1], idx, val)
    return val, meta


def _out_nbytes(out) -> int:
    if isinstance(out, tuple):
        return int(out[0].nbytes)
    return int(out.values.nbytes) + (0 if out.indices is None else int(out.indices.nbytes))


def _readonly(arr):
    if isinstance(arr, np.ndarray) and arr.flags.writeable and arr.base is None:
        arr.flags.writeable = False
    return arr


def _timed(fn, *args, **kwargs):
    t0 = time.thread_time()
    out = fn(*args, **kwargs)
    return out, time.thread_time() - t0


def _codec_sig(codec):
    return (codec.index_dtype.str, codec.value_dtype.str)


def _nbytes(arrays) -> int:
    return sum(a.nbytes for a in arrays if a is not None)


def _vec_arrays(v):
    return v.indices, v.values


def _with_arrays(out, idx, val):
    if idx is out.indices and val is out.values:
        return out
    if isinstance(out, SparseVector):
        return SparseVector.unchecked(out.dim, idx, val)
    return type(out)(out.offset, out.length, idx, val)


def _fingerprint(arr: np.ndarray):
    flat = arr.reshape(-1)
    n = flat.shape[0]
    pos = np.linspace(0, n - 1, 33).astype(np.int64) if n else np.empty(0, np.int64)
    return arr.dtype.str, arr.shape, flat[pos].tobytes()


def _payload_views(buf):
    """``(index code, (offset, dtype, shape) of the indices or None, of the values)`` of a
    lossless message, read from its header (no decoding); None if quantized."""
    h = read_header(buf)
    if h.quantized:
        return None
    count, length, start = h.count, h.length, h.size
    vdt = _VALUE_BY_SIZE[h.value_size]
    if h.fmt == DENSE:
        return RAW, None, (start, vdt.str, (count,))
    idt = _INDEX_BY_SIZE[h.index_size]
    code = h.index_code
    used = index_section_nbytes(code, count, length, idt.itemsize)
    return code, (start, idt.str, (count,)), (start + _pad8(used), vdt.str, (count,))


class SharingOps(Ops):
    """The operations of a simulation that shares memory between its ranks (module
    docstring). One per run; its tables go with it."""

    def __init__(self):
        self._lock = threading.RLock()
        self._memo: dict = {}      # provenance key -> (input weakrefs, output, cpu seconds)
        self._encoded: dict = {}   # id(encode buffer) -> (weakref(buffer), canonical keys)
        self._decoded: dict = {}   # (id(root), offset, nbytes) -> (weakref(root), Part, cpu)
        self._contents: dict = {}  # content fingerprint -> list of weakrefs to interned arrays
        self._pending: dict = {}   # provenance key -> Event, while one rank computes it
        self._recent: collections.deque = collections.deque()
        self._recent_bytes = 0
        self._sweep_at = 10_000

    def clear(self) -> None:
        """Drop every table (the run is over: what the ranks returned is theirs)."""
        with self._lock:
            for table in (self._memo, self._encoded, self._decoded, self._contents):
                table.clear()
            self._recent.clear()
            self._recent_bytes = 0

    # ---- provenance --------------------------------------------------------------------------
    def _canon(self, arr):
        """A hashable key for the contents of ``arr`` by provenance, and the objects it relies
        on."""
        if arr is None:
            return None, ()
        root = _root(arr)
        offset = arr.__array_interface__["data"][0] - root.__array_interface__["data"][0]
        entry = self._encoded.get(id(root))
        if entry is not None and entry[0]() is root:
            mapped = entry[1].get((offset, arr.dtype.str, arr.shape))
            if mapped is not None:
                refs = tuple(w() for w in mapped[1])
                if all(r is not None for r in refs):
                    return mapped[0], refs
        return (id(root), offset, arr.dtype.str, arr.shape, arr.strides), (root,)

    def _key_of(self, arrays, extra):
        keys, refs = [], []
        for a in arrays:
            k, r = self._canon(a)
            keys.append(k)
            refs.extend(r)
        return (tuple(keys), extra), refs

    def _lookup(self, key, refs):
        with self._lock:
            entry = self._memo.get(key)
        if entry is None:
            return None
        wrefs, packed, cpu = entry
        if len(wrefs) != len(refs) or any(w() is not r for w, r in zip(wrefs, refs)):
            return None
        out = _unpack(packed)
        if out is not None:
            charge(cpu)
        return out

    def _store(self, key, refs, out, cpu):
        try:
            wrefs = [weakref.ref(r) for r in refs]
            packed = _pack(out)
        except TypeError:  # pragma: no cover - an array that cannot be weakly referenced
            return out
        with self._lock:
            entry = self._memo.get(key)
            if entry is not None:
                prior = _unpack(entry[1])
                if prior is not None and all(w() is r for w, r in zip(entry[0], refs)):
                    return prior
            self._memo[key] = (wrefs, packed, cpu)
            size = _out_nbytes(out)
            self._recent.append((out, size))
            self._recent_bytes += size
            while self._recent_bytes > RECENT_BYTES and len(self._recent) > 1:
                self._recent_bytes -= self._recent.popleft()[1]
            self._maybe_sweep_locked()
        return out

    def _maybe_sweep_locked(self):
        """Drop the entries of freed arrays once the tables have doubled since the last sweep
        (amortized O(1) per entry, however many stay alive)."""
        tables = (self._memo, self._encoded, self._decoded)
        if sum(len(t) for t in tables) < self._sweep_at:
            return
        dead = [k for k, (w, packed, _) in self._memo.items()
                if any(x() is None for x in w) or packed[3]() is None]
        for k in dead:
            del self._memo[k]
        for table in (self._encoded, self._decoded):
            dead = [k for k, e in table.items() if e[0]() is None]
            for k in dead:
                del table[k]
        self._sweep_at = max(10_000, 2 * sum(len(t) for t in tables))

    def _small_call(self, compute):
        """Inputs below ``SMALL_BYTES``: compute here, then intern the output by content (cheap
        at this size), so that later, larger calls on it share provenance across ranks."""
        out = compute()
        t0 = time.thread_time()
        if isinstance(out, tuple):
            result = out
        else:
            result = self._share(out)
        discount(time.thread_time() - t0)
        return result

    def _memo_call(self, arrays, extra, compute, post=None):
        """``compute()`` once per provenance key; the hook's own CPU time is not charged to the
        rank (it is the simulator's, not sparcml's), the computation's is, hit or miss."""
        if _nbytes(arrays) < SMALL_BYTES:
            if post is not None and extra[0] == "encode":
                out = compute()
                if _nbytes(arrays) < SMALL_BYTES // 64:  # a split algorithm's P^2 small parts:
                    return out  # no sum of them is memoized; registering each would cost memory
                t0 = time.thread_time()
                out = post(out)
                discount(time.thread_time() - t0)
                return out
            return self._small_call(compute)
        t0 = time.thread_time()
        key, refs = self._key_of(arrays, extra)
        spent = 0.0
        while True:
            out = self._lookup(key, refs)
            if out is not None:
                break
            with self._lock:  # one rank computes; the others of its group wait for its result
                event = self._pending.get(key)
                owner = event is None
                if owner:
                    event = self._pending[key] = threading.Event()
            if not owner:
                event.wait()
                continue
            try:
                out, spent = _timed(compute)
                # provenance may differ where contents agree (a rank that came late to a sum
                # whose first copy has gone, two ranks that encoded one sum): one copy per content
                out = self._share(out) if post is None else post(out)
                out = self._store(key, refs, out, spent)
            finally:
                with self._lock:
                    self._pending.pop(key, None)
                event.set()
            break
        discount(time.thread_time() - t0 - spent)
        return out

    def _share(self, out):
        """``out`` with its arrays read-only and interned by content (one copy per content)."""
        return _with_arrays(out, self.intern_array(out.indices), self.intern_array(out.values))

    def _register_payload(self, buf, dense, part):
        """Views of ``buf``'s payload (and the indices a receiver decodes from a coded section)
        stand for the arrays of ``part`` that were encoded: receivers' sums keep their
        provenance."""
        if dense != (part.indices is None):
            return
        layout = _payload_views(buf)
        if layout is None:
            return
        code, idx_at, val_at = layout
        payload = {}
        for at, src in ((idx_at, part.indices), (val_at, part.values)):
            if at is not None and src is not None:
                k, r = self._canon(src)
                payload["decoded" if (src is part.indices and code != 0) else at] = \
                    (k, tuple(weakref.ref(x) for x in r))
        with self._lock:
            self._encoded[id(buf)] = (weakref.ref(buf), payload)
            self._maybe_sweep_locked()

    # ---- the operations ----------------------------------------------------------------------
    def encode(self, codec, part, *, known_dense=False, seed=None):
        plain = super().encode
        if not sharing() or codec.lossy:
            return plain(codec, part, known_dense=known_dense, seed=seed)

        def post(result):
            buf, dense = result
            _readonly(buf)
            if buf.nbytes >= SMALL_BYTES:
                shared = self.intern_array(buf)
                if shared is not buf:  # an equal message exists: its payload is registered
                    return shared, dense
            self._register_payload(buf, dense, part)
            return buf, dense

        return self._memo_call(
            (part.indices, part.values),
            ("encode", part.offset, part.length, bool(known_dense), _codec_sig(codec)),
            lambda: plain(codec, part, known_dense=known_dense, seed=seed), post)

    def decode(self, buf, out=None, *, streaming=False, check=False):
        """A buffer that several ranks decode (one sent by a memoized encode, a slot of a
        shared allgather buffer) is decoded once while its result is held (every later rank is
        charged the measured CPU time); coded indices, decoded into a new array, are given the
        provenance of what was encoded (or of the buffer they came from)."""
        if not sharing() or out is not None or check:
            return super().decode(buf, out, streaming=streaming, check=check)
        t0 = time.thread_time()
        root = _root(buf)
        offset = buf.__array_interface__["data"][0] - root.__array_interface__["data"][0]
        key = (id(root), offset, buf.nbytes)
        with self._lock:
            entry = self._decoded.get(key)
        if entry is not None and entry[0]() is root:
            got = _unpack(entry[1])
            if got is not None:
                charge(entry[2])
                discount(time.thread_time() - t0)
                return Part(got.offset, got.length, got.indices, got.values)
        t1 = time.thread_time()
        part = super().decode(buf, streaming=streaming)
        cpu = time.thread_time() - t1
        t2 = time.thread_time()
        idx = part.indices
        lossless = part.values.base is not None  # raw values are views of the buffer
        if lossless and idx is not None and idx.base is None:
            # coded indices: a new array; it stands for what the sender encoded, else the buffer
            mapped = None
            with self._lock:
                enc = self._encoded.get(id(root))
            if enc is not None and enc[0]() is root and offset == 0:
                mapped = enc[1].get("decoded")
            if mapped is None:
                k, r = self._canon(buf)
                mapped = (("decoded", k), tuple(weakref.ref(x) for x in r))
            _readonly(idx)
            with self._lock:
                self._encoded[id(idx)] = (weakref.ref(idx),
                                          {(0, idx.dtype.str, idx.shape): mapped})
                self._maybe_sweep_locked()
        if lossless and root.nbytes >= SMALL_BYTES:  # share the decoding while it is held
            try:
                packed = _pack(part)
            except TypeError:  # pragma: no cover
                packed = None
            if packed is not None:
                with self._lock:
                    self._decoded[key] = (weakref.ref(root), packed, cpu)
                    self._maybe_sweep_locked()
        discount(time.thread_time() - t2 + (t1 - t0))
        return part

    def add(self, a, b, codec, *, workspace=None, intermediate=False, role="add"):
        plain = super().add
        if not sharing() or codec.lossy:
            return plain(a, b, codec, workspace=workspace, intermediate=intermediate, role=role)
        return self._memo_call(_vec_arrays(a) + _vec_arrays(b),
                               ("add", a.dim, _codec_sig(codec)), lambda: plain(a, b, codec),
                               self._share)

    def fold_parts(self, parts, offset, length, codec, force_dense=False, *, workspace=None,
                   intermediate=False, role="fold"):
        plain = super().fold_parts
        if not sharing() or codec.lossy:
            return plain(parts, offset, length, codec, force_dense, workspace=workspace,
                         intermediate=intermediate, role=role)
        arrays = [x for p in parts for x in (p.indices, p.values)]
        return self._memo_call(arrays, ("fold", tuple((p.offset, p.length) for p in parts),
                                        offset, length, bool(force_dense), _codec_sig(codec)),
                               lambda: plain(parts, offset, length, codec, force_dense),
                               self._share)

    def assemble(self, blocks, dim, codec):
        plain = super().assemble
        if not sharing() or codec.lossy:
            return plain(blocks, dim, codec)
        arrays = [x for p in blocks for x in (p.indices, p.values)]
        return self._memo_call(arrays, ("assemble", tuple((p.offset, p.length) for p in blocks),
                                        dim, _codec_sig(codec)),
                               lambda: plain(blocks, dim, codec), self._share)

    def fold_packed(self, buf, displs, sizes, offset, length, codec, force_dense=False, *,
                    workspace=None, intermediate=False, role="fold"):
        plain = super().fold_packed
        if not sharing() or codec.lossy:
            return plain(buf, displs, sizes, offset, length, codec, force_dense,
                         workspace=workspace, intermediate=intermediate, role=role)
        # the packed buffer is this rank's own (its receive buffer): keyed by its identity
        return self._memo_call((buf,), ("fold_packed", offset, length, bool(force_dense),
                                        _codec_sig(codec)),
                               lambda: plain(buf, displs, sizes, offset, length, codec,
                                             force_dense), self._share)

    def assemble_packed(self, buf, displs, sizes, dim, codec):
        plain = super().assemble_packed
        if not sharing() or codec.lossy:
            return plain(buf, displs, sizes, dim, codec)
        # every rank's buffer is the one shared allgather buffer: assembled once
        return self._memo_call((buf,), ("assemble_packed", dim, _codec_sig(codec)),
                               lambda: plain(buf, displs, sizes, dim, codec), self._share)

    def recv_bytes(self, ctx, source, tag, status=None):
        if not sharing():
            return super().recv_bytes(ctx, source, tag, status)
        status = MPI.Status() if status is None else status
        msg = ctx.waiter.mprobe(ctx.comm, source, tag, status)
        view = msg.payload.view()
        view.flags.writeable = False
        return view, status.Get_source()

    def allgather_in_place(self, ctx, sizes, write_mine, stats):
        if not sharing():
            return super().allgather_in_place(ctx, sizes, write_mine, stats)
        recv, displs = self.allgather_packed(ctx, sizes, write_mine, stats)
        return [recv[int(d):int(d) + int(n)] for d, n in zip(displs, sizes)]

    def allgather_packed(self, ctx, sizes, write_mine, stats):
        if not sharing():
            return super().allgather_packed(ctx, sizes, write_mine, stats)
        comm = ctx.comm
        mine = np.empty(int(sizes[ctx.rank]), np.uint8)
        write_mine(mine)
        displs = np.zeros_like(sizes)
        np.cumsum(sizes[:-1], out=displs[1:])
        total = int(sizes.sum())

        def combine(parts):
            out = np.empty(total, np.uint8)
            for d, p in zip(displs, parts):
                out[int(d):int(d) + p.size] = p
            out.flags.writeable = False
            return out

        recv = comm.shared_collective(mine, combine, lambda r, a, b: cc.allgather_time(
            comm.size, total, mine.nbytes, a, b), total - mine.nbytes)
        stats.bytes_sent += int(sizes.sum() - sizes[ctx.rank])
        stats.bytes_received += int(sizes.sum() - sizes[ctx.rank])  # as the plain one counts
        stats.messages += 1
        return recv, displs

    def alltoallv_bytes(self, ctx, bufs, stats):
        if not sharing():
            return super().alltoallv_bytes(ctx, bufs, stats)
        comm, rank, size = ctx.comm, ctx.rank, ctx.size
        scounts = np.array([0 if j == rank else b.nbytes for j, b in enumerate(bufs)], np.intc)
        rcounts = np.empty(size, np.intc)
        ctx.waiter.collective(comm, "Alltoall", [scounts, MPI.INT], [rcounts, MPI.INT])
        sent, received = int(scounts.sum()), int(rcounts.sum())
        for j, b in enumerate(bufs):  # the receivers get these very buffers, read-only
            if j != rank:
                b.flags.writeable = False

        def combine(parts):
            return [p[0] for p in parts], max(max(p[1], p[2]) for p in parts)

        got, _ = comm.shared_collective((bufs, sent, received), combine,
                                        lambda r, a, b: cc.alltoallv_time(size, r[1], r[1],
                                                                          a, b), sent)
        out = [bufs[rank] if j == rank else theirs[rank] for j, theirs in enumerate(got)]
        stats.bytes_sent += cc.SIZE_BYTES * (size - 1)
        stats.bytes_received += cc.SIZE_BYTES * (size - 1) + received
        return out

    def alltoallv_packed(self, ctx, packed, stats, extra=None):
        """The senders' packed buffers go to the receivers as they are (one simulated
        collective, as :meth:`alltoallv_bytes`); each receiver then copies its messages into
        one receive buffer, as MPI would have received them (the copy is the simulator's,
        not charged)."""
        if not sharing():
            return super().alltoallv_packed(ctx, packed, stats, extra)
        comm, rank, size = ctx.comm, ctx.rank, ctx.size
        sizes = packed.table[:, pk.NBYTES]
        scounts = sizes.astype(np.intc)
        scounts[rank] = 0
        rcounts, extras, header = exchange_sizes(ctx, scounts, extra)
        sent, received = int(scounts.sum()), int(rcounts.sum())
        packed.buf.flags.writeable = False

        def combine(parts):
            return [p[0] for p in parts], max(max(p[1], p[2]) for p in parts)

        got, _ = comm.shared_collective((packed, sent, received), combine,
                                        lambda r, a, b: cc.alltoallv_time(size, r[1], r[1],
                                                                          a, b), sent)
        t0 = time.thread_time()
        rsizes = rcounts.astype(np.int64)
        rsizes[rank] = sizes[rank]
        rdispls = np.zeros_like(rsizes)
        np.cumsum(rsizes[:-1], out=rdispls[1:])
        recv = np.concatenate([theirs.message(rank) for theirs in got]) if size else \
            np.empty(0, np.uint8)
        del got
        discount(time.thread_time() - t0)
        stats.bytes_sent += header * (size - 1)
        stats.bytes_received += header * (size - 1) + received
        return recv, rdispls, rsizes, extras

    def gather_bytes(self, ctx, buf, stats, root=0):
        if not sharing():
            return super().gather_bytes(ctx, buf, stats, root)
        comm, size = ctx.comm, ctx.size
        mine = np.array([buf.nbytes], np.intc)
        sizes = np.empty(size, np.intc) if ctx.rank == root else None
        ctx.waiter.collective(comm, "Gather", [mine, MPI.INT],
                              None if sizes is None else [sizes, MPI.INT], root)
        sending = 0 if ctx.rank == root else buf.nbytes

        def combine(parts):
            return parts, sum(p.nbytes for j, p in enumerate(parts) if j != root)

        got, received = comm.shared_collective(
            buf, combine, lambda r, a, b: cc.gatherv_time(
                size, r[1] if ctx.rank == root else sending, a, b), sending)
        if ctx.rank != root:
            stats.bytes_sent += cc.SIZE_BYTES
            return None
        out = []
        for j, p in enumerate(got):
            if j == root:
                out.append(buf)
                continue
            view = p.view()
            view.flags.writeable = False
            out.append(view)
        stats.bytes_received += cc.SIZE_BYTES * (size - 1) + received
        return out

    def allgather_values(self, ctx, block, bounds, out):
        if not sharing() or out is not None:  # a caller's buffer: filled as on real ranks
            return super().allgather_values(ctx, block, bounds, out)
        comm = ctx.comm
        total = int(bounds[-1]) * block.itemsize

        def combine(parts):
            result = np.concatenate(parts)
            result.flags.writeable = False
            return result

        return comm.shared_collective(block, combine, lambda r, a, b: cc.allgather_time(
            comm.size, total, block.nbytes, a, b), total - block.nbytes)

    def bcast_bytes(self, ctx, data, nbytes, root=0, out=None):
        if not sharing() or out is not None:
            return super().bcast_bytes(ctx, data, nbytes, root, out)
        comm = ctx.comm

        def combine(parts):  # one copy for the receivers: the root keeps writing its own
            shared = parts[root].copy()
            shared.flags.writeable = False
            return shared

        got = comm.shared_collective(data if ctx.rank == root else None, combine,
                                     lambda r, a, b: cc.bcast_time(comm.size, nbytes, a, b),
                                     nbytes if ctx.rank == root else 0)
        return data if ctx.rank == root else got

    # ---- content interning -------------------------------------------------------------------
    def intern_array(self, arr):
        """One shared read-only array per content (bitwise); ``arr`` itself the first time."""
        if not isinstance(arr, np.ndarray) or arr.nbytes < 512:
            return arr
        if not arr.flags.c_contiguous:
            arr = np.ascontiguousarray(arr)
        fp = _fingerprint(arr)
        with self._lock:
            candidates = [w() for w in self._contents.get(fp, [])]
        for c in candidates:
            if c is arr:
                return arr
            if c is not None and np.array_equal(c.view(np.uint8), arr.view(np.uint8)):
                return c
        if arr.flags.writeable:
            arr = arr.view()  # the caller may still own the base; a read-only view is shared
            arr.flags.writeable = False
        with self._lock:
            lst = self._contents.setdefault(fp, [])
            lst[:] = [w for w in lst if w() is not None]
            lst.append(weakref.ref(arr))
        return arr

    def intern_result(self, obj):
        """:meth:`intern_array` applied to the arrays of ``obj`` (a SparseVector, an ndarray,
        or a tuple/list/dict of those); other objects are returned as they are."""
        if isinstance(obj, SparseVector):
            return SparseVector.unchecked(obj.dim, self.intern_array(obj.indices),
                                         self.intern_array(obj.values))
        if isinstance(obj, np.ndarray):
            return self.intern_array(obj)
        if isinstance(obj, tuple):
            return tuple(self.intern_result(x) for x in obj)
        if isinstance(obj, list):
            return [self.intern_result(x) for x in obj]
        if isinstance(obj, dict):
            return {k: self.intern_result(v) for k, v in obj.items()}
        return obj
