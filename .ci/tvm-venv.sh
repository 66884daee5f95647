#!/usr/bin/env bash
# Create the separate virtual environment holding Apache TVM, the real peer of the RPC interop tests
# (tests/test_rpc_*.py, need "tvm-venv"). TVM pins a numpy our mxnet extra cannot share, so it never goes
# into the project's own environment. Idempotent: an existing venv whose `import tvm.rpc` works is kept.
#
#   bash .ci/tvm-venv.sh            # creates ${VTA_TVM_VENV:-~/.cache/vta-stack/tvm-venv}
set -euo pipefail
export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_ROOT_USER_ACTION=ignore
source "$(dirname "$0")/cached-venv.sh"
VENV="${VTA_TVM_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/vta-stack/tvm-venv}"
TVM_VERSION="${VTA_TVM_VERSION:-0.27.0.post1}"

cached_venv tvm-venv "$VENV" 'import tvm.rpc.tracker, tvm.exec.query_rpc_tracker, tvm.exec.rpc_tracker' \
    'import tvm; print(f"apache-tvm {tvm.__version__}")' \
    "apache-tvm==$TVM_VERSION" tornado psutil cloudpickle
