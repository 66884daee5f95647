"""Recorded tile groups replayed with shifted DRAM offsets emit exactly what emitting them one by one does.

The conv template records the instructions of a tile group and replays them for later groups of the same class
(same windows, same queue state; docs/operators.md, "Program generation"). The reference here is the same
emitter with recording switched off (every group emitted instruction by instruction): streams and micro-op
words must be equal bit for bit, with one stream and with streams cut short by a small ``max_insns`` (flushes
between groups), and the replayed program must compute numpy's result.
"""

from __future__ import annotations

import numpy as np
import pytest
from devices import assert_alloc_and_free_refuse_what_is_not_a_size_or_a_buffer
from program_digests import _cases

from hw_config import load_config
from vta import compile_op
from vta.device import Buffer, SimDevice
from vta.runtime import LOAD, CommandQueue, ScheduleError
from vta.templates import random_inputs

CFG = load_config("pynq")
CONV_CASES = [c for c in _cases() if c[1] in ("conv2d", "dense", "group_conv2d", "conv2d_transpose")
              and not c[0].startswith(("C1", "C3", "C5", "C7"))]


def _streams(op) -> list[tuple[bytes, bytes]]:
    return [(s.insns.tobytes(), s.uop_words.tobytes()) for s in op.program.streams]


def _compile(monkeypatch: pytest.MonkeyPatch, replay: bool, *args, **kwargs):
    with monkeypatch.context() as m:
        if not replay:
            m.setattr(CommandQueue, "recording", lambda self, mark, buffers: None)
        return compile_op(*args, **kwargs)


@pytest.mark.parametrize("name,op,workload,epilogue", CONV_CASES, ids=[c[0] for c in CONV_CASES])
def test_replay_emits_what_one_by_one_emission_does(monkeypatch: pytest.MonkeyPatch, name, op, workload,
                                                    epilogue) -> None:
    first = compile_op(op, CFG, epilogue=epilogue, **workload)
    space = first.space
    rng = np.random.default_rng(len(name))
    configs = [None] + [space[int(i)] for i in rng.permutation(len(space))[:6]]
    compared = 0
    for config in configs:
        for max_insns in (1 << 20, 64):
            try:
                plain = _compile(monkeypatch, False, op, CFG, config=config, epilogue=epilogue,
                                 max_insns=max_insns, **workload)
            except ScheduleError:
                continue
            replayed = _compile(monkeypatch, True, op, CFG, config=config, epilogue=epilogue, max_insns=max_insns,
                                **workload)
            assert _streams(replayed) == _streams(plain), f"{name} {config} max_insns={max_insns}"
            compared += 1
    assert compared >= 3, f"{name}: only {compared} configs compiled"


def test_replayed_program_with_many_streams_computes_numpys_result() -> None:
    workload = {"data_shape": (1, 64, 28, 28), "kernel_shape": (64, 64, 3, 3), "strides": 1, "padding": 1}
    epilogue = (("bias",), ("residual",), ("shr", 8), ("relu",), ("clip", -127, 127))
    op = compile_op("conv2d", CFG, epilogue=epilogue, max_insns=40, **workload)
    assert len(op.program.streams) > 3
    inputs = random_inputs(op, seed=3)
    np.testing.assert_array_equal(op.run(**inputs), op.reference(**inputs))


def _one_load() -> tuple[CommandQueue, Buffer, tuple]:
    """A queue with one load emitted after a mark, the load's buffer and the mark."""
    device = SimDevice(CFG)
    q = CommandQueue(device, record=True)
    buf = device.alloc(4096)
    mark = q.mark()
    q.load_2d(buf, 0, 4, 1, 4, 0, "INP")
    return q, buf, mark


def test_replay_refuses_a_queue_in_another_state() -> None:
    q, buf, mark = _one_load()
    rec = q.recording(mark, [buf])
    assert rec is not None and [tag for *_, tag in rec.insns] == [0]
    q.dep_pop(LOAD + 1, LOAD)   # a pending pop: not the state the recording started from
    with pytest.raises(ScheduleError, match="not in the state the recording started from"):
        q.replay(rec, [16])


def test_recording_refuses_overlapping_buffers() -> None:
    q, buf, mark = _one_load()
    assert q.recording(mark, [buf, Buffer(buf.addr + 64, 64)]) is None   # an address would have two buffers


def test_a_run_of_replays_assembles_as_replays_one_by_one() -> None:
    """``replay_run`` (the conv emitter's back-to-back replays, one queue element) against ``replay`` once per
    recording, with a push that lands on the run's last instruction (the run gives up its last recording)."""
    streams = []
    for batched in (False, True):
        q, buf, mark = _one_load()
        rec = q.recording(mark, [buf])
        deltas = np.array([[16], [48], [80]])
        if batched:
            q.replay_run([rec] * 3, deltas)
        else:
            for d in deltas:
                q.replay(rec, list(d))
        q.dep_push(LOAD, LOAD + 1)   # rides on the last replayed load
        streams.append(q.program().streams[0].insns)
    assert streams[0].tobytes() == streams[1].tobytes()
    mem = CFG.insn_formats["mem"].decode_rows(streams[1])
    assert [int(d - mem["dram_base"][0]) for d in mem["dram_base"][:4]] == [0, 16, 48, 80]
    assert mem["push_next_dep"][:4].tolist() == [0, 0, 0, 1]


