#!/usr/bin/env bash
# GPU check of the PyTorch adapter's device path (issue 15), for a machine with CUDA:
# CUDA tensors through DistributedOptimizer at P = 2 give the CPU path's results (pinned host
# staging); the device-resident compression (issue 35: top-k, random-k, threshold, DGC) gives
# the host path's; top-k of 16M values on the device is timed beside the host path, and so is
# the optimizer's step (16M values, top-k 1%) on each path, with the bytes each copies.
#
#   bash scripts/gpu-check.sh            # prints GPU-CHECK lines, exits 0 when every check holds
#
# Without a CUDA device it exits 2 with a message (CPU CI never runs it; tests check the
# refusal). PYTHON and MPIEXEC override the interpreter and launcher (default: the project's
# venv when there is one, else python on PATH; the mpiexec beside the interpreter, with the
# flags its MPI needs here: python -m sparcapps.launcher, i.e. sparc-mpiexec).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
if [[ -z "${PYTHON:-}" ]]; then
    PYTHON=python
    [[ -x "$root/.venv/bin/python" ]] && PYTHON="$root/.venv/bin/python"
fi
if ! "$PYTHON" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)"; then
    echo "gpu-check: no CUDA device here (torch.cuda.is_available() is False with $PYTHON);" \
         "run this script on a machine with an NVIDIA GPU and a CUDA build of torch" >&2
    exit 2
fi
if [[ -z "${MPIEXEC:-}" ]]; then
    exec "$PYTHON" -m sparcapps.launcher -n 2 "$PYTHON" "$root/scripts/gpu_check.py" "$@"
fi
exec "$MPIEXEC" -n 2 "$PYTHON" "$root/scripts/gpu_check.py" "$@"
