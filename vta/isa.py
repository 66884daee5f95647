"""VTA's instruction set as Python objects: encode, decode, disassemble and document.

Everything here is driven by the bit-layout table in ``hw_config.layout`` (``cfg.insn_formats``), so the
field positions exist once and follow the configuration. The dataclasses only name the fields; the table
decides where they go and how wide they are, and ``encode`` refuses any field the table does not have.

Regenerate ``docs/isa.md`` with ``python -m vta.isa --markdown [PRESET] > docs/isa.md``.
"""

from __future__ import annotations

import argparse
import dataclasses
import operator
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from hw_config import ALU_OPCODES, MEM_TYPES, OPCODES, Format, HwConfig, isa_rules, load_config
from hw_config.capabilities import CAPABILITY_SETS
from hw_config.isa_rules import (
    ALU_OPCODE_NAMES,
    DEP_FLAGS,
    INSN_BYTES,
    MEM_TYPE_NAMES,
    MODULES,
    OPCODE_NAMES,
    UOP_BYTES,
    dep_operation,
)

# What each dependency flag does in each module as text ("pop g2l"; None: the module has no such queue, the
# flag is invalid): hw_config.isa_rules.DEP_QUEUES spelled for disassembly and docs/isa.md.
DEP_QUEUES: dict[str, dict[str, str | None]] = {m: {f: dep_operation(m, f) for f in DEP_FLAGS} for m in MODULES}


@dataclass(frozen=True, kw_only=True)
class _Insn:
    """The header every instruction shares: the four dependency-token flags."""

    pop_prev_dep: int = 0
    pop_next_dep: int = 0
    push_prev_dep: int = 0
    push_next_dep: int = 0

    FORMAT: ClassVar[str] = ""
    OPCODE: ClassVar[int] = -1

    @property
    def op(self) -> int:
        return self.OPCODE


@dataclass(frozen=True, kw_only=True)
class MemInsn(_Insn):
    """LOAD or STORE: a 2D strided DMA between DRAM and an SRAM, with zero padding on loads.

    ``dram_base`` and ``x_stride`` count DRAM elements of ``memory_type`` (``cfg.elem_bytes``), ``sram_base``
    counts SRAM entries. ``x_size == 0`` makes the instruction a NOP that only carries its flags.
    """

    opcode: int = OPCODES["LOAD"]
    memory_type: int = 0
    sram_base: int = 0
    dram_base: int = 0
    y_size: int = 0
    x_size: int = 0
    x_stride: int = 0
    y_pad_0: int = 0
    y_pad_1: int = 0
    x_pad_0: int = 0
    x_pad_1: int = 0

    FORMAT: ClassVar[str] = "mem"

    def __post_init__(self) -> None:
        if self.opcode not in (OPCODES["LOAD"], OPCODES["STORE"]):
            raise ValueError(f"MemInsn.opcode={self.opcode!r}: allowed LOAD {OPCODES['LOAD']} "
                             f"or STORE {OPCODES['STORE']}")

    @property
    def op(self) -> int:
        return self.opcode


@dataclass(frozen=True, kw_only=True)
class _LoopInsn(_Insn):
    """The fields GEMM and ALU share: a micro-op range run inside two affine loops."""

    reset_reg: int = 0
    uop_bgn: int = 0
    uop_end: int = 0
    iter_out: int = 0
    iter_in: int = 0
    dst_factor_out: int = 0
    dst_factor_in: int = 0
    src_factor_out: int = 0
    src_factor_in: int = 0


@dataclass(frozen=True, kw_only=True)
class GemmInsn(_LoopInsn):
    """GEMM over micro-ops ``[uop_bgn, uop_end)`` in two affine loops; ``reset_reg`` zeroes ACC instead."""

    wgt_factor_out: int = 0
    wgt_factor_in: int = 0

    FORMAT: ClassVar[str] = "gemm"
    OPCODE: ClassVar[int] = OPCODES["GEMM"]


@dataclass(frozen=True, kw_only=True)
class AluInsn(_LoopInsn):
    """Lane-wise ``acc[dst] = op(acc[dst], imm if use_imm else acc[src])`` over the same loops as GEMM."""

    alu_opcode: int = 0
    use_imm: int = 0
    imm: int = 0

    FORMAT: ClassVar[str] = "alu"
    OPCODE: ClassVar[int] = OPCODES["ALU"]


@dataclass(frozen=True, kw_only=True)
class FinishInsn(_Insn):
    """End of the program (the compute module raises ``done``)."""

    FORMAT: ClassVar[str] = "finish"
    OPCODE: ClassVar[int] = OPCODES["FINISH"]


