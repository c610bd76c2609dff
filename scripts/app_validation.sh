#!/usr/bin/env bash
# Simulated step times of sparc-linear against measured ones on the emulated 1 Gbit network
# (issue 33, item 3): P = 2 and 4 ranks, one per emulated node, sparse and dense, LR and SVM.
# Needs root (network namespaces) and MPICH; run it on a quiet machine: the measured side
# shares this machine's cores. Usage: bash scripts/app_validation.sh [OUT_DIR]
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="${1:-$root/benchmarks/app-validation}"
mkdir -p "$out"
export PATH="$root/.venv/bin:$PATH"
cd "$root"
D="--synth url --epochs 3 --batch-size 256 --seed 0 --no-progress"
for P in ${SPARC_VALIDATION_P:-2 4}; do   # SPARC_VALIDATION_P="4": one of them
    cs=$(( P > 2 ? P / 2 : 1 ))      # ranks per core here: the simulation's compute scale
    spec=$(bash jobs/emulate.sh "${P}x1gbit" -- sparc-bench --probe-network \
           | sed -n 's/^--network //p')
    echo "P = $P: probed --network $spec (compute scale $cs)"
    for app in "sparc-linear --loss log" "sparc-svm"; do
        for alg in "" "--algorithm dense"; do
            # shellcheck disable=SC2086
            bash jobs/emulate.sh "${P}x1gbit" -- $app $D $alg --output "$out/measured.jsonl"
            # shellcheck disable=SC2086
            $app $D $alg --simulate "$P" --network "$spec" --compute-scale "$cs" \
                --output "$out/simulated.jsonl"
        done
    done
done
python scripts/app_validation_table.py "$out/measured.jsonl" "$out/simulated.jsonl" \
    | tee "$out/table.md"
