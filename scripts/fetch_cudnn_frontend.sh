#!/usr/bin/env bash
# fetch_cudnn_frontend.sh — puts NVIDIA's header-only cudnn-frontend (C++ graph API over cuDNN 9,
# MIT licence) into .deps/cudnn_frontend/include for the CUDA build's flash attention:
#   cmake ... -DGANTRY_BACKEND=cuda -DGANTRY_CUDNN_FRONTEND_DIR=$PWD/.deps/cudnn_frontend/include
# It takes the headers out of the nvidia-cudnn-frontend wheel (pip download, no install).
set -euo pipefail
version="${1:-1.32.0}"
root="$(cd "$(dirname "$0")/.." && pwd)"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
python3 -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 \
  --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
  -d "$tmp" "nvidia-cudnn-frontend==${version}"
mkdir -p "$root/.deps/cudnn_frontend"
python3 - "$tmp" "$root/.deps/cudnn_frontend" <<'PY'
import pathlib, sys, zipfile
wheel = next(pathlib.Path(sys.argv[1]).glob("*.whl"))
with zipfile.ZipFile(wheel) as z:
    for name in z.namelist():
        if name.startswith("include/"):
            z.extract(name, sys.argv[2])
PY
echo "cudnn-frontend ${version} headers in $root/.deps/cudnn_frontend/include"
