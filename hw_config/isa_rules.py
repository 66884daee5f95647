"""VTA's instruction-set rules, written once: sizes, names, which module runs what, the dependency-token
routing, and the limits the field widths impose.

The bit positions live in ``layout.py``; this module holds everything else a reader of an instruction needs.
The encoder (``vta.isa``), the runtime that emits streams, the Python reference simulator, the board latency
model, the trace exporter, the templates and graph_pack import these names; the C simulator includes
``simulator/csrc/vta_isa.h``, which ``python -m hw_config.isa_rules --c-header`` generates from them (a test
keeps it current).
"""

from __future__ import annotations

import numpy as np

from hw_config.layout import (
    ALU_OPCODES,
    ALUOP_IMM_BITS,
    INSN_BITS,
    LOOP_ITER_BITS,
    MEM_TYPES,
    MEMOP_PAD_BITS,
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
