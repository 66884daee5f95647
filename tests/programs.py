"""Small helpers that build instruction streams for tests, in the style of VTA's runtime.

Until the runtime exists, tests write their programs with these: tile packing for DRAM, an allocator that
frees a test's DRAM regions together, LOAD/STORE/GEMM/ALU constructors that take physical byte addresses and turn them
into element-unit ``dram_base`` values (``phys // cfg.elem_bytes(mem)``, as VTA's runtime does), and
``finish_sync``, the tail VTA's ``Synchronize`` appends so that FINISH waits for the load and store modules.

DRAM tile layouts (``to_tiles``): inputs ``[rows/BATCH][K/BLOCK_IN][BATCH][BLOCK_IN]`` int8, weights
``[N/BLOCK_OUT][K/BLOCK_IN][BLOCK_OUT][BLOCK_IN]`` int8, accumulators ``[rows/BATCH][N/BLOCK_OUT][BATCH][BLOCK_OUT]``
int32 and outputs the same with int8 lanes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

from hw_config import ALU_OPCODES, MEM_TYPES, OPCODES, HwConfig
from simulator.core import Simulator
from simulator.stats import RunStats
from vta.isa import AluInsn, FinishInsn, GemmInsn, Insn, MemInsn, Uop, assemble, uops_to_bytes

LOAD, STORE = OPCODES["LOAD"], OPCODES["STORE"]


# ---------------------------------------------------------------------------------------------------------
# data layouts

def to_tiles(matrix: np.ndarray, row_block: int, col_block: int) -> np.ndarray:
    """(R, C) -> (R/row_block, C/col_block, row_block, col_block), C-contiguous (the DRAM order)."""
    r, c = matrix.shape
    assert r % row_block == 0 and c % col_block == 0, (matrix.shape, row_block, col_block)
    tiles = matrix.reshape(r // row_block, row_block, c // col_block, col_block).transpose(0, 2, 1, 3)
    return np.ascontiguousarray(tiles)


def from_tiles(tiles: np.ndarray) -> np.ndarray:
    """The inverse of ``to_tiles``: (R/rb, C/cb, rb, cb) -> (R, C)."""
    rt, ct, rb, cb = tiles.shape
    return tiles.transpose(0, 2, 1, 3).reshape(rt * rb, ct * cb)


def pack_inp(x: np.ndarray, cfg: HwConfig) -> np.ndarray:
    return to_tiles(x.astype(np.int8), cfg.BATCH, cfg.BLOCK_IN)


def pack_wgt(w: np.ndarray, cfg: HwConfig) -> np.ndarray:
    return to_tiles(w.astype(np.int8), cfg.BLOCK_OUT, cfg.BLOCK_IN)


def pack_acc(a: np.ndarray, cfg: HwConfig) -> np.ndarray:
    return to_tiles(a.astype(np.int32), cfg.BATCH, cfg.BLOCK_OUT)


def low_byte(x: np.ndarray) -> np.ndarray:
    """The low 8 bits of each int32 lane as int8 (what STORE keeps), computed without relying on casts."""
    return (np.asarray(x, dtype=np.int64) & 0xFF).astype(np.uint8).view(np.int8)


def wrap32(x: np.ndarray | int) -> np.ndarray:
    """Reduce integers (int64 range) modulo 2^32 into int32, two's complement."""
    v = np.asarray(x, dtype=np.int64) & 0xFFFFFFFF
    return np.where(v >= 1 << 31, v - (1 << 32), v).astype(np.int32)


# ---------------------------------------------------------------------------------------------------------
# DRAM

class Dram:
    """Allocates regions on a Simulator and remembers them so a test can free them all."""

    def __init__(self, sim: Simulator):
        self.sim = sim
        self.regions: list[int] = []

    def alloc(self, nbytes: int) -> int:
        addr = self.sim.alloc(max(int(nbytes), 1))
        self.regions.append(addr)
        return addr

    def put(self, data: np.ndarray | bytes) -> int:
        raw = np.frombuffer(data, dtype=np.uint8) if isinstance(data, bytes) \
            else np.ascontiguousarray(data).reshape(-1).view(np.uint8)
        addr = self.alloc(raw.size)
        self.sim.write(addr, raw)
        return addr

    def put_uops(self, uops: Sequence[Uop]) -> int:
        return self.put(uops_to_bytes(uops, self.sim.cfg))

    def get(self, addr: int, shape: tuple[int, ...], dtype: np.dtype | type) -> np.ndarray:
        dtype = np.dtype(dtype)
        return self.sim.read(addr, int(np.prod(shape)) * dtype.itemsize).view(dtype).reshape(shape)

    def free_all(self) -> None:
        while self.regions:
            self.sim.free(self.regions.pop())


# ---------------------------------------------------------------------------------------------------------
# instructions

def dram_elem(cfg: HwConfig, mem: str, addr: int, offset: int = 0) -> int:
    """``dram_base`` for a physical byte address: elements of ``mem`` (VTA: phys / elem_bytes + offset)."""
    e = cfg.elem_bytes(mem)
    assert addr % e == 0, f"address 0x{addr:x} is not aligned to {mem} elements of {e} bytes"
    return addr // e + offset


