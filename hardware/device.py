"""``RtlDevice``: the generated RTL, simulated cycle by cycle by Verilator, used like a board.

The shared library (hardware/build.py) is loaded through cffi in ABI mode. The device holds DRAM as the
harness's sparse pages; ``run`` writes the registers as VTA's driver does (instruction count and address, the
modules' control words, then fetch's ap_start) and clocks the model until compute's ``done`` register is 1.
"""

from __future__ import annotations

import operator
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from hardware import registers as R
from hardware.toolchain import require
from hw_config import HwConfig, load_config

CDEF = """
typedef struct vta_rtl vta_rtl;
vta_rtl* vta_rtl_create(uint64_t dram_latency);
void vta_rtl_destroy(vta_rtl* r);
int vta_rtl_bus_bytes(void);
int vta_rtl_reset(vta_rtl* r);
int vta_rtl_dram_write(vta_rtl* r, uint64_t addr, const uint8_t* data, uint64_t n);
uint64_t vta_rtl_dram_read(vta_rtl* r, uint64_t addr, uint8_t* out, uint64_t n);
void vta_rtl_dram_clear(vta_rtl* r);
void vta_rtl_reg_write(vta_rtl* r, uint32_t offset, uint32_t value);
uint32_t vta_rtl_reg_read(vta_rtl* r, uint32_t offset);
int vta_rtl_run_until(vta_rtl* r, uint32_t offset, uint32_t mask, uint64_t max_cycles, uint64_t* cycles,
                      char* err, uint64_t errlen);
uint64_t vta_rtl_cycle(vta_rtl* r);
uint64_t vta_rtl_beats(vta_rtl* r, int written);
"""
DEFAULT_MAX_CYCLES = 1 << 30
INSN_BYTES = 16
_LIBS: dict[Path, Any] = {}


class RtlError(RuntimeError):
    """The RTL simulation could not finish a run (timeout or a DMA outside the DRAM the host wrote)."""


class Image(Protocol):
    """What ``replay`` needs of a program image (simulator.image.ProgramImage has it)."""

    config: HwConfig
    insns: np.ndarray
    insn_addr: int
    segments: list[tuple[int, np.ndarray]]


def _library(path: Path) -> tuple[Any, Any]:
    cffi = require("cffi", "loading the RTL simulation")
    if path not in _LIBS:
        ffi = cffi.FFI()
        ffi.cdef(CDEF)
        _LIBS[path] = (ffi, ffi.dlopen(str(path)))
    return _LIBS[path]