Insn = MemInsn | GemmInsn | AluInsn | FinishInsn
_CLASS_OF_OPCODE: dict[int, type[_Insn]] = {OPCODES["LOAD"]: MemInsn, OPCODES["STORE"]: MemInsn,
                                             OPCODES["GEMM"]: GemmInsn, OPCODES["ALU"]: AluInsn,
                                             OPCODES["FINISH"]: FinishInsn}


@dataclass(frozen=True)
class Uop:
    """One micro-op: base indices into ACC (dst), INP or ACC (src) and WGT (wgt)."""

    dst_idx: int = 0
    src_idx: int = 0
    wgt_idx: int = 0


# ------------------------------------------------------------------------------------------------------------
# encode / decode

def _field_values(obj: object, what: str) -> dict[str, int]:
    values = {}
    for f in dataclasses.fields(obj):  # type: ignore[arg-type]
        v = getattr(obj, f.name)
        try:
            values[f.name] = operator.index(v)
        except TypeError:
            raise ValueError(f"{what}.{f.name}={v!r}: expected an integer") from None
    return values


def _insn_name(insn: _Insn) -> str:
    return f"{type(insn).__name__} ({OPCODE_NAMES.get(insn.op, insn.op)})"


def encode(insn: Insn, cfg: HwConfig) -> bytes:
    """The 16 bytes of an instruction as VTA's hardware reads them (little-endian 128-bit word)."""
    if not isinstance(insn, _Insn):
        raise TypeError(f"cannot encode {type(insn).__name__}: "
                        "expected MemInsn, GemmInsn, AluInsn or FinishInsn")
    values = _field_values(insn, type(insn).__name__)
    values["opcode"] = insn.op
    try:
        word = cfg.insn_formats[insn.FORMAT].encode(values)
    except ValueError as e:
        raise ValueError(f"{_insn_name(insn)}: {e}") from None
    return word.to_bytes(INSN_BYTES, "little")


def _as_bytes(raw: bytes | bytearray | memoryview | np.ndarray, size: int, what: str) -> bytes:
    data = raw.tobytes() if isinstance(raw, np.ndarray) else bytes(raw)
    if len(data) != size:
        raise ValueError(f"{what}: expected {size} bytes, got {len(data)}")
    return data


def decode(raw16: bytes | bytearray | memoryview | np.ndarray, cfg: HwConfig) -> Insn:
    """The instruction in 16 bytes. Total for opcodes 0-4; bits no field covers are ignored (as in VTA)."""
    word = int.from_bytes(_as_bytes(raw16, INSN_BYTES, "instruction"), "little")
    opcode = word & 0b111
    cls = _CLASS_OF_OPCODE.get(opcode)
    if cls is None:
        allowed = ", ".join(f"{k} {v}" for k, v in OPCODES.items())
        raise ValueError(f"unknown opcode {opcode} (allowed: {allowed})")
    values = cfg.insn_formats[cls.FORMAT].decode(word)
    if cls is not MemInsn:
        del values["opcode"]
    return cls(**values)  # type: ignore[return-value]


def assemble(insns: Iterable[Insn], cfg: HwConfig) -> np.ndarray:
    """An instruction stream as it sits in DRAM: uint8 array of shape (N, 16)."""
    rows = []
    for i, insn in enumerate(insns):
        try:
            rows.append(encode(insn, cfg))
        except ValueError as e:
            raise ValueError(f"instruction {i}: {e}") from None
    return np.frombuffer(b"".join(rows), dtype=np.uint8).reshape(len(rows), INSN_BYTES).copy()


def _rows(insns: np.ndarray | bytes | bytearray | memoryview) -> np.ndarray:
    arr = np.frombuffer(bytes(insns), dtype=np.uint8) if not isinstance(insns, np.ndarray) else insns
    if arr.dtype != np.uint8 or arr.size % INSN_BYTES or arr.ndim not in (1, 2) or (
            arr.ndim == 2 and arr.shape[1] != INSN_BYTES):
        raise ValueError(f"instruction stream: expected uint8 of shape (N, 16) or (16*N,), "
                         f"got {arr.dtype} {arr.shape}")
    return arr.reshape(-1, INSN_BYTES)


def decode_program(insns: np.ndarray | bytes, cfg: HwConfig) -> list[Insn]:
    """Decode a whole stream; an undecodable instruction raises ValueError naming its index."""
    out = []
    for i, row in enumerate(_rows(insns)):
        try:
            out.append(decode(row, cfg))
        except ValueError as e:
            raise ValueError(f"instruction {i}: {e}") from None
    return out


