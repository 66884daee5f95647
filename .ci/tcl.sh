#!/usr/bin/env bash
# tclsh, for tests/test_vivado.py: it runs the Tcl scripts of `vta hw vivado` with stub Vivado commands
# (tests/vivado_stub.tcl); need "tclsh". Debian's tcl package, without recommends.
# Idempotent and quiet: apt runs only when tclsh is missing.
#
#   bash .ci/tcl.sh
set -euo pipefail
source "$(dirname "$0")/apt-install.sh"
if command -v tclsh >/dev/null; then
    echo "tcl: already installed: tclsh $(echo 'puts [info patchlevel]' | tclsh)"
    exit 0
fi
apt_install tcl tcl
if ! command -v tclsh >/dev/null; then
    echo "tcl: apt-get installed tcl, but tclsh is not on PATH ($PATH)" >&2
    exit 1
fi
echo "tcl: installed tclsh $(echo 'puts [info patchlevel]' | tclsh)"