class RtlDevice:
    """The accelerator's RTL for ``cfg`` as a device: DRAM write/read, run, replay of program images.

    The first use of a config builds its model (about a minute; then cached, see hardware/build.py)."""

    def __init__(self, cfg: HwConfig | str | None = None, progress=None):
        from hardware.build import ensure_built

        self.cfg = cfg if isinstance(cfg, HwConfig) else load_config(cfg)
        self.library = ensure_built(self.cfg, progress)
        self._ffi, self._lib = _library(self.library)
        if self._lib.vta_rtl_bus_bytes() != self.cfg.BUS_BYTES:
            raise RtlError(f"{self.library} was built for a {self._lib.vta_rtl_bus_bytes()}-byte bus, the config "
                           f"has {self.cfg.BUS_BYTES}")
        handle = self._lib.vta_rtl_create(max(1, self.cfg.DRAM_LATENCY))
        if handle == self._ffi.NULL:
            raise RtlError("could not create the RTL model")
        self._handle = self._ffi.gc(handle, self._lib.vta_rtl_destroy)
        self.last_cycles = 0

    def _reg(self, block: str, offset: int) -> int:
        return R.register_offset(self.cfg, block, offset)

    # ---- DRAM ----
    def write(self, addr: int, data: bytes | np.ndarray) -> None:
        raw = np.ascontiguousarray(np.frombuffer(bytes(data), np.uint8) if isinstance(data, (bytes, bytearray))
                                   else np.asarray(data)).view(np.uint8).reshape(-1)
        buf = self._ffi.from_buffer("uint8_t[]", raw)
        if self._lib.vta_rtl_dram_write(self._handle, operator.index(addr), buf, raw.size):
            raise RtlError(f"DRAM write of {raw.size} bytes at 0x{addr:x} failed")

    def read(self, addr: int, nbytes: int) -> np.ndarray:
        out = np.zeros(operator.index(nbytes), np.uint8)
        self._lib.vta_rtl_dram_read(self._handle, operator.index(addr), self._ffi.from_buffer("uint8_t[]", out),
                                    out.size)
        return out

    def clear_dram(self) -> None:
        self._lib.vta_rtl_dram_clear(self._handle)

    def reset(self) -> None:
        """Reset the model as at power-up: registers, queues and SRAMs (zero); DRAM is kept."""
        if self._lib.vta_rtl_reset(self._handle):
            raise RtlError("could not reset the RTL model")

    # ---- registers and runs ----
    def write_register(self, block: str, offset: int, value: int) -> None:
        self._lib.vta_rtl_reg_write(self._handle, self._reg(block, offset), value & 0xFFFFFFFF)

    def read_register(self, block: str, offset: int) -> int:
        return int(self._lib.vta_rtl_reg_read(self._handle, self._reg(block, offset)))

    def run(self, insn_addr: int, count: int, max_cycles: int = DEFAULT_MAX_CYCLES) -> int:
        """Run ``count`` instructions at DRAM byte address ``insn_addr``; returns the cycles from launch to done."""
        self.write_register("fetch", R.FETCH_INSN_COUNT, count)
        self.write_register("fetch", R.FETCH_INSN_ADDR, insn_addr)
        self.write_register("fetch", R.FETCH_INSN_ADDR + 4, insn_addr >> 32)
        for block in ("load", "compute", "store"):
            self.write_register(block, R.CTRL, R.AP_START | R.AUTO_RESTART)
        self.write_register("fetch", R.CTRL, R.AP_START)
        cycles = self._ffi.new("uint64_t*")
        err = self._ffi.new("char[]", 512)
        status = self._lib.vta_rtl_run_until(self._handle, self._reg("compute", R.COMPUTE_DONE_RD), 1,
                                             max_cycles, cycles, err, 512)
        self.last_cycles = int(cycles[0])
        if status:
            message = self._ffi.string(err).decode()
            dispatched = self.read_register("fetch", R.FETCH_DISPATCHED)
            self._lib.vta_rtl_reset(self._handle)
            raise RtlError(f"RTL run of {count} instructions at 0x{insn_addr:x}: {message} (fetch had dispatched "
                           f"{dispatched}); the model was reset")
        return self.last_cycles

    def run_program(self, insns: np.ndarray | bytes, insn_addr: int, max_cycles: int = DEFAULT_MAX_CYCLES) -> int:
        """Write an instruction stream to DRAM at ``insn_addr`` and run it."""
        raw = np.frombuffer(bytes(insns), np.uint8) if isinstance(insns, (bytes, bytearray)) else \
            np.ascontiguousarray(insns, np.uint8).reshape(-1)
        if raw.size % INSN_BYTES:
            raise ValueError(f"an instruction stream is whole {INSN_BYTES}-byte instructions, got {raw.size} bytes")
        self.write(insn_addr, raw)
        return self.run(insn_addr, raw.size // INSN_BYTES, max_cycles)

    def replay(self, image: Image, max_cycles: int = DEFAULT_MAX_CYCLES) -> tuple[list[tuple[int, np.ndarray]], int]:
        """Run a program image: write its segments and stream, run, read the segments back.
        Returns (final segments, cycles). DRAM is cleared first and after, so replays do not leak."""
        if image.config.fingerprint != self.cfg.fingerprint:
            raise RtlError(f"image is for {image.config.model} (fingerprint {image.config.fingerprint}) but this "
                           f"device is {self.cfg.model} (fingerprint {self.cfg.fingerprint})")
        self.clear_dram()
        try:
            for addr, data in image.segments:
                self.write(addr, data)
            insn_addr = int(image.insn_addr) or self._free_address(image)
            cycles = self.run_program(image.insns, insn_addr, max_cycles)
            return [(addr, self.read(addr, data.size)) for addr, data in image.segments], cycles
        finally:
            self.clear_dram()

    @staticmethod
    def _free_address(image: Image) -> int:
        """A page-aligned address above every segment (for images whose insn_addr is 0, "anywhere")."""
        end = max([addr + data.size for addr, data in image.segments] + [0x1000])
        return (end + 0xFFF) & ~0xFFF
