"""``RtlDevice``: the generated RTL, simulated cycle by cycle by Verilator, used like a board.

The shared library (hardware/build.py) is loaded through cffi in ABI mode. The device holds DRAM as the
harness's sparse pages; ``launch`` writes the registers as VTA's driver does (instruction count and address,
the modules' control words, then fetch's ap_start) and clocks the model until compute's ``done`` register is 1.

``reset`` pulses the model's reset input (SRAMs keep their contents, as on a board); ``reprogram`` makes a new
model (SRAMs zero, as after a bitstream download). VTA's counters come from the RTL's counter registers.

It offers the device surface of ``vta.device.SimDevice`` (``alloc/free/copy_in/copy_out/run -> stats``,
``last_stats``, ``cfg``), so operators and whole networks run on it unchanged
(``graph_pack.build(..., device=RtlDevice(cfg))``): buffers are placed first fit from page 1 as the
simulator places them, instructions go to a region of their own above them, and ``run`` returns an
``RtlRunStats`` (hardware/stats.py).
"""

from __future__ import annotations

import dataclasses
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from hardware import registers as R
from hardware.params import DRAM_CLIENTS, INTERCONNECT_CYCLES
from hardware.stats import RtlRunStats
from hardware.toolchain import require
from hw_config import HwConfig, load_config
from hw_config.buffer import Buffer, alloc_size, checked_buffer
from hw_config.checks import is_whole
from hw_config.isa_rules import MODULES, module_indices
from hw_config.layout import OPCODE_BITS, OPCODES
from hw_config.locking import serialised

CDEF = """
typedef struct vta_rtl vta_rtl;
vta_rtl* vta_rtl_create(uint64_t dram_latency);
void vta_rtl_destroy(vta_rtl* r);
int vta_rtl_bus_bytes(void);
int vta_rtl_reset(vta_rtl* r, int fresh);
unsigned vta_rtl_interrupts(vta_rtl* r);
int vta_rtl_dram_write(vta_rtl* r, uint64_t addr, const uint8_t* data, uint64_t n);
uint64_t vta_rtl_dram_read(vta_rtl* r, uint64_t addr, uint8_t* out, uint64_t n);
void vta_rtl_dram_clear(vta_rtl* r);
int vta_rtl_reg_write(vta_rtl* r, uint32_t offset, uint32_t value);
uint32_t vta_rtl_reg_read(vta_rtl* r, uint32_t offset);
int vta_rtl_run_until(vta_rtl* r, uint32_t offset, uint32_t mask, uint64_t max_cycles, uint64_t* cycles,
                      char* err, uint64_t errlen);
uint64_t vta_rtl_cycle(vta_rtl* r);
void vta_rtl_trace(vta_rtl* r, uint64_t limit);
uint64_t vta_rtl_trace_read(vta_rtl* r, uint64_t* out, uint64_t n);
void vta_rtl_dram_unmap(vta_rtl* r, uint64_t addr, uint64_t n);
void vta_rtl_module_stats(vta_rtl* r, uint64_t* insns, uint64_t* busy);
uint64_t vta_rtl_beats(vta_rtl* r, int written);
void vta_rtl_axi_stats(vta_rtl* r, uint64_t* out);
void vta_rtl_stress(vta_rtl* r, uint64_t seed, unsigned percent);
int vta_rtl_dram_settings(vta_rtl* r, const uint64_t* v, unsigned n);
void vta_rtl_dram_fail(vta_rtl* r, uint64_t lo, uint64_t hi, unsigned resp);
void vta_rtl_dram_errors(vta_rtl* r, uint64_t* out);
"""
# A run not done after this many cycles is stopped: ~3 minutes of Verilator here (1.3 s a million cycles), where
# one accelerator group of ResNet-18 takes ~1 M; the C simulator's 2^30 would leave a hung program clocking ~25 min
DEFAULT_MAX_CYCLES = 1 << 27
ADDRESS_LIMIT = 1 << 32         # the AXI4 master's addresses are 32 bits: DRAM is [0, 4 GiB)
INSN_BYTES = 16
PAGE = 1 << 12
BUFFER_LIMIT = 3 << 30          # buffers lie below 3 GiB (the AXI4 master's addresses are 32 bits) ...
INSN_REGION = BUFFER_LIMIT      # ... and ``run`` puts instruction streams above them, below 4 GiB
TRACE_LIMIT = 1 << 26           # events a traced run keeps (two per instruction)
_LIBS: dict[Path, Any] = {}


