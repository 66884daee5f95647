"""VTA's instruction-set rules, written once: sizes, names, which module runs what, the dependency-token
routing, and the limits the field widths impose.

The bit positions live in ``layout.py``; this module holds everything else a reader of an instruction needs.
The encoder (``vta.isa``), the runtime that emits streams, the Python reference simulator, the board latency
model, the trace exporter, the templates and graph_pack import these names; the C simulator includes
``simulator/csrc/vta_isa.h``, which ``python -m hw_config.isa_rules --c-header`` generates from them (a test
keeps it current).
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

from hw_config.config import MAX_LOG_DEPTH, sim_param_ranges
from hw_config.layout import (
    ALU_OPCODES,
    ALUOP_IMM_BITS,
    INSN_BITS,
    LOOP_ITER_BITS,
    MEM_TYPES,
    MEMOP_ID_BITS,
    MEMOP_PAD_BITS,
    MEMOP_SIZE_BITS,
    MEMOP_STRIDE_BITS,
    OPCODES,
    UOP_BITS,
)

INSN_BYTES = INSN_BITS // 8
UOP_BYTES = UOP_BITS // 8

OPCODE_NAMES = {v: k for k, v in OPCODES.items()}
MEM_TYPE_NAMES = {v: k for k, v in MEM_TYPES.items()}
ALU_OPCODE_NAMES = {v: k for k, v in ALU_OPCODES.items()}

# What LOAD and STORE may name: every SRAM but OUT is loadable; STORE reads the accumulators as OUT.
LOAD_MEM_TYPES = tuple(MEM_TYPES[n] for n in ("UOP", "WGT", "INP", "ACC", "ACC_8BIT"))
STORE_MEM_TYPES = (MEM_TYPES["OUT"],)

# The three modules (their index is the C simulator's MOD_* number) and the four token queues between them
# (index = C's Q_*): l2g load->compute, g2l compute->load, s2g store->compute, g2s compute->store.
MODULES = ("load", "compute", "store")
QUEUES = ("l2g", "g2l", "s2g", "g2s")
QUEUE_BETWEEN = {("load", "compute"): "l2g", ("compute", "load"): "g2l", ("store", "compute"): "s2g",
                 ("compute", "store"): "g2s"}

DEP_FLAGS = ("pop_prev_dep", "pop_next_dep", "push_prev_dep", "push_next_dep")
# The queue each dependency flag pops or pushes in each module (None: the module has no such queue, so no
# VTA compiler sets the flag there). "prev"/"next" are the neighbours in the order load, compute, store.
DEP_QUEUES: dict[str, dict[str, str | None]] = {
    "load": {"pop_prev_dep": None, "pop_next_dep": "g2l", "push_prev_dep": None, "push_next_dep": "l2g"},
    "compute": {"pop_prev_dep": "l2g", "pop_next_dep": "s2g", "push_prev_dep": "g2l", "push_next_dep": "g2s"},
    "store": {"pop_prev_dep": "g2s", "pop_next_dep": None, "push_prev_dep": "s2g", "push_next_dep": None},
}

# Limits the fixed field widths impose on programs (what a template must stay within).
LOOP_MAX = (1 << LOOP_ITER_BITS) - 1            # iter_out / iter_in
PAD_MAX = (1 << MEMOP_PAD_BITS) - 1             # zero rows or columns one LOAD inserts on one side
IMM_MIN, IMM_MAX = -(1 << (ALUOP_IMM_BITS - 1)), (1 << (ALUOP_IMM_BITS - 1)) - 1   # ALU immediate
SHIFT_MAX = 31                                  # the simulator clamps shift amounts to 31 (docs/simulator.md)


def module_of(opcode: int, memory_type: int = 0) -> str:
    """The module that executes an instruction, as VTA's fetch routes it: LOAD of INP/WGT goes to the load
    module, STORE to the store module, everything else (LOAD UOP/ACC/ACC_8BIT, GEMM, ALU, FINISH) to compute."""
    if opcode == OPCODES["STORE"]:
        return "store"
    if opcode == OPCODES["LOAD"] and memory_type in (MEM_TYPES["INP"], MEM_TYPES["WGT"]):
        return "load"
    return "compute"


def module_indices(opcodes: np.ndarray, memory_types: np.ndarray) -> np.ndarray:
    """``module_of`` over arrays, as indices into ``MODULES`` (int64)."""
    op, mt = np.asarray(opcodes), np.asarray(memory_types)
    out = np.full(op.shape, MODULES.index("compute"), dtype=np.int64)
    out[op == OPCODES["STORE"]] = MODULES.index("store")
    out[(op == OPCODES["LOAD"]) & ((mt == MEM_TYPES["INP"]) | (mt == MEM_TYPES["WGT"]))] = MODULES.index("load")
    return out


def queue_table() -> np.ndarray:
    """(module, flag) -> queue index, -1 where the module has no such queue: ``DEP_QUEUES`` as numbers."""
    return np.array([[QUEUES.index(DEP_QUEUES[m][f]) if DEP_QUEUES[m][f] else -1 for f in DEP_FLAGS]
                     for m in MODULES], dtype=np.int64)


def dep_flag(module: str, other: str, action: str) -> str:
    """The flag with which ``module`` pops (``action`` "pop") or pushes ("push") a token from / to ``other``."""
    queue = QUEUE_BETWEEN[(other, module)] if action == "pop" else QUEUE_BETWEEN[(module, other)]
    for flag in DEP_FLAGS:
        if flag.startswith(action) and DEP_QUEUES[module][flag] == queue:
            return flag
    raise ValueError(f"{module} has no queue to {action} with {other}")


def dep_operation(module: str, flag: str) -> str | None:
    """What ``flag`` does in ``module`` as text ("pop g2l", "push l2g"), None where the module has no such queue."""
    queue = DEP_QUEUES[module][flag]
    return f"{flag.split('_')[0]} {queue}" if queue else None


# ------------------------------------------------------------------------------------------------------------
# the C simulator's view: simulator/csrc/vta_isa.h

C_HEADER = "simulator/csrc/vta_isa.h"
# vta_params_t's scalar members in declaration order (simulator/csrc/vta_sim.h) and the HwConfig attribute
# each one carries; simulator/params.py fills the struct in this order.
SIM_PARAMS = (("batch", "BATCH"), ("block_in", "BLOCK_IN"), ("block_out", "BLOCK_OUT"),
              ("uop_depth", "UOP_BUFF_DEPTH"), ("inp_depth", "INP_BUFF_DEPTH"), ("wgt_depth", "WGT_BUFF_DEPTH"),
              ("acc_depth", "ACC_BUFF_DEPTH"), ("bus_bytes", "BUS_BYTES"), ("dram_latency", "DRAM_LATENCY"),
              ("burst_beats", "DMA_BURST_BEATS"), ("burst_gap", "DMA_BURST_GAP"), ("gemm_ii", "GEMM_II"),
              ("alu_ii", "ALU_II"), ("compute_latency", "COMPUTE_LATENCY"),
              ("insn_queue_depth", "INSN_QUEUE_DEPTH"), ("token_queue_depth", "TOKEN_QUEUE_DEPTH"))
# Shapes, depths and the bus width: C runs any positive value up to hw_config's highest (the sanitizer driver,
# tests/c/hostile.c, runs odd shapes that no config has), where hw_config takes powers of two only.
SIM_ANY_SHAPE = ("BATCH", "BLOCK_IN", "BLOCK_OUT", "UOP_BUFF_DEPTH", "INP_BUFF_DEPTH", "WGT_BUFF_DEPTH",
                 "ACC_BUFF_DEPTH", "BUS_BYTES")


def sim_param_limits() -> dict[str, tuple[int, int]]:
    """C member -> (lowest, highest) value ``vta_sim_create`` accepts: hw_config's range (``sim_param_ranges``),
    from 1 for the members of ``SIM_ANY_SHAPE``."""
    ranges = sim_param_ranges()
    return {member: (1 if attr in SIM_ANY_SHAPE else ranges[attr][0], ranges[attr][1]) for member, attr in SIM_PARAMS}


def _c_enum(prefix: str, names: dict[str, int], count: str, extra: str = "") -> str:
    items = ", ".join(f"{prefix}{name.upper()} = {value}" for name, value in names.items())
    return f"enum {{ {items}, {count} = {max(names.values()) + 1}{extra} }};"


def _mask(values: tuple[int, ...]) -> str:
    return f"0x{sum(1 << v for v in values):02x}u"


def _c_strings(name: str, count: str, values: dict[int, str]) -> str:
    quoted = ", ".join(f'"{values[i]}"' for i in sorted(values))
    return f"static const char *const {name}[{count}] = {{{quoted}}};"


def _allowed(names: dict[int, str], values: tuple[int, ...] | None = None) -> str:
    return ", ".join(f"{v} {names[v]}" for v in sorted(names) if values is None or v in values)


def c_header() -> str:
    """The text of ``simulator/csrc/vta_isa.h``: the rules above as C enums, tables and limits."""
    for numbering in (OPCODES, MEM_TYPES, ALU_OPCODES):   # C indexes its name tables by these numbers
        assert sorted(numbering.values()) == list(range(len(numbering))), numbering
    mem_values = range(1 << MEMOP_ID_BITS)
    module_of_rows = ",\n".join(
        f"    /* {name:<6} */ {{{', '.join('MOD_' + module_of(op, mt).upper() for mt in mem_values)}}}"
        for name, op in OPCODES.items())
    routes = ",\n".join(
        f"    /* {m:<7} */ {{{', '.join('Q_' + q.upper() if q else 'NO_QUEUE' for q in DEP_QUEUES[m].values())}}}"
        for m in MODULES)
    allowed_flags = {i: ", ".join(f[:-4] for f, q in DEP_QUEUES[m].items() if q) for i, m in enumerate(MODULES)}
    limits = sim_param_limits()
    ranges = sim_param_ranges()
    limit_rows = " \\\n".join(
        f"  X({member}, {limits[member][0]}u, {limits[member][1]}u)"
        + (" " * (28 - len(member) - len(str(limits[member][0])) - len(str(limits[member][1]))))
        + f"/* hw_config: {ranges[attr][0]}..{ranges[attr][1]}{', powers of two' if attr in SIM_ANY_SHAPE else ''} */"
        for member, attr in SIM_PARAMS)
    lines = [
        "/* VTA's instruction-set rules for the C simulator: GENERATED from hw_config/isa_rules.py (and the ranges of",
        " * hw_config/config.py) by `python -m hw_config.isa_rules --c-header > simulator/csrc/vta_isa.h`; do not",
        " * edit. tests/test_isa_rules.py checks that this file is current and that vta_sim.c obeys it. */",
        "#ifndef VTA_ISA_H",
        "#define VTA_ISA_H",
        "",
        f"#define VTA_INSN_BYTES {INSN_BYTES}",
        f"#define VTA_UOP_BYTES {UOP_BYTES}",
        "",
        "/* Numbering shared with VTA (hw_config/layout.py). */",
        _c_enum("OP_", OPCODES, "NUM_OPCODES"),
        _c_enum("MEM_", MEM_TYPES, "NUM_MEM_TYPES"),
        _c_enum("ALU_", ALU_OPCODES, "NUM_ALU_OPCODES"),
        f"#define NUM_MEM_IDS {1 << MEMOP_ID_BITS} /* values the {MEMOP_ID_BITS}-bit memory_type field holds */",
        _c_strings("OP_NAMES", "NUM_OPCODES", OPCODE_NAMES),
        _c_strings("MEM_NAMES", "NUM_MEM_TYPES", MEM_TYPE_NAMES),
        f'#define VTA_OPCODES_ALLOWED "{_allowed(OPCODE_NAMES)}"',
        f'#define VTA_ALU_OPCODES_ALLOWED "{_allowed(ALU_OPCODE_NAMES)}"',
        f'#define VTA_LOAD_MEM_ALLOWED "{_allowed(MEM_TYPE_NAMES, LOAD_MEM_TYPES)}"',
        f'#define VTA_STORE_MEM_ALLOWED "{_allowed(MEM_TYPE_NAMES, STORE_MEM_TYPES)}"',
        "/* bit t set: memory type t is allowed on LOAD / on a STORE that moves data */",
        f"#define VTA_LOAD_MEM_MASK {_mask(LOAD_MEM_TYPES)}",
        f"#define VTA_STORE_MEM_MASK {_mask(STORE_MEM_TYPES)}",
        "",
        "/* The modules and the token queues between them (l2g load->compute, g2l compute->load, s2g store->compute,",
        " * g2s compute->store); CAUSE_DISPATCH follows the pop and push causes of each queue (vta_stats_t.stalls). */",
        _c_enum("MOD_", {m: i for i, m in enumerate(MODULES)}, "NUM_MODULES"),
        _c_enum("Q_", {q: i for i, q in enumerate(QUEUES)}, "NUM_QUEUES", f", CAUSE_DISPATCH = {2 * len(QUEUES)}"),
        _c_enum("DEP_", {f[:-4]: i for i, f in enumerate(DEP_FLAGS)}, "NUM_DEP_FLAGS"),
        "#define NO_QUEUE 0xff",
        _c_strings("MODULE_NAMES", "NUM_MODULES", dict(enumerate(MODULES))),
        _c_strings("QUEUE_NAMES", "NUM_QUEUES", dict(enumerate(QUEUES))),
        _c_strings("DEP_FLAG_NAMES", "NUM_DEP_FLAGS", dict(enumerate(DEP_FLAGS))),
        "/* the flags a module may set */",
        _c_strings("DEP_FLAGS_ALLOWED", "NUM_MODULES", allowed_flags),
        "",
        "/* The module that executes an instruction: MODULE_OF[opcode][memory_type] (hw_config.isa_rules.module_of). */",
        "static const unsigned char MODULE_OF[NUM_OPCODES][NUM_MEM_IDS] = {",
        module_of_rows,
        "};",
        "/* The queue each dependency flag (pop_prev, pop_next, push_prev, push_next) pops or pushes in each module;",
        " * NO_QUEUE: the module has no such queue and the flag is refused (DEP_QUEUES). */",
        "static const unsigned char DEP_QUEUE[NUM_MODULES][NUM_DEP_FLAGS] = {",
        routes,
        "};",
        "",
        "/* Widths of the fixed instruction fields, and the widest uop_end (MAX_LOG_DEPTH + 1 bits). */",
        f"#define VTA_MEMOP_ID_BITS {MEMOP_ID_BITS}",
        f"#define VTA_LOOP_ITER_BITS {LOOP_ITER_BITS}",
        f"#define VTA_MEMOP_SIZE_BITS {MEMOP_SIZE_BITS}",
        f"#define VTA_MEMOP_STRIDE_BITS {MEMOP_STRIDE_BITS}",
        f"#define VTA_MEMOP_PAD_BITS {MEMOP_PAD_BITS}",
        f"#define VTA_UOP_END_MAX_BITS {MAX_LOG_DEPTH + 1}",
        f"#define VTA_SHIFT_MAX {SHIFT_MAX} /* shift amounts clamp to this */",
        "",
        "/* X(member, lowest, highest) of each scalar of vta_params_t that vta_sim_create accepts: hw_config's",
        " * ranges, which keep every duration below 2^60 so cycle arithmetic cannot wrap. Shapes, depths and the bus",
        " * width may be any positive value up to hw_config's highest (the sanitizer driver runs odd ones). */",
        "#define VTA_PARAM_LIMITS(X) \\",
        limit_rows,
        "",
        "#endif",
    ]
    return "\n".join(lines) + "\n"


def _main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m hw_config.isa_rules", description="Print the ISA rules for C.")
    parser.add_argument("--c-header", action="store_true", required=True,
                        help=f"print {C_HEADER} (the C simulator's enums, routing tables and limits)")
    parser.parse_args(argv)
    sys.stdout.write(c_header())
    return 0


if __name__ == "__main__":
    raise SystemExit(_main())
