"""Exceptions raised for bad programs and bad use of a simulator (C or reference alike)."""

from __future__ import annotations


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


class CycleBudgetExceeded(SimulatorError):
    """The program would run past ``max_cycles`` (the guard that keeps hostile programs from hanging)."""


# Error codes shared with the C library (simulator/csrc/vta_sim.h).
ERROR_CLASSES: dict[int, type[SimulatorError]] = {
    1: InvalidInstruction,
    2: MemoryAccessError,
    3: DeadlockError,
    4: CycleBudgetExceeded,
    5: SimulatorError,
}
