"""What each implementation of VTA can execute: its capability set, part of the config (key ``CAPABILITIES``).

The ISA is one table (``layout``), but VTA's backends implement different parts of it. The functional simulator
(fsim) does everything the table can express; the HLS IP behind VTA's bitstreams has no ALU MUL, fills only the
micro-op and accumulator SRAMs from the compute module (an ACC_8BIT load is silently skipped), copies micro-ops as
one row, and pads only some loads; the bitstreams VTA published for the Pynq (HW_VER 0.0.1/0.0.2) were built before
the HLS source learnt padded ACC loads (apache/tvm-vta 6096ca0, Dec 2020). A program that uses a missing feature
passes every simulation and computes garbage on the board, so the compiler never emits one for such a config,
``vta.program_check`` refuses one before launch, and ``Simulator(cfg, strict=True)`` refuses one too.

``violations(insns, cfg)`` is the one check all three use: vectorised over a whole stream, lowest layer.

One difference is not a missing feature but a different memory: what STORE reads (``out_buffer``). The C simulator,
the reference executor and the RTL all do what the set's hardware does there; ``Simulator(cfg, strict=True)``
refuses a STORE whose result would differ from VTA's functional simulator's (docs/simulator.md, "The output
buffer"): that needs the micro-ops and the order of execution, which a check of the stream alone does not have.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hw_config.layout import ALU_OPCODES, MEM_TYPES, OPCODE_BITS, OPCODES

_ALL_ALU = frozenset(ALU_OPCODES)
_HLS_ALU = frozenset(("MIN", "MAX", "ADD", "SHR"))
_PADS = ("y_pad_0", "y_pad_1", "x_pad_0", "x_pad_1")
# Capabilities.out_buffer's values, in the C simulator's numbering (vta_sim_set_out_buffer)
OUT_BUFFER_MODES = ("mirror", "hls", "chisel")


@dataclass(frozen=True)
class Capabilities:
    """One implementation's share of the ISA."""

    name: str
    alu_opcodes: frozenset[str]     # ALU opcodes it computes as the ISA defines them
    compute_loads: frozenset[str]   # memory types a LOAD routed to the compute module fills (UOP, ACC, ACC_8BIT)
    padded_loads: frozenset[str]    # memory types whose LOAD honours y/x padding
    uop_load_rows: bool             # a UOP LOAD may span y_size > 1 rows (HLS copies x_size micro-ops only)
    source: str                     # where the facts come from
    # how an ALU SHR reads its amount: "any" (the ISA's meaning, fsim: b >= 0 shifts right, b < 0 left, by at most
    # SHIFT_MAX); "signed" (VTA's HLS, vta.cc: the low LOG_ACC_WIDTH bits as a signed ap_int, so 16 is -16, a left
    # shift); "unsigned" (VTA's Chisel: the low LOG_ACC_WIDTH bits unsigned, always a right shift)
    shr_amount: str = "any"
    # what STORE reads (docs/hardware.md, "The output buffer"): "mirror" (fsim: the accumulator, narrowed to
    # OUT_WIDTH at the store, so every accumulator write counts, LOAD ACC included); "hls" (vta.cc: an output
    # buffer that only GEMM and ALU write, each micro-op the narrowed result, a GEMM with reset_reg the narrowed
    # acc[dst] + dot product it computed before zeroing acc[dst]); "chisel" (TensorGemm/TensorAlu: as "hls",
    # but a GEMM with reset_reg leaves the output buffer as it was)
    out_buffer: str = "mirror"

    def shr_immediates(self, log_acc_width: int) -> tuple[int, int] | None:
        """The SHR immediates this implementation computes as the ISA defines them ((lo, hi), or None: all)."""
        if self.shr_amount == "signed":
            return -(1 << (log_acc_width - 1)), (1 << (log_acc_width - 1)) - 1
        if self.shr_amount == "unsigned":
            return 0, (1 << log_acc_width) - 1
        return None

    def describe(self) -> str:
        return (f"{self.name}: ALU {', '.join(sorted(self.alu_opcodes, key=ALU_OPCODES.get))}; compute loads "
                f"{', '.join(sorted(self.compute_loads, key=MEM_TYPES.get))}; padded loads "
                f"{', '.join(sorted(self.padded_loads, key=MEM_TYPES.get)) or 'none'}"
                f"{'' if self.uop_load_rows else '; micro-op loads one row'} ({self.source})")


