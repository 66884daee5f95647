#!/usr/bin/env bash
# The ARM cross toolchains and emulators: 32-bit (armv7l, a Pynq-Z1/Z2's Cortex-A9) for the C simulator's armv7 build
# (tests/test_armv7.py) and both for the host templates' ARMv7 and AArch64 kernels run under qemu-user
# (tests/test_host_templates.py); needs "armv7-toolchain" and "aarch64-toolchain". Debian's gcc-arm-linux-gnueabihf,
# gcc-aarch64-linux-gnu, their libc and qemu-user, without recommends.
# Idempotent and quiet: apt runs only when a tool is missing.
#
#   bash .ci/arm-cross.sh
set -euo pipefail
source "$(dirname "$0")/apt-install.sh"
TOOLS=(arm-linux-gnueabihf-gcc qemu-arm aarch64-linux-gnu-gcc qemu-aarch64)
PACKAGES=(gcc-arm-linux-gnueabihf libc6-dev-armhf-cross gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user)
versions() {
    echo "$(arm-linux-gnueabihf-gcc -dumpfullversion) armhf and $(aarch64-linux-gnu-gcc -dumpfullversion) arm64" \
         "cross gcc, $(qemu-aarch64 --version | head -1)"
}
absent() {   # the tools of "$@" not on PATH, one a line
    local tool
    for tool in "$@"; do
        command -v "$tool" >/dev/null || echo "$tool"
    done
}
mapfile -t missing < <(absent "${TOOLS[@]}")
if [ ${#missing[@]} -eq 0 ]; then
    echo "arm-cross: already installed: $(versions)"
    exit 0
fi
apt_install arm-cross "${PACKAGES[@]}"
mapfile -t still < <(absent "${missing[@]}")
if [ ${#still[@]} -ne 0 ]; then
    echo "arm-cross: apt-get installed ${PACKAGES[*]}, but ${still[*]} is still not on PATH ($PATH)" >&2
    exit 1
fi
echo "arm-cross: installed $(versions)"
