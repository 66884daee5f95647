"""The C simulator's parameter block (``vta_params_t``) as a flat list of uint32, from a config.

Shared by the cffi wrapper and by the sanitizer test driver, which reads the numbers from a file
(``python -m simulator.params PRESET``) so it can run without Python in the process.
"""

from __future__ import annotations

import sys

from hw_config import HwConfig, load_config
from hw_config.isa_rules import SIM_PARAMS

SCALARS = tuple(attr for _, attr in SIM_PARAMS)  # the struct's scalar members, in order, as HwConfig attributes
FORMATS = ("mem", "gemm", "alu", "uop")  # the field arrays, in struct order


def param_values(cfg: HwConfig) -> list[int]:
    """The struct's uint32 members in declaration order: scalars, then (offset, width) per field."""
    values = [getattr(cfg, name) for name in SCALARS]
    for fmt in FORMATS:
        for f in cfg.insn_formats[fmt].fields:
            values += [f.offset, f.width]
    return values


if __name__ == "__main__":
    print(" ".join(str(v) for v in param_values(load_config(sys.argv[1] if len(sys.argv) > 1 else None))))
