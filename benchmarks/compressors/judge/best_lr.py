"""The learning rate each row of the sweep chose (``runs.sh``, phase ``best``).

``python best_lr.py APP.jsonl APP ROW ...`` prints ``ROW SCALE LR`` for each compressor ROW
whose best seed-0 run of ``j-APP-ROW-xSCALE-0`` over every SCALE recorded (x1 and at least one
other: 0.33 and 3, and 9 where ``SCALES`` added it; by final test accuracy, ties to x1, then to
the smaller lr: :func:`sparcapps.deep.compressor_table.best_of_sweep`) is not x1. Dense only
with ``SWEEP_DENSE=1`` (its best rate's other seeds, for context: the table's baseline stays at
x1).
"""

import os
import re
import sys

from sparcapps.deep.compressor_table import best_of_sweep
from sparcapps.records import read_records

path, app, rows = sys.argv[1], sys.argv[2], sys.argv[3:]
by_id = {r["config"].get("run_id"): r for r in read_records([path])[0]}
for row in rows:
    pattern = re.compile(rf"j-{re.escape(app)}-{re.escape(row)}-x([0-9.]+)-0")
    runs = {m.group(1): rec for run_id, rec in by_id.items()
            if run_id and (m := pattern.fullmatch(run_id))}
    if (row == "dense" and os.environ.get("SWEEP_DENSE") != "1") or "1" not in runs \
            or len(runs) < 2:
        continue
    best = best_of_sweep(list(runs.values()))
    scale = next(s for s, r in runs.items() if r is best)
    if scale != "1":
        print(row, scale, best["config"]["lr"])
