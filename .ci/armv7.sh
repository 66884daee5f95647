#!/usr/bin/env bash
# The 32-bit ARM (armv7l: Pynq-Z1/Z2) cross toolchain and emulator for the C simulator's armv7 build
# (tests/test_armv7.py, need "armv7-toolchain"): Debian's gcc-arm-linux-gnueabihf and qemu-user.
# Idempotent and quiet: apt runs only when a tool is missing.
#
#   bash .ci/armv7.sh
set -euo pipefail
if command -v arm-linux-gnueabihf-gcc >/dev/null && command -v qemu-arm >/dev/null; then
    echo "armv7: $(arm-linux-gnueabihf-gcc -dumpfullversion) cross gcc and qemu-arm already installed"
    exit 0
fi
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
log="$(mktemp)"
trap 'rm -f "$log"' EXIT
if ! { $SUDO apt-get update -qq && $SUDO apt-get install -y -qq --no-install-recommends gcc-arm-linux-gnueabihf \
        libc6-dev-armhf-cross qemu-user; } >"$log" 2>&1; then
    cat "$log" >&2
    echo "armv7: apt-get could not install gcc-arm-linux-gnueabihf and qemu-user" >&2
    exit 1
fi
echo "armv7: installed $(arm-linux-gnueabihf-gcc -dumpfullversion) cross gcc and $(qemu-arm --version | head -1)"
