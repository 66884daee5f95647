#!/usr/bin/env bash
# A Python 3.10 virtual environment like a Pynq-Z1/Z2 board's PYNQ v3 image (Ubuntu 22.04 "jammy"): Python 3.10,
# jammy's numpy 1.21.5 and cffi 1.15.0 (with pycparser 2.21 and wheel 0.37.1, also jammy's; the image's pynq-venv
# sees them through --system-site-packages), and no llvmlite, which has no armv7l wheel. tests/test_py310.py (need
# "py310-venv") installs the checkout into a directory of its own with this venv's pip (--no-deps: these pins are
# the dependencies) and runs the core and the board path there. Idempotent: a venv holding these versions is kept.
#
#   bash .ci/py310-venv.sh          # creates ${VTA_PY310_VENV:-~/.cache/vta-stack/py310-venv}
#   VTA_PYTHON310=/path/to/python3.10 bash .ci/py310-venv.sh
set -euo pipefail
export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_ROOT_USER_ACTION=ignore
VENV="${VTA_PY310_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/vta-stack/py310-venv}"
PINS=(numpy==1.21.5 cffi==1.15.0 pycparser==2.21 wheel==0.37.1 setuptools==65.5.0)
PY="$VENV/bin/python"

probe='import sys, numpy, cffi, pycparser, wheel, setuptools
assert sys.version_info[:2] == (3, 10), sys.version
have = (numpy.__version__, cffi.__version__, pycparser.__version__, wheel.__version__, setuptools.__version__)
assert have == ("1.21.5", "1.15.0", "2.21", "0.37.1", "65.5.0"), have
try:
    import llvmlite
except ImportError:
    pass
else:
    raise SystemExit("llvmlite is installed")'
if [ -x "$PY" ] && "$PY" -c "$probe" >/dev/null 2>&1; then
    echo "py310-venv: $VENV already holds Python $("$PY" -c 'import platform; print(platform.python_version())'), ${PINS[*]}"
    exit 0
fi

# Python 3.10: $VTA_PYTHON310, else the newest of pyenv's 3.10 builds, else python3.10 on PATH
is310() { [ -x "$1" ] && "$1" -c 'import sys; assert sys.version_info[:2] == (3, 10)' >/dev/null 2>&1; }
PY310="${VTA_PYTHON310:-}"
if [ -z "$PY310" ]; then
    for cand in $(ls -d "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.10.* 2>/dev/null | sort -V -r); do
        if is310 "$cand/bin/python3.10"; then PY310="$cand/bin/python3.10"; break; fi
    done
fi
if [ -z "$PY310" ] && is310 "$(command -v python3.10 || true)"; then PY310="$(command -v python3.10)"; fi
if [ -z "$PY310" ] || ! is310 "$PY310"; then
    echo "py310-venv: no Python 3.10 found (looked at \$VTA_PYTHON310, ${PYENV_ROOT:-$HOME/.pyenv}/versions/3.10.*," \
         "python3.10 on PATH); install one, e.g. pyenv install 3.10" >&2
    exit 1
fi

rm -rf "$VENV"
mkdir -p "$(dirname "$VENV")"
"$PY310" -m venv "$VENV"
"$PY" -m pip install -q "${PINS[@]}"
"$PY" -c "$probe"
echo "py310-venv: created $VENV from $PY310 with ${PINS[*]}"