def load(cfg: HwConfig, mem: str, sram: int, addr: int, x: int, y: int = 1, stride: int | None = None,
         pad: tuple[int, int, int, int] = (0, 0, 0, 0), offset: int = 0, **flags: int) -> MemInsn:
    """LOAD ``y`` rows of ``x`` elements of ``mem`` (rows ``stride`` apart) into SRAM from ``sram`` on.

    ``pad`` is (y_pad_0, y_pad_1, x_pad_0, x_pad_1); ``offset`` counts elements past ``addr``.
    """
    y0, y1, x0, x1 = pad
    return MemInsn(opcode=LOAD, memory_type=MEM_TYPES[mem], sram_base=sram,
                   dram_base=dram_elem(cfg, mem, addr, offset), y_size=y, x_size=x,
                   x_stride=x if stride is None else stride, y_pad_0=y0, y_pad_1=y1, x_pad_0=x0, x_pad_1=x1,
                   **flags)


def store(cfg: HwConfig, sram: int, addr: int, x: int, y: int = 1, stride: int | None = None, offset: int = 0,
          **flags: int) -> MemInsn:
    """STORE ``y`` rows of ``x`` ACC entries (low 8 bits of each lane) to OUT elements at ``addr``."""
    return MemInsn(opcode=STORE, memory_type=MEM_TYPES["OUT"], sram_base=sram,
                   dram_base=dram_elem(cfg, "OUT", addr, offset), y_size=y, x_size=x,
                   x_stride=x if stride is None else stride, **flags)


def load_nop(mem: str = "INP", **flags: int) -> MemInsn:
    """A LOAD with x_size 0: only its flags act (INP: load module, UOP: compute module)."""
    return MemInsn(opcode=LOAD, memory_type=MEM_TYPES[mem], **flags)


def store_nop(**flags: int) -> MemInsn:
    """A store-stage NOP as VTA's runtime emits it (its PushNoop gives memory_type UOP)."""
    return MemInsn(opcode=STORE, memory_type=MEM_TYPES["UOP"], **flags)


def gemm(uops: tuple[int, int], iters: tuple[int, int] = (1, 1), dst: tuple[int, int] = (0, 0),
         src: tuple[int, int] = (0, 0), wgt: tuple[int, int] = (0, 0), reset: bool = False,
         **flags: int) -> GemmInsn:
    """GEMM over micro-ops [uops[0], uops[1]) in loops ``iters`` = (iter_out, iter_in); factors as (out, in)."""
    return GemmInsn(reset_reg=int(reset), uop_bgn=uops[0], uop_end=uops[1], iter_out=iters[0], iter_in=iters[1],
                    dst_factor_out=dst[0], dst_factor_in=dst[1], src_factor_out=src[0], src_factor_in=src[1],
                    wgt_factor_out=wgt[0], wgt_factor_in=wgt[1], **flags)


def alu(op: str, uops: tuple[int, int], iters: tuple[int, int] = (1, 1), dst: tuple[int, int] = (0, 0),
        src: tuple[int, int] = (0, 0), imm: int | None = None, **flags: int) -> AluInsn:
    """ALU ``op`` (MIN, MAX, ADD, SHR, MUL) with an immediate, or with ``acc[src]`` when ``imm`` is None."""
    return AluInsn(uop_bgn=uops[0], uop_end=uops[1], iter_out=iters[0], iter_in=iters[1], dst_factor_out=dst[0],
                   dst_factor_in=dst[1], src_factor_out=src[0], src_factor_in=src[1], alu_opcode=ALU_OPCODES[op],
                   use_imm=int(imm is not None), imm=0 if imm is None else imm, **flags)


def finish_sync(program: Sequence[Insn]) -> list[Insn]:
    """``program`` followed by the tail of VTA's ``Synchronize``: FINISH runs after every other module.

    As VTA's runtime does: a trailing STORE without push_prev gets it (else a store NOP pushes s2g), a load
    NOP pushes l2g, a compute NOP pops both, then FINISH (which may not pop itself).
    """
    out = list(program)
    last = out[-1] if out else None
    if isinstance(last, MemInsn) and last.opcode == STORE and not last.push_prev_dep:
        out[-1] = dataclasses.replace(last, push_prev_dep=1)
    else:
        out.append(store_nop(push_prev_dep=1))
    out += [load_nop("INP", push_next_dep=1), load_nop("UOP", pop_prev_dep=1, pop_next_dep=1), FinishInsn()]
    return out


def run(sim: Simulator, program: Sequence[Insn], **options: object) -> RunStats:
    """Assemble and run ``program`` on ``sim`` (options as for ``Simulator.run``)."""
    return sim.run(assemble(program, sim.cfg), **options)  # type: ignore[arg-type]


def counters(**nonzero: int) -> dict[str, int]:
    """VTA's seven counters, zero except those given (to compare with ``RunStats.vta_counters()``)."""
    base = dict.fromkeys(("inp_load_nbytes", "wgt_load_nbytes", "acc_load_nbytes", "uop_load_nbytes",
                          "out_store_nbytes", "gemm_counter", "alu_counter"), 0)
    unknown = set(nonzero) - set(base)
    assert not unknown, unknown
    return {**base, **nonzero}
