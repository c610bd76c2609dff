"""How a link passes messages after an idle moment, and in bulk (2 ranks, one per node).

    bash jobs/emulate.sh 2x1gbit -- python scripts/link_probe.py [SIZE_KIB ...]   # as root

Rank 0 sends S bytes to rank 1 after 30 ms of idle (both ranks asleep), rank 1 answers one
byte; prints per size the median of 7 round trips (ms) and the rate it implies (Gbit/s), then
a 16 MiB exchange both ways at once (the fastest of 3). On a shaped link of rate R every size
should come out near R: a rate well above it means the shaper let a burst through at memory
speed (see jobs/README.md, "Small messages are shaped too"). One JSON line from rank 0.
"""

import json
import sys
import time

import numpy as np
from mpi4py import MPI

SIZES_KIB = (32, 128, 512, 2048, 8192)  # the default sizes (arguments replace them)
BULK = 16 << 20


def main():
    comm = MPI.COMM_WORLD
    if comm.size != 2:
        raise SystemExit(f"link_probe.py needs exactly 2 ranks, got {comm.size}")
    try:
        sizes = [int(a) << 10 for a in sys.argv[1:]] or [s << 10 for s in SIZES_KIB]
    except ValueError:
        raise SystemExit(f"link_probe.py: sizes are whole KiB, got {sys.argv[1:]}") from None
    rank, out = comm.rank, {}
    ack = np.zeros(1, np.uint8)
    for size in sizes:
        buf = np.ones(size, np.uint8)
        times = []
        for _ in range(7):
            comm.Barrier()
            time.sleep(0.03)
            comm.Barrier()
            t0 = time.perf_counter()
            if rank == 0:
                comm.Send(buf, 1)
                comm.Recv(ack, 1)
                times.append(time.perf_counter() - t0)
            else:
                comm.Recv(buf, 0)
                comm.Send(ack, 0)
        if rank == 0:
            t = float(np.median(times))
            out[f"{size >> 10} KiB after idle"] = {"ms": round(t * 1e3, 3),
                                                   "gbit/s": round(size * 8 / t / 1e9, 3)}
    send, recv = np.ones(BULK, np.uint8), np.empty(BULK, np.uint8)
    times = []
    for _ in range(3):
        comm.Barrier()
        t0 = time.perf_counter()
        comm.Sendrecv(send, 1 - rank, recvbuf=recv, source=1 - rank)
        times.append(time.perf_counter() - t0)
    if rank == 0:
        t = min(times)
        out["16 MiB both ways"] = {"ms": round(t * 1e3, 2), "gbit/s": round(BULK * 8 / t / 1e9, 3)}
        print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