def encode_uop(uop: Uop, cfg: HwConfig) -> int:
    """A micro-op as its 32-bit word."""
    try:
        return cfg.insn_formats["uop"].encode(_field_values(uop, "Uop"))
    except ValueError as e:
        raise ValueError(f"Uop: {e}") from None


def decode_uop(word: int, cfg: HwConfig) -> Uop:
    """The micro-op in a 32-bit word (bits no field covers are ignored)."""
    word = operator.index(word)
    if not 0 <= word < 1 << 32:
        raise ValueError(f"micro-op word {word:#x} does not fit 32 bits")
    return Uop(**cfg.insn_formats["uop"].decode(word))


def uops_to_bytes(uops: Sequence[Uop | int], cfg: HwConfig | None = None) -> bytes:
    """Micro-ops as they sit in DRAM (little-endian uint32 each). Ints pass through; ``Uop`` needs ``cfg``."""
    words = []
    for i, u in enumerate(uops):
        if isinstance(u, Uop):
            if cfg is None:
                raise ValueError("uops_to_bytes: encoding Uop objects needs the hardware config (cfg)")
            words.append(encode_uop(u, cfg))
        else:
            w = operator.index(u)
            if not 0 <= w < 1 << 32:
                raise ValueError(f"micro-op {i}: word {w:#x} does not fit 32 bits")
            words.append(w)
    return np.asarray(words, dtype="<u4").tobytes()


def uops_from_bytes(data: bytes | bytearray | memoryview | np.ndarray, cfg: HwConfig) -> list[Uop]:
    """Decode micro-ops from their DRAM bytes."""
    raw = data.tobytes() if isinstance(data, np.ndarray) else bytes(data)
    if len(raw) % UOP_BYTES:
        raise ValueError(f"micro-ops: {len(raw)} bytes is not a multiple of {UOP_BYTES}")
    return [decode_uop(int(w), cfg) for w in np.frombuffer(raw, dtype="<u4")]


# ------------------------------------------------------------------------------------------------------------
# routing and disassembly

def module_of(insn: Insn) -> str:
    """The module that executes an instruction ('load', 'compute' or 'store'), as VTA's fetch routes it."""
    return isa_rules.module_of(insn.op, insn.memory_type if isinstance(insn, MemInsn) else 0)


def dep_flag_names(insn: Insn) -> list[str]:
    """The set flags as queue operations ('pop g2l', ...); a flag the module lacks shows as 'pop_prev?'."""
    table = DEP_QUEUES[module_of(insn)]
    names = []
    for flag in DEP_FLAGS:
        if getattr(insn, flag):
            names.append(table[flag] or f"{flag[:-4]}?")
    return names


def _pair(a: int, b: int) -> str:
    return f"({a},{b})"


def _describe(insn: Insn) -> tuple[str, str]:
    """(column after the opcode, operand text) for one decoded instruction."""
    if isinstance(insn, MemInsn):
        col = MEM_TYPE_NAMES.get(insn.memory_type, f"mem?{insn.memory_type}")
        pads = f"({insn.y_pad_0},{insn.y_pad_1},{insn.x_pad_0},{insn.x_pad_1})"
        text = (f"sram={insn.sram_base} dram={insn.dram_base} y={insn.y_size} x={insn.x_size} "
                f"stride={insn.x_stride} pad={pads}")
        if insn.x_size == 0:
            rest = [f"{k}={v}" for k, v in _field_values(insn, "MemInsn").items()
                    if v and k not in DEP_FLAGS and k not in ("opcode", "memory_type")]
            text = " ".join(["nop", *rest])
        return col, text
    if isinstance(insn, (GemmInsn, AluInsn)):
        loops = (f"uop=[{insn.uop_bgn},{insn.uop_end}) iter={insn.iter_out}x{insn.iter_in} "
                 f"dst={_pair(insn.dst_factor_out, insn.dst_factor_in)} "
                 f"src={_pair(insn.src_factor_out, insn.src_factor_in)}")
        if isinstance(insn, GemmInsn):
            col = "reset" if insn.reset_reg else ""
            return col, f"{loops} wgt={_pair(insn.wgt_factor_out, insn.wgt_factor_in)}"
        col = ALU_OPCODE_NAMES.get(insn.alu_opcode, f"op?{insn.alu_opcode}")
        operand = f"imm={insn.imm}" if insn.use_imm else "acc[src]"
        ignored = " reset_reg=1(ignored)" if insn.reset_reg else ""
        return col, f"{loops} {operand}{ignored}"
    return "", ""


