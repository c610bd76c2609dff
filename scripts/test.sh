#!/usr/bin/env bash
# The whole test suite, in the project's virtual environment.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$root/scripts/venv.sh"
cd "$root"
exec python -m pytest "$@"
