#!/bin/bash
# helper cal's quiet window (02:42-03:00 UTC): the deep validation with its calibration in the
# window; the calibration's spread, old (main 9beeb94: best of 5) against new (branch); P = 1.
set -u
W=/tmp/cal/win; mkdir -p $W/rates $W/p1
source /work/main/.venv/bin/activate
export PYTHONPATH=/work/wt-cal/comm:/work/wt-cal
export SPARCML_SIM_RATES=$W/rates/sim-kernel-rates.json
cd /work/wt-cal
log() { echo "== $1 $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)" >> $W/log.txt; }
echo "HEAD $(git rev-parse --short HEAD) dirty: $(git status --porcelain | wc -l)" > $W/log.txt
log validation
SPARC_VALIDATION_APPS=deep bash scripts/app_validation.sh $W/val > $W/val.log 2>&1
echo "   rc=$?" >> $W/log.txt
log spread
for cfg in "cnn --density 0.01 --bits 4" "lstm --density 0.01 --bits 4" "cnn --dense" "lstm --dense"; do
    set -- $cfg; app=$1; shift
    PYTHONPATH=/tmp/cal/main-9beeb94/comm:/tmp/cal/main-9beeb94 python /tmp/cal/compare.py $app old 6 "$@" >> $W/spread.jsonl 2>>$W/spread.err
    python /tmp/cal/compare.py $app new 6 "$@" >> $W/spread.jsonl 2>>$W/spread.err
    log "spread $app $*"
    [[ $(date -u +%H%M) < 0256 ]] || break
done
D="--epochs 3 --batch-size 8 --seed 0 --no-progress"
for cfg in "sparc-cnn|--density 0.01 --bits 4" "sparc-cnn|--dense" "sparc-lstm|--density 0.01 --bits 4" "sparc-lstm|--dense"; do
    [[ $(date -u +%H%M) < 0257 ]] || break
    app="${cfg%%|*}" alg="${cfg#*|}"
    $app $D $alg --output $W/p1/measured.jsonl >> $W/p1.log 2>&1
    $app $D $alg --simulate 1 --network 1x1gbit --output $W/p1/simulated.jsonl >> $W/p1.log 2>&1
    log "p1 $app $alg"
done
log end