def test_assembly_reuses_encoded_recordings_pads_delta_tables_and_range_checks_moved_addresses() -> None:
    """Assembling again gives the same stream (the recordings' rows are encoded once); replays of recordings
    tagged against different numbers of buffers move each address by its own buffer's delta; a moved address
    out of the field's range is refused."""
    q, buf, mark = _one_load()
    rec = q.recording(mark, [buf])
    mark = q.mark()
    q.load_2d(buf, 4, 4, 1, 4, 0, "INP")
    rec2 = q.recording(mark, [None, buf])
    assert [tag for *_, tag in rec2.insns] == [1]
    q.replay_run([rec, rec], np.array([[16], [48]]))
    q.replay(rec2, [7, 32])
    first = q.assemble()
    assert rec.encoded is not None and q.assemble().tobytes() == first.tobytes()
    base = CFG.insn_formats["mem"].decode_rows(first)["dram_base"]
    assert (base - base[0]).tolist() == [0, 4, 16, 48, 36]
    q.replay(rec, [-int(base[0]) - 1])
    with pytest.raises(ScheduleError, match=r"mem\.dram_base=-1 is out of range"):
        q.assemble()


def test_replay_flushes_where_one_by_one_emission_does_at_every_stream_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    """A run of replays is cut where ``checkpoint`` would flush after one of its groups: over this range of
    ``max_insns``, several runs reach the limit exactly (``near_full``'s boundary; e.g. 90, 132, 170)."""
    workload = {"data_shape": (1, 16, 16, 16), "kernel_shape": (16, 16, 3, 3), "strides": 1, "padding": 1}
    epilogue = (("bias",), ("shr", 8), ("clip", -127, 127))
    config = {"tile_b": (1, 1), "tile_h": (8, 2), "tile_w": (4, 4), "tile_ci": (1, 1), "tile_co": (1, 1),
              "oc_nthread": 1, "h_nthread": 2}
    for max_insns in range(80, 180):
        plain = _compile(monkeypatch, False, "conv2d", CFG, config=config, epilogue=epilogue, max_insns=max_insns,
                         **workload)
        replayed = _compile(monkeypatch, True, "conv2d", CFG, config=config, epilogue=epilogue, max_insns=max_insns,
                            **workload)
        assert _streams(replayed) == _streams(plain), f"max_insns={max_insns}"


def test_a_recording_keeps_its_last_instruction_as_recorded() -> None:
    """A push that later rides on the recorded stretch's last instruction is not part of the recording."""
    q, buf, mark = _one_load()
    rec = q.recording(mark, [buf])
    q.dep_push(LOAD, LOAD + 1)   # rides on the recorded load
    q.replay(rec, [16])
    mem = CFG.insn_formats["mem"].decode_rows(q.program().streams[0].insns)
    assert mem["push_next_dep"][:2].tolist() == [1, 0]


def test_a_run_with_empty_recordings_assembles_as_replays_one_by_one() -> None:
    """Empty recordings in a run only move the queue state: the run holds the others, and assembles as each
    replayed on its own."""
    streams = []
    for batched in (False, True):
        q, buf, mark = _one_load()
        rec = q.recording(mark, [buf])
        empty = q.recording(q.mark(), [buf])
        recs, deltas = [empty, rec, empty, rec], np.array([[0], [16], [0], [48]])
        if batched:
            q.replay_run(recs, deltas)
        else:
            for r, d in zip(recs, deltas):
                q.replay(r, list(d))
        streams.append(q.program().streams[0].insns)
    assert streams[0].tobytes() == streams[1].tobytes()
    mem = CFG.insn_formats["mem"].decode_rows(streams[1])
    assert [int(d - mem["dram_base"][0]) for d in mem["dram_base"][:3]] == [0, 16, 48]


def test_the_simulator_device_refuses_a_bad_alloc_size_or_free_argument():
    assert_alloc_and_free_refuse_what_is_not_a_size_or_a_buffer(SimDevice(CFG))


def test_the_simulators_dram_calls_check_their_range_before_allocating():
    """Simulator.read of 10^12 bytes allocated 931 GiB before the C side refused it; 2^64 and 1.5 were an
    OverflowError and a TypeError; free(None) a format error; numpy integers were refused as sizes."""
    from simulator import Simulator
    from simulator.errors import MemoryAccessError

    sim = Simulator(CFG)
    addr = sim.alloc(np.int64(16))
    for a, n in ((addr, 10**12), (2**64, 4), (1.5, 4), (-1, 4), (addr, -1)):
        with pytest.raises(MemoryAccessError, match="DRAM range"):
            sim.read(a, n)
    with pytest.raises(MemoryAccessError, match="DRAM range"):
        sim.write(2**64, b"1234")
    with pytest.raises(MemoryAccessError, match="cannot free None"):
        sim.free(None)
    sim.write(np.int64(addr), b"12345678")
    assert bytes(sim.read(addr, np.int64(8))) == b"12345678"
