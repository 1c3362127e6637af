#!/usr/bin/env bash
# The README's test command: sets everything up, then runs lint, type checks and the whole
# test suite (unit, native parity against PyTorch, integration on the embedded Slurm cluster).
# Nothing it starts survives it: test clusters live under one temp dir that is torn down
# (gantry cluster down for each) and removed on exit, also when pytest fails or is interrupted.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"
bash scripts/setup.sh
export PATH="$repo/.venv/bin:$PATH"

GANTRY_TEST_TMPDIR=$(mktemp -d /tmp/gantry-tests.XXXXXX)
chmod 755 "$GANTRY_TEST_TMPDIR"  # munged (user munge) must reach the sockets below it
export GANTRY_TEST_TMPDIR
cleanup() {
  local site
  for site in "$GANTRY_TEST_TMPDIR"/*/site.yaml; do
    [ -e "$site" ] || continue
    gantry cluster down --site "$site" >/dev/null 2>&1 || echo "test.sh: could not stop the cluster of $site" >&2
  done
  rm -rf "$GANTRY_TEST_TMPDIR"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

echo "== ruff"
ruff check .
echo "== mypy"
mypy
echo "== pytest"
pytest -q "$@"
