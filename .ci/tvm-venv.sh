#!/usr/bin/env bash
# Create the separate virtual environment holding Apache TVM, the real peer of the RPC interop tests
# (tests/test_rpc_*.py, need "tvm-venv"). TVM pins a numpy our mxnet extra cannot share, so it never goes
# into the project's own environment. Idempotent: an existing venv whose `import tvm.rpc` works is kept.
#
#   bash .ci/tvm-venv.sh            # creates ${VTA_TVM_VENV:-~/.cache/vta-stack/tvm-venv}
set -euo pipefail
export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_ROOT_USER_ACTION=ignore
VENV="${VTA_TVM_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/vta-stack/tvm-venv}"
TVM_VERSION="${VTA_TVM_VERSION:-0.27.0.post1}"
PY="$VENV/bin/python"

probe='import tvm.rpc.tracker, tvm.exec.query_rpc_tracker, tvm.exec.rpc_tracker'
if [ -x "$PY" ] && "$PY" -c "$probe" >/dev/null 2>&1; then
    echo "tvm-venv: $VENV already holds apache-tvm ($("$PY" -c 'import tvm; print(tvm.__version__)'))"
    exit 0
fi
rm -rf "$VENV"
mkdir -p "$(dirname "$VENV")"
python3 -m venv "$VENV"
"$PY" -m pip install -q "apache-tvm==$TVM_VERSION" tornado psutil cloudpickle
"$PY" -c "$probe"
echo "tvm-venv: created $VENV with apache-tvm $("$PY" -c 'import tvm; print(tvm.__version__)')"
