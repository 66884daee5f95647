"""What a program may touch before it reaches real DMA engines.

VTA's DMA engines reach any physical address: on a board, a wrong or hostile program could overwrite the
kernel's memory. ``check_program`` decodes a whole stream at once (vectorised, so a million instructions
cost milliseconds) and refuses, before anything runs, any instruction fetch, LOAD or STORE whose DRAM range
does not lie inside one of the buffers allocated for the program, any opcode or memory type the hardware
does not define, padding on a store, and anything the config's hardware lacks (its capability set,
``hw_config.capabilities``: e.g. ALU MUL or a padded ACC load on the Pynq's published bitstream, which the IP
would silently skip or mis-execute). Apart from the last, these are the rules the simulator applies to DRAM accesses; the
simulator itself needs no such pass because it checks each access as it runs.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from hw_config import MEM_TYPES, OPCODES, HwConfig
from hw_config.capabilities import violations
from hw_config.isa_rules import INSN_BYTES, MEM_TYPE_NAMES, OPCODE_NAMES
from hw_config.layout import OPCODE_BITS, dma_byte_ranges

Region = tuple[int, int]   # (physical byte address, size in bytes)


class ProgramRejected(ValueError):
    """A program would touch memory outside its buffers (or is not a program): refused before launch."""

    def __init__(self, message: str, index: int | None = None):
        super().__init__(message)
        self.index = index


def _regions_text(regions: Sequence[Region]) -> str:
    shown = ", ".join(f"[{a:#x}, {a + n:#x})" for a, n in sorted(regions)[:6])
    return shown + (f" and {len(regions) - 6} more" if len(regions) > 6 else "")


def _inside(first: np.ndarray, end: np.ndarray, regions: Sequence[Region]) -> np.ndarray:
    """Whether each [first, end) lies within one region (regions do not overlap)."""
    if not regions:
        return np.zeros(first.shape, dtype=bool)
    starts = np.array(sorted(a for a, _ in regions), dtype=np.int64)
    ends = np.array([a + n for a, n in sorted(regions)], dtype=np.int64)
    k = np.searchsorted(starts, first, side="right") - 1   # the last region starting at or before `first`
    ok = k >= 0
    k = np.maximum(k, 0)
    return ok & (end <= ends[k])


def check_program(insns: np.ndarray, cfg: HwConfig, regions: Sequence[Region], insn_region: Region,
                  protected: Sequence[Region] | None = None) -> None:
    """Refuse (``ProgramRejected``, naming the instruction and the range) a stream that would fetch, load or
    store outside ``regions``, or load or store inside ``protected`` (default: ``insn_region``, where the stream
    itself is placed for the fetch module, which may still be reading it), or that does not end with FINISH
    (the accelerator would never raise ``done``)."""
    rows = np.asarray(insns)
    if rows.dtype != np.uint8 or rows.ndim != 2 or rows.shape[1] != INSN_BYTES:
        raise ProgramRejected(f"instruction stream: expected uint8 of shape (N, {INSN_BYTES}), got {rows.dtype} "
                              f"{rows.shape}")
    n = rows.shape[0]
    if n == 0:
        raise ProgramRejected("instruction stream is empty: a program ends with FINISH")
    addr, size = insn_region
    if addr % INSN_BYTES or n * INSN_BYTES > size or not _inside(np.array([addr]), np.array([addr + size]),
                                                                   regions)[0]:
        raise ProgramRejected(f"instruction fetch of {n} instructions ({n * INSN_BYTES} bytes) at {addr:#x}: "
                              f"outside its {size}-byte buffer or the program's buffers ({_regions_text(regions)})")
    opcode = rows[:, 0] & ((1 << OPCODE_BITS) - 1)   # the opcode is the instruction's lowest bits
    if opcode[-1] != OPCODES["FINISH"]:
        raise ProgramRejected(f"instruction {n - 1}: the program does not end with FINISH, so the accelerator "
                              "would never signal done", n - 1)
    unknown = ~np.isin(opcode, list(OPCODE_NAMES))
    if unknown.any():
        i = int(np.argmax(unknown))
        raise ProgramRejected(f"instruction {i}: opcode {int(opcode[i])} is not one the hardware defines "
                              f"({', '.join(f'{k} {v}' for k, v in OPCODES.items())})", i)
    refused = violations(rows, cfg)
    if refused:
        i, reason = refused[0]
        raise ProgramRejected(f"instruction {i}: {reason}, so the board would compute something else "
                              f"({len(refused)} such instruction(s); {cfg.capabilities.describe()})", i)
    mem = np.flatnonzero((opcode == OPCODES["LOAD"]) | (opcode == OPCODES["STORE"]))
    if mem.size == 0:
        return
    f = cfg.insn_formats["mem"].decode_rows(rows[mem])
    elem = cfg.elem_bytes_by_type[f["memory_type"]]
    bad_type = elem == 0
    if bad_type.any():
        i = int(mem[np.argmax(bad_type)])
        raise ProgramRejected(f"instruction {i}: memory type {int(f['memory_type'][np.argmax(bad_type)])} is not "
                              f"one the hardware defines ({', '.join(f'{k} {v}' for k, v in MEM_TYPES.items())})", i)
    is_store = opcode[mem] == OPCODES["STORE"]
    padded = is_store & ((f["y_pad_0"] | f["y_pad_1"] | f["x_pad_0"] | f["x_pad_1"]) != 0)
    if padded.any():
        i = int(mem[np.argmax(padded)])
        raise ProgramRejected(f"instruction {i}: a STORE with padding (all four pads of a store must be 0)", i)
    moves = (f["x_size"] > 0) & (f["y_size"] > 0)   # x_size == 0 (or no rows) is a NOP carrying its flags
    first, end = dma_byte_ranges(f, elem)
    for lo, size in (insn_region,) if protected is None else protected:
        hit = moves & (first < lo + size) & (end > lo)
        if hit.any():
            j = int(np.argmax(hit))
            raise ProgramRejected(f"instruction {int(mem[j])}: DRAM bytes [{int(first[j]):#x}, {int(end[j]):#x}) "
                                  f"touch the instruction buffer [{lo:#x}, {lo + size:#x}); a program "
                                  "may not read or write its own instructions", int(mem[j]))
    outside = moves & ~_inside(first, end, regions)
    if outside.any():
        j = int(np.argmax(outside))
        i = int(mem[j])
        kind = "STORE" if is_store[j] else "LOAD"
        mem_type = MEM_TYPE_NAMES[int(f["memory_type"][j])]
        raise ProgramRejected(
            f"instruction {i} ({kind} {mem_type}): DRAM bytes [{int(first[j]):#x}, {int(end[j]):#x}) (dram_base="
            f"{int(f['dram_base'][j])}, y_size={int(f['y_size'][j])}, x_size={int(f['x_size'][j])}, x_stride="
            f"{int(f['x_stride'][j])}, {int(elem[j])}-byte elements) are not inside one buffer of this program "
            f"({_regions_text(regions)})", i)


def check_dma_ranges(insns: np.ndarray, cfg: HwConfig, regions: Sequence[Region], insn_region: Region) -> None:
    """Refuse (``ProgramRejected``, naming the instruction and the range) a stream whose instruction fetch
    (``insn_region``: where it is read from, and how many bytes) or whose LOAD/STORE DRAM ranges leave
    ``regions``. Only the ranges: a shared board (the simulated one) checks this for every launch, whatever
    else the program does wrong (that is the program's own fault, reported when it runs)."""
    rows = np.asarray(insns)
    if rows.dtype != np.uint8 or rows.ndim != 2 or rows.shape[1] != INSN_BYTES:
        raise ProgramRejected(f"instruction stream: expected uint8 of shape (N, {INSN_BYTES}), got {rows.dtype} "
                              f"{rows.shape}")
    addr, size = insn_region
    if size and not _inside(np.array([addr]), np.array([addr + size]), regions)[0]:
        raise ProgramRejected(f"instruction fetch of {size // INSN_BYTES} instructions, bytes [{addr:#x}, "
                              f"{addr + size:#x}), is not inside one buffer ({_regions_text(regions) or 'none'})")
    opcode = rows[:, 0] & ((1 << OPCODE_BITS) - 1)
    mem = np.flatnonzero((opcode == OPCODES["LOAD"]) | (opcode == OPCODES["STORE"]))
    if mem.size == 0:
        return
    f = cfg.insn_formats["mem"].decode_rows(rows[mem])
    elem = cfg.elem_bytes_by_type[f["memory_type"]]
    moves = (f["x_size"] > 0) & (f["y_size"] > 0) & (elem > 0)   # an undefined memory type moves nothing
    first, end = dma_byte_ranges(f, elem)
    outside = moves & ~_inside(first, end, regions)
    if outside.any():
        j = int(np.argmax(outside))
        i = int(mem[j])
        kind = "STORE" if opcode[i] == OPCODES["STORE"] else "LOAD"
        raise ProgramRejected(
            f"instruction {i} ({kind} {MEM_TYPE_NAMES[int(f['memory_type'][j])]}): DRAM bytes [{int(first[j]):#x}, "
            f"{int(end[j]):#x}) are not inside one buffer ({_regions_text(regions) or 'none'})", i)
