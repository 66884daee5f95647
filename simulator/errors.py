"""Exceptions raised for bad programs and bad use of a simulator (C or reference alike), and the run budgets."""

from __future__ import annotations

import operator

# The two budgets of a run (docs/simulator.md, "Budgets"); Simulator(cfg, max_cycles=..., max_work=...) or
# run(..., max_cycles=..., max_work=...) raise them. Together they bound the host time of any program.
DEFAULT_MAX_CYCLES = 1 << 30
DEFAULT_MAX_WORK = 1 << 35


class SimulatorError(RuntimeError):
    """A program or request the simulator refused. ``index`` is the instruction index, or None."""

    def __init__(self, message: str, index: int | None = None):
        super().__init__(message)
        self.index = index


class InvalidInstruction(SimulatorError):
    """An instruction that cannot execute: bad opcode, memory type, flag, SRAM range or missing FINISH."""


class MemoryAccessError(SimulatorError):
    """A DRAM access outside the mapped regions, or a bad alloc/read/write request."""


class DeadlockError(SimulatorError):
    """No module can make progress: a token pop that is never satisfied or a queue that never drains."""


class BudgetExceeded(SimulatorError):
    """A run refused to go past one of its budgets (``max_cycles`` or ``max_work``); nothing past it executed."""


class CycleBudgetExceeded(BudgetExceeded):
    """The program would run past ``max_cycles`` simulated cycles."""


class WorkBudgetExceeded(BudgetExceeded):
    """The program would do more than ``max_work`` units of host work (the guard that bounds host CPU time)."""


# Error codes shared with the C library (simulator/csrc/vta_sim.h).
ERROR_CLASSES: dict[int, type[SimulatorError]] = {
    1: InvalidInstruction,
    2: MemoryAccessError,
    3: DeadlockError,
    4: CycleBudgetExceeded,
    5: SimulatorError,
    6: WorkBudgetExceeded,
}


def budget_value(name: str, value: object) -> int:
    """A budget given by the user as a positive integer below 2^64, or a SimulatorError naming it."""
    try:
        n = operator.index(value)  # type: ignore[arg-type]
    except TypeError:
        n = None
    if n is None or isinstance(value, bool) or not 0 < n < 1 << 64:
        raise SimulatorError(f"{name}={value!r}: need a positive integer below 2^64")
    return n