CAPABILITY_SETS: dict[str, Capabilities] = {c.name: c for c in (
    Capabilities("fsim", _ALL_ALU, frozenset(("UOP", "ACC", "ACC_8BIT")),
                 frozenset(("UOP", "WGT", "INP", "ACC", "ACC_8BIT")), True,
                 "VTA's functional simulator, and ours: the whole ISA"),
    Capabilities("vta-hls", _HLS_ALU, frozenset(("UOP", "ACC")), frozenset(("INP", "ACC")), False,
                 "VTA's HLS accelerator as of apache/tvm-vta d4a15f6, hardware/xilinx/src/vta.cc, for bitstreams "
                 "built from it", "signed", "hls"),
    Capabilities("vta-hls-0.0.2", _HLS_ALU, frozenset(("UOP", "ACC")), frozenset(("INP",)), False,
                 "the Pynq bitstreams VTA published, HW_VER 0.0.1/0.0.2, built before the HLS source had "
                 "padded ACC loads (apache/tvm-vta 6096ca0, Dec 2020)", "signed", "hls"),
    Capabilities("vta-chisel", _HLS_ALU, frozenset(("UOP", "ACC")), frozenset(("INP", "ACC")), False,
                 "VTA's Chisel accelerator for de10nano and tsim, where ALU opcode 4 is a left shift, not MUL",
                 "unsigned", "chisel"),
)}


def default_capabilities(target: str, hw_ver: str) -> str:
    """The capability set a config without the key gets: what VTA ships for its TARGET and HW_VER."""
    if target in ("sim", "intelfocl"):
        return "fsim"   # intelfocl's OpenCL kernel implements MUL and ACC_8BIT like fsim
    if target in ("de10nano", "tsim"):
        return "vta-chisel"
    if target == "pynq" and hw_ver in ("0.0.1", "0.0.2"):
        return "vta-hls-0.0.2"
    return "vta-hls"


def violations(insns: np.ndarray, cfg) -> list[tuple[int, str]]:
    """(index, reason) for every instruction of the (N, 16) uint8 stream that ``cfg``'s capability set cannot
    execute as the ISA defines it, in stream order (empty: the implementation runs the whole stream)."""
    caps = cfg.capabilities
    rows = np.asarray(insns, dtype=np.uint8).reshape(-1, 16)
    opcode = rows[:, 0] & ((1 << OPCODE_BITS) - 1)
    found: list[tuple[int, str]] = []
    where = f"capability set {cfg.CAPABILITIES}"
    alu = np.flatnonzero(opcode == OPCODES["ALU"])
    if alu.size:
        fields = cfg.insn_formats["alu"].decode_rows(rows[alu])
        ops = fields["alu_opcode"]
        for name, code in ALU_OPCODES.items():
            if name not in caps.alu_opcodes:
                found += [(int(i), f"ALU {name}: {where} has no ALU {name}") for i in alu[ops == code]]
        limits = caps.shr_immediates(cfg.LOG_ACC_WIDTH)
        if limits is not None and "SHR" in caps.alu_opcodes:
            lo, hi = limits
            imm = fields["imm"].astype(np.int64)
            bad = (ops == ALU_OPCODES["SHR"]) & (fields["use_imm"] != 0) & ((imm < lo) | (imm > hi))
            found += [(int(i), (f"ALU SHR by immediate {int(v)}: {where} reads the amount as the low "
                       f"{cfg.LOG_ACC_WIDTH} bits ({caps.shr_amount}), so only {lo}..{hi} shift as the ISA says"))
                      for i, v in zip(alu[bad], imm[bad], strict=True)]
    mem = np.flatnonzero(opcode == OPCODES["LOAD"])
    if mem.size:
        f = cfg.insn_formats["mem"].decode_rows(rows[mem])
        kind = f["memory_type"]
        moves = f["x_size"] > 0
        padded = np.zeros(mem.size, dtype=bool)
        for p in _PADS:
            padded |= f[p] != 0
        for name in ("INP", "WGT", "UOP", "ACC", "ACC_8BIT"):
            is_type = moves & (kind == MEM_TYPES[name])
            if name in ("UOP", "ACC", "ACC_8BIT") and name not in caps.compute_loads:
                found += [(int(i), f"LOAD {name}: {where} does not load {name} (the load is skipped)")
                          for i in mem[is_type]]
                continue
            if name not in caps.padded_loads:
                found += [(int(i), f"LOAD {name} with padding: {where} ignores padding on {name} loads")
                          for i in mem[is_type & padded]]
        if not caps.uop_load_rows:
            rows_uop = moves & (kind == MEM_TYPES["UOP"]) & (f["y_size"] > 1)
            found += [(int(i), f"LOAD UOP of several rows: {where} copies x_size micro-ops (one row)")
                      for i in mem[rows_uop]]
    return sorted(found)
