"""What a run on the RTL reports: ``RtlRunStats``, with the fields of the simulator's ``RunStats`` (hardware
does not import the simulator; code above reads either the same way).

The RTL measures cycles (launch to ``done``), per module instructions and busy cycles, and VTA's counters in
its counter registers (hardware/counters.py; VTA's bitstreams have none). ``program_counters`` is their
definition, computed from the instruction stream as VTA's simulator counts them: tests hold the RTL's registers
to it (tests/test_hardware_rtl.py), and it to the C simulator's counters.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from hw_config import HwConfig
from hw_config.isa_rules import MODULES
from hw_config.layout import MEM_TYPES, OPCODES

COUNTERS = ("inp_load_nbytes", "wgt_load_nbytes", "acc_load_nbytes", "uop_load_nbytes", "out_store_nbytes",
            "gemm_counter", "alu_counter")


def program_counters(insns: np.ndarray, cfg: HwConfig) -> dict[str, int]:
    """VTA's counters for one run of the (N, 16) uint8 stream: bytes loaded per memory type (ACC_8BIT counted
    as ACC elements, padding not counted, NOPs with x_size 0 not counted), bytes stored, micro-ops of non-reset
    GEMMs and of ALUs."""
    rows = np.asarray(insns, dtype=np.uint8).reshape(-1, 16)
    out = dict.fromkeys(COUNTERS, 0)
    if not rows.size:
        return out
    mem = cfg.insn_formats["mem"].decode_rows(rows)
    opcode = mem["opcode"]
    n = mem["x_size"].astype(np.int64) * mem["y_size"].astype(np.int64)
    load = opcode == OPCODES["LOAD"]
    kind = mem["memory_type"]
    for name, key in (("UOP", "uop_load_nbytes"), ("INP", "inp_load_nbytes"), ("WGT", "wgt_load_nbytes")):
        out[key] = int(n[load & (kind == MEM_TYPES[name])].sum()) * cfg.elem_bytes(MEM_TYPES[name])
    acc = load & ~np.isin(kind, [MEM_TYPES[t] for t in ("UOP", "INP", "WGT")])
    out["acc_load_nbytes"] = int(n[acc].sum()) * cfg.elem_bytes(MEM_TYPES["ACC"])
    out["out_store_nbytes"] = int(n[opcode == OPCODES["STORE"]].sum()) * cfg.elem_bytes(MEM_TYPES["OUT"])
    gemm = cfg.insn_formats["gemm"].decode_rows(rows)
    uops = np.maximum(gemm["uop_end"].astype(np.int64) - gemm["uop_bgn"].astype(np.int64), 0)
    iters = gemm["iter_out"].astype(np.int64) * gemm["iter_in"].astype(np.int64) * uops
    out["gemm_counter"] = int(iters[(opcode == OPCODES["GEMM"]) & (gemm["reset_reg"] == 0)].sum())
    out["alu_counter"] = int(iters[opcode == OPCODES["ALU"]].sum())
    return out


@dataclass
class RtlRunStats:
    """One run on the RTL, field for field as simulator.stats.RunStats: ``cycles`` measured from launch to
    ``done`` (``finish_cycle`` too: the run ends at FINISH), ``insns`` and ``busy`` per module measured (a
    module is busy from an instruction's start, its tokens popped, to its finish, its tokens pushed), VTA's
    counters read from the RTL's counter registers after ``done``, no stall breakdown and no host work
    budget (``work`` 0). ``latency_s`` is the accelerator's time at the config's clock: the RTL has no board latency model."""

    inp_load_nbytes: int = 0
    wgt_load_nbytes: int = 0
    acc_load_nbytes: int = 0
    uop_load_nbytes: int = 0
    out_store_nbytes: int = 0
    gemm_counter: int = 0
    alu_counter: int = 0
    cycles: int = 0
    finish_cycle: int = 0
    work: int = 0
    insns: dict[str, int] = field(default_factory=lambda: dict.fromkeys(MODULES, 0))
    busy: dict[str, int] = field(default_factory=lambda: dict.fromkeys(MODULES, 0))
    stalls: dict[str, dict[str, int]] = field(default_factory=lambda: {m: {} for m in MODULES})
    clock_mhz: float = 0.0
    latency_s: float = 0.0
    trace: list[tuple[str, int, int]] | None = None
    device: str = "rtl"
    host_seconds: float = 0.0       # wall time of the simulation

    def vta_counters(self) -> dict[str, int]:
        return {k: getattr(self, k) for k in COUNTERS}

    @property
    def dram_bytes(self) -> int:
        return sum(getattr(self, k) for k in COUNTERS if k.endswith("_nbytes"))

    @property
    def seconds(self) -> float:
        """The accelerator's time at the config's clock."""
        return self.cycles / (self.clock_mhz * 1e6) if self.clock_mhz else 0.0

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        if d["trace"] is None:
            del d["trace"]
        return d
