#!/usr/bin/env bash
# The runs of BENCHMARKS.md "Compressors on one table" (issue 35, item 2): dense and every
# compressor of the catalog (sparcml.compression.COMPRESSORS, `--compressor NAME`) on the
# digits sparc-cnn and sparc-lstm, P ranks on shared memory, EPOCHS epochs.
#
#   bash benchmarks/compressors/judge/runs.sh OUTDIR   # PHASE=all (default) | base | sweep | best
#   python -m sparcapps.deep.compressor_table OUTDIR/*.jsonl --accuracy-only --min-seeds 3
#   python -m sparcapps.deep.compressor_table OUTDIR/*.jsonl --sweep
#
# Phases, in this order:
#   base   every row at its paper defaults (the recommended lr and SGD momentum the apps apply),
#          seeds SEEDS (default 0 1 2); seed 0 first for every row, then the other seeds
#   sweep  seed 0 only: each compressor at 1/3 (run id x0.33) and 3 times its recommended lr
#          (x1 is the base run of seed 0); SCALES, default "0.33 3", names the scales run (0.33
#          is 1/3, any other as written: SCALES=9 adds 9x to a finished sweep whose best was at
#          its top, SCALES="0.1 0.03" lower rates); dense is not swept (it runs at the
#          apps' defaults) unless SWEEP_DENSE=1: then its seed-0 runs at the same scales, and
#          in phase best its best rate at the other seeds, for context (the table's dense
#          baseline stays at the default rate)
#   best   the lr of the sweep's best final test accuracy (seed 0, every scale run; ties to x1,
#          then to the smaller lr: compressor_table.best_of_sweep), where it is not x1, at the
#          other seeds
#
# Every run under `nice -n 19`. Each run has a --run-id (j-APP-ROW-xSCALE-SEED); a run whose id
# is in its records file is skipped, so the script resumes where it stopped. APPS="cnn" limits
# the apps (two scripts, one per app, may run side by side: each app has its own file), ROWS
# the rows (default: dense and the names of the catalog; also randomk-shared, randomk-noef,
# qsgd-noef), EPOCHS (20), NP (2) the run.
set -euo pipefail
out="${1:?usage: runs.sh OUTDIR}"
phase="${PHASE:-all}"
epochs="${EPOCHS:-20}"
np="${NP:-2}"
read -r -a apps <<<"${APPS:-cnn lstm}"
read -r -a seeds <<<"${SEEDS:-0 1 2}"
read -r -a scales <<<"${SCALES:-0.33 3}"
mkdir -p "$out/logs"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

catalog=$(python -c 'from sparcml.compression import COMPRESSORS; print(*COMPRESSORS)')
read -r -a rows <<<"${ROWS:-dense $catalog}"

flags() {  # ROW -> the run's flags at its paper defaults
    case "$1" in
        dense) echo "--dense" ;;
        threshold) echo "--compressor threshold --threshold 0.005" ;;  # no paper default
        randomk-shared) echo "--compressor randomk --shared-indices" ;;
        qsgd-noef) echo "--compressor qsgd --no-error-feedback" ;;  # the QSGD paper's: no memory
        randomk-noef) echo "--compressor randomk --no-error-feedback" ;;  # unbiased: n / k
        *) echo "--compressor $1" ;;
    esac
}

recommended_lr() {  # APP ROW -> the lr the app runs ROW with by default
    # shellcheck disable=SC2046
    python -c 'import sys, importlib
app, flags = sys.argv[1], sys.argv[2:]
print(importlib.import_module(f"sparcapps.deep.{app}").build_parser().parse_args(flags).lr)' \
        "$1" $(flags "$2")
}

scaled() {  # LR SCALE -> LR times SCALE, 4 digits (the scale 0.33 is 1/3)
    python -c 'import sys; s = sys.argv[2]; f = 1 / 3 if s == "0.33" else float(s)
print(f"{float(sys.argv[1]) * f:.4g}")' "$@"
}

done_already() { [[ -f "$2" ]] && grep -q "\"run_id\": \"$1\"" "$2"; }

run() {  # APP ROW SCALE SEED [--lr LR]
    local app="$1" row="$2" scale="$3" seed="$4"; shift 4
    local id="j-$app-$row-x$scale-$seed" file="$out/$app.jsonl"
    done_already "$id" "$file" && return 0
    echo "$(date -u +%H:%M:%S) $id $* (load $(cut -d' ' -f1-3 /proc/loadavg))" >&2
    local t0=$SECONDS
    # shellcheck disable=SC2046
    nice -n 19 mpiexec -n "$np" "sparc-$app" --seed "$seed" --epochs "$epochs" $(flags "$row") \
        "$@" --no-progress --run-id "$id" --output "$file" >"$out/logs/$id.log" 2>&1 \
        || echo "FAILED $id (see $out/logs/$id.log)" >&2
    local last
    last=$(grep -o 'epoch [0-9]*/[0-9]*: [^,]*, test acc [0-9.]*' "$out/logs/$id.log" \
           | tail -1 || true)
    echo "$(date -u +%H:%M:%S) $id done in $((SECONDS - t0)) s: $last" >&2
}

if [[ "$phase" == all || "$phase" == base ]]; then
    for seed in "${seeds[@]}"; do
        for row in "${rows[@]}"; do
            for app in "${apps[@]}"; do
                run "$app" "$row" 1 "$seed"
            done
        done
    done
fi
if [[ "$phase" == all || "$phase" == sweep ]]; then
    for row in "${rows[@]}"; do
        [[ "$row" == dense && "${SWEEP_DENSE:-0}" != 1 ]] && continue
        for app in "${apps[@]}"; do
            lr=$(recommended_lr "$app" "$row")
            for scale in "${scales[@]}"; do
                run "$app" "$row" "$scale" 0 --lr "$(scaled "$lr" "$scale")"
            done
        done
    done
fi
if [[ "$phase" == all || "$phase" == best ]]; then
    for app in "${apps[@]}"; do
        # "ROW SCALE LR" per row whose best lr of the sweep is not x1
        python "$here/best_lr.py" "$out/$app.jsonl" "$app" "${rows[@]}" |
        while read -r row scale lr; do
            for seed in "${seeds[@]}"; do
                [[ "$seed" == 0 ]] && continue
                run "$app" "$row" "$scale" "$seed" --lr "$lr" </dev/null
            done
        done
    done
fi
