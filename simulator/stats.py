"""The result of one run: VTA's counters plus the timing model's figures."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from hw_config.isa_rules import MODULES, QUEUES

STALL_CAUSES = tuple([f"pop_{q}" for q in QUEUES] + [f"push_{q}" for q in QUEUES] + ["dispatch"])
VTA_COUNTERS = ("inp_load_nbytes", "wgt_load_nbytes", "acc_load_nbytes", "uop_load_nbytes",
                "out_store_nbytes", "gemm_counter", "alu_counter")


@dataclass
class RunStats:
    """Counters named as in VTA's simulator profiler, plus cycles, busy and stall figures per module."""

    inp_load_nbytes: int = 0
    wgt_load_nbytes: int = 0
    acc_load_nbytes: int = 0
    uop_load_nbytes: int = 0
    out_store_nbytes: int = 0
    gemm_counter: int = 0
    alu_counter: int = 0
    cycles: int = 0
    finish_cycle: int = 0
    # Host work units the run did (docs/simulator.md, "Budgets"): what ``max_work`` is compared with.
    work: int = 0
    insns: dict[str, int] = field(default_factory=lambda: dict.fromkeys(MODULES, 0))
    busy: dict[str, int] = field(default_factory=lambda: dict.fromkeys(MODULES, 0))
    stalls: dict[str, dict[str, int]] = field(
        default_factory=lambda: {m: dict.fromkeys(STALL_CAUSES, 0) for m in MODULES})
    clock_mhz: float = 0.0
    # Predicted wall time of one call on the config's board (simulator/latency.py, docs/calibrate.md): the
    # accelerator's time re-timed with the board's DMA and loop costs plus the runtime's host, cache and launch
    # costs. Equals ``seconds`` when the config has no board model.
    latency_s: float = 0.0
    # Per-instruction (module, start, end) when the run was traced; None otherwise.
    trace: list[tuple[str, int, int]] | None = None

    def vta_counters(self) -> dict[str, int]:
        """Only VTA's own counters, comparable with its simulator's profiler_status JSON."""
        return {k: getattr(self, k) for k in VTA_COUNTERS}

    @property
    def dram_bytes(self) -> int:
        """Bytes moved between DRAM and the SRAMs (all loads and stores)."""
        return sum(getattr(self, k) for k in VTA_COUNTERS if k.endswith("_nbytes"))

    @property
    def seconds(self) -> float:
        """Simulated accelerator time at the config's clock."""
        return self.cycles / (self.clock_mhz * 1e6) if self.clock_mhz else 0.0

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d.pop("trace")
        d["seconds"] = self.seconds
        return d


# The basis of every time and throughput figure the commands print (vta run, vta tune, the report page, vta dse;
# docs/simulate.md, "Which time is which"): each figure says which of these it is.
SIMULATED = "simulated"       # the simulator's cycles at the config's clock: the accelerator alone
BOARD_MODEL = "board model"   # the calibrated board model's prediction of one call on the board (runtime included)
MEASURED = "measured"         # wall time measured, on a board or on this machine's CPU


def latency_basis(cfg) -> str:
    """What a simulator run's ``latency_s`` is on ``cfg``: BOARD_MODEL where the config's board model applies
    (``HwConfig.board_model``), else SIMULATED (the cycles at the clock)."""
    return BOARD_MODEL if getattr(cfg, "board_model", False) else SIMULATED


def basis_legend(cfg, board: str | None = None, host: bool = True) -> str:
    """One line saying the basis of each kind of figure beside it (a table's legend). ``board``: how its board
    figures were obtained ("predicted by the board model", "measured", ...; None: there are none)."""
    text = (f"basis: VTA rows' cycles, time ms and GOPS are {SIMULATED} (cycles at {cfg.CLOCK_MHZ:g} MHz; GOPS = "
            "2 x MACs / that time)")
    if board == "predicted by the board model":
        text += ("; board ms is the board model's prediction of a call on the board (the runtime on its CPU, caches "
                 "and the accelerator there; calibrated for this design, docs/calibrate.md)")
    elif board:
        text += f"; board ms is {board}"
    if host:
        text += "; CPU rows' time ms is measured on this machine"
    return text


def format_duration(seconds: float) -> str:
    """A simulated time as the command line prints it: microseconds below 1000 us, milliseconds from there."""
    return f"{seconds * 1e6:.1f} us" if seconds * 1e6 < 1000 else f"{seconds * 1e3:.2f} ms"


def format_stats(stats: RunStats, cfg, board: str | None = None) -> str:
    """Human-readable summary: cycles and time, VTA's counters, the board time, and a per-module table.
    ``board`` says where ``latency_s`` came from when it was not the config's board model (e.g. "measured on the
    board, launch to done"); without one, the board line is the model's prediction, shown where there is a model."""
    if board is None and getattr(cfg, "board_model", False):
        board = f"predicted (board model of {cfg.model})"
    lines = [(f"  cycles {stats.cycles:,} = {format_duration(stats.seconds)} at {cfg.CLOCK_MHZ:g} MHz "
             f"(FINISH at cycle {stats.finish_cycle:,}); host work {stats.work:,} units (MACs, ALU lanes, DMA "
              f"bytes: what --max-work bounds)"),
             "  counters: " + ", ".join(f"{k}={v:,}" for k, v in stats.vta_counters().items()),
             *([f"  board: {stats.latency_s * 1e3:.3f} ms per call {board}"] if board else []),
             "  module    insns    busy cycles   busy %   stall cycles by cause"]
    for mod in MODULES:
        stalls = ", ".join(f"{c}={v:,}" for c, v in stats.stalls[mod].items() if v) or "-"
        busy_pct = 100.0 * stats.busy[mod] / stats.cycles if stats.cycles else 0.0
        lines.append(f"  {mod:<8} {stats.insns[mod]:>6} {stats.busy[mod]:>14,} {busy_pct:>7.1f}%   {stalls}")
    return "\n".join(lines)