def disassemble_one(insn: Insn, index: int = 0) -> str:
    """One line: index, opcode, memory type / ALU op, fields, and the dependency flags as queue operations."""
    col, text = _describe(insn)
    line = f"{index:4d}  {OPCODE_NAMES[insn.op]:<6} {col:<4} {text}".rstrip()
    flags = dep_flag_names(insn)
    if flags:
        line += f"  [{', '.join(flags)}]"
    return line


def disassemble(insns: np.ndarray | bytes | Sequence[Insn], cfg: HwConfig, start_index: int = 0) -> str:
    """A listing of a stream, one line per instruction; undecodable ones print as '??? opcode N'."""
    lines = []
    if isinstance(insns, (list, tuple)) and all(isinstance(i, _Insn) for i in insns):
        for i, insn in enumerate(insns, start_index):
            lines.append(disassemble_one(insn, i))
        return "\n".join(lines)
    for i, row in enumerate(_rows(insns), start_index):  # type: ignore[arg-type]
        try:
            insn = decode(row, cfg)
        except ValueError:
            lines.append(f"{i:4d}  ??? opcode {int(row[0]) & 0b111}  raw={row.tobytes()[::-1].hex()}")
            continue
        lines.append(disassemble_one(insn, i))
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------------------------
# documentation

def _routing(opcode: int) -> dict[str, list[str]]:
    """module -> the memory types (names) with which ``opcode`` runs there, by ``hw_config.isa_rules.module_of``."""
    types = {OPCODES["LOAD"]: isa_rules.LOAD_MEM_TYPES, OPCODES["STORE"]: isa_rules.STORE_MEM_TYPES}.get(opcode, (0,))
    out: dict[str, list[str]] = {}
    for t in types:
        out.setdefault(isa_rules.module_of(opcode, t), []).append(MEM_TYPE_NAMES[t])
    return {m: out[m] for m in MODULES if m in out}


def _executed_by(opcode: int) -> str:
    """"compute", or "load (WGT, INP) or compute (...)" where the memory type decides."""
    routes = _routing(opcode)
    if len(routes) == 1:
        return next(iter(routes))
    return " or ".join(f"{m} ({', '.join(types)})" for m, types in routes.items())


def _instructions_of(module: str) -> str:
    """The instructions a module runs: "LOAD UOP, ACC, ACC_8BIT; GEMM; FINISH; ALU"."""
    parts = []
    for name, opcode in OPCODES.items():
        routes = _routing(opcode)
        if module in routes:
            parts.append(name if len(routes) == 1 else f"{name} {', '.join(routes[module])}")
    return "; ".join(parts)


ALU_SEMANTICS = {
    "MIN": ("min(a, b)", "yes", "yes", "yes", "yes"),
    "MAX": ("max(a, b)", "yes", "yes", "yes", "yes"),
    "ADD": ("a + b (wrapping)", "yes", "yes", "yes", "yes"),
    "SHR": ("b >= 0: a >> b (arithmetic); b < 0: a << -b", "yes", "yes", "yes (low 5 bits, signed)",
            "yes (low log2(ACC_WIDTH) bits, unsigned; no left shift)"),
    "MUL": ("a * b (low 32 bits)", "yes", "yes", "**no**", "**no: opcode 4 is SHL by -b**"),
}
ALU_HEADER = ("| op | value | result | fsim (our simulator) | intelfocl | HLS (pynq, ultra96, zcu104) "
              "| Chisel (tsim, de10nano) |")
