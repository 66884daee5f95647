"""Replay of the sixteen golden programs VTA's own compiler, runtime and functional simulator produced.

A correct simulator leaves exactly the bytes VTA's simulator stored and reports the same counters; it also
refuses corrupted images with the right error naming the instruction, and survives such failures.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from golden_files import GOLDEN_DIR, requires_golden

from simulator.core import Simulator
from simulator.errors import (
    CycleBudgetExceeded,
    DeadlockError,
    InvalidInstruction,
    MemoryAccessError,
    SimulatorError,
)
from simulator.image import ProgramImage, load_image, load_result
from simulator.replay import replay, replay_with_stats
from simulator.stats import VTA_COUNTERS
from vta.cli import main
from vta.isa import MemInsn, decode_program

GOLDEN = GOLDEN_DIR
NAMES = ["alu_0", "alu_1", "alu_2", "alu_3", "alu_4", "alu_5", "gemm_0", "gemm_1", "padded_load_0",
         "padded_load_1", "padded_load_2", "padded_load_3", "padded_load_4", "relu_0", "save_load_out_0",
         "shift_and_scale_0"]

pytestmark = requires_golden

Segments = list[tuple[int, np.ndarray]]


def image_path(name: str) -> Path:
    return GOLDEN / f"{name}.npz"


def expected(name: str) -> tuple[Segments, dict[str, int]]:
    """The stored ranges (address, bytes) and VTA's counters of a golden program's run."""
    with np.load(GOLDEN / f"{name}.expect.npz", allow_pickle=False) as z:
        segs = [(int(a), z[f"seg_{i}"].copy()) for i, a in enumerate(z["seg_addr"])]
        stats = json.loads(str(z["stats"]))
    return segs, stats


def find(segments: Segments, addr: int, size: int) -> np.ndarray:
    """The bytes [addr, addr + size) taken from whichever segment holds them entirely."""
    for base, data in segments:
        if base <= addr and addr + size <= base + data.size:
            return data[addr - base:addr - base + size]
    raise AssertionError(f"no segment holds [0x{addr:x}, 0x{addr + size:x})")


def assert_matches(name: str, segments: Segments, stats: dict | None) -> None:
    """Stored bytes byte-identical to VTA's, everything else as the image had it, counters exactly VTA's (``stats``
    None: a device without VTA's counters, the bytes only)."""
    image = load_image(image_path(name))
    expect_segs, expect_stats = expected(name)
    assert set(expect_stats) == set(VTA_COUNTERS)
    if stats is not None:
        assert {k: stats[k] for k in VTA_COUNTERS} == expect_stats
    assert [a for a, _ in segments] == [a for a, _ in image.segments]
    stored = [np.zeros(d.size, dtype=bool) for _, d in image.segments]
    for addr, data in expect_segs:
        got = find(segments, addr, data.size)
        assert got.tobytes() == data.tobytes(), f"{name}: bytes at 0x{addr:x} differ from VTA's"
        for (base, seg), mask in zip(image.segments, stored, strict=True):
            if base <= addr < base + seg.size:
                mask[addr - base:addr - base + data.size] = True
    for (_, before), (_, after), mask in zip(image.segments, segments, stored, strict=True):
        np.testing.assert_array_equal(after[~mask], before[~mask], err_msg=f"{name}: a byte no store wrote changed")


def test_all_sixteen_programs_are_there():
    found = sorted(p.name[:-len(".expect.npz")] for p in GOLDEN.glob("*.expect.npz"))
    assert found == sorted(NAMES)
    assert all(image_path(n).is_file() for n in NAMES)


@pytest.mark.parametrize("name", NAMES)
def test_replay_matches_vta(name: str):
    result = replay(image_path(name))
    assert_matches(name, result.segments, result.stats)


@pytest.mark.parametrize("name", NAMES)
def test_replay_through_the_cli(name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    out = tmp_path / f"{name}.result.npz"
    assert main(["sim", "replay", str(image_path(name)), "--out", str(out)]) == 0
    assert "counters:" in capsys.readouterr().out
    result = load_result(out)
    assert_matches(name, result.segments, result.stats)


@pytest.mark.parametrize("name", NAMES)
def test_timing_only_replay_has_identical_counters_and_cycles(name: str):
    full = replay(image_path(name))
    timing = replay(image_path(name), compute=False)
    assert timing.stats == full.stats  # VTA's counters, cycles, finish cycle, busy, stalls
    assert timing.stats["cycles"] > 0
    image = load_image(image_path(name))
    for (_, before), (_, after) in zip(image.segments, timing.segments, strict=True):
        assert after.tobytes() == before.tobytes()  # no data movement without compute


@pytest.mark.parametrize("name", ["gemm_1", "relu_0"])
def test_cycle_budget(name: str):
    """max_cycles equal to the run's length is enough; one cycle less stops the instruction ending last."""
    image = load_image(image_path(name))
    _, full = replay_with_stats(Simulator(image.config), image, trace=True)
    assert full.trace is not None
    assert replay(image, max_cycles=full.cycles).stats == full.to_dict()
    with pytest.raises(CycleBudgetExceeded, match="max_cycles") as info:
        replay(image, max_cycles=full.cycles - 1)
    assert info.value.index is not None
    assert full.trace[info.value.index][2] == full.cycles


# ---------------------------------------------------------------------------------------------------------
# corrupted images

def with_insns(image: ProgramImage, insns: np.ndarray) -> ProgramImage:
    return ProgramImage(image.config, insns, image.insn_addr, list(image.segments))


def with_opcode(image: ProgramImage, index: int, opcode: int) -> ProgramImage:
    insns = image.insns.copy()
    insns[index, 0] = (int(insns[index, 0]) & 0b1111_1000) | opcode
    return with_insns(image, insns)


def dma_ranges(image: ProgramImage) -> list[tuple[int, int, int]]:
    """(instruction index, first byte, end byte) of every non-NOP LOAD/STORE (docs/simulator.md ranges)."""
    cfg = image.config
    out = []
    for i, insn in enumerate(decode_program(image.insns, cfg)):
        if isinstance(insn, MemInsn) and insn.x_size:
            e = cfg.elem_bytes(insn.memory_type)
            lo = insn.dram_base * e
            out.append((i, lo, lo + ((insn.y_size - 1) * insn.x_stride + insn.x_size) * e))
    return out


@pytest.mark.parametrize("name", NAMES)
def test_invalid_opcode_is_refused_naming_the_instruction(name: str):
    image = load_image(image_path(name))
    index = len(image.insns) // 2
    for opcode in (5, 6, 7):
        with pytest.raises(InvalidInstruction, match=rf"instruction {index}\b") as info:
            replay(with_opcode(image, index, opcode))
        assert info.value.index == index


@pytest.mark.parametrize("name", NAMES)
def test_dma_outside_the_mapped_segments_is_refused(name: str):
    """Dropping any one segment makes the first DMA into it fall outside DRAM: MemoryAccessError names it."""
    image = load_image(image_path(name))
    ranges = dma_ranges(image)
    dropped = 0
    for k, (base, data) in enumerate(image.segments):
        users = [i for i, lo, hi in ranges if lo < base + data.size and base < hi]
        if not users:
            continue
        dropped += 1
        kept = image.segments[:k] + image.segments[k + 1:]
        with pytest.raises(MemoryAccessError, match=rf"instruction {users[0]}\b") as info:
            replay(ProgramImage(image.config, image.insns, image.insn_addr, kept))
        assert info.value.index == users[0]
    assert dropped >= 2  # at least the data read and the data stored


def test_missing_token_push_is_a_deadlock_naming_the_stuck_instruction():
    """alu_0 ends with LOAD INP nop [push l2g]; LOAD UOP nop [pop l2g, pop s2g]; FINISH. Without the push
    the compute NOP waits for a token that never comes."""
    image = load_image(image_path("alu_0"))
    insns = image.insns.copy()
    assert insns[4, 0] & 0b111 == 0 and insns[4, 0] & (1 << 6)  # LOAD with push_next_dep
    insns[4, 0] &= ~(1 << 6) & 0xFF
    with pytest.raises(DeadlockError, match="l2g") as info:
        replay(with_insns(image, insns))
    assert info.value.index == 5


def test_a_simulator_replays_a_good_image_after_failures():
    image = load_image(image_path("gemm_1"))
    sim = Simulator(image.config)
    bad_opcode = with_opcode(image, 9, 7)
    no_weights = ProgramImage(image.config, image.insns, image.insn_addr,
                              [s for s in image.segments if s[0] != 0x2000])
    insns = image.insns.copy()
    insns[26, 0] &= ~(1 << 6) & 0xFF  # the load NOP no longer pushes l2g: deadlock after most of the run
    deadlock = with_insns(image, insns)
    for bad, error in ((bad_opcode, InvalidInstruction), (no_weights, MemoryAccessError), (deadlock, DeadlockError)):
        with pytest.raises(error):
            sim.replay(bad)
        assert sim.regions() == []  # the failed replay unmapped its segments
        result = sim.replay(image)
        assert_matches("gemm_1", result.segments, result.stats)
        assert sim.regions() == []


def test_replay_refuses_a_simulator_of_another_config():
    image = load_image(image_path("gemm_0"))
    other = Simulator(image.config.replace(LOG_BATCH=1, LOG_INP_BUFF_SIZE=16, LOG_ACC_BUFF_SIZE=18))
    with pytest.raises(SimulatorError, match="fingerprint"):
        other.replay(image)
    assert other.regions() == []
    # A different description is not a different machine.
    same = Simulator(image.config.replace(DESCRIPTION="renamed"))
    result = same.replay(image)
    assert_matches("gemm_0", result.segments, result.stats)
