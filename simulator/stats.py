"""The result of one run: VTA's counters plus the timing model's figures."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

MODULES = ("load", "compute", "store")
QUEUES = ("l2g", "g2l", "s2g", "g2s")
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
    insns: dict[str, int] = field(default_factory=lambda: dict.fromkeys(MODULES, 0))
    busy: dict[str, int] = field(default_factory=lambda: dict.fromkeys(MODULES, 0))
    stalls: dict[str, dict[str, int]] = field(
        default_factory=lambda: {m: dict.fromkeys(STALL_CAUSES, 0) for m in MODULES})
    clock_mhz: float = 0.0
    # Per-instruction (module, start, end) when the run was traced; None otherwise.
    trace: list[tuple[str, int, int]] | None = None

    def vta_counters(self) -> dict[str, int]:
        """Only VTA's own counters, comparable with its simulator's profiler_status JSON."""
        return {k: getattr(self, k) for k in VTA_COUNTERS}

    @property
    def seconds(self) -> float:
        """Simulated accelerator time at the config's clock."""
        return self.cycles / (self.clock_mhz * 1e6) if self.clock_mhz else 0.0

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d.pop("trace")
        d["seconds"] = self.seconds
        return d
