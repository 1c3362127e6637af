#!/usr/bin/env bash
# The README's test command: sets everything up, then runs lint, type checks and the whole
# test suite (unit, native parity against PyTorch, integration on the embedded Slurm cluster).
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"
bash scripts/setup.sh
export PATH="$repo/.venv/bin:$PATH"
echo "== ruff"
ruff check .
echo "== mypy"
mypy
echo "== pytest"
pytest -q "$@"
