#!/usr/bin/env bash
# tclsh, for tests/test_vivado.py: it runs the Tcl scripts of `vta hw vivado` with stub Vivado commands
# (tests/vivado_stub.tcl); need "tclsh". Debian's tcl package, without recommends.
# Idempotent and quiet: apt runs only when tclsh is missing.
#
#   bash .ci/tcl.sh
set -euo pipefail
if command -v tclsh >/dev/null; then
    echo "tcl: already installed: tclsh $(echo 'puts [info patchlevel]' | tclsh)"
    exit 0
fi
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
log="$(mktemp)"
trap 'rm -f "$log"' EXIT
if ! { $SUDO apt-get update -qq && $SUDO apt-get install -y -qq --no-install-recommends tcl; } >"$log" 2>&1; then
    cat "$log" >&2
    echo "tcl: apt-get could not install tcl" >&2
    exit 1
fi
echo "tcl: installed tclsh $(echo 'puts [info patchlevel]' | tclsh)"
