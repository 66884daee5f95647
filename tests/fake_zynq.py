"""A Pynq board's hardware layer, faked below pynq's own API, for testing ``PynqDevice``'s local path here.

On a board, pynq's ``Device.active_device`` is an XRT-backed device: ``allocate`` makes CMA buffers,
``MMIO`` maps ``/dev/mem``, ``Bitstream.download`` programs the PL. ``FakeZynq`` is a ``pynq`` ``Device``
subclass standing in for exactly that layer, so everything above it is pynq's real code (``pynq.allocate``,
``PynqBuffer`` with its ``flush``/``invalidate``, ``pynq.MMIO`` through the ``REGISTER_RW`` hooks,
``pynq.Bitstream``), and the accelerator behind it is the simulated board's (``SimulatedBoard``: VTA's HLS
register blocks over the C simulator, with board DRAM as the simulator's DRAM).

Memory model: a buffer's host array (what the CPU sees through its caches) and its DRAM are two copies. On a
coherent platform (``cfg.COHERENT``: the Zynq's ACP port) the accelerator sees the CPU's caches: host data
reaches DRAM at each launch, and DRAM data reaches the host at its first register read after the run ends.
Otherwise only ``flush`` (host -> DRAM) and ``invalidate`` (DRAM -> host) move data, as on real
non-coherent hardware; a missing sync shows up as wrong results.
"""

from __future__ import annotations

import numpy as np
from pynq.buffer import PynqBuffer
from pynq.pl_server.device import Device

from hw_config import HwConfig
from vta.board.server import SimulatedBoard

FAKE_NAME = "Pynq-Z1 (hardware layer faked for tests)"


def cache_board_bitstream(cfg: HwConfig, cache_dir) -> None:
    """A non-placeholder .bit for ``cfg`` in the bitstream cache at ``cache_dir``: the placeholder with a VTA
    design name of the same length (one header field) in place of its own."""
    from vta.board.bitstream import PLACEHOLDER_DESIGN, bitstream_path, placeholder_bytes

    fpga_design = "vta_1x16_i8w8a32_15_15_18_17_hls_bits"
    assert len(fpga_design) == len(PLACEHOLDER_DESIGN)
    path = bitstream_path(cfg, cache_dir)
    path.parent.mkdir(parents=True)
    path.write_bytes(placeholder_bytes(cfg).replace(PLACEHOLDER_DESIGN.encode(), fpga_design.encode()))


class FakeZynq(Device):
    _probe_priority_ = 917   # never probed: tests install it as the active device

    @classmethod
    def _probe_(cls) -> list:
        return []

    def __init__(self, cfg: HwConfig, time_scale: float = 1.0):
        super().__init__("fake-zynq")
        self.name = FAKE_NAME
        self.cfg = cfg
        self.capabilities = {"REGISTER_RW": True, "MEMORY_MAPPED": False, "REMOTE": False}
        self.board = SimulatedBoard(cfg, time_scale=time_scale)
        self.buffers: dict[int, PynqBuffer] = {}   # device address -> buffer
        self.calls: dict[str, int] = {"flush": 0, "invalidate": 0, "download": 0}
        self.allocations: list[dict] = []
        self.running = False   # launched, and the host has not yet seen the run's end

    # ---- memory ----
    def allocate(self, shape, dtype, cacheable: int = 0, **kwargs) -> PynqBuffer:
        nbytes = int(np.prod(shape)) * np.dtype(dtype).itemsize
        buf = self.board.allocate(nbytes, str(dtype), "local")
        self.allocations.append({"nbytes": nbytes, "cacheable": bool(cacheable), **kwargs})
        arr = PynqBuffer(shape, dtype, device=self, device_address=buf.addr, bo=buf.id,
                         coherent=not cacheable)
        arr[...] = 0
        self.buffers[buf.addr] = arr
        return arr

    def flush(self, bo, offset, ptr, size) -> None:
        self.calls["flush"] += 1
        arr = self._by_bo(bo)
        self.board.sim.write(arr.device_address, np.asarray(arr).view(np.uint8).reshape(-1))

    def invalidate(self, bo, offset, ptr, size) -> None:
        self.calls["invalidate"] += 1
        arr = self._by_bo(bo)
        raw = self.board.sim.read(arr.device_address, arr.nbytes)
        np.asarray(arr).view(np.uint8).reshape(-1)[:] = raw

    def _by_bo(self, bo) -> PynqBuffer:
        return next(a for a in self.buffers.values() if a.bo == bo)

    def free(self, arr: PynqBuffer) -> None:
        self.buffers.pop(arr.device_address, None)
        self.board.free(arr.bo)

    # ---- registers ----
    def read_registers(self, address: int, length: int) -> bytes:
        block, offset = self._block(address, length)
        if self.cfg.COHERENT and self.running and self.board.vta.status()["state"] == "idle":
            self.running = False   # the run is over: the CPU sees what the accelerator wrote (ACP)
            for arr in self.buffers.values():
                np.asarray(arr).view(np.uint8).reshape(-1)[:] = self.board.sim.read(arr.device_address, arr.nbytes)
        words = [self.board.vta.read(block, offset + i) for i in range(0, max(length, 4), 4)]
        return b"".join(w.to_bytes(4, "little") for w in words)[:length]

    def write_registers(self, address: int, data: bytes) -> None:
        block, offset = self._block(address, len(data))
        if self.cfg.COHERENT and block == "fetch" and offset == 0 and data[0] & 1:
            self.running = True
            for arr in self.buffers.values():   # the accelerator reads the CPU's caches through the ACP port
                self.board.sim.write(arr.device_address, np.asarray(arr).view(np.uint8).reshape(-1))
        for i in range(0, len(data), 4):
            self.board.vta.write(block, offset + i, int.from_bytes(data[i:i + 4], "little"), "local")

    def _block(self, address: int, length: int) -> tuple[str, int]:
        where = self.board.vta.block_at(address, max(length, 4))
        if where is None:
            raise RuntimeError(f"no device at 0x{address:x} (this fake maps VTA's register blocks only)")
        return where

    # ---- the PL ----
    def download(self, bitstream, parser=None) -> None:
        self.calls["download"] += 1
        self.running = False   # a reprogrammed PL ends any run: nothing of it reaches the host any more
        self.board.vta.reset(str(bitstream.bitfile_name).rsplit("/", 1)[-1])

    def close(self) -> None:
        self.board.close()
