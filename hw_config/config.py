"""The hardware configuration: VTA's JSON keys plus the platform/timing parameters, validated once.

Every number any other layer needs (widths, element sizes, SRAM depths, instruction field positions,
bitstream and model strings, bus and timing parameters) is derived here and nowhere else.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import math
import numbers
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields, replace
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np

from hw_config.capabilities import CAPABILITY_SETS, Capabilities, default_capabilities
from hw_config.layout import MEM_TYPES, MEMOP_ID_BITS, MEMOP_SRAM_ADDR_BITS, Format, instruction_formats
from hw_config.reading import read_bounded

PRESET_DIR = Path(__file__).with_name("presets")
DEFAULT_PRESET = "pynq"

TARGETS = ("sim", "tsim", "pynq", "ultra96", "zcu104", "de10nano", "intelfocl")
# Which preset supplies platform/timing parameters for a config that carries only VTA's keys.
PLATFORM_PRESET_OF_TARGET = {"sim": "sim", "tsim": "sim", "intelfocl": "sim", "pynq": "pynq",
                             "ultra96": "ultra96", "zcu104": "zcu104", "de10nano": "de10nano"}

VTA_KEYS = ("TARGET", "HW_VER", "LOG_INP_WIDTH", "LOG_WGT_WIDTH", "LOG_ACC_WIDTH", "LOG_BATCH", "LOG_BLOCK",
            "LOG_UOP_BUFF_SIZE", "LOG_INP_BUFF_SIZE", "LOG_WGT_BUFF_SIZE", "LOG_ACC_BUFF_SIZE")
PLATFORM_KEYS = ("CLOCK_MHZ", "LOG_BUS_WIDTH", "DRAM_LATENCY", "DMA_BURST_BEATS", "DMA_BURST_GAP", "GEMM_II",
                 "ALU_II", "COMPUTE_LATENCY", "INSN_QUEUE_DEPTH", "TOKEN_QUEUE_DEPTH")
# How a board exposes the accelerator (VTA's pkg_config.py): they change neither programs nor timing, so they
# stay out of the fingerprint (tuning records stay valid across boards of one design).
BOARD_KEYS = ("MMIO_BASE", "MMIO_RANGE", "COHERENT", "BOARD_MEM_MB")
MMIO_BLOCKS = ("fetch", "load", "compute", "store")   # register blocks at MMIO_BASE + i * MMIO_RANGE
# The board latency model (simulator/latency.py, docs/calibrate.md): what one call costs on a real board beyond
# the accelerator's simulated cycles. They change no program and no cycle count, only ``RunStats.latency_s``,
# the tuners' objective, so a calibrated board is a different fingerprint; at their neutral values (no board
# model: latency = cycles at the clock) they stay out of it, so uncalibrated configs keep their fingerprints.
LATENCY_KEYS = ("LAUNCH_US", "HOST_INSN_NS", "HOST_UOP_NS", "CACHE_NS_PER_BYTE", "DMA_EFFICIENCY", "DMA_ROW_CYCLES",
                "COMPUTE_LOOP_CYCLES")
# A board model is fitted to one design (the bitstream the board ran: its core, buffers, bus, clock, queues):
# CALIBRATED_FOR holds that design's ``design_fingerprint``, and the model applies only to a config of that design
# (``HwConfig.board_model``); a variant (another bus, block, clock, ...) keeps the keys but gets cycles-only times.
# "" = not recorded: the keys apply as given (a config that sets them itself).
LATENCY_NEUTRAL = {"LAUNCH_US": 0.0, "HOST_INSN_NS": 0.0, "HOST_UOP_NS": 0.0, "CACHE_NS_PER_BYTE": 0.0,
                   "DMA_EFFICIENCY": 1.0, "DMA_ROW_CYCLES": 0.0, "COMPUTE_LOOP_CYCLES": 0.0}
# key -> (lowest, highest, what it means); DMA_EFFICIENCY must also be > 0.
LATENCY_RANGES: dict[str, tuple[float, float, str]] = {
    "LAUNCH_US": (0.0, 1e6, "microseconds per launch: the runtime starting the accelerator and polling for done"),
    "HOST_INSN_NS": (0.0, 1e6, "nanoseconds of the board's CPU per instruction the runtime builds"),
    "HOST_UOP_NS": (0.0, 1e6, "nanoseconds of the board's CPU per micro-op copied to the micro-op buffer"),
    "CACHE_NS_PER_BYTE": (0.0, 1e3, "nanoseconds of cache flush/invalidate per byte the accelerator reads or writes"),
    "DMA_EFFICIENCY": (0.0, 1.0, "fraction of the AXI port's peak a DMA burst sustains on the board, in (0, 1]"),
    "DMA_ROW_CYCLES": (0.0, 1e5, "extra cycles per DMA row (DRAM row opened, new burst address)"),
    "COMPUTE_LOOP_CYCLES": (0.0, 1e5, "extra cycles per GEMM/ALU loop iteration (micro-op pipeline fill)"),
}

# key -> (allowed range, what it means). Ranges beyond what the simulator supports are refused here.
INT_RANGES: dict[str, tuple[int, int, str]] = {
    "LOG_INP_WIDTH": (3, 3, "log2 of input bits; the simulator supports int8 inputs only"),
    "LOG_WGT_WIDTH": (3, 3, "log2 of weight bits; the simulator supports int8 weights only"),
    "LOG_ACC_WIDTH": (5, 5, "log2 of accumulator bits; the simulator supports int32 accumulators only"),
    "LOG_BATCH": (0, 4, "log2 of the GEMM core's BATCH"),
    "LOG_BLOCK": (1, 6, "log2 of the GEMM core's BLOCK_IN = BLOCK_OUT"),
    "LOG_UOP_BUFF_SIZE": (2, 24, "log2 of micro-op SRAM bytes"),
    "LOG_INP_BUFF_SIZE": (4, 26, "log2 of input SRAM bytes"),
    "LOG_WGT_BUFF_SIZE": (4, 28, "log2 of weight SRAM bytes"),
    "LOG_ACC_BUFF_SIZE": (4, 28, "log2 of accumulator SRAM bytes"),
    "LOG_BUS_WIDTH": (5, 10, "log2 of the AXI data bus width in bits (6 = 64-bit)"),
    "DRAM_LATENCY": (0, 100_000, "cycles from a DMA request to its first beat"),
    "DMA_BURST_BEATS": (1, 4096, "bus beats per AXI burst"),
    "DMA_BURST_GAP": (0, 10_000, "idle cycles between bursts (each new 2D row starts a burst)"),
    "GEMM_II": (1, 64, "cycles per GEMM micro-op iteration"),
    "ALU_II": (1, 64, "cycles per ALU micro-op iteration"),
    "COMPUTE_LATENCY": (0, 10_000, "pipeline fill cycles per GEMM/ALU instruction"),
    "INSN_QUEUE_DEPTH": (1, 65_536, "instructions each module's command queue holds"),
    "TOKEN_QUEUE_DEPTH": (1, 1024, "tokens a dependency queue holds (VTA's block design: 1,024)"),
}


# Every SRAM holds at least two tiles (a depth of one leaves its index fields 0 bits wide, which neither VTA's
# hw_spec.h bit-fields nor our layout can express) and no more than the 16-bit sram_base field addresses.
MIN_LOG_DEPTH, MAX_LOG_DEPTH = 1, MEMOP_SRAM_ADDR_BITS


def sim_param_ranges() -> dict[str, tuple[int, int]]:
    """The values each scalar the C simulator receives (``simulator/params.py``) takes over all valid configs:
    attribute -> (lowest, highest). BATCH, BLOCK_IN/OUT, the four depths and BUS_BYTES are powers of two.

    Derived from ``INT_RANGES`` and the depth rule above, so it is what ``_validate`` accepts;
    ``simulator/csrc/vta_isa.h`` carries it to C (``python -m hw_config.isa_rules --c-header``)."""
    r = {key: (lo, hi) for key, (lo, hi, _) in INT_RANGES.items()}

    def powers(key: str, shift: int = 0) -> tuple[int, int]:
        return (1 << r[key][0]) >> shift, (1 << r[key][1]) >> shift

    depth = (1 << MIN_LOG_DEPTH, 1 << MAX_LOG_DEPTH)
    return {"BATCH": powers("LOG_BATCH"), "BLOCK_IN": powers("LOG_BLOCK"), "BLOCK_OUT": powers("LOG_BLOCK"),
            "UOP_BUFF_DEPTH": depth, "INP_BUFF_DEPTH": depth, "WGT_BUFF_DEPTH": depth, "ACC_BUFF_DEPTH": depth,
            "BUS_BYTES": powers("LOG_BUS_WIDTH", 3),
            **{key: r[key] for key in ("DRAM_LATENCY", "DMA_BURST_BEATS", "DMA_BURST_GAP", "GEMM_II", "ALU_II",
                                       "COMPUTE_LATENCY", "INSN_QUEUE_DEPTH", "TOKEN_QUEUE_DEPTH")}}


# How ``HwConfig.name`` says a timing field that differs from the TARGET's preset (the bitstream's fields are in
# ``model`` already): LOG_BUS_WIDTH=7 -> "bus128", CLOCK_MHZ=150 -> "150MHz", ...
NAME_TAGS: dict[str, Any] = {
    "LOG_BUS_WIDTH": lambda v: f"bus{1 << v}", "CLOCK_MHZ": lambda v: f"{v:g}MHz", "DRAM_LATENCY": lambda v: f"dram{v}",
    "DMA_BURST_BEATS": lambda v: f"burst{v}", "DMA_BURST_GAP": lambda v: f"gap{v}", "GEMM_II": lambda v: f"gemmii{v}",
    "ALU_II": lambda v: f"aluii{v}", "COMPUTE_LATENCY": lambda v: f"clat{v}", "INSN_QUEUE_DEPTH": lambda v: f"iq{v}",
    "TOKEN_QUEUE_DEPTH": lambda v: f"tq{v}"}
assert set(NAME_TAGS) == set(PLATFORM_KEYS)


class ConfigError(ValueError):
    """A configuration was refused; ``key`` names the offending key."""

    def __init__(self, key: str, message: str):
        super().__init__(message)
        self.key = key


def _fail(key: str, value: Any, allowed: str) -> ConfigError:
    return ConfigError(key, f"hardware config: {key}={value!r} is not allowed: {allowed}")


@dataclass(frozen=True)
class HwConfig:
    """An immutable, validated accelerator configuration (build with ``load_config``)."""

    TARGET: str
    HW_VER: str
    LOG_INP_WIDTH: int
    LOG_WGT_WIDTH: int
    LOG_ACC_WIDTH: int
    LOG_BATCH: int
    LOG_BLOCK: int
    LOG_UOP_BUFF_SIZE: int
    LOG_INP_BUFF_SIZE: int
    LOG_WGT_BUFF_SIZE: int
    LOG_ACC_BUFF_SIZE: int
    CLOCK_MHZ: float
    LOG_BUS_WIDTH: int
    DRAM_LATENCY: int
    DMA_BURST_BEATS: int
    DMA_BURST_GAP: int
    GEMM_II: int
    ALU_II: int
    COMPUTE_LATENCY: int
    INSN_QUEUE_DEPTH: int
    TOKEN_QUEUE_DEPTH: int
    # board latency model (LATENCY_KEYS): neutral defaults = no board model
    LAUNCH_US: float = 0.0
    HOST_INSN_NS: float = 0.0
    HOST_UOP_NS: float = 0.0
    CACHE_NS_PER_BYTE: float = 0.0
    DMA_EFFICIENCY: float = 1.0
    DMA_ROW_CYCLES: float = 0.0
    COMPUTE_LOOP_CYCLES: float = 0.0
    CALIBRATED_FOR: str = ""        # the design_fingerprint the board model was fitted on ("" = any)
    DESCRIPTION: str = ""
    MMIO_BASE: int = 0x43C00000     # physical address of the fetch module's AXI-lite registers
    MMIO_RANGE: int = 0x1000        # spacing of the four register blocks (VTA's ip_reg_map_range)
    COHERENT: bool = True           # the accelerator's DMA sees the CPU caches (no flush/invalidate needed)
    BOARD_MEM_MB: int = 512         # DRAM of the board, the bound of its buffers
    # what the implementation executes (hw_config.capabilities); "" = VTA's for TARGET and HW_VER
    CAPABILITIES: str = ""

    def __post_init__(self) -> None:
        if self.CAPABILITIES == "" and isinstance(self.TARGET, str) and isinstance(self.HW_VER, str):
            object.__setattr__(self, "CAPABILITIES", default_capabilities(self.TARGET, self.HW_VER))
        _validate(self)

    @property
    def dma_window(self) -> int:
        """Bytes of physical memory from 0 the accelerator's AXI masters reach on the board (VTA's vivado.tcl
        maps them to the Zynq-7000's ACP DDR window, 1 GiB, and UltraScale+'s HPC0 DDR_LOW, 2 GiB); 4 GiB, the
        32-bit DRAM address field's reach, elsewhere."""
        return {"pynq": 1 << 30, "ultra96": 2 << 30, "zcu104": 2 << 30}.get(self.TARGET, 1 << 32)

    @property
    def capabilities(self) -> Capabilities:
        """The share of the ISA this config's hardware executes (``CAPABILITY_SETS[CAPABILITIES]``)."""
        return CAPABILITY_SETS[self.CAPABILITIES]

    # ---- widths and shapes (names as in VTA's Environment) ----
    LOG_BLOCK_IN = property(lambda self: self.LOG_BLOCK)
    LOG_BLOCK_OUT = property(lambda self: self.LOG_BLOCK)
    LOG_OUT_WIDTH = property(lambda self: self.LOG_INP_WIDTH)
    LOG_OUT_BUFF_SIZE = property(lambda self: self.LOG_ACC_BUFF_SIZE + self.LOG_OUT_WIDTH - self.LOG_ACC_WIDTH)
    INP_WIDTH = property(lambda self: 1 << self.LOG_INP_WIDTH)
    WGT_WIDTH = property(lambda self: 1 << self.LOG_WGT_WIDTH)
    ACC_WIDTH = property(lambda self: 1 << self.LOG_ACC_WIDTH)
    OUT_WIDTH = property(lambda self: 1 << self.LOG_OUT_WIDTH)
    BATCH = property(lambda self: 1 << self.LOG_BATCH)
    BLOCK_IN = property(lambda self: 1 << self.LOG_BLOCK)
    BLOCK_OUT = property(lambda self: 1 << self.LOG_BLOCK)
    UOP_BUFF_SIZE = property(lambda self: 1 << self.LOG_UOP_BUFF_SIZE)
    INP_BUFF_SIZE = property(lambda self: 1 << self.LOG_INP_BUFF_SIZE)
    WGT_BUFF_SIZE = property(lambda self: 1 << self.LOG_WGT_BUFF_SIZE)
    ACC_BUFF_SIZE = property(lambda self: 1 << self.LOG_ACC_BUFF_SIZE)
    OUT_BUFF_SIZE = property(lambda self: 1 << self.LOG_OUT_BUFF_SIZE)
    INP_ELEM_BITS = property(lambda self: self.BATCH * self.BLOCK_IN * self.INP_WIDTH)
    WGT_ELEM_BITS = property(lambda self: self.BLOCK_OUT * self.BLOCK_IN * self.WGT_WIDTH)
    ACC_ELEM_BITS = property(lambda self: self.BATCH * self.BLOCK_OUT * self.ACC_WIDTH)
    OUT_ELEM_BITS = property(lambda self: self.BATCH * self.BLOCK_OUT * self.OUT_WIDTH)
    UOP_ELEM_BITS = property(lambda self: 32)
    INP_ELEM_BYTES = property(lambda self: self.INP_ELEM_BITS // 8)
    WGT_ELEM_BYTES = property(lambda self: self.WGT_ELEM_BITS // 8)
    ACC_ELEM_BYTES = property(lambda self: self.ACC_ELEM_BITS // 8)
    OUT_ELEM_BYTES = property(lambda self: self.OUT_ELEM_BITS // 8)
    UOP_ELEM_BYTES = property(lambda self: 4)
    LOG_UOP_BUFF_DEPTH = property(lambda self: self.LOG_UOP_BUFF_SIZE - 2)
    LOG_INP_BUFF_DEPTH = property(
        lambda self: self.LOG_INP_BUFF_SIZE - self.LOG_BATCH - self.LOG_BLOCK - self.LOG_INP_WIDTH + 3)
    LOG_WGT_BUFF_DEPTH = property(
        lambda self: self.LOG_WGT_BUFF_SIZE - 2 * self.LOG_BLOCK - self.LOG_WGT_WIDTH + 3)
    LOG_ACC_BUFF_DEPTH = property(
        lambda self: self.LOG_ACC_BUFF_SIZE - self.LOG_BATCH - self.LOG_BLOCK - self.LOG_ACC_WIDTH + 3)
    UOP_BUFF_DEPTH = property(lambda self: 1 << self.LOG_UOP_BUFF_DEPTH)
    INP_BUFF_DEPTH = property(lambda self: 1 << self.LOG_INP_BUFF_DEPTH)
    WGT_BUFF_DEPTH = property(lambda self: 1 << self.LOG_WGT_BUFF_DEPTH)
    ACC_BUFF_DEPTH = property(lambda self: 1 << self.LOG_ACC_BUFF_DEPTH)
    OUT_BUFF_DEPTH = property(lambda self: 1 << self.LOG_ACC_BUFF_DEPTH)
    inp_dtype = property(lambda self: f"int{self.INP_WIDTH}")
    wgt_dtype = property(lambda self: f"int{self.WGT_WIDTH}")
    acc_dtype = property(lambda self: f"int{self.ACC_WIDTH}")
    out_dtype = property(lambda self: f"int{self.OUT_WIDTH}")

    # ---- bus and timing ----
    BUS_WIDTH = property(lambda self: 1 << self.LOG_BUS_WIDTH)
    BUS_BYTES = property(lambda self: self.BUS_WIDTH // 8)
    INP_MAT_AXI_RATIO = property(lambda self: max(1, self.INP_ELEM_BITS // self.BUS_WIDTH))
    WGT_MAT_AXI_RATIO = property(lambda self: max(1, self.WGT_ELEM_BITS // self.BUS_WIDTH))
    ACC_MAT_AXI_RATIO = property(lambda self: max(1, self.ACC_ELEM_BITS // self.BUS_WIDTH))
    OUT_MAT_AXI_RATIO = property(lambda self: max(1, self.OUT_ELEM_BITS // self.BUS_WIDTH))
    MACS_PER_CYCLE = property(lambda self: self.BATCH * self.BLOCK_IN * self.BLOCK_OUT)

    @property
    def peak_gops(self) -> float:
        """Peak int8 throughput: two ops per MAC, one GEMM iteration every GEMM_II cycles."""
        return 2 * self.MACS_PER_CYCLE * self.CLOCK_MHZ / self.GEMM_II / 1000.0

    # ---- names ----
    @property
    def bitstream(self) -> str:
        return (f"{self.BATCH}x{self.BLOCK_IN}_i{self.INP_WIDTH}w{self.WGT_WIDTH}a{self.ACC_WIDTH}"
                f"_{self.LOG_UOP_BUFF_SIZE}_{self.LOG_INP_BUFF_SIZE}_{self.LOG_WGT_BUFF_SIZE}_{self.LOG_ACC_BUFF_SIZE}")

    @property
    def model(self) -> str:
        return f"{self.TARGET}_{self.bitstream}"

    BITSTREAM = property(lambda self: self.bitstream)
    MODEL = property(lambda self: self.model)

    @cached_property
    def name(self) -> str:
        """The config's name as the commands print it: VTA's ``model`` (TARGET and the bitstream's fields, which a
        bitstream's and a tuning target's names require unchanged), then every timing field that differs from the
        TARGET's preset, so two designs never print one name: ``pynq_1x16_i8w8a32_15_15_17_17_bus128``; and
        ``_board-<6 hex>`` for a board model of its own, ``_noboard`` for the preset's design without the preset's
        model. The pynq preset's name is VTA's ``pynq_1x16_i8w8a32_15_15_18_17``."""
        preset = load_config(PLATFORM_PRESET_OF_TARGET[self.TARGET])
        parts = [self.model]
        for key, text in NAME_TAGS.items():
            if getattr(self, key) != getattr(preset, key):
                parts.append(text(getattr(self, key)))
        if self.board_model and (not preset.board_model or self.latency_params() != preset.latency_params()):
            tag = hashlib.sha256(json.dumps(self.latency_params(), sort_keys=True).encode()).hexdigest()[:6]
            parts.append(f"board-{tag}")
        elif not self.board_model and preset.board_model and self.design_fingerprint == preset.design_fingerprint:
            parts.append("noboard")
        return "_".join(parts)

    # ---- ISA layout ----
    @cached_property
    def insn_formats(self) -> dict[str, Format]:
        return instruction_formats(self.LOG_UOP_BUFF_DEPTH, self.LOG_INP_BUFF_DEPTH, self.LOG_WGT_BUFF_DEPTH,
                                   self.LOG_ACC_BUFF_DEPTH, self.LOG_ACC_WIDTH)

    @cached_property
    def elem_bytes_by_type(self) -> np.ndarray:
        """``elem_bytes`` of every memory-type value an instruction's 3-bit field can hold, as an int64 array
        (0 where the ISA defines no type): for decoding whole instruction streams at once."""
        table = np.zeros(1 << MEMOP_ID_BITS, dtype=np.int64)
        for name, value in MEM_TYPES.items():
            table[value] = self.elem_bytes(name)
        return table

    def elem_bytes(self, mem_type: int | str) -> int:
        """Bytes of one DRAM element of a memory type (the unit of an instruction's dram_base)."""
        name = mem_type if isinstance(mem_type, str) else {v: k for k, v in MEM_TYPES.items()}.get(mem_type)
        if name not in self._elem_bytes:
            raise ValueError(f"unknown memory type {mem_type!r}; allowed: {sorted(MEM_TYPES)}")
        return self._elem_bytes[name]

    @cached_property
    def _elem_bytes(self) -> dict[str, int]:
        return {"UOP": self.UOP_ELEM_BYTES, "WGT": self.WGT_ELEM_BYTES, "INP": self.INP_ELEM_BYTES,
                "ACC": self.ACC_ELEM_BYTES, "OUT": self.OUT_ELEM_BYTES,
                "ACC_8BIT": self.BATCH * self.BLOCK_OUT * self.INP_WIDTH // 8}

    # ---- serialisation ----
    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent)

    def vta_dict(self) -> dict[str, Any]:
        """Only VTA's own keys, as in VTA's vta_config.json."""
        return {k: getattr(self, k) for k in VTA_KEYS}

    def mmio_address(self, block: str) -> int:
        """Physical address of a register block ("fetch", "load", "compute", "store")."""
        if block not in MMIO_BLOCKS:
            raise ValueError(f"unknown register block {block!r}; allowed: {', '.join(MMIO_BLOCKS)}")
        return self.MMIO_BASE + MMIO_BLOCKS.index(block) * self.MMIO_RANGE

    @property
    def fingerprint(self) -> str:
        """Stable hash of everything that changes programs or timing (the description and the board's address
        map excluded; the board latency model included when it applies and is not neutral)."""
        return self._fingerprint(with_board_model=self.board_model)

    @property
    def hardware_fingerprint(self) -> str:
        """The fingerprint without the board latency model, which changes no hardware: what the generated RTL and
        its syntheses are cached by, so a calibrated preset and its design uncalibrated share them (it is
        ``fingerprint`` wherever no board model applies)."""
        return self._fingerprint(with_board_model=False)

    def _fingerprint(self, with_board_model: bool) -> str:
        d = self.to_dict()
        for key in ("DESCRIPTION", "CAPABILITIES", "CALIBRATED_FOR", *BOARD_KEYS):   # capabilities refuse programs
            d.pop(key)
        for key in LATENCY_KEYS:
            if not with_board_model or d[key] == LATENCY_NEUTRAL[key]:
                d.pop(key)
        return hashlib.sha256(json.dumps(d, sort_keys=True).encode()).hexdigest()[:16]

    @cached_property
    def design_fingerprint(self) -> str:
        """Stable hash of the design alone: what changes programs or cycles (the fingerprint without the board
        latency model). A board model is calibrated for one (``CALIBRATED_FOR``)."""
        d = self.to_dict()
        for key in ("DESCRIPTION", "CAPABILITIES", "CALIBRATED_FOR", *BOARD_KEYS, *LATENCY_KEYS):
            d.pop(key)
        d["CLOCK_MHZ"] = float(d["CLOCK_MHZ"])   # 100 and 100.0 MHz are one design
        return hashlib.sha256(json.dumps(d, sort_keys=True).encode()).hexdigest()[:16]

    @property
    def has_latency_keys(self) -> bool:
        """Whether any LATENCY_KEYS value is not neutral (a board model, applied or not: ``board_model``)."""
        return any(getattr(self, k) != LATENCY_NEUTRAL[k] for k in LATENCY_KEYS)

    @property
    def board_model(self) -> bool:
        """Whether the board latency model applies: the config carries one (a LATENCY_KEYS value not neutral) and
        it was calibrated for this design (``CALIBRATED_FOR`` is this config's ``design_fingerprint``, or "")."""
        return self.has_latency_keys and self.CALIBRATED_FOR in ("", self.design_fingerprint)

    def board_model_note(self) -> str | None:
        """Why a config has no board model (its times are cycles at the clock), in one line; None when it has
        one: one carried but calibrated for another design, or none calibrated for this design's board at all."""
        if self.board_model:
            return None
        if not self.has_latency_keys:
            return (f"no board model: none is calibrated for {self.name}'s design (vta calibrate fits one to board "
                    "measurements, docs/calibrate.md); times are the simulator's cycles at the clock")
        whose = next((f"the {name} preset's design" for name in presets()
                      if (c := load_config(name)).CALIBRATED_FOR == self.CALIBRATED_FOR and c.board_model), None)
        return (f"no board model: its board latency model was calibrated for another design "
                f"({whose or f'design fingerprint {self.CALIBRATED_FOR}'}), not for {self.name}; times are the "
                "simulator's cycles at the clock")

    def latency_params(self) -> dict[str, float]:
        """The board latency model's parameters (LATENCY_KEYS)."""
        return {k: getattr(self, k) for k in LATENCY_KEYS}

    def derived(self) -> dict[str, Any]:
        """Derived values, for display (``vta config show``)."""
        names = ["BATCH", "BLOCK_IN", "BLOCK_OUT", "INP_WIDTH", "WGT_WIDTH", "ACC_WIDTH", "OUT_WIDTH",
                 "UOP_BUFF_SIZE", "INP_BUFF_SIZE", "WGT_BUFF_SIZE", "ACC_BUFF_SIZE", "OUT_BUFF_SIZE",
                 "INP_ELEM_BYTES", "WGT_ELEM_BYTES", "ACC_ELEM_BYTES", "OUT_ELEM_BYTES",
                 "UOP_BUFF_DEPTH", "INP_BUFF_DEPTH", "WGT_BUFF_DEPTH", "ACC_BUFF_DEPTH",
                 "BUS_WIDTH", "INP_MAT_AXI_RATIO", "WGT_MAT_AXI_RATIO", "ACC_MAT_AXI_RATIO", "OUT_MAT_AXI_RATIO",
                 "MACS_PER_CYCLE", "peak_gops", "bitstream", "model", "name", "fingerprint", "design_fingerprint",
                 "board_model"]
        return {n: getattr(self, n) for n in names}

    def replace(self, **overrides: Any) -> HwConfig:
        _check_keys(overrides)
        return replace(self, **overrides)


FIELD_NAMES = tuple(f.name for f in fields(HwConfig))


def describe_overrides(cfg: HwConfig, name: str, overrides: Mapping[str, Any]) -> HwConfig:
    """``cfg``, config ``name`` with ``overrides`` applied, with a DESCRIPTION that says so: "NAME with K=V, ...;
    the base: <the base's description>". A preset's description names its bitstream and calibration, which the
    overrides may not keep. Unchanged when there are no overrides or they set DESCRIPTION themselves."""
    if not overrides or "DESCRIPTION" in overrides:
        return cfg
    said = ", ".join(f"{k}={v}" for k, v in overrides.items())
    return cfg.replace(DESCRIPTION=f"{name} with {said}" + (f"; the base: {cfg.DESCRIPTION}" if cfg.DESCRIPTION else ""))


def _check_keys(d: dict[str, Any]) -> None:
    for k in d:
        if k not in FIELD_NAMES:
            near = difflib.get_close_matches(str(k), FIELD_NAMES, n=1, cutoff=0.7)
            hint = f" (did you mean {near[0]!r}?)" if near else ""
            raise ConfigError(k, f"hardware config: unknown key {k!r}{hint}; allowed keys: {', '.join(FIELD_NAMES)}")


def _validate(c: HwConfig) -> None:
    for f in fields(c):   # numpy numbers (a sweep over np.arange) as the Python numbers they equal
        v = getattr(c, f.name)
        if isinstance(v, numbers.Integral) and not isinstance(v, int):   # bool is an int: left as it is
            object.__setattr__(c, f.name, int(v))
        elif isinstance(v, numbers.Real) and not isinstance(v, (numbers.Integral, float)):
            object.__setattr__(c, f.name, float(v))
    if not isinstance(c.TARGET, str) or c.TARGET not in TARGETS:
        raise _fail("TARGET", c.TARGET, f"one of {', '.join(TARGETS)}")
    if not isinstance(c.HW_VER, str) or not re.fullmatch(r"\d+\.\d+\.\d+", c.HW_VER):
        raise _fail("HW_VER", c.HW_VER, "a version string such as '0.0.2'")
    if not isinstance(c.DESCRIPTION, str):
        raise _fail("DESCRIPTION", c.DESCRIPTION, "a string")
    if not isinstance(c.CALIBRATED_FOR, str) or not re.fullmatch(r"|[0-9a-f]{16}", c.CALIBRATED_FOR):
        raise _fail("CALIBRATED_FOR", c.CALIBRATED_FOR, "'' or the 16 hex digits of a design_fingerprint (the design "
                    "the board latency model was calibrated for)")
    if not isinstance(c.COHERENT, bool):
        raise _fail("COHERENT", c.COHERENT, "true or false")
    if not isinstance(c.CAPABILITIES, str) or c.CAPABILITIES not in CAPABILITY_SETS:
        raise _fail("CAPABILITIES", c.CAPABILITIES, f"one of {', '.join(CAPABILITY_SETS)} (hw_config.capabilities)")
    for key, lo, hi, meaning in (("MMIO_BASE", 0, (1 << 40) - 1, "a physical address, e.g. 0x43C00000"),
                                 ("MMIO_RANGE", 0x100, 1 << 24, "bytes between register blocks, e.g. 0x1000"),
                                 ("BOARD_MEM_MB", 16, 1 << 20, "MiB of board DRAM")):
        v = getattr(c, key)
        if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
            raise _fail(key, v, f"an integer in [{lo:#x}, {hi:#x}] ({meaning})" if key != "BOARD_MEM_MB" else
                        f"an integer in [{lo}, {hi}] ({meaning})")
    if c.MMIO_BASE % 0x1000 or c.MMIO_RANGE % 0x100:
        raise _fail("MMIO_BASE", hex(c.MMIO_BASE), "a page-aligned address with MMIO_RANGE a multiple of 0x100")
    for key, (lo, hi, meaning) in LATENCY_RANGES.items():
        v = getattr(c, key)
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or not lo <= v <= hi \
                or (key == "DMA_EFFICIENCY" and v <= 0):
            shown = "a number in (0, 1]" if key == "DMA_EFFICIENCY" else f"a number in [{lo:g}, {hi:g}]"
            raise _fail(key, v, f"{shown} ({meaning})")
        object.__setattr__(c, key, float(v))   # 10 and 10.0 are one config (and one fingerprint)
    if isinstance(c.CLOCK_MHZ, bool) or not isinstance(c.CLOCK_MHZ, (int, float)) or not (
            math.isfinite(c.CLOCK_MHZ) and 1 <= c.CLOCK_MHZ <= 5000):
        raise _fail("CLOCK_MHZ", c.CLOCK_MHZ, "a number of MHz in [1, 5000]")
    for key, (lo, hi, meaning) in INT_RANGES.items():
        v = getattr(c, key)
        if isinstance(v, bool) or not isinstance(v, int):
            raise _fail(key, v, f"an integer in [{lo}, {hi}] ({meaning})")
        if not lo <= v <= hi:
            allowed = f"{lo}" if lo == hi else f"an integer in [{lo}, {hi}]"
            raise _fail(key, v, f"{allowed} ({meaning})")
    # Every SRAM holds at least two tiles and no more than sram_base addresses (MIN_LOG_DEPTH, MAX_LOG_DEPTH).
    buffers = [("LOG_UOP_BUFF_SIZE", c.LOG_UOP_BUFF_DEPTH, "micro-op", 4),
               ("LOG_INP_BUFF_SIZE", c.LOG_INP_BUFF_DEPTH, "input", c.INP_ELEM_BYTES),
               ("LOG_WGT_BUFF_SIZE", c.LOG_WGT_BUFF_DEPTH, "weight", c.WGT_ELEM_BYTES),
               ("LOG_ACC_BUFF_SIZE", c.LOG_ACC_BUFF_DEPTH, "accumulator", c.ACC_ELEM_BYTES)]
    for key, log_depth, what, elem in buffers:
        need = int(math.log2(elem))
        if log_depth < MIN_LOG_DEPTH:
            raise _fail(key, getattr(c, key),
                        f"the {what} buffer must hold at least two {elem}-byte tiles: {key} >= {need + MIN_LOG_DEPTH}")
        if log_depth > MAX_LOG_DEPTH:
            raise _fail(key, getattr(c, key),
                        f"the {what} buffer would have 2^{log_depth} entries but instructions address SRAM with "
                        f"{MAX_LOG_DEPTH} bits: {key} <= {need + MAX_LOG_DEPTH}")
    for name, fmt in c.insn_formats.items():
        if fmt.used_bits > fmt.total_bits:
            what = "32-bit micro-op" if name == "uop" else f"128-bit {name.upper()} instruction"
            keys = "LOG_UOP_BUFF_SIZE, LOG_INP_BUFF_SIZE, LOG_WGT_BUFF_SIZE, LOG_ACC_BUFF_SIZE"
            raise ConfigError(
                _overflow_key(c, name, fmt),
                f"hardware config: the SRAM depths ({keys} = {c.LOG_UOP_BUFF_SIZE}, {c.LOG_INP_BUFF_SIZE}, "
                f"{c.LOG_WGT_BUFF_SIZE}, {c.LOG_ACC_BUFF_SIZE} with BATCH={c.BATCH}, BLOCK={c.BLOCK_IN}) make the "
                f"{what} need {fmt.used_bits} bits, more than the {fmt.total_bits} VTA's hardware has: "
                f"use smaller buffers or a larger block")


# VTA's default depths fill the GEMM words and the micro-op exactly, so an overflow is blamed on the buffer
# grown most beyond them (for a single override, the overridden key).
_VTA_LOG_DEPTHS = {"LOG_UOP_BUFF_SIZE": 13, "LOG_ACC_BUFF_SIZE": 11, "LOG_INP_BUFF_SIZE": 11, "LOG_WGT_BUFF_SIZE": 10}


def _overflow_key(c: HwConfig, name: str, fmt: Format) -> str:
    """The buffer-size key most responsible for format ``name`` not fitting its container."""
    if name in ("gemm", "alu") and fmt.field("iter_in").offset >= 64:
        return "LOG_UOP_BUFF_SIZE"  # the micro-op range fields no longer fit the first 64-bit word
    depth = {"LOG_UOP_BUFF_SIZE": c.LOG_UOP_BUFF_DEPTH, "LOG_ACC_BUFF_SIZE": c.LOG_ACC_BUFF_DEPTH,
             "LOG_INP_BUFF_SIZE": c.LOG_INP_BUFF_DEPTH, "LOG_WGT_BUFF_SIZE": c.LOG_WGT_BUFF_DEPTH}
    suspects = ["LOG_ACC_BUFF_SIZE"] if name == "alu" else ["LOG_ACC_BUFF_SIZE", "LOG_INP_BUFF_SIZE",
                                                            "LOG_WGT_BUFF_SIZE"]
    return max(suspects, key=lambda k: depth[k] - _VTA_LOG_DEPTHS[k])


def presets() -> list[str]:
    """Names of the built-in presets."""
    return sorted(p.stem for p in PRESET_DIR.glob("*.json"))


MAX_CONFIG_BYTES = 1 << 20   # a config is a few hundred bytes; anything this large is not one


def _read_json(path: Path) -> dict[str, Any]:
    try:
        text = read_bounded(path, MAX_CONFIG_BYTES, f"hardware config {path}",
                            f"a config file is at most {MAX_CONFIG_BYTES:,} bytes")
    except ValueError as e:
        raise ConfigError("", str(e)) from None
    try:
        data = json.loads(text.decode())
    except (ValueError, UnicodeDecodeError) as e:   # JSONDecodeError, and ints past Python's digit limit
        raise ConfigError("", f"hardware config {path}: not valid JSON ({e})") from None
    except RecursionError:
        raise ConfigError("", f"hardware config {path}: nested too deeply to be a config (a flat JSON "
                              "object of keys and values)") from None
    if not isinstance(data, dict):
        raise ConfigError("", f"hardware config {path}: expected a JSON object, got {type(data).__name__}")
    return data


def config_from_dict(data: dict[str, Any], **overrides: Any) -> HwConfig:
    """Build a config from a dict. Missing platform/timing keys default from the TARGET's preset."""
    data = {**data, **overrides}
    _check_keys(data)
    missing = [k for k in VTA_KEYS if k not in data]
    if missing:
        raise ConfigError(missing[0], f"hardware config: missing key(s) {', '.join(missing)}")
    target = data["TARGET"]
    if not isinstance(target, str) or target not in PLATFORM_PRESET_OF_TARGET:
        raise _fail("TARGET", target, f"one of {', '.join(TARGETS)}")
    if any(k not in data for k in (*PLATFORM_KEYS, *BOARD_KEYS, *LATENCY_KEYS, "CALIBRATED_FOR")):
        platform = _read_json(PRESET_DIR / f"{PLATFORM_PRESET_OF_TARGET[target]}.json")
        data = {**{k: platform[k] for k in (*PLATFORM_KEYS, *BOARD_KEYS, *LATENCY_KEYS) if k in platform}, **data}
        # the preset's board model (its values, inherited or copied) is the preset's calibration, made for the
        # preset's design: it says so, and applies only where the design is that one (HwConfig.board_model)
        if "CALIBRATED_FOR" not in data and "CALIBRATED_FOR" in platform and all(
                data.get(k, LATENCY_NEUTRAL[k]) == platform.get(k, LATENCY_NEUTRAL[k]) for k in LATENCY_KEYS):
            data["CALIBRATED_FOR"] = platform["CALIBRATED_FOR"]
    for key in ("MMIO_BASE", "MMIO_RANGE"):   # JSON has no hex literals: "0x43C00000" is accepted as well
        if isinstance(data.get(key), str):
            try:
                data[key] = int(data[key], 0)
            except ValueError:
                raise _fail(key, data[key], "an integer or a hex string such as '0x43C00000'") from None
    return HwConfig(**data)


def load_config(name_or_path: str | Path | dict | HwConfig | None = None, **overrides: Any) -> HwConfig:
    """Load a preset by name, a JSON file by path, or a dict; apply ``KEY=value`` overrides.

    ``load_config()`` is the default preset (``pynq``); ``load_config("pynq", LOG_BLOCK=5)`` overrides keys.
    """
    if name_or_path is None:
        name_or_path = DEFAULT_PRESET
    if isinstance(name_or_path, HwConfig):
        return name_or_path.replace(**overrides) if overrides else name_or_path
    if isinstance(name_or_path, dict):
        return config_from_dict(name_or_path, **overrides)
    text = str(name_or_path)
    preset = PRESET_DIR / f"{text}.json"
    if "/" not in text and not text.endswith(".json") and preset.is_file():
        return config_from_dict(_read_json(preset), **overrides)
    path = Path(text)
    if path.is_file():
        data = _read_json(path)
        if set(data) == {"config", "derived"} and isinstance(data["config"], dict):
            data = data["config"]   # what `vta config show --json` prints: its config part is the config
        return config_from_dict(data, **overrides)
    if path.is_dir():
        raise ConfigError("", f"hardware config {text!r}: a directory, not a JSON config file")
    if "/" in text or "\\" in text or text.endswith(".json"):   # meant as a file
        raise ConfigError("", f"hardware config {text!r}: no such file (a config is a preset name "
                              f"({', '.join(presets())}) or an existing JSON file)")
    near = difflib.get_close_matches(text, presets(), n=1, cutoff=0.6)
    hint = f"; did you mean {near[0]!r}?" if near else ""
    raise ConfigError("", f"hardware config {text!r}: neither a preset ({', '.join(presets())}) nor a JSON "
                          f"file{hint}")
