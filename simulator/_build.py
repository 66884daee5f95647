"""cffi (API mode) build of the C simulator; run by setup.py through ``cffi_modules``.

Compiler flags: -O3 for the host's baseline ISA, no -march: the GEMM kernels for AVX2, AVX-512 and AVX-512 VNNI
are compiled into the same library through function target attributes, the AMX ones in their own file with the
AMX target enabled there only (csrc/vta_amx_native.c), all chosen at run time by what the running CPU supports (``VTA_SIM_KERNEL`` forces one; docs/simulator.md, "Kernel paths"), so a build copied to
another x86-64 machine still runs. Set ``VTA_SIM_PORTABLE=1`` to build without any x86 intrinsics (the generic C
kernels only, as on a non-x86 host).
"""

import os
import re
from pathlib import Path

from cffi import FFI

CSRC = Path(__file__).resolve().parent / "csrc"
HEADER = (CSRC / "vta_sim.h").read_text()

ffibuilder = FFI()
# cdef takes plain declarations: drop the preprocessor lines of the header.
ffibuilder.cdef(re.sub(r"(?m)^#.*$", "", HEADER))

extra = ["-O3", "-std=c99", "-Wall", "-Wextra", "-fno-strict-aliasing", "-pthread"]
include_dirs = [os.path.relpath(CSRC)]
if os.environ.get("VTA_SIM_PORTABLE") == "1":
    extra.append("-DVTA_SIM_PORTABLE")
if os.environ.get("VTA_SIM_EMULATE_AVX512") == "1":  # tests only: AVX-512 kernels over SIMDe (vta_sim.c)
    import simde_py

    extra.append("-DVTA_SIM_EMULATE_AVX512")
    include_dirs.append(simde_py.get_include())

ffibuilder.set_source(
    "simulator._vta_sim",
    '#include "vta_sim.h"',
    sources=[os.path.relpath(c) for c in sorted(CSRC.glob("*.c"))],   # every C file there is the simulator's
    depends=[os.path.relpath(h) for h in sorted(CSRC.glob("*.h"))],   # a header edit rebuilds too
    include_dirs=include_dirs,
    extra_compile_args=extra,
    extra_link_args=["-pthread"],  # the GEMM threads (docs/simulator.md, "Threads")
)

if __name__ == "__main__":
    ffibuilder.compile(verbose=True)