class RtlError(RuntimeError):
    """The RTL simulation could not finish a run (timeout or a DMA outside the DRAM the host wrote)."""


class DramError(RtlError):
    """DRAM answered one of the accelerator's bursts with an error (SLVERR or DECERR), as the AXI master's status
    register (hardware/registers.py AXI_STATUS) reported after the run; the run's results are not to be used."""


# Outstanding bursts the Zynq-7000's ACP port accepts (docs/hardware.md, "The DRAM port"): the read and write
# acceptance of the Cortex-A9 SCU's ACP as we recall them from UG585's interconnect table (not checked against a
# stored copy of the manual: treat them as estimates and set your own).
ACP_MAX_READS, ACP_MAX_WRITES = 7, 3
STALL_CHANNELS = ("ar", "aw", "w", "r", "b")


@dataclass(frozen=True)
class DramSettings:
    """How the Verilator harness's DRAM answers the accelerator's AXI4 master (hardware/csrc/harness.cpp).

    ``read_latency``: cycles from an AR to its first R beat; ``write_latency``: from a burst's last W beat to its
    B; ``max_reads`` / ``max_writes``: bursts outstanding before AR / AW wait; ``burst_gap``: idle cycles of the
    R (W) channel after each burst's last beat; ``stall_<channel>``: percent of cycles the slave holds AR, AW, W
    ready or R, B valid low at random (seeded by ``seed``). ``for_config`` gives the Pynq ACP port's values as
    far as the calibration data and the manuals say them (docs/hardware.md, "The DRAM port")."""

    read_latency: int
    write_latency: int
    max_reads: int = ACP_MAX_READS
    max_writes: int = ACP_MAX_WRITES
    burst_gap: int = 0
    stall_ar: int = 0
    stall_aw: int = 0
    stall_w: int = 0
    stall_r: int = 0
    stall_b: int = 0
    seed: int = 0

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            least, most = {"stall": (0, 99), "seed": (0, 2**64 - 1), "burst_gap": (0, 10_000)}.get(
                f.name.split("_")[0] if f.name.startswith("stall") else f.name, (1, 100_000))
            _whole(getattr(self, f.name), f"DramSettings.{f.name}", least, most)

    @classmethod
    def for_config(cls, cfg: HwConfig, **changes: int) -> DramSettings:
        """The ACP-like port for ``cfg``: the timing model's DRAM_LATENCY both ways, less the cycles the RTL's own
        arbiter adds (INTERCONNECT_CYCLES), the ACP's acceptance limits, the timing model's per-burst cost
        (DMA_BURST_GAP) charged by the port; ``changes`` override fields (back-pressure, say)."""
        latency = max(1, cfg.DRAM_LATENCY - INTERCONNECT_CYCLES)
        return dataclasses.replace(cls(latency, latency, burst_gap=cfg.DMA_BURST_GAP), **changes)

    def as_array(self) -> list[int]:
        """The order ``vta_rtl_dram_settings`` takes."""
        return [self.read_latency, self.write_latency, self.max_reads, self.max_writes, self.burst_gap,
                *(getattr(self, f"stall_{c}") for c in STALL_CHANNELS), self.seed]


