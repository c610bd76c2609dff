"""Re-run one record of the table from its own command and compare (BENCHMARKS "Bit for bit").

``python rerun.py RECORDS.jsonl RUN_ID SCRATCH.jsonl`` runs the record's
``environment.command`` under ``nice -n 19 mpiexec -n P`` with ``--output SCRATCH.jsonl`` and
prints whether the parameters' sha256, every epoch's loss and test accuracy and the bytes per
step are the record's.
"""

import json
import subprocess
import sys

src, run_id, scratch = sys.argv[1], sys.argv[2], sys.argv[3]
with open(src) as f:
    rec = next(r for r in map(json.loads, f) if r["config"].get("run_id") == run_id)
cmd = list(rec["environment"]["command"])
cmd[cmd.index("--output") + 1] = scratch
subprocess.run(["nice", "-n", "19", "mpiexec", "-n", str(rec["P"])] + cmd, check=True,
               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
with open(scratch) as f:
    new = [json.loads(line) for line in f][-1]


def epochs(r):
    return [(e.get("loss"), e.get("test_accuracy")) for e in r["metrics"]["epochs"]]


old_sha, new_sha = rec["metrics"]["params_sha256"], new["metrics"]["params_sha256"]
print(f"{run_id} (recorded at {rec['environment'].get('git_commit', '?')[:7]}): sha256 "
      f"{old_sha[:8]} -> {new_sha[:8]}; same sha256: {old_sha == new_sha}; same epochs: "
      f"{epochs(rec) == epochs(new)}; same bytes/step: "
      f"{rec['bytes']['sent_per_step'] == new['bytes']['sent_per_step']}")
