"""The learning rate each row of the sweep chose (``runs.sh``, phase ``best``).

``python best_lr.py APP.jsonl APP ROW ...`` prints ``ROW SCALE LR`` for each compressor ROW
whose best seed-0 run of ``j-APP-ROW-x{0.33,1,3}-0`` (by final test accuracy; ties to x1, then
to the smaller lr: :func:`sparcapps.deep.compressor_table.best_of_sweep`) is not x1.
"""

import sys

from sparcapps.deep.compressor_table import best_of_sweep
from sparcapps.records import read_records

path, app, rows = sys.argv[1], sys.argv[2], sys.argv[3:]
by_id = {r["config"].get("run_id"): r for r in read_records([path])[0]}
for row in rows:
    runs = {s: by_id.get(f"j-{app}-{row}-x{s}-0") for s in ("0.33", "1", "3")}
    if row == "dense" or None in runs.values():
        continue
    best = best_of_sweep(list(runs.values()))
    scale = next(s for s, r in runs.items() if r is best)
    if scale != "1":
        print(row, scale, best["config"]["lr"])
