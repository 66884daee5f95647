"""A Pynq board whose programmable logic is the accelerator's RTL: ``RtlZynq``, a pynq ``Device`` like
tests/fake_zynq.py's ``FakeZynq``, with VTA's register blocks and the board's DRAM served by a
``hardware.RtlDevice`` (the generated Verilog, simulated cycle by cycle by Verilator) instead of the simulated
board.

Everything above this layer is real: ``vta.device_pynq.PynqDevice`` unmodified, pynq's ``allocate``,
``PynqBuffer`` (``flush``/``invalidate``), ``MMIO`` through the ``REGISTER_RW`` hooks and ``Bitstream``. Below
it, each MMIO access the driver makes is one AXI4-Lite transaction on the RTL's slave port of that block (a few
clock cycles of the model), and DRAM is the harness's DRAM behind the RTL's AXI4 master. Buffers are the RTL's
DRAM at the addresses ``RtlDevice.alloc`` places them (page-aligned, from page 1: inside the Pynq's DMA window).

Time: the accelerator runs while the host waits. Here the model is clocked when the host looks: a register
read after a launch first runs the model until compute's ``done`` (polled over AXI4-Lite) or for ``quantum``
cycles, so a program that hangs stays hung across polls until the driver's timeout, as on the board.

Memory model (as FakeZynq's): a buffer's host array and its DRAM are two copies. On a coherent config (the
Zynq's ACP port) host data reaches DRAM at each launch and DRAM reaches the host at the first register read that
sees the run over; otherwise only ``flush`` and ``invalidate`` move data.
"""

from __future__ import annotations

import numpy as np
from pynq.buffer import PynqBuffer
from pynq.pl_server.device import Device

from hw_config import HwConfig
from hw_config.config import MMIO_BLOCKS

RTL_NAME = "Pynq-Z1 (programmable logic: the accelerator's RTL, Verilator)"
FETCH_CTRL = 0x00


class RtlZynq(Device):
    _probe_priority_ = 918   # never probed: tests install it as the active device

    @classmethod
    def _probe_(cls) -> list:
        return []

    def __init__(self, cfg: HwConfig, quantum: int = 2_000_000, rtl=None):
        from hardware import RtlDevice

        super().__init__("fake-zynq-rtl")
        self.name = RTL_NAME
        self.cfg = cfg
        self.capabilities = {"REGISTER_RW": True, "MEMORY_MAPPED": False, "REMOTE": False}
        self.rtl = rtl if rtl is not None else RtlDevice(cfg)
        self.quantum = quantum
        self.buffers: dict[int, PynqBuffer] = {}   # device address -> buffer
        self.calls: dict[str, int] = {"flush": 0, "invalidate": 0, "download": 0, "launch": 0}
        self.mmio: list[tuple[str, str, int, int]] = []   # ("r"/"w", block, offset, value) of every access
        self.runs: list[int] = []                         # RTL cycles of each finished run (launch to done)
        self.running = False
        self._cycles = 0

    # ---- memory ----
    def allocate(self, shape, dtype, cacheable: int = 0, **kwargs) -> PynqBuffer:
        nbytes = int(np.prod(shape)) * np.dtype(dtype).itemsize
        buf = self.rtl.alloc(nbytes)
        arr = PynqBuffer(shape, dtype, device=self, device_address=buf.addr, bo=buf.addr, coherent=not cacheable)
        arr[...] = 0
        self.buffers[buf.addr] = arr
        return arr

    def flush(self, bo, offset, ptr, size) -> None:
        self.calls["flush"] += 1
        arr = self.buffers[bo]
        self.rtl.write(arr.device_address, np.asarray(arr).view(np.uint8).reshape(-1))

    def invalidate(self, bo, offset, ptr, size) -> None:
        self.calls["invalidate"] += 1
        arr = self.buffers[bo]
        np.asarray(arr).view(np.uint8).reshape(-1)[:] = self.rtl.read(arr.device_address, arr.nbytes)

    def _to_dram(self) -> None:
        for arr in self.buffers.values():
            self.rtl.write(arr.device_address, np.asarray(arr).view(np.uint8).reshape(-1))

    def _to_host(self) -> None:
        for arr in self.buffers.values():
            np.asarray(arr).view(np.uint8).reshape(-1)[:] = self.rtl.read(arr.device_address, arr.nbytes)

    # ---- registers: each word one AXI4-Lite access on the block's slave port ----
    def _offset(self, address: int, length: int) -> int:
        offset = address - self.cfg.MMIO_BASE
        if not 0 <= offset <= len(MMIO_BLOCKS) * self.cfg.MMIO_RANGE - max(length, 4):
            raise RuntimeError(f"no device at 0x{address:x} (this fake maps VTA's register blocks only)")
        return offset

    def _where(self, offset: int) -> tuple[str, int]:
        return MMIO_BLOCKS[offset // self.cfg.MMIO_RANGE], offset % self.cfg.MMIO_RANGE

    def read_registers(self, address: int, length: int) -> bytes:
        offset = self._offset(address, length)
        if self.running:                       # the accelerator runs while the host waits
            done, cycles = self.rtl.run_until_done(self.quantum)
            self._cycles += cycles
            if done:
                self.running = False
                self.runs.append(self._cycles)
                if self.cfg.COHERENT:
                    self._to_host()            # the CPU sees what the accelerator wrote (ACP)
        words = []
        for i in range(0, max(length, 4), 4):
            value = self.rtl.read_mmio(offset + i)
            self.mmio.append(("r", *self._where(offset + i), value))
            words.append(value)
        return b"".join(w.to_bytes(4, "little") for w in words)[:length]

    def write_registers(self, address: int, data: bytes) -> None:
        offset = self._offset(address, len(data))
        launch = offset == FETCH_CTRL and bool(data[0] & 1)
        if launch:
            self.calls["launch"] += 1
            if self.cfg.COHERENT:
                self._to_dram()                # the accelerator reads the CPU's caches through the ACP port
        for i in range(0, len(data), 4):
            value = int.from_bytes(data[i:i + 4], "little")
            self.rtl.write_mmio(offset + i, value)
            self.mmio.append(("w", *self._where(offset + i), value))
        if launch:
            self.running, self._cycles = True, 0

    # ---- the PL ----
    def download(self, bitstream, parser=None) -> None:
        """A bitstream download reconfigures the accelerator: a new model, its SRAMs zero (block RAM's initial
        contents), then the reset (DRAM, as CMA memory, stays)."""
        self.calls["download"] += 1
        self.running = False
        self.rtl.reprogram()

    def close(self) -> None:
        self.buffers.clear()
