"""VTA's golden programs through our Pynq driver's unmodified launch sequence, pointed at the RTL.

``vta.device_pynq.PynqDevice`` runs on "the board itself": pynq's active device is ``RtlZynq``
(tests/fake_zynq_rtl.py), whose programmable logic is the generated accelerator simulated by Verilator: every
register access of the driver (pynq's ``MMIO``) is an AXI4-Lite transaction on the RTL's slave port of that
block, and DRAM is what the RTL's AXI4 master reads and writes. The images are replayed as on a board
(``vta.board.images.replay_on_device``: one pynq buffer per segment, the program relocated to them).

On ``pynq`` (capability set vta-hls-0.0.2, VTA's published bitstream) the eleven programs the bitstream runs
leave VTA's bytes, and the driver refuses the five padded_load ones before launch, as it does for the board
(tests/test_pynq_device.py: they pad ACC loads, which that bitstream lacks). On ``pynq`` with capability set
``vta-hls`` (VTA's HLS source since Dec 2020, which pads ACC) all sixteen leave VTA's bytes.

What comes from the RTL: the bytes in DRAM, the register traffic, the RTL's cycles (``fake.runs``) and its
performance counters, read from its counter registers (hardware/counters.py) after the run: VTA's counters of
each trace. What does not: the counters and ``stats.cycles`` the driver reports. VTA's bitstreams have no
performance counters, so ``PynqDevice`` never reads any (on VTA's bitstream their offsets alias its HLS
registers) and reports those from the C simulator's timing-only run of the stream it launched
(``counters_from`` says so): that model's count of the relocated stream, checked against VTA's trace too.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from extras import need
from golden_files import GOLDEN_DIR, requires_golden
from test_pynq_device import GOLDEN, stored_bytes_match

from hw_config import load_config
from simulator.image import load_image
from simulator.stats import VTA_COUNTERS

pytestmark = [pytest.mark.slow, requires_golden]
CFG = load_config("pynq")
PADDED = [name for name in GOLDEN if name.startswith("padded_load")]


@pytest.fixture
def rtl_board(tmp_path, monkeypatch):
    """``install(cfg)`` makes an RtlZynq pynq's active device; a non-placeholder .bit is in the cache."""
    need("pynq")
    need("amaranth")
    need("verilator")
    import pynq
    from fake_zynq import cache_board_bitstream
    from fake_zynq_rtl import RtlZynq
    from test_hardware_rtl import device

    cache_board_bitstream(CFG, tmp_path)
    made = []

    def install(cfg):
        from hardware import RtlDevice
        # the session's library for pynq (test_hardware_rtl builds it once); a fresh model for this board
        rtl = RtlDevice(cfg) if cfg.CAPABILITIES != CFG.CAPABILITIES else RtlDevice(device("pynq").cfg)
        fake = RtlZynq(cfg, rtl=rtl)
        monkeypatch.setattr(pynq.Device, "_active_device", fake, raising=False)
        made.append(fake)
        return fake

    monkeypatch.delenv("VTA_PYNQ_BOARD", raising=False)
    monkeypatch.delenv("PYNQ_REMOTE_DEVICES", raising=False)
    yield install, tmp_path
    for fake in made:
        fake.close()


def _replay_all(install, cache, cfg, names):
    from vta.board.images import replay_on_device
    from vta.device_pynq import PynqDevice
    from vta.program_check import ProgramRejected

    fake = install(cfg)
    out = {}
    with PynqDevice(cfg, cache_dir=cache, timeout_s=120) as dev:
        assert dev.board == f"local board {fake.name}" and not dev.remote
        for name in names:
            launches = fake.calls["launch"]
            try:
                result, stats = replay_on_device(dev, load_image(GOLDEN_DIR / f"{name}.npz"))
            except ProgramRejected as e:
                assert fake.calls["launch"] == launches          # refused before anything reached the RTL
                out[name] = {"refused": str(e), "index": e.index}
                continue
            assert fake.calls["launch"] == launches + 1 and not fake.running
            out[name] = {"result": result, "stats": stats, "rtl_cycles": fake.runs[-1],
                         "rtl_counters": fake.rtl.counters()}
    return fake, out


