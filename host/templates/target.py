"""The CPUs the host templates generate code for: this host (its triple, CPU name and features, as llvmlite
reports them) and the ARM boards a VTA deployment runs its host layers on (AArch64, ARMv7 with NEON).

The host's kernels are JIT-compiled in this process (host.jit); any target's are compiled to
object code (``object_code``), which is how the ARM code generation is checked on an x86 machine and what a
board's RPC server does for its own CPU.
"""

from __future__ import annotations

import functools
import hashlib
from dataclasses import dataclass


@dataclass(frozen=True)
class CpuTarget:
    """One CPU code is generated for. Tuning records made on it carry ``fingerprint`` (as an accelerator's
    records carry its hardware config's), so a schedule tuned on one CPU is never applied to another."""

    triple: str
    cpu: str
    features: str          # LLVM's "+avx2,+fma,..." (enabled features only)
    vector_bits: int       # the widest float vector register: 512 (AVX-512), 256 (AVX2), 128 (NEON / SSE)

    # what tuning's Task asks of a hardware config: records store cycles at this "clock" (1 cycle = 1 ns)
    CLOCK_MHZ = 1000.0
    TARGET = "cpu"

    @property
    def lanes(self) -> int:
        """float32 lanes of one vector register."""
        return self.vector_bits // 32

    @property
    def arch(self) -> str:
        """"x86" or "arm": which template family suits this CPU (NCHWc for x86, spatial pack for ARM)."""
        return "arm" if self.triple.startswith(("aarch64", "arm")) else "x86"

    @property
    def model(self) -> str:
        return f"{self.cpu} ({self.triple})"

    @property
    def fingerprint(self) -> str:
        digest = hashlib.sha256(f"{self.triple}|{self.cpu}|{self.features}".encode()).hexdigest()[:12]
        return f"cpu:{self.triple}:{self.cpu}:{digest}"

    def to_dict(self) -> dict[str, object]:
        return {"triple": self.triple, "cpu": self.cpu, "features": self.features, "vector_bits": self.vector_bits}

    @staticmethod
    def from_dict(d: dict) -> CpuTarget:
        try:
            t = CpuTarget(str(d["triple"]), str(d["cpu"]), str(d["features"]), int(d["vector_bits"]))
        except (KeyError, TypeError, ValueError) as e:
            raise ValueError(f"a CPU target is {{triple, cpu, features, vector_bits}}, got {d!r}"[:200]) from e
        if t.vector_bits not in (128, 256, 512):
            raise ValueError(f"vector_bits must be 128, 256 or 512, got {t.vector_bits}")
        return t


def _llvm():
    from host.jit import _jit  # the one llvmlite import point (its install hint when missing)

    return _jit().llvm


@functools.cache
def host() -> CpuTarget:
    """This machine's CPU as LLVM sees it (with the features ``VTA_HOST_ISA`` leaves on: host.jit)."""
    from host.jit import _jit

    st = _jit()
    llvm, feats = st.llvm, st.feature_map   # as VTA_HOST_ISA limits them
    enabled = ",".join(sorted(f"+{k}" for k, v in feats.items() if v))
    bits = 512 if feats.get("avx512f") else 256 if feats.get("avx2") or feats.get("avx") else 128
    return CpuTarget(llvm.get_process_triple(), st.cpu, enabled, bits)


# the ARM boards of VTA deployments: a 64-bit Cortex-A53/A72 class board (RK3399, Raspberry Pi 3/4) and the
# Pynq's 32-bit Cortex-A9 with NEON
AARCH64 = CpuTarget("aarch64-unknown-linux-gnu", "cortex-a53", "+neon,+fp-armv8", 128)
ARMV7 = CpuTarget("armv7a-unknown-linux-gnueabihf", "cortex-a9", "+neon,+vfp3", 128)
CROSS = {"aarch64": AARCH64, "armv7": ARMV7}


def object_code(ir: str, t: CpuTarget) -> bytes:
    """Optimised (O3) ELF object code of an LLVM IR module for ``t`` (host.cross compiles for a board the same
    way as the auto-scheduled kernels)."""
    from host.cross import object_code as compile_for
    return compile_for(ir, t)
