#!/usr/bin/env bash
# Create (once) the project's virtual environment in .venv and install the project into it
# with the pinned development versions (constraints.txt). Sourced by main.sh and test.sh.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${SPARCML_VENV:-$root/.venv}"
stamp="$venv/.installed-$(cat "$root/pyproject.toml" "$root/constraints.txt" | sha256sum | cut -c1-16)"
if [ ! -x "$venv/bin/python" ]; then
    python3 -m venv "$venv"
fi
if [ ! -e "$stamp" ]; then
    "$venv/bin/python" -m pip install --quiet --upgrade pip
    "$venv/bin/python" -m pip install --quiet -c "$root/constraints.txt" -e "$root[apps,mpich,torch,test]"
    rm -f "$venv"/.installed-*
    touch "$stamp"
fi
export PATH="$venv/bin:$PATH"
