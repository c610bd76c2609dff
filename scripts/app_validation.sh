#!/usr/bin/env bash
# Simulated step times of the training apps against measured ones on the emulated 1 Gbit
# network (issue 33, item 3): P = 2 and 4 ranks, one per emulated node, sparse and dense; LR and
# SVM on the url-like twin ("linear"), the CNN and LSTM on digits with top-k 1% + 4-bit QSGD
# ("deep", the scaling study's settings). Needs root (network namespaces) and MPICH; run it on a
# quiet machine: the measured side shares this machine's cores.
# Usage: [SPARC_VALIDATION_P="2 4"] [SPARC_VALIDATION_APPS="linear deep"] \
#        bash scripts/app_validation.sh [OUT_DIR]
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="${1:-$root/benchmarks/app-validation}"
mkdir -p "$out"
export PATH="$root/.venv/bin:$PATH"
cd "$root"
D="--synth url --epochs 3 --batch-size 256 --seed 0 --no-progress"
DEEP="--epochs 3 --batch-size 8 --seed 0 --no-progress"
apps=()
for group in ${SPARC_VALIDATION_APPS:-linear deep}; do
    case "$group" in
        linear) apps+=("sparc-linear --loss log $D|" "sparc-linear --loss log $D|--algorithm dense"
                       "sparc-svm $D|" "sparc-svm $D|--algorithm dense") ;;
        deep) apps+=("sparc-cnn $DEEP|--density 0.01 --bits 4" "sparc-cnn $DEEP|--dense"
                     "sparc-lstm $DEEP|--density 0.01 --bits 4" "sparc-lstm $DEEP|--dense") ;;
        *) echo "app_validation.sh: SPARC_VALIDATION_APPS: unknown group '$group'" \
               "(use linear, deep)" >&2; exit 2 ;;
    esac
done
for P in ${SPARC_VALIDATION_P:-2 4}; do   # SPARC_VALIDATION_P="4": one of them
    cs=$(( P > 2 ? P / 2 : 1 ))      # ranks per core here: the simulation's compute scale
    spec=$(bash jobs/emulate.sh "${P}x1gbit" -- sparc-bench --probe-network \
           | sed -n 's/^--network //p')
    echo "P = $P: probed --network $spec (compute scale $cs)"
    for entry in "${apps[@]}"; do
        app="${entry%%|*}" alg="${entry#*|}"
        # shellcheck disable=SC2086
        bash jobs/emulate.sh "${P}x1gbit" -- $app $alg --output "$out/measured.jsonl"
        # shellcheck disable=SC2086
        $app $alg --simulate "$P" --network "$spec" --compute-scale "$cs" \
            --output "$out/simulated.jsonl"
    done
done
python scripts/app_validation_table.py "$out/measured.jsonl" "$out/simulated.jsonl" \
    | tee "$out/table.md"
