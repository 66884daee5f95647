#!/usr/bin/env bash
# The ARM cross toolchains and emulators: 32-bit (armv7l, a Pynq-Z1/Z2's Cortex-A9) for the C simulator's armv7 build
# (tests/test_armv7.py) and both for the host templates' ARMv7 and AArch64 kernels run under qemu-user
# (tests/test_host_templates.py); needs "armv7-toolchain" and "aarch64-toolchain". Debian's gcc-arm-linux-gnueabihf,
# gcc-aarch64-linux-gnu, their libc and qemu-user, without recommends.
# Idempotent and quiet: apt runs only when a tool is missing.
#
#   bash .ci/arm-cross.sh
set -euo pipefail
TOOLS=(arm-linux-gnueabihf-gcc qemu-arm aarch64-linux-gnu-gcc qemu-aarch64)
PACKAGES=(gcc-arm-linux-gnueabihf libc6-dev-armhf-cross gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user)
versions() {
    echo "$(arm-linux-gnueabihf-gcc -dumpfullversion) armhf and $(aarch64-linux-gnu-gcc -dumpfullversion) arm64" \
         "cross gcc, $(qemu-aarch64 --version | head -1)"
}
missing=()
for tool in "${TOOLS[@]}"; do
    command -v "$tool" >/dev/null || missing+=("$tool")
done
if [ ${#missing[@]} -eq 0 ]; then
    echo "arm-cross: already installed: $(versions)"
    exit 0
fi
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
log="$(mktemp)"
trap 'rm -f "$log"' EXIT
if ! { $SUDO apt-get update -qq && $SUDO apt-get install -y -qq --no-install-recommends "${PACKAGES[@]}"; } \
        >"$log" 2>&1; then
    cat "$log" >&2
    echo "arm-cross: apt-get could not install ${PACKAGES[*]} (missing: ${missing[*]})" >&2
    exit 1
fi
echo "arm-cross: installed $(versions)"