MEM_NOTES = {
    "UOP": "micro-ops, 32 bits each; LOAD only",
    "WGT": "weights; LOAD only (VTA's HLS load path ignores padding for WGT)",
    "INP": "inputs; LOAD only",
    "ACC": "accumulators (int32 lanes); LOAD only (e.g. a bias)",
    "OUT": "STORE only: the output buffer, the low OUT_WIDTH bits of each ACC lane (see \"Backend support\")",
    "ACC_8BIT": "LOAD only: int8 DRAM lanes sign-extended into ACC; fsim and intelfocl only",
}
BACKEND_NOTES = """\
VTA's backends do not agree on everything; programs meant for every backend should avoid these corners.

- **ALU opcode 4** is MUL (`a*b`, low 32 bits) in VTA's functional simulator (fsim) and the intelfocl OpenCL
  backend, SHL (shift left by `-b`) in the Chisel backend (tsim, de10nano), and does not exist in the HLS
  bitstreams (pynq, ultra96, zcu104). VTA's compiler emits it only for TARGET `sim` and `intelfocl`.
- **ACC_8BIT loads** (memory type 5) exist only in fsim and intelfocl.
- **Shift amounts** differ: fsim uses C's `>>`/`<<` on int32 (undefined from 32 on), HLS reads the low
  log2(ACC_WIDTH) bits of the operand as a signed number (vta.cc's `ap_int<VTA_SHR_ARG_BIT_WIDTH>`: with 32-bit
  accumulators an SHR by 16 is a left shift by 16, by 20 a left shift by 12), Chisel reads them unsigned (no left
  shift). Our simulator clamps the amount to 31 (`>>` is arithmetic, so large right shifts give 0 or -1). The
  compiler emits every shift in steps all backends read alike (right by at most 15, left by at most 16: `shr 20`
  is SHR 15 then SHR 5, exact), and an immediate a config's hardware would read otherwise is refused like a
  missing opcode (the SHR immediates column below). An SHR whose amount comes from the accumulator (no
  immediate) is data, which no check before launch can see: on the HLS and Chisel sets keep such amounts in
  their range.
- **Dependency flags** a module has no queue for (marked `?` in disassembly) are ignored by the hardware;
  our simulator refuses them because no VTA compiler sets them.
- **What STORE reads**: fsim narrows the accumulator; the HLS and Chisel designs read an output buffer that
  only GEMM and ALU write (a LOAD ACC does not; a reset GEMM writes its pre-reset sum on HLS, nothing on Chisel),
  so a STORE of rows LOADed or reset since their last GEMM/ALU stores an older result there. Our simulators and
  RTL do what the config's capability set does (docs/simulator.md, "The output buffer"); the compiler never
  stores such a row, and `Simulator(cfg, strict=True)` refuses a STORE of one.
- Our simulator follows fsim for MUL and ACC_8BIT (without `strict`); see `docs/simulator.md`.
"""


def _format_table(fmt: Format) -> list[str]:
    lines = ["| field | bits | width | signed |", "|---|---|---|---|"]
    pos = 0
    for f in fmt.fields:
        if f.offset > pos:
            lines.append(f"| *(padding)* | {pos}:{f.offset - 1} | {f.offset - pos} |  |")
        bits = f"{f.offset}:{f.offset + f.width - 1}"
        lines.append(f"| `{f.name}` | {bits} | {f.width} | {'yes' if f.signed else ''} |")
        pos = f.offset + f.width
    if pos < fmt.total_bits:
        lines.append(f"| *(unused)* | {pos}:{fmt.total_bits - 1} | {fmt.total_bits - pos} |  |")
    return lines


FORMAT_TITLES = {
    "mem": "LOAD / STORE (`MemInsn`)",
    "gemm": "GEMM (`GemmInsn`)",
    "alu": "ALU (`AluInsn`)",
    "finish": "FINISH (`FinishInsn`)",
    "uop": "Micro-op (`Uop`, 32 bits)",
}


