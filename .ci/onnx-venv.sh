#!/usr/bin/env bash
# A virtual environment with what `pip install 'vta-stack[onnx]'` alone resolves to today: the newest onnx,
# onnxruntime and protobuf (and numpy), beside the core's cffi and llvmlite. The test extras pin protobuf < 6
# through pynq, so the newest protobuf never runs in the project's own environment; protobuf 7 once broke every
# ONNX load there (FieldDescriptor.label was dropped). tests/test_onnx_newest.py (need "onnx-venv") installs the
# checkout into a directory of its own with this venv's pip (--no-deps) and runs the ONNX path there.
# Idempotent: a venv that imports onnx, onnxruntime and google.protobuf is kept (delete it to take newer releases).
#
#   bash .ci/onnx-venv.sh           # creates ${VTA_ONNX_VENV:-~/.cache/vta-stack/onnx-venv}
set -euo pipefail
export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_ROOT_USER_ACTION=ignore
source "$(dirname "$0")/cached-venv.sh"
VENV="${VTA_ONNX_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/vta-stack/onnx-venv}"

# the [onnx] extra's and the core's requirements as pyproject.toml states them, nothing pinned further
cached_venv onnx-venv "$VENV" 'import onnx, onnxruntime, google.protobuf, numpy, cffi, llvmlite, setuptools' \
    'import onnx, onnxruntime, google.protobuf as p, numpy; print(f"onnx {onnx.__version__}, onnxruntime {onnxruntime.__version__}, protobuf {p.__version__}, numpy {numpy.__version__}")' \
    "onnx>=1.16" "onnxruntime>=1.18" "numpy>=1.21" "cffi>=1.15" llvmlite setuptools wheel
