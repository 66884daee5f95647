"""The behavioural simulator of the accelerator (C, through cffi) and its program images.

``Simulator`` is loaded on first use, so the pure-Python parts (images, errors,
the reference executor) work even before the C library is built.
"""

from simulator.errors import (
    BudgetExceeded,
    CycleBudgetExceeded,
    DeadlockError,
    InvalidInstruction,
    MemoryAccessError,
    SimulatorError,
    WorkBudgetExceeded,
)
from simulator.stats import RunStats

__all__ = ["BudgetExceeded", "CycleBudgetExceeded", "DeadlockError", "InvalidInstruction", "MemoryAccessError", "RunStats",
           "Simulator", "SimulatorError", "WorkBudgetExceeded"]


def __getattr__(name: str):
    if name == "Simulator":
        from simulator.core import Simulator

        return Simulator
    raise AttributeError(f"module 'simulator' has no attribute {name!r}")
