#!/usr/bin/env bash
# The runs of BENCHMARKS.md "Compressors on one table" (issue 24): every row on sparc-cnn and
# sparc-lstm (digits, P = 2, 5 epochs), seeds given (default 0 1 2), the rows the issue names
# first (dense, top-k 1% with EF, DGC, EF-signSGD, PowerSGD rank 4), then the others; then
# (PHASE=all or net, root) one 1-epoch timing run per row and app on the emulated 4 x 1 Gbit
# network (jobs/emulate.sh, P = 4, seed 0).
#
#   bash benchmarks/compressors/table.sh OUTDIR [SEED ...]        # PHASE=shm (default) | net | all
#   python -m sparcapps.deep.compressor_table OUTDIR/*.jsonl --figure benchmarks/compressors/compressors.png
#
# Each run has a --run-id (table-APP-ROW-SEED, net-APP-ROW); a run whose id is already in its
# records file is skipped, so the script resumes where it stopped. While OUTDIR/PAUSE exists it
# waits between runs (to let another MPI job run alone). ROWS="dense dgc" limits the rows.
set -euo pipefail
out="${1:?usage: table.sh OUTDIR [SEED ...]}"; shift
seeds=(0 1 2)
[[ $# -eq 0 ]] || seeds=("$@")
phase="${PHASE:-shm}"
mkdir -p "$out"
declare -A FLAGS=(
    [dense]="--dense"
    [topk]="--compressor topk"
    [dgc]="--compressor dgc"
    [efsignsgd]="--compressor efsignsgd"
    [powersgd]="--compressor powersgd"
    [randomk]="--compressor randomk"
    [randomk-shared]="--compressor randomk --shared-indices"
    [threshold]="--compressor threshold --threshold 0.005"
    [signsgd]="--compressor signsgd --lr 0.001"
    [signum]="--compressor signum --lr 0.001"
    [terngrad]="--compressor terngrad"
    [qsgd]="--compressor qsgd"
    [fp16]="--compressor fp16"
    [bf16]="--compressor bf16"
)
first=(dense topk dgc efsignsgd powersgd)
rest=(randomk randomk-shared threshold signsgd signum terngrad qsgd fp16 bf16)
read -r -a only <<<"${ROWS:-}"

wanted() { [[ ${#only[@]} -eq 0 ]] || [[ " ${only[*]} " == *" $1 "* ]]; }
done_already() { [[ -f "$2" ]] && grep -q "\"run_id\": \"$1\"" "$2"; }
pause() { while [[ -e "$out/PAUSE" ]]; do sleep 5; done; }

run() {  # ID FILE APP FLAGS...
    local id="$1" file="$2" app="$3"; shift 3
    done_already "$id" "$file" && return 0
    pause
    echo "$(date -u +%H:%M:%S) $id (load $(cut -d' ' -f1-3 /proc/loadavg))" >&2
    "$@" --no-progress --run-id "$id" --output "$file" || echo "FAILED $id" >&2
}

if [[ "$phase" == shm || "$phase" == all ]]; then
    for group in first rest; do
        if [[ $group == first ]]; then rows=("${first[@]}"); else rows=("${rest[@]}"); fi
        for seed in "${seeds[@]}"; do
            for app in cnn lstm; do
                for row in "${rows[@]}"; do
                    wanted "$row" || continue
                    # shellcheck disable=SC2086
                    run "table-$app-$row-$seed" "$out/table-$app.jsonl" "$app" \
                        mpiexec -n 2 "sparc-$app" --seed "$seed" --epochs 5 ${FLAGS[$row]}
                done
            done
        done
    done
fi
if [[ "$phase" == net || "$phase" == all ]]; then
    here="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
    for app in cnn lstm; do
        for row in "${first[@]}" "${rest[@]}"; do
            wanted "$row" || continue
            # shellcheck disable=SC2086
            run "net-$app-$row" "$out/net-$app.jsonl" "$app" \
                bash "$here/jobs/emulate.sh" 4x1gbit -- "sparc-$app" --seed 0 --epochs 1 \
                ${FLAGS[$row]}
        done
    done
fi
