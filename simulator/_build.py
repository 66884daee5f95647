"""cffi (API mode) build of the C simulator; run by setup.py through ``cffi_modules``.

Compiler flags: -O3 and -march=native so the GEMM inner loops use the host's SIMD (every install
compiles on the machine that runs it). Set ``VTA_SIM_PORTABLE=1`` to build without -march=native,
e.g. for a wheel meant for other machines.
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

extra = ["-O3", "-std=c99", "-Wall", "-Wextra", "-fno-strict-aliasing"]
if os.environ.get("VTA_SIM_PORTABLE") != "1":
    extra.append("-march=native")

ffibuilder.set_source(
    "simulator._vta_sim",
    '#include "vta_sim.h"',
    sources=[os.path.relpath(CSRC / "vta_sim.c")],
    include_dirs=[os.path.relpath(CSRC)],
    extra_compile_args=extra,
)

if __name__ == "__main__":
    ffibuilder.compile(verbose=True)
