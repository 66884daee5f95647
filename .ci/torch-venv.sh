#!/usr/bin/env bash
# A virtual environment with PyTorch, to export models as users do (docs/pytorch.md, tests/test_pytorch_doc.py).
# torch is pinned (never unpinned: a plain `torch` takes a CUDA build of several GB); 2.13.0's CPU wheel is on
# this kind of machine's disk, where pip finds it. onnxscript is what torch.onnx.export's default exporter needs.
# Idempotent: a venv that imports torch and onnxscript is kept.
#
#   bash .ci/torch-venv.sh          # creates ${VTA_TORCH_VENV:-~/.cache/vta-stack/torch-venv}
set -euo pipefail
export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_ROOT_USER_ACTION=ignore
source "$(dirname "$0")/cached-venv.sh"
VENV="${VTA_TORCH_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/vta-stack/torch-venv}"

cached_venv torch-venv "$VENV" 'import torch, onnxscript, numpy; assert torch.__version__.startswith("2.13.0")' \
    'import torch, onnxscript, onnx; print(f"torch {torch.__version__}, onnxscript {onnxscript.__version__}, onnx {onnx.__version__}")' \
    "torch==2.13.0" "onnxscript==0.7.2" numpy
