#!/usr/bin/env bash
# Installs what gantry's demo and test suite need on Debian 12/13: system packages (Slurm,
# munge, Open MPI, compilers, BLAS) and a virtual environment .venv with gantry and its
# dev/test dependencies. Safe to run again: it only installs what is missing.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"

if [ "$(id -u)" -eq 0 ]; then sudo=(); else sudo=(sudo); fi

apt_packages=(
  slurm-wlm slurm-client libslurm-dev munge
  openmpi-bin libopenmpi-dev libpmix-dev
  build-essential cmake pkg-config libopenblas-dev
  python3-venv python3-dev
)
missing=()
for pkg in "${apt_packages[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if [ "${#missing[@]}" -gt 0 ]; then
  echo "setup: installing system packages: ${missing[*]}"
  "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -qq
  "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
    "${missing[@]}" >/dev/null
fi

python=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  echo "setup: creating .venv"
  "$python" -m venv .venv
fi
stamp=.venv/.gantry-setup-stamp
want=$(cat pyproject.toml scripts/setup.sh | sha256sum | cut -d' ' -f1)
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  echo "setup: installing gantry and its dependencies into .venv"
  .venv/bin/python -m pip install -q --upgrade pip >/dev/null
  # torch is pinned: 2.13.0 is a CPU build; a looser pin pulls a multi-GB CUDA build.
  .venv/bin/python -m pip install -q -e ".[dev]" "torch==2.13.0"
  echo "$want" >"$stamp"
fi
echo "setup: ready ($(.venv/bin/gantry --version), $(slurmd -V))"
