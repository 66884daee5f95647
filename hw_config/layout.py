"""Bit layouts of VTA's 128-bit instructions and 32-bit micro-ops, as a function of the config.

VTA declares its instructions as C structs of ``uint64_t`` bit-fields (``hw_spec.h``). With GCC's
packing rule a field that would straddle a 64-bit storage unit starts at the next unit, so field
positions move when buffer depths change. This module reproduces that rule explicitly; it is the
single table that encode, decode, disassembly, the C simulator and ``docs/isa.md`` are built from.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

INSN_BITS = 128
UOP_BITS = 32

# Opcode, memory-type and ALU-opcode numbering shared with VTA (hw_spec.h).
OPCODES = {"LOAD": 0, "STORE": 1, "GEMM": 2, "FINISH": 3, "ALU": 4}
MEM_TYPES = {"UOP": 0, "WGT": 1, "INP": 2, "ACC": 3, "OUT": 4, "ACC_8BIT": 5}
ALU_OPCODES = {"MIN": 0, "MAX": 1, "ADD": 2, "SHR": 3, "MUL": 4}

# Fixed widths from hw_spec_const.h.
OPCODE_BITS = 3
MEMOP_ID_BITS = 3
MEMOP_SRAM_ADDR_BITS = 16
MEMOP_DRAM_ADDR_BITS = 32
MEMOP_SIZE_BITS = 16
MEMOP_STRIDE_BITS = 16
MEMOP_PAD_BITS = 4
LOOP_ITER_BITS = 14
ALU_OPCODE_BITS = 3
ALUOP_IMM_BITS = 16


@dataclass(frozen=True)
class Field:
    name: str
    offset: int  # bit position from the least significant bit of the whole word
    width: int
    signed: bool = False

    @property
    def mask(self) -> int:
        return (1 << self.width) - 1

    @property
    def max_value(self) -> int:
        return (1 << (self.width - 1)) - 1 if self.signed else self.mask

    @property
    def min_value(self) -> int:
        return -(1 << (self.width - 1)) if self.signed else 0


@dataclass(frozen=True)
class Format:
    """One instruction (or micro-op) format: its fields in declaration order."""

    name: str
    fields: tuple[Field, ...]
    used_bits: int  # position after the last field, padding included
    total_bits: int  # size of the container (128 for instructions, 32 for micro-ops)

    def field(self, name: str) -> Field:
        for f in self.fields:
            if f.name == name:
                return f
        raise KeyError(f"format {self.name} has no field {name!r}")

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(f.name for f in self.fields)

    def encode(self, values: dict[str, int]) -> int:
        """Pack field values into an integer; every field must be given and in range."""
        word = 0
        unknown = set(values) - set(self.names)
        if unknown:
            raise ValueError(f"{self.name}: unknown field(s) {sorted(unknown)}; fields are {list(self.names)}")
        for f in self.fields:
            if f.name not in values:
                raise ValueError(f"{self.name}: missing field {f.name!r}")
            v = int(values[f.name])
            if not f.min_value <= v <= f.max_value:
                raise ValueError(f"{self.name}.{f.name}={v} is out of range: allowed "
                                 f"[{f.min_value}, {f.max_value}] ({f.width} bits{', signed' if f.signed else ''})")
            word |= (v & f.mask) << f.offset
        return word

    def encode_rows(self, columns: dict[str, np.ndarray], nbytes: int = 16) -> np.ndarray:
        """Vectorised ``encode``: one integer array per field (missing fields are 0) -> uint8 (N, nbytes)."""
        unknown = set(columns) - set(self.names)
        if unknown:
            raise ValueError(f"{self.name}: unknown field(s) {sorted(unknown)}; fields are {list(self.names)}")
        n = len(next(iter(columns.values()))) if columns else 0
        table = np.zeros((n, len(self.fields)), dtype=np.int64)
        for j, f in enumerate(self.fields):
            if f.name in columns:
                table[:, j] = columns[f.name]
        return self.encode_table(table, nbytes)

    def encode_table(self, table: np.ndarray, nbytes: int = 16) -> np.ndarray:
        """``encode_rows`` of a table: one row per word, one column per field in declaration order."""
        table = np.asarray(table, dtype=np.int64).reshape(-1, len(self.fields))
        low, high, word, shift, mask = self._packing
        bad = (table < low) | (table > high)
        if bad.any():
            j = int(np.argmax(bad.any(axis=0)))
            i, f = int(np.argmax(bad[:, j])), self.fields[j]
            raise ValueError(f"row {i}: {self.name}.{f.name}={int(table[i, j])} is out of range: allowed "
                             f"[{f.min_value}, {f.max_value}] ({f.width} bits{', signed' if f.signed else ''})")
        packed = (table.astype(np.uint64) & mask) << shift
        words = np.empty((table.shape[0], max(1, nbytes // 8)), dtype=np.uint64)
        for w, columns in enumerate(word):   # fields never overlap: within a word, OR is a sum
            words[:, w] = packed[:, columns].sum(axis=1, dtype=np.uint64)
        return words.view(np.uint8)[:, :nbytes].copy()

    @cached_property
    def _packing(self) -> tuple:
        """Per field: lowest and highest value, shift within its 64-bit word, mask; per word, its fields' columns
        (``encode_table``, and ``FormatSet``'s packing). Each word is packed and read on its own: a field across
        two is refused (pack_bitfields never places one so in 64-bit units; the simulator refuses it too)."""
        straddling = [f.name for f in self.fields if f.width and f.offset // 64 != (f.offset + f.width - 1) // 64]
        if straddling:
            raise ValueError(f"{self.name}: fields {straddling} straddle a 64-bit word")
        words = max(1, -(-self.total_bits // 64))
        return (np.array([f.min_value for f in self.fields], dtype=np.int64),
                np.array([f.max_value for f in self.fields], dtype=np.int64),
                [np.array([j for j, f in enumerate(self.fields) if f.offset // 64 == w], dtype=np.int64)
                 for w in range(words)],
                np.array([f.offset % 64 for f in self.fields], dtype=np.uint64),
                np.array([f.mask for f in self.fields], dtype=np.uint64))

    def decode_rows(self, rows: np.ndarray, names: tuple[str, ...] | None = None) -> dict[str, np.ndarray]:
        """Vectorised ``decode``: uint8 (N, total_bits // 8) -> one int64 array per field (signed ones extended),
        every field or only ``names``. Each field comes from one 64-bit word: a layout with a field across two is
        refused, as the encoders refuse it."""
        *_, shifts, masks = self._packing   # refuses a field across two 64-bit words
        nbytes = self.total_bits // 8
        raw = np.ascontiguousarray(rows, dtype=np.uint8).reshape(-1, nbytes)
        if nbytes % 8:
            words = np.zeros((raw.shape[0], -(-nbytes // 8) * 8), dtype=np.uint8)
            words[:, :nbytes] = raw
            raw = words
        words64 = raw.view("<u8")
        out = {}
        for f in self.fields if names is None else map(self.field, names):
            j = self.fields.index(f)
            v = ((words64[:, f.offset // 64] >> shifts[j]) & masks[j]).astype(np.int64)
            if f.signed:
                v = np.where(v >> (f.width - 1), v - (1 << f.width), v)
            out[f.name] = v
        return out

    def decode(self, word: int) -> dict[str, int]:
        """Unpack an integer into field values (signed fields sign-extended)."""
        out = {}
        for f in self.fields:
            v = (word >> f.offset) & f.mask
            if f.signed and v >> (f.width - 1):
                v -= 1 << f.width
            out[f.name] = v
        return out


@dataclass(frozen=True)
class FormatSet:
    """Several formats encoded together: rows of any of them in one flat array of field values (``encode_flat``),
    so that a stream mixing formats takes one pass of numpy calls instead of one per format."""

    formats: tuple[Format, ...]

    def encode_flat(self, which: np.ndarray, values: np.ndarray, nbytes: int = 16) -> np.ndarray:
        """Row ``i`` is a word of ``formats[which[i]]``, its field values the next ones of ``values`` (rows one
        after another, fields in declaration order) -> uint8 (N, nbytes), as ``encode_table`` of each row."""
        count, first, low, span, shift, mask, bounds = self._packing
        which = np.asarray(which, dtype=np.int64)
        values = np.asarray(values, dtype=np.int64)
        if not which.size:
            return np.zeros((0, nbytes), dtype=np.uint8)
        lens = count[which]
        ends = np.cumsum(lens)
        starts = ends - lens
        if values.shape != (int(ends[-1]),):
            raise ValueError(f"{values.size} field values for rows of {int(ends[-1])} fields")
        param = np.repeat(first[which] - starts, lens) + np.arange(values.size)   # each value's field, all formats
        bad = (values - low.take(param)).view(np.uint64) > span.take(param)   # below or above: one unsigned compare
        if bad.any():
            k = int(np.argmax(bad))
            i = int(np.searchsorted(ends, k, side="right"))
            fmt = self.formats[int(which[i])]
            f = fmt.fields[k - int(starts[i])]
            raise ValueError(f"row {i}: {fmt.name}.{f.name}={int(values[k])} is out of range: allowed "
                             f"[{f.min_value}, {f.max_value}] ({f.width} bits{', signed' if f.signed else ''})")
        # fields never overlap and come in offset order, so each 64-bit word is the sum of one contiguous run of a
        # row's values: reduceat over the runs' starts (an empty run, e.g. FINISH's second word, is set to 0)
        packed = np.zeros(values.size + 1, dtype=np.uint64)
        np.left_shift(values.view(np.uint64) & mask.take(param), shift.take(param), out=packed[:-1])
        cuts = (starts[:, None] + bounds.take(which, axis=0)).reshape(-1)
        words = np.add.reduceat(packed, cuts)
        words[:-1][cuts[:-1] == cuts[1:]] = 0   # (the last run, if empty, is the padding 0)
        return words.reshape(len(which), -1).view(np.uint8)[:, :nbytes].copy()

    @cached_property
    def _packing(self) -> tuple:
        """Per format: field count, index of its first field in the per-field arrays, and where each 64-bit word's
        fields start; per field of all formats: lowest value, range, shift within its word, mask (each format's
        own ``Format._packing``, which refuses a field across two words)."""
        packs = [fmt._packing for fmt in self.formats]   # (low, high, columns per word, shift, mask)
        low = np.concatenate([low for low, *_ in packs])
        words = max(len(columns) for _, _, columns, _, _ in packs)
        return (np.array([len(fmt.fields) for fmt in self.formats], dtype=np.int64),
                np.cumsum([0] + [len(fmt.fields) for fmt in self.formats[:-1]]).astype(np.int64),
                low,
                (np.concatenate([high for _, high, *_ in packs]) - low).astype(np.uint64),
                np.concatenate([shift for *_, shift, _ in packs]),
                np.concatenate([mask for *_, mask in packs]),
                np.array([[sum(len(c) for c in columns[:w]) for w in range(words)] for _, _, columns, _, _ in packs],
                         dtype=np.int64))


def pack_bitfields(name: str, spec: list[tuple[str, int, bool]], unit_bits: int, total_bits: int) -> Format:
    """Place fields like C bit-fields in ``unit_bits``-wide storage units (GCC, little-endian)."""
    fields = []
    pos = 0
    for fname, width, signed in spec:
        if width <= 0 or width > unit_bits:
            raise ValueError(f"{name}.{fname}: width {width} does not fit a {unit_bits}-bit unit")
        unit_end = (pos // unit_bits + 1) * unit_bits
        if pos + width > unit_end:
            pos = unit_end
        fields.append(Field(fname, pos, width, signed))
        pos += width
    return Format(name, tuple(fields), pos, total_bits)


HEADER = [
    ("opcode", OPCODE_BITS, False),
    ("pop_prev_dep", 1, False),
    ("pop_next_dep", 1, False),
    ("push_prev_dep", 1, False),
    ("push_next_dep", 1, False),
]


def dma_byte_ranges(mem: dict[str, np.ndarray], elem: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """[first, end) DRAM bytes that decoded LOAD/STORE fields touch (``Format.decode_rows`` of "mem"; ``elem``:
    their element bytes): ``y_size`` rows of ``x_size`` elements, ``x_stride`` elements apart, from
    ``dram_base``. Meaningful where ``x_size`` and ``y_size`` are both positive (otherwise a NOP)."""
    first = mem["dram_base"] * elem
    return first, first + ((mem["y_size"] - 1) * mem["x_stride"] + mem["x_size"]) * elem


def instruction_formats(log_uop_depth: int, log_inp_depth: int, log_wgt_depth: int,
                        log_acc_depth: int, log_acc_width: int) -> dict[str, Format]:
    """The five formats for a configuration, keyed 'mem', 'gemm', 'alu', 'finish', 'uop'."""
    mem = HEADER + [
        ("memory_type", MEMOP_ID_BITS, False),
        ("sram_base", MEMOP_SRAM_ADDR_BITS, False),
        ("dram_base", MEMOP_DRAM_ADDR_BITS, False),
        ("y_size", MEMOP_SIZE_BITS, False),
        ("x_size", MEMOP_SIZE_BITS, False),
        ("x_stride", MEMOP_STRIDE_BITS, False),
        ("y_pad_0", MEMOP_PAD_BITS, False),
        ("y_pad_1", MEMOP_PAD_BITS, False),
        ("x_pad_0", MEMOP_PAD_BITS, False),
        ("x_pad_1", MEMOP_PAD_BITS, False),
    ]
    loop_head = HEADER + [
        ("reset_reg", 1, False),
        ("uop_bgn", log_uop_depth, False),
        ("uop_end", log_uop_depth + 1, False),
        ("iter_out", LOOP_ITER_BITS, False),
        ("iter_in", LOOP_ITER_BITS, False),
        ("dst_factor_out", log_acc_depth, False),
        ("dst_factor_in", log_acc_depth, False),
    ]
    gemm = loop_head + [
        ("src_factor_out", log_inp_depth, False),
        ("src_factor_in", log_inp_depth, False),
        ("wgt_factor_out", log_wgt_depth, False),
        ("wgt_factor_in", log_wgt_depth, False),
    ]
    alu = loop_head + [
        ("src_factor_out", log_acc_depth, False),
        ("src_factor_in", log_acc_depth, False),
        ("alu_opcode", ALU_OPCODE_BITS, False),
        ("use_imm", 1, False),
        ("imm", ALUOP_IMM_BITS, True),
    ]
    uop = [
        ("dst_idx", log_acc_depth, False),
        ("src_idx", max(log_acc_depth, log_inp_depth), False),
        ("wgt_idx", log_wgt_depth, False),
    ]
    return {
        "mem": pack_bitfields("mem", mem, 64, INSN_BITS),
        "gemm": pack_bitfields("gemm", gemm, 64, INSN_BITS),
        "alu": pack_bitfields("alu", alu, 64, INSN_BITS),
        "finish": pack_bitfields("finish", HEADER, 64, INSN_BITS),
        "uop": pack_bitfields("uop", uop, 32, UOP_BITS),
    }