def _check_vtas_bytes_and_the_models_counters(name: str, got: dict) -> None:
    """The RTL left VTA's bytes; its counter registers hold VTA's counters, and so do those the driver reports (the
    timing model's count of the relocated stream); the RTL's own cycles are near the timing model's."""
    from vta.device_pynq import COUNTERS_FROM

    result, stats = got["result"], got["stats"]
    stored_bytes_match(name, result.segments)                   # VTA's bytes, nothing else changed: the RTL's
    with np.load(GOLDEN_DIR / f"{name}.expect.npz", allow_pickle=False) as z:
        expect_stats = json.loads(str(z["stats"]))
    assert stats.counters_from == COUNTERS_FROM and "no performance counters" in COUNTERS_FROM
    assert {k: result.stats[k] for k in VTA_COUNTERS} == expect_stats    # the model's count of the stream
    assert got["rtl_counters"] == expect_stats                           # the RTL's counter registers
    assert stats.launched and stats.host_seconds > 0
    # the RTL's own cycles for the run (the driver's done-clearing GEMM in front) against the timing model's
    assert abs(got["rtl_cycles"] / stats.cycles - 1) <= 0.05, (name, got["rtl_cycles"], stats.cycles)


def test_vtas_golden_programs_through_the_pynq_driver_on_the_rtl(rtl_board):
    """pynq (vta-hls-0.0.2): the driver's VTADeviceRun sequence over AXI4-Lite starts the RTL and sees its done;
    eleven programs leave VTA's bytes (their counters, from the timing model, VTA's), the five padded_load ones
    are refused before launch, as on the board."""
    install, cache = rtl_board
    fake, out = _replay_all(install, cache, CFG, GOLDEN)
    for name in PADDED:
        assert out[name]["index"] == 0 and "LOAD ACC with padding" in out[name]["refused"], out[name]
    for name in (n for n in GOLDEN if n not in PADDED):
        _check_vtas_bytes_and_the_models_counters(name, out[name])
    assert fake.calls["download"] == 1 and fake.calls["flush"] == fake.calls["invalidate"] == 0   # coherent (ACP)
    # the driver's sequence, as the RTL's slave ports saw it: ap_done cleared by a read of compute's control,
    # the stream's count and address, fetch started, the modules' auto-restart, then ap_done and done polled
    seq = [(op, block, off) for op, block, off, _ in fake.mmio]
    start = seq.index(("w", "fetch", 0x00))
    assert seq[start - 8:start] == [("r", "compute", 0x00), ("w", "fetch", 0x10), ("w", "fetch", 0x18),
                                    ("w", "load", 0x10), ("w", "load", 0x18), ("w", "compute", 0x20),
                                    ("w", "compute", 0x28), ("w", "store", 0x10)]
    assert seq[start + 1:start + 4] == [("w", "load", 0x00), ("w", "compute", 0x00), ("w", "store", 0x00)]
    polls = seq[start + 4:start + 6]
    assert polls == [("r", "compute", 0x00), ("r", "compute", 0x18)]
    ap_done, done = fake.mmio[start + 4][3], fake.mmio[start + 5][3]
    assert ap_done & 0x2 and done == 1


def test_all_sixteen_golden_programs_through_the_driver_with_vta_hls(rtl_board):
    """pynq with capability set vta-hls (the HLS source that pads ACC loads): all sixteen leave VTA's bytes (their
    counters, from the timing model, VTA's)."""
    install, cache = rtl_board
    cfg = CFG.replace(CAPABILITIES="vta-hls")
    _, out = _replay_all(install, cache, cfg, GOLDEN)
    for name in GOLDEN:
        assert "refused" not in out[name], out[name]
        _check_vtas_bytes_and_the_models_counters(name, out[name])