def isa_markdown(cfg: HwConfig) -> str:
    """Markdown tables of every format, the opcode/memory-type/ALU numbering and the backend notes."""
    layout = (f"SRAM depths (entries): UOP {cfg.UOP_BUFF_DEPTH}, INP {cfg.INP_BUFF_DEPTH}, "
              f"WGT {cfg.WGT_BUFF_DEPTH}, ACC {cfg.ACC_BUFF_DEPTH}. Instructions are 128 bits "
              "(16 bytes, little-endian), micro-ops 32 bits. Bit ranges are inclusive, counted from the "
              "least significant bit of the whole word. A field that would straddle a 64-bit word (32-bit "
              "for micro-ops) starts at the next one, as in VTA's C bit-fields, so positions move with the "
              "buffer depths.")
    flags = ("Each module pops tokens before an instruction starts and pushes them after it ends. "
             "`-`: the module has no such queue.")
    out = [f"## Configuration `{cfg.model}`", "", layout, "",
           "## Opcodes (bits 0:2)", "", "| opcode | value | executed by |", "|---|---|---|"]
    out += [f"| {name} | {v} | {_executed_by(v)} |" for name, v in OPCODES.items()]
    out += ["", "Values 5-7 are invalid.", "",
            "## Memory types (`memory_type`)", "",
            "| type | value | DRAM element bytes | notes |", "|---|---|---|---|"]
    out += [f"| {name} | {v} | {cfg.elem_bytes(name)} | {MEM_NOTES[name]} |" for name, v in MEM_TYPES.items()]
    units = ("`dram_base` and `x_stride` count DRAM elements of the memory type; "
             "`sram_base` counts SRAM entries.")
    out += ["", units, "", "## ALU opcodes (`alu_opcode`)", "",
            "`a` is `acc[dst]`, `b` is the sign-extended `imm` when `use_imm` is set, else `acc[src]`.", "",
            ALU_HEADER, "|---|---|---|---|---|---|---|"]
    out += [f"| {name} | {v} | {' | '.join(ALU_SEMANTICS[name])} |" for name, v in ALU_OPCODES.items()]
    out += ["", "## Dependency flags", "", flags, "",
            "| module | instructions | pop_prev | pop_next | push_prev | push_next |",
            "|---|---|---|---|---|---|"]
    for module, table in DEP_QUEUES.items():
        cells = " | ".join(table[f] or "-" for f in DEP_FLAGS)
        out.append(f"| {module} | {_instructions_of(module)} | {cells} |")
    for name, fmt in cfg.insn_formats.items():
        out += ["", f"## {FORMAT_TITLES[name]}", "", *_format_table(fmt)]
    out += ["", "## Backend support", "", BACKEND_NOTES.rstrip()]
    out += ["", "## Capability sets", "", CAPABILITY_NOTES.rstrip(), ""]
    out += [("| set | ALU opcodes | SHR immediates | compute-module loads | padded loads | micro-op load rows | "
            "source |"), "|---|---|---|---|---|---|---|"]
    for c in CAPABILITY_SETS.values():
        limits = c.shr_immediates(cfg.LOG_ACC_WIDTH)
        shr = "any" if limits is None else f"{limits[0]}..{limits[1]}"
        out.append(f"| `{c.name}` | {', '.join(sorted(c.alu_opcodes, key=ALU_OPCODES.get))} | {shr} | "
                   f"{', '.join(sorted(c.compute_loads, key=MEM_TYPES.get))} | "
                   f"{', '.join(sorted(c.padded_loads, key=MEM_TYPES.get))} | "
                   f"{'several' if c.uop_load_rows else 'one'} | {c.source} |")
    return "\n".join(out) + "\n"


CAPABILITY_NOTES = """
What a config's hardware executes is part of the config: the key `CAPABILITIES` names one of the sets below
(default: VTA's for the config's TARGET and HW_VER; the `pynq` preset is `vta-hls-0.0.2`, VTA's published Pynq
bitstream; `sim` is `fsim`). For a config whose set lacks something, the compiler never emits it (an op that
needs it is refused with the reason, and graph_pack leaves it on the CPU, saying why in `vta run --report`),
`vta.program_check` refuses a stream using it before launch on a board, naming the instruction, and
`Simulator(cfg, strict=True)` (`vta sim replay --strict`) refuses it too. Without `strict` the simulator runs
the whole ISA as VTA's fsim does (VTA's own golden padded-load programs, for instance, run there but would be
mis-executed by the 0.0.2 bitstream). The fingerprint ignores the key: it refuses programs and changes no
program the compiler emits (only a STORE of rows the compiler never stores that way: "What STORE reads" above).
"""


def isa_page(cfg: HwConfig) -> str:
    """The whole of ``docs/isa.md``: an introduction followed by ``isa_markdown(cfg)``."""
    intro = (
        "# The instruction set\n\n"
        "Our instructions and micro-ops have VTA's exact bit layout, so streams compiled here run on VTA "
        "bitstreams and streams compiled by VTA run on our simulator. The layout is computed from the "
        "hardware config by `hw_config/layout.py`; `vta/isa.py` encodes, decodes and disassembles it "
        "(`vta sim disasm IMAGE`), and the semantics are specified in `docs/simulator.md`. "
        f"The tables below are for the `{cfg.model}` configuration; this page is generated by "
        "`python -m vta.isa --markdown > docs/isa.md` and a test checks it is current.\n\n")
    return intro + isa_markdown(cfg)


def _main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m vta.isa", description="Print the ISA reference page.")
    parser.add_argument("--markdown", nargs="?", const="pynq", metavar="PRESET", required=True,
                        help="print docs/isa.md for a preset or config file (default pynq)")
    args = parser.parse_args(argv)
    sys.stdout.write(isa_page(load_config(args.markdown)))
    return 0


if __name__ == "__main__":
    raise SystemExit(_main())
