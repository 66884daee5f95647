"""A device is a small fixed surface: buffers in DRAM, copies in and out, run a stream, read stats.

The simulator is the first backend; remote and Pynq devices will offer the same operations, so code
above never asks which one it holds.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Protocol, runtime_checkable

import numpy as np

from hw_config import HwConfig
from hw_config.buffer import Buffer, alloc_size, checked_buffer
from simulator.stats import RunStats

__all__ = ["Buffer", "Device", "SimDevice", "cleanup_on_error", "close_on_exit", "free_all"]

if TYPE_CHECKING:   # the C simulator is loaded when a SimDevice is made, not when vta is imported
    from simulator.core import Simulator


@runtime_checkable
class Device(Protocol):
    """What every device offers (simulator, Pynq board, remote board): the surface the runtime and build use."""

    cfg: HwConfig
    last_stats: RunStats | None

    def alloc(self, nbytes: int) -> Buffer: ...
    def free(self, buf: Buffer) -> None: ...
    def copy_in(self, buf: Buffer, data: np.ndarray | bytes, offset: int = 0) -> None: ...
    def copy_out(self, buf: Buffer, nbytes: int | None = None, offset: int = 0) -> np.ndarray: ...
    def run(self, insns: np.ndarray, *, compute: bool = True, trace: bool = False) -> RunStats: ...


class SimDevice:
    """The simulator as a device."""

    def __init__(self, cfg: HwConfig, simulator: Simulator | None = None):
        from simulator.core import Simulator
        self.cfg = cfg
        self.sim = simulator or Simulator(cfg)
        self.last_stats: RunStats | None = None

    def alloc(self, nbytes: int) -> Buffer:
        n = alloc_size(nbytes)
        return Buffer(self.sim.alloc(max(1, n)), n)

    def free(self, buf: Buffer) -> None:
        self.sim.free(checked_buffer(buf).addr)

    def copy_in(self, buf: Buffer, data: np.ndarray | bytes, offset: int = 0) -> None:
        checked_buffer(buf)
        raw = np.frombuffer(data, np.uint8) if isinstance(data, (bytes, bytearray)) else \
            np.ascontiguousarray(data).reshape(-1).view(np.uint8)
        if offset < 0 or offset + raw.size > buf.nbytes:
            raise ValueError(f"copy of {raw.size} bytes at offset {offset} overruns a {buf.nbytes}-byte buffer")
        self.sim.write(buf.addr + offset, raw)

    def copy_out(self, buf: Buffer, nbytes: int | None = None, offset: int = 0) -> np.ndarray:
        n = checked_buffer(buf).nbytes - offset if nbytes is None else nbytes
        if offset < 0 or offset + n > buf.nbytes:
            raise ValueError(f"read of {n} bytes at offset {offset} overruns a {buf.nbytes}-byte buffer")
        return self.sim.read(buf.addr + offset, n)

    def run(self, insns: np.ndarray, *, compute: bool = True, trace: bool = False) -> RunStats:
        self.last_stats = stats = self.sim.run(insns, compute=compute, trace=trace)
        return stats   # this run's, not what another thread's run may have put in last_stats since


def free_all(device: Device, buffers: list[Buffer]) -> None:
    """Free each of ``buffers`` on ``device``, every one even when one fails (the first error is raised then)."""
    error = None
    for buf in buffers:
        try:
            device.free(buf)
        except Exception as e:  # noqa: BLE001 - free the rest, then raise the first
            error = error or e
    if error is not None:
        raise error


@contextlib.contextmanager
def cleanup_on_error(cleanup: Callable[[], None]) -> Iterator[None]:
    """Run the body; when it raises, ``cleanup()`` (freeing what it allocated) without letting the cleanup's own error
    replace the body's: a lost device fails the frees too, and the first error says why."""
    try:
        yield
    except BaseException:
        with contextlib.suppress(Exception):
            cleanup()
        raise


def close_on_exit(close: Callable[[], None], failed: bool) -> None:
    """A with-block's end for what holds device memory: ``close()``; after an error in the body, ``close()`` without
    letting its own error replace the body's (as ``cleanup_on_error``)."""
    if not failed:
        close()
        return
    with contextlib.suppress(Exception):
        close()