class Image(Protocol):
    """What ``replay`` needs of a program image (simulator.image.ProgramImage has it)."""

    config: HwConfig
    insns: np.ndarray
    insn_addr: int
    segments: list[tuple[int, np.ndarray]]


class _Space:
    """Page-aligned regions placed first fit from page 1 (0 means null), as the simulator places buffers."""

    def __init__(self) -> None:
        self.sizes: dict[int, int] = {}

    def place(self, nbytes: int) -> int:
        need = -(-nbytes // PAGE) * PAGE
        cand = PAGE
        for base in sorted(self.sizes):
            if cand + need <= base:
                break
            cand = max(cand, base + self.sizes[base])
        if cand + need > BUFFER_LIMIT:
            raise RtlError(f"cannot allocate {nbytes} bytes: the device's {BUFFER_LIMIT >> 30} GiB of buffers are "
                           f"full")
        self.sizes[cand] = need
        return cand

    def release(self, addr: int) -> int:
        if addr not in self.sizes:
            raise RtlError(f"cannot free 0x{addr:x}: no buffer starts there")
        return self.sizes.pop(addr)


def _library(path: Path) -> tuple[Any, Any]:
    cffi = require("cffi", "loading the RTL simulation")
    if path not in _LIBS:
        ffi = cffi.FFI()
        ffi.cdef(CDEF)
        _LIBS[path] = (ffi, ffi.dlopen(str(path)))
    return _LIBS[path]


class RtlDevice:
    """The accelerator's RTL for ``cfg`` as a device: the Device surface (alloc, free, copy_in, copy_out,
    run), raw DRAM write/read, launch, replay of program images.

    The first use of a config builds its model (about a minute; then cached, see hardware/build.py).
    ``max_cycles`` bounds every ``run``.

    Threads: a device may be shared; its methods take turns on its lock (``run`` and ``replay`` each as a whole),
    as a simulator's do (docs/simulator.md, "Sharing a simulator between threads"). For speed, one per thread.

    ``dsp_packing``: the generator's option (two int8 products per DSP, hardware/dsp_packing.py); None builds
    the config's default (on for Xilinx boards). ``dram``: the harness DRAM's settings (``DramSettings``; None:
    the config's, ``DramSettings.for_config``). ``library``: a build of cfg's RTL to load instead of the cache's
    (hardware/build.py's training run loads its instrumented build this way)."""

    def __init__(self, cfg: HwConfig | str | None = None, progress=None, max_cycles: int = DEFAULT_MAX_CYCLES,
                 dsp_packing: bool | None = None, dram: DramSettings | None = None, library: Path | None = None):
        from hardware.build import ensure_built

        self.cfg = cfg if isinstance(cfg, HwConfig) else load_config(cfg)
        self.library = Path(library) if library is not None else ensure_built(self.cfg, progress,
                                                                               dsp_packing=dsp_packing)
        self._ffi, self._lib = _library(self.library)
        if self._lib.vta_rtl_bus_bytes() != self.cfg.BUS_BYTES:
            raise RtlError(f"{self.library} was built for a {self._lib.vta_rtl_bus_bytes()}-byte bus, the config "
                           f"has {self.cfg.BUS_BYTES}")
        handle = self._lib.vta_rtl_create(max(1, self.cfg.DRAM_LATENCY))
        if handle == self._ffi.NULL:
            raise RtlError("could not create the RTL model")
        self._handle = self._ffi.gc(handle, self._lib.vta_rtl_destroy)
        self.last_cycles = 0
        self.max_cycles = _whole(max_cycles, "max_cycles", 1, 2**64 - 1)
        self.last_stats: RtlRunStats | None = None
        self.wall_seconds = 0.0           # host time spent simulating runs (``run``), in all
        self.cpu_seconds = 0.0            # the CPU time of the thread that ran them (one core: load-proof-ish)
        self._space = _Space()
        self._lock = threading.RLock()    # serialised: one caller in the model at a time (RLock: run nests)
        self.dram_settings = DramSettings.for_config(self.cfg)
        self.set_dram(dram or self.dram_settings)

    # ---- the Device surface ----
    @serialised
    def alloc(self, nbytes: int) -> Buffer:
        """A zeroed, page-aligned DRAM buffer of ``nbytes`` bytes."""
        n = alloc_size(nbytes)
        addr = self._space.place(max(1, n))
        self.write(addr, np.zeros(self._space.sizes[addr], np.uint8))
        return Buffer(addr, n)

    @serialised
    def free(self, buf: Buffer) -> None:
        size = self._space.release(checked_buffer(buf).addr)
        self._lib.vta_rtl_dram_unmap(self._handle, buf.addr, size)

    @serialised
    def copy_in(self, buf: Buffer, data: np.ndarray | bytes, offset: int = 0) -> None:
        checked_buffer(buf)
        raw = np.frombuffer(data, np.uint8) if isinstance(data, (bytes, bytearray)) else \
            np.ascontiguousarray(data).reshape(-1).view(np.uint8)
        if offset < 0 or offset + raw.size > buf.nbytes:
            raise ValueError(f"copy of {raw.size} bytes at offset {offset} overruns a {buf.nbytes}-byte buffer")
        self.write(buf.addr + offset, raw)

    @serialised
    def copy_out(self, buf: Buffer, nbytes: int | None = None, offset: int = 0) -> np.ndarray:
        n = checked_buffer(buf).nbytes - offset if nbytes is None else nbytes
        if offset < 0 or n < 0 or offset + n > buf.nbytes:
            raise ValueError(f"read of {n} bytes at offset {offset} overruns a {buf.nbytes}-byte buffer")
        return self.read(buf.addr + offset, n)

    @serialised
    def run(self, insns: np.ndarray | bytes, *, compute: bool = True, trace: bool = False) -> RtlRunStats:
        """Run an instruction stream (it is written above every buffer); returns the run's stats, with the
        per-instruction (module, start, end) trace when ``trace``. The RTL always moves the data:
        ``compute=False`` (the simulator's timing-only run) runs the program in full, with the same cycles."""
        raw = _stream_bytes(insns)
        rows = raw.reshape(-1, INSN_BYTES)
        t0, c0 = time.perf_counter(), time.thread_time()
        self.write(INSN_REGION, raw)
        try:
            cycles, events = self._launch_traced(INSN_REGION, len(rows), self.max_cycles, trace)
        finally:
            self._lib.vta_rtl_dram_unmap(self._handle, INSN_REGION, -(-raw.size // PAGE) * PAGE)
        stats = RtlRunStats(cycles=cycles, finish_cycle=cycles, clock_mhz=self.cfg.CLOCK_MHZ,
                            host_seconds=time.perf_counter() - t0, **self.counters())
        self.wall_seconds += stats.host_seconds
        self.cpu_seconds += time.thread_time() - c0
        stats.latency_s = stats.seconds
        insns_n, busy = self._ffi.new("uint64_t[3]"), self._ffi.new("uint64_t[3]")
        self._lib.vta_rtl_module_stats(self._handle, insns_n, busy)
        stats.insns = {m: int(insns_n[i]) for i, m in enumerate(MODULES)}
        stats.busy = {m: int(busy[i]) for i, m in enumerate(MODULES)}
        if trace:
            stats.trace = self._pair_events(rows, events)
        self.last_stats = stats
        return stats

    def _reg(self, block: str, offset: int) -> int:
        return R.register_offset(self.cfg, block, offset)

    # ---- DRAM ----
    @serialised
    def write(self, addr: int, data: bytes | np.ndarray) -> None:
        """Write ``data``'s bytes into the model's DRAM at byte ``addr`` (inside [0, 4 GiB))."""
        raw = np.ascontiguousarray(np.frombuffer(bytes(data), np.uint8) if isinstance(data, (bytes, bytearray))
                                   else np.asarray(data)).view(np.uint8).reshape(-1)
        addr = _dram_range(addr, raw.size, "write")
        buf = self._ffi.from_buffer("uint8_t[]", raw)
        if self._lib.vta_rtl_dram_write(self._handle, addr, buf, raw.size):
            raise RtlError(f"DRAM write of {raw.size} bytes at 0x{addr:x} failed")

    @serialised
    def read(self, addr: int, nbytes: int) -> np.ndarray:
        """``nbytes`` bytes of the model's DRAM from byte ``addr`` (inside [0, 4 GiB); never written: zeros)."""
        addr = _dram_range(addr, nbytes, "read")   # before the buffer is allocated
        out = np.zeros(int(nbytes), np.uint8)
        self._lib.vta_rtl_dram_read(self._handle, addr, self._ffi.from_buffer("uint8_t[]", out), out.size)
        return out

    @serialised
    def clear_dram(self) -> None:
        self._lib.vta_rtl_dram_clear(self._handle)

    @serialised
    def reset(self) -> None:
        """Hold the reset input for 16 cycles, as a board's reset does: registers, token and command queues, the
        counters and the DMA engines start over; the SRAMs keep their contents (block RAM has no reset) and DRAM
        is kept."""
        if self._lib.vta_rtl_reset(self._handle, 0):
            raise RtlError("could not reset the RTL model")

    @serialised
    def reprogram(self) -> None:
        """As a bitstream download: a new model, every SRAM zero (block RAM's initial contents), then the reset;
        DRAM is kept. Runs compared with a fresh C simulator start here (its SRAMs are zero)."""
        if self._lib.vta_rtl_reset(self._handle, 1):
            raise RtlError("could not rebuild the RTL model")

    @serialised
    def interrupts(self) -> dict[str, bool]:
        """Each register block's interrupt output now (GIE and ISR, hardware/control.py)."""
        bits = int(self._lib.vta_rtl_interrupts(self._handle))
        return {block: bool(bits >> i & 1) for i, block in enumerate(R.MMIO_BLOCKS)}

    @serialised
    def counters(self) -> dict[str, int]:
        """The performance counters' registers (hardware/counters.py; a launch clears them), each read as its
        low word then its high word over AXI4-Lite."""
        out = {}
        for name, (block, offset) in R.COUNTER_REGISTERS.items():
            low = self.read_register(block, offset)
            out[name] = low | self.read_register(block, offset + 4) << 32
        return out

    # ---- registers and runs ----
    @serialised
    def write_register(self, block: str, offset: int, value: int) -> None:
        """Write a register through its block's AXI4-Lite port (a few clock cycles of the model)."""
        self.write_mmio(self._reg(block, offset), value)

    @serialised
    def read_register(self, block: str, offset: int) -> int:
        """Read a register through its block's AXI4-Lite port (reading a CTRL clears its ap_done)."""
        return self.read_mmio(self._reg(block, offset))

    @serialised
    def write_mmio(self, offset: int, value: int) -> None:
        """Write the register at byte ``offset`` from MMIO_BASE (block ``offset // MMIO_RANGE``) over AXI4-Lite."""
        offset = self._mmio(offset)
        if self._lib.vta_rtl_reg_write(self._handle, offset, _whole(value, "value", -(2**31), 2**32 - 1) & 0xFFFFFFFF):
            raise RtlError(f"the AXI4-Lite write of register 0x{offset:x} got no response")

    @serialised
    def read_mmio(self, offset: int) -> int:
        """Read the register at byte ``offset`` from MMIO_BASE over AXI4-Lite."""
        return int(self._lib.vta_rtl_reg_read(self._handle, self._mmio(offset)))

    def _mmio(self, offset: object) -> int:
        """An MMIO byte offset inside the four register blocks."""
        return _whole(offset, "MMIO offset", 0, len(R.MMIO_BLOCKS) * self.cfg.MMIO_RANGE - 1)

    @serialised
    def run_until_done(self, max_cycles: int) -> tuple[bool, int]:
        """Clock the model, polling compute's ``done`` over AXI4-Lite, for at most ``max_cycles`` cycles;
        returns (done, cycles). A DMA fault or an AXI violation raises ``RtlError``."""
        cycles = self._ffi.new("uint64_t*")
        err = self._ffi.new("char[]", 512)
        status = self._lib.vta_rtl_run_until(self._handle, self._reg("compute", R.COMPUTE_DONE_RD), 1, max_cycles,
                                             cycles, err, 512)
        if status == 2:
            raise RtlError(self._ffi.string(err).decode())
        return status == 0, int(cycles[0])

    @serialised
    def axi_stats(self) -> dict[str, int]:
        """The AXI4 master's traffic since the model was made: bursts and beats each way, longest bursts."""
        out = self._ffi.new("uint64_t[6]")
        self._lib.vta_rtl_axi_stats(self._handle, out)
        keys = ("read_bursts", "write_bursts", "read_beats", "write_beats", "longest_read", "longest_write")
        return {k: int(out[i]) for i, k in enumerate(keys)}

    @serialised
    def stress(self, percent: int, seed: int = 0) -> None:
        """Make the DRAM model stall its AXI4 ready signals and responses at random (``percent`` of cycles
        each; 0 stops it), to exercise the master's back-pressure."""
        self._lib.vta_rtl_stress(self._handle, _whole(seed, "seed", 0, 2**64 - 1), _whole(percent, "percent", 0, 100))

    @serialised
    def set_dram(self, settings: DramSettings) -> None:
        """Answer the accelerator's bursts with ``settings``' timing and back-pressure from now on."""
        if not isinstance(settings, DramSettings):
            raise TypeError(f"set_dram takes a DramSettings, not {type(settings).__name__}")
        values = self._ffi.new("uint64_t[]", settings.as_array())
        if self._lib.vta_rtl_dram_settings(self._handle, values, len(values)):
            raise RtlError("the RTL library does not take these DRAM settings (rebuild it)")
        self.dram_settings = settings

    @serialised
    def fail_dram(self, addr: int, nbytes: int, resp: str = "SLVERR") -> None:
        """Make DRAM answer every burst touching [addr, addr + nbytes) with ``resp`` (SLVERR or DECERR;
        nbytes 0 stops it): the next run raises ``DramError``."""
        codes = {name: code for code, name in R.RESP_NAMES.items() if name in ("SLVERR", "DECERR")}
        if resp not in codes:
            raise ValueError(f"resp={resp!r}: one of {', '.join(codes)}")
        addr = _dram_range(addr, nbytes, "fail_dram")
        self._lib.vta_rtl_dram_fail(self._handle, addr, addr + nbytes, codes[resp] if nbytes else 0)

    def _check_axi_status(self, count: int, insn_addr: int) -> None:
        """Raise ``DramError`` if the AXI master saw an error response in the run just finished."""
        status = self.read_register("fetch", R.AXI_STATUS)
        log = self._ffi.new("uint64_t[5]")
        self._lib.vta_rtl_dram_errors(self._handle, log)
        if not status & (R.STATUS_READ_ERROR | R.STATUS_WRITE_ERROR):
            return
        said = []
        for flag, kind, shift, resp_shift in ((R.STATUS_READ_ERROR, "read", R.STATUS_RID_SHIFT, R.STATUS_RRESP_SHIFT),
                                              (R.STATUS_WRITE_ERROR, "write", R.STATUS_BID_SHIFT,
                                               R.STATUS_BRESP_SHIFT)):
            if status & flag:
                ident = (status >> shift) & 0x7
                client = DRAM_CLIENTS[ident] if ident < len(DRAM_CLIENTS) else f"ID {ident}"
                said.append(f"a {kind} of {client} got {R.RESP_NAMES[(status >> resp_shift) & 3]}")
        where = (f"; the first failing burst: a {'write' if log[1] else 'read'} at 0x{int(log[2]):x} "
                 f"({R.RESP_NAMES[int(log[4])]})") if log[0] else ""
        raise DramError(f"RTL run of {count} instructions at 0x{insn_addr:x}: DRAM answered with an error: "
                        f"{', '.join(said)} (AXI status register 0x{status:08x}){where}")

    @serialised
    def launch(self, insn_addr: int, count: int, max_cycles: int = DEFAULT_MAX_CYCLES) -> int:
        """Run ``count`` instructions at DRAM byte address ``insn_addr``; returns the cycles from launch to done."""
        return self._launch_traced(insn_addr, count, max_cycles, False)[0]

    def _launch_traced(self, insn_addr: int, count: int, max_cycles: int, trace: bool) -> tuple[int, np.ndarray]:
        """Launch as VTA's driver does; returns (cycles, the events port's record relative to the launch)."""
        count = _whole(count, "count", 1, (ADDRESS_LIMIT - 1) // INSN_BYTES)   # fetch's count register is 32 bits
        max_cycles = _whole(max_cycles, "max_cycles", 1, 2**64 - 1)
        _dram_range(insn_addr, count * INSN_BYTES, "instruction fetch")
        self._lib.vta_rtl_module_stats(self._handle, self._ffi.new("uint64_t[3]"), self._ffi.new("uint64_t[3]"))
        self._lib.vta_rtl_trace(self._handle, TRACE_LIMIT if trace else 0)
        self.write_register("fetch", R.FETCH_INSN_COUNT, count)
        self.write_register("fetch", R.FETCH_INSN_ADDR, insn_addr)
        self.write_register("fetch", R.FETCH_INSN_ADDR + 4, insn_addr >> 32)
        for block in ("load", "compute", "store"):
            self.write_register(block, R.CTRL, R.AP_START | R.AUTO_RESTART)
        self.write_register("fetch", R.CTRL, R.AP_START)
        start = int(self._lib.vta_rtl_cycle(self._handle))
        cycles = self._ffi.new("uint64_t*")
        err = self._ffi.new("char[]", 512)
        status = self._lib.vta_rtl_run_until(self._handle, self._reg("compute", R.COMPUTE_DONE_RD), 1,
                                             max_cycles, cycles, err, 512)
        self.last_cycles = int(cycles[0])
        if status:
            message = self._ffi.string(err).decode()
            dispatched = self.read_register("fetch", R.FETCH_DISPATCHED)
            self._lib.vta_rtl_reset(self._handle, 0)
            raise RtlError(f"RTL run of {count} instructions at 0x{insn_addr:x}: {message} (fetch had dispatched "
                           f"{dispatched}); the model was reset")
        self._check_axi_status(count, insn_addr)
        events = np.zeros(0, np.uint64)
        if trace:
            n = int(self._lib.vta_rtl_trace_read(self._handle, self._ffi.NULL, 0))
            events = np.zeros(min(n, TRACE_LIMIT), np.uint64)
            self._lib.vta_rtl_trace_read(self._handle, self._ffi.cast("uint64_t*", self._ffi.from_buffer(events)),
                                         events.size)
            self._lib.vta_rtl_trace(self._handle, 0)
            events = np.stack([(events >> np.uint64(8)).astype(np.int64) - start,
                               (events & np.uint64(0xFF)).astype(np.int64)], axis=1)
        return self.last_cycles, events

    def _pair_events(self, rows: np.ndarray, events: np.ndarray) -> list[tuple[str, int, int]]:
        """(module, start, end) per instruction in program order, from the events port's record: the k-th
        start and finish of a module belong to the k-th instruction routed to it (modules run in order)."""
        mem = self.cfg.insn_formats["mem"].decode_rows(rows)
        mods = module_indices(mem["opcode"], mem["memory_type"])
        starts = {m: events[events[:, 1] == 2 * m, 0] for m in range(len(MODULES))}
        ends = {m: events[events[:, 1] == 2 * m + 1, 0] + 1 for m in range(len(MODULES))}
        seen = [0] * len(MODULES)
        out = []
        for m in mods:
            k = seen[m]
            seen[m] += 1
            if k >= len(ends[m]):
                raise RtlError(f"trace: {MODULES[m]} finished {len(ends[m])} instructions, the program routes more "
                               f"to it (more than {TRACE_LIMIT} events?)")
            out.append((MODULES[m], int(starts[m][k]), int(ends[m][k])))
        return out

    @serialised
    def run_program(self, insns: np.ndarray | bytes, insn_addr: int, max_cycles: int = DEFAULT_MAX_CYCLES) -> int:
        """Write an instruction stream to DRAM at ``insn_addr`` and run it."""
        raw = _stream_bytes(insns)
        self.write(insn_addr, raw)
        return self.launch(insn_addr, raw.size // INSN_BYTES, max_cycles)

    @serialised
    def replay(self, image: Image, max_cycles: int = DEFAULT_MAX_CYCLES) -> tuple[list[tuple[int, np.ndarray]], int]:
        """Run a program image: write its segments and stream, run, read the segments back.
        Returns (final segments, cycles). DRAM is cleared first and after, so replays do not leak: that
        includes buffers from ``alloc``, so replay images on a device of their own, not one a network uses."""
        if not all(hasattr(image, k) for k in ("config", "insns", "segments", "insn_addr")):
            raise TypeError(f"replay takes a program image (simulator.image.load_image(path)), not "
                            f"{type(image).__name__}")
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


def _stream_bytes(insns: np.ndarray | bytes) -> np.ndarray:
    """The stream as bytes, refused (ValueError/TypeError) unless it is whole instructions ending with FINISH: the
    model would run until its cycle limit on a stream whose end never signals done."""
    if isinstance(insns, (bytes, bytearray, memoryview)):
        raw = np.frombuffer(bytes(insns), np.uint8)
    elif isinstance(insns, np.ndarray) and insns.dtype == np.uint8:
        raw = np.ascontiguousarray(insns).reshape(-1)
    else:
        raise TypeError(f"an instruction stream is bytes or a uint8 array (N, {INSN_BYTES}), not "
                        f"{getattr(insns, 'dtype', type(insns).__name__)}")
    if raw.size % INSN_BYTES or not raw.size:
        raise ValueError(f"an instruction stream is one or more {INSN_BYTES}-byte instructions, got {raw.size} bytes")
    if raw[-INSN_BYTES] & ((1 << OPCODE_BITS) - 1) != OPCODES["FINISH"]:
        raise ValueError(f"instruction {raw.size // INSN_BYTES - 1}: the stream does not end with FINISH, so the "
                         "accelerator would never signal done")
    return raw


def _whole(value: object, name: str, least: int, most: int) -> int:
    """``value`` as an int in [least, most], or a ValueError naming ``name`` and the range."""
    if not is_whole(value) or not least <= value <= most:
        raise ValueError(f"{name}={value!r}: an integer {least}..{most}")
    return int(value)


def _dram_range(addr: object, nbytes: object, what: str) -> int:
    """``addr`` once [addr, addr + nbytes) is checked to lie in the model's DRAM, [0, 4 GiB)."""
    addr, n = _whole(addr, f"{what} addr", 0, ADDRESS_LIMIT - 1), _whole(nbytes, f"{what} nbytes", 0, ADDRESS_LIMIT)
    if addr + n > ADDRESS_LIMIT:
        raise ValueError(f"{what} of {n} bytes at 0x{addr:x}: past the model's 4 GiB of DRAM (32-bit addresses)")
    return addr
