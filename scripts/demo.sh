#!/usr/bin/env bash
# The README's main command: sets everything up, brings up the embedded Slurm cluster and
# runs gantry's main job on it. The cluster stays up afterwards (`gantry cluster status`,
# `eval "$(gantry cluster env)"` for plain sinfo/sbatch/srun); stop it with
# `.venv/bin/gantry cluster down`.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"
bash scripts/setup.sh
export PATH="$repo/.venv/bin:$PATH"
exec gantry demo "$@"
