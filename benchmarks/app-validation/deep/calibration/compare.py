"""The deep step calibration's spread: REPS calibrations of one configuration in one process.

    PYTHONPATH=<checkout>/comm:<checkout> python compare.py APP METHOD REPS [APP OPTIONS]

APP: cnn or lstm (``--batch-size 8 --seed 0`` and the options given); METHOD: ``old`` (the
checkout's ``sparcapps.deep.simranks._measure``: best of 5 of each part alone, rates version 2,
main at 9beeb94) or ``new`` (``sparcapps.deep.steprates._measure``: the median of 100 training
steps, version 3). One JSON line per calibration: its rates in ms, their sum (``total_ms``),
the time, the 1-minute load and the calibration's seconds (the first in a process compiles
Numba's kernels).
"""
import json
import os
import sys
import time

which, method, reps = sys.argv[1], sys.argv[2], int(sys.argv[3])
extra = sys.argv[4:]
from sparcapps.deep import cnn, lstm  # noqa: E402 - after the arguments

mod = {"cnn": cnn, "lstm": lstm}[which]
args = mod.build_parser().parse_args(["--batch-size", "8", "--seed", "0"] + extra)
if method == "old":
    from sparcapps.deep import simranks as m
else:
    from sparcapps.deep import steprates as m
for r in range(reps):
    t = time.time()
    rates = m._measure(f"sparc-{which}", args, mod.make_task)
    print(json.dumps({"method": method, "app": which, "opts": " ".join(extra),
                      "checkout": os.path.dirname(os.path.dirname(mod.__file__)),
                      "t": time.strftime("%H:%M:%S", time.gmtime()),
                      "load": os.getloadavg()[0], "secs": round(time.time() - t, 2),
                      "total_ms": round(sum(rates.values()) * 1e3, 4),
                      **{k: round(v * 1e3, 4) for k, v in rates.items()}}), flush=True)
