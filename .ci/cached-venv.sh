# Sourced by the .ci scripts that make a virtual environment of their own (tvm-venv.sh, onnx-venv.sh).
#
#   cached_venv NAME DIR PROBE DESCRIBE PIP_ARGS...
#
# Keeps DIR when PROBE (Python code) runs in its python; else makes it anew with python3 -m venv, installs PIP_ARGS
# and checks PROBE there. DESCRIBE (Python code printing a line) says what the venv holds, in the log.
cached_venv() {
    local name="$1" venv="$2" probe="$3" describe="$4"
    shift 4
    local py="$venv/bin/python"
    if [ -x "$py" ] && "$py" -c "$probe" >/dev/null 2>&1; then
        echo "$name: $venv already holds $("$py" -c "$describe")"
        return 0
    fi
    rm -rf "$venv"
    mkdir -p "$(dirname "$venv")"
    python3 -m venv "$venv"
    "$py" -m pip install -q "$@"
    "$py" -c "$probe"
    echo "$name: created $venv with $("$py" -c "$describe")"
}
