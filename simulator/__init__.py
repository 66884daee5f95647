"""The behavioural simulator of the accelerator (C, through cffi) and its program images."""

from simulator.errors import (
    CycleBudgetExceeded,
    DeadlockError,
    InvalidInstruction,
    MemoryAccessError,
    SimulatorError,
)
from simulator.stats import RunStats

__all__ = ["CycleBudgetExceeded", "DeadlockError", "InvalidInstruction", "MemoryAccessError", "RunStats",
           "SimulatorError"]
