"""The board latency model (simulator/latency.py): RunStats.latency_s, its terms, and the re-timed schedule.

The model must be the simulator itself when neutral (latency_s == cycles at the clock, the re-timer giving
the simulator's cycle count on every kind of stream), add each term exactly as docs/calibrate.md says, and
keep its LATENCY_KEYS in the config like any other platform parameter.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from golden_files import GOLDEN_DIR, requires_golden
from test_fuzz import CONFIGS, _prepared, random_stream

from hw_config import LATENCY_KEYS, ConfigError, load_config, presets
from hw_config.config import LATENCY_NEUTRAL
from simulator import Simulator, SimulatorError
from simulator.image import load_image
from simulator.latency import BoardProgram, board_latency
from simulator.reference import ReferenceSimulator
from simulator.stats import format_stats
from vta.device import SimDevice
from vta.templates import compile_op, random_inputs

PYNQ = load_config("pynq")
NEUTRAL = PYNQ.replace(**LATENCY_NEUTRAL)
EPILOGUE = [("bias",), ("shr", 8), ("clip", 0, 127)]
# a few schedules of one layer: double-buffered, serial, small tiles (many instructions)
SCHEDULES = [
    None,
    {"tile_b": [1, 1], "tile_h": [2, 7], "tile_w": [1, 14], "tile_ci": [2, 1], "tile_co": [1, 2], "oc_nthread": 1,
     "h_nthread": 2},
    {"tile_b": [1, 1], "tile_h": [14, 1], "tile_w": [2, 7], "tile_ci": [1, 2], "tile_co": [2, 1], "oc_nthread": 1,
     "h_nthread": 1},
]


def conv(cfg, config=None, max_insns=1 << 20):
    return compile_op("conv2d", cfg, config=config, epilogue=EPILOGUE, data_shape=(1, 32, 14, 14),
                      kernel_shape=(32, 32, 3, 3), strides=1, padding=1, max_insns=max_insns)


def streams_of(op):
    """(insns, stats) of each stream of a compiled op, run in its own simulator (timing only)."""
    out = []
    for s in op.program.streams:
        if s.uop_words.size:
            op.device.copy_in(op.program.uop_buffer, s.uop_words)
        out.append((s.insns, op.device.run(s.insns, compute=False)))
    return out


def python_times(program: BoardProgram, extra) -> tuple[list[float], list[float], list[float]]:
    """The re-timing recurrence written out in Python (docs/calibrate.md; BoardProgram._times runs it in C)."""
    duration = (program.duration + program.features @ np.asarray(extra, dtype=np.float64)).tolist()
    n = program.n
    start, end, disp = [0.0] * n, [0.0] * n, [0.0] * n
    last, d = float(program.cfg.DRAM_LATENCY), 0
    fetch = float(-(-16 // program.cfg.BUS_BYTES))
    for i in program._order:
        while d <= i:
            r = program._room[d]
            last = max(last, start[r]) if r >= 0 else last
            last += fetch
            disp[d] = last
            d += 1
        s = disp[i]
        for j in (program._prev[i], program._pop_a[i], program._pop_b[i]):
            s = max(s, end[j]) if j >= 0 else s
        for j in (program._space_a[i], program._space_b[i]):
            s = max(s, start[j]) if j >= 0 else s
        start[i], end[i] = s, s + duration[i]
    return start, end, disp


def test_c_retimer_equals_the_python_recurrence_bit_for_bit():
    """Board durations (non-neutral extras), template programs and random streams (some out of program order)."""
    rng = np.random.default_rng(7)
    programs = [BoardProgram(NEUTRAL, insns) for insns, _ in streams_of(conv(NEUTRAL, SCHEDULES[1], 300))]
    for seed in range(40):
        cfg = CONFIGS["pynq"]
        stream = random_stream(cfg, np.random.default_rng([seed, 99]))
        try:
            _prepared(Simulator, cfg, seed).run(stream, compute=False, max_cycles=20_000)
        except SimulatorError:
            continue
        programs.append(BoardProgram(cfg, np.frombuffer(stream, np.uint8)))
    assert len(programs) > 10 and any(not isinstance(p._order, range) for p in programs)
    for program in programs:
        for extra in ((0.0, 0.0, 0.0), tuple(rng.uniform(0, 40, 3)), (0.37, 11.0, 3.5)):
            assert tuple(program._times(extra).tolist()) == python_times(program, extra)


def test_c_retimer_refuses_references_out_of_range():
    program = BoardProgram(NEUTRAL, streams_of(conv(NEUTRAL))[0][0])
    program._refs[2] = program._refs[2].copy()
    program._refs[2][-1] = program.n   # a "previous instruction" past the stream
    with pytest.raises(ValueError, match="out of range"):
        program.accel_cycles()


# ---- neutral: the simulator itself -----------------------------------------------------------------------------

@pytest.mark.parametrize("schedule", range(len(SCHEDULES)))
def test_retimer_reproduces_the_simulators_cycles_on_template_programs(schedule):
    for cfg in (NEUTRAL, load_config("batch4"), load_config("block32")):
        op = conv(cfg, SCHEDULES[schedule] if cfg is NEUTRAL else None, max_insns=200)
        for insns, stats in streams_of(op):
            program = BoardProgram(cfg, insns)
            assert program.accel_cycles() == stats.cycles
            assert program.uop_words * 4 == stats.uop_load_nbytes
            assert stats.latency_s == stats.seconds if not cfg.board_model else True


@requires_golden
def test_retimer_reproduces_the_simulators_cycles_on_vta_golden_programs():
    names = sorted(p for p in GOLDEN_DIR.glob("*.npz") if not p.name.endswith(".expect.npz"))
    assert names
    for path in names:
        image = load_image(path)
        result = Simulator(image.config).replay(image)
        assert BoardProgram(image.config, image.insns).accel_cycles() == result.stats["cycles"], path.name


def test_retimer_reproduces_the_simulators_cycles_on_random_streams():
    """Random token-balanced streams (the fuzz generator), including ones whose program order is not an order
    of their dependencies (a push waiting for a pop that comes later in the stream)."""
    seen, out_of_order = 0, 0
    for name, cfg in CONFIGS.items():
        for seed in range(80):
            stream = random_stream(cfg, np.random.default_rng([seed, 99]))
            try:
                stats = _prepared(Simulator, cfg, seed).run(stream, compute=False, max_cycles=20_000)
            except SimulatorError:
                continue
            program = BoardProgram(cfg, np.frombuffer(stream, np.uint8))
            assert program.accel_cycles() == stats.cycles, (name, seed)
            seen += 1
            out_of_order += not isinstance(program._order, range)
    assert seen >= 30 and out_of_order >= 1


def test_both_simulators_report_the_same_latency():
    op = conv(PYNQ)
    insns = op.program.streams[0].insns
    for cls in (Simulator, ReferenceSimulator):
        sim = cls(PYNQ)
        for b in (op.buffers.data, op.buffers.kernel, op.buffers.out, op.buffers.bias, op.program.uop_buffer):
            sim.map(b.addr, b.nbytes)
        sim.write(op.program.uop_buffer.addr, op.program.streams[0].uop_words.view(np.uint8))
        stats = sim.run(insns, compute=False)
        assert stats.latency_s == pytest.approx(board_latency(PYNQ, insns).total_s, rel=1e-12)
        assert stats.to_dict()["latency_s"] == stats.latency_s


# ---- terms ------------------------------------------------------------------------------------------------------

def test_each_host_term_adds_exactly_what_docs_say():
    op = conv(NEUTRAL, SCHEDULES[2], max_insns=120)   # several streams: one launch each
    runs = streams_of(op)
    assert len(runs) > 1
    n = sum(len(insns) for insns, _ in runs)
    uops = sum(BoardProgram(NEUTRAL, insns).uop_words for insns, _ in runs)
    cache = sum(BoardProgram(NEUTRAL, insns).cache_bytes for insns, _ in runs)
    seconds = sum(stats.seconds for _, stats in runs)
    for key, value, expected in (("LAUNCH_US", 7.0, len(runs) * 7e-6), ("HOST_INSN_NS", 300.0, n * 300e-9),
                                 ("HOST_UOP_NS", 11.0, uops * 11e-9), ("CACHE_NS_PER_BYTE", 0.5, cache * 0.5e-9)):
        cfg = NEUTRAL.replace(**{key: value})
        total = sum(board_latency(cfg, insns, stats.cycles).total_s for insns, stats in runs)
        assert total - seconds == pytest.approx(expected, rel=1e-9), key


def test_cache_bytes_are_the_stream_and_the_union_of_what_it_touches():
    op = conv(NEUTRAL)
    insns = op.program.streams[0].insns
    touched = op.buffers.data.nbytes + op.buffers.kernel.nbytes + op.buffers.out.nbytes + op.buffers.bias.nbytes
    uop_bytes = op.program.streams[0].uop_words.size * 4
    assert BoardProgram(NEUTRAL, insns).cache_bytes == 16 * len(insns) + touched + uop_bytes


def test_board_terms_grow_the_schedule_by_at_most_their_count():
    """Each accelerator-side term adds at most its count (all of it only where the instructions are on the
    critical path; the rest hides under the other modules), and the critical path bounds the growth."""
    serial = conv(NEUTRAL, SCHEDULES[2])
    insns, _ = streams_of(serial)[0]
    program = BoardProgram(NEUTRAL, insns)
    beats, rows, loops = program.features.sum(axis=0)
    base = program.accel_cycles()
    for extra, count in (((0.5, 0, 0), 0.5 * beats), ((0, 9.0, 0), 9.0 * rows), ((0, 0, 13.0), 13.0 * loops)):
        grown = program.accel_cycles(extra)
        assert base < grown <= base + count
        length, path = program.accel_cycles_and_path(extra)
        # the critical path at ``extra`` bounds the growth from above (the length is a max of linear paths)
        assert length == grown and grown - base - 1e-9 <= float(np.dot(path, extra)) <= count + 1e-9


def test_critical_path_is_the_derivative():
    """The length is piecewise linear in the board terms; the critical path's counts are its slope."""
    for schedule in SCHEDULES:
        insns, _ = streams_of(conv(NEUTRAL, schedule))[0]
        program = BoardProgram(NEUTRAL, insns)
        at = np.array([0.4, 17.0, 9.0])
        length, path = program.accel_cycles_and_path(tuple(at))
        for k in range(3):
            step = np.zeros(3)
            step[k] = 1e-4
            slope = (program.accel_cycles(tuple(at + step)) - length) / 1e-4
            assert slope == pytest.approx(path[k], abs=1e-3)


def test_latency_grows_with_every_parameter_and_programs_sum_their_streams():
    op = conv(PYNQ, SCHEDULES[2], max_insns=120)
    stats = op.program.run(compute=False)
    parts = [board_latency(PYNQ, s.insns).total_s for s in op.program.streams]
    assert stats.latency_s == pytest.approx(sum(parts), rel=1e-12) and stats.latency_s > stats.seconds
    insns = op.program.streams[0].insns
    base = board_latency(PYNQ, insns).total_s
    for key in LATENCY_KEYS:
        worse = PYNQ.replace(**{key: PYNQ.DMA_EFFICIENCY / 2 if key == "DMA_EFFICIENCY" else getattr(PYNQ, key) * 2})
        assert board_latency(worse, insns).total_s > base, key


def test_compiled_ops_and_stats_report_board_latency():
    op = conv(PYNQ)
    op.run(**random_inputs(op))
    assert op.stats.latency_s > op.stats.seconds > 0
    text = format_stats(op.stats, PYNQ)
    assert "board:" in text and f"{op.stats.latency_s * 1e3:.3f} ms" in text
    neutral = conv(NEUTRAL)
    neutral.run(**random_inputs(neutral))
    assert neutral.stats.latency_s == neutral.stats.seconds and "board:" not in format_stats(neutral.stats, NEUTRAL)


def test_a_simulator_reuses_a_streams_board_latency_and_keeps_its_cache_bounded(monkeypatch):
    """A stream run again (a network's layers every inference) reuses its board-model result, which must equal
    a fresh evaluation; different streams never share one; the cache holds at most LATENCY_CACHE_STREAMS."""
    from simulator import core
    monkeypatch.setattr(core, "LATENCY_CACHE_STREAMS", 2)
    device = SimDevice(PYNQ)   # one simulator runs all three
    ops = [compile_op("conv2d", PYNQ, config=c, epilogue=EPILOGUE, data_shape=(1, 32, 14, 14),
                      kernel_shape=(32, 32, 3, 3), strides=1, padding=1, device=device) for c in SCHEDULES]
    sim = device.sim
    for _ in range(2):
        for op in ops:
            for insns, stats in streams_of(op):
                assert stats.latency_s == board_latency(PYNQ, insns, stats.cycles).total_s
                assert len(sim._latency_cache) <= 2
    assert len({s.latency_s for op in ops for _, s in streams_of(op)}) == len(ops)


def test_a_stream_that_never_finishes_is_refused():
    cfg = NEUTRAL
    finish = cfg.insn_formats["finish"].encode_rows({"opcode": np.array([3]), "pop_prev_dep": np.array([1])})
    with pytest.raises(ValueError, match="never pushed"):
        BoardProgram(cfg, finish)


# ---- the config keys ---------------------------------------------------------------------------------------------

def test_latency_keys_are_config_keys():
    assert all(k in PYNQ.to_dict() for k in LATENCY_KEYS)
    assert PYNQ.board_model and all(not load_config(p).board_model for p in presets() if p != "pynq")
    # neutral values stay out of the fingerprint: uncalibrated configs keep theirs
    sim = load_config("sim")
    assert sim.replace(LAUNCH_US=0).fingerprint == sim.fingerprint
    assert sim.replace(LAUNCH_US=10).fingerprint != sim.fingerprint
    assert sim.replace(LAUNCH_US=10).fingerprint == sim.replace(LAUNCH_US=10.0).fingerprint
    assert PYNQ.fingerprint != NEUTRAL.fingerprint   # a calibrated board is another tuning target
    # a VTA-keys-only config (a golden image's) takes the target preset's board model
    assert load_config(PYNQ.vta_dict()).latency_params() == PYNQ.latency_params()
    assert load_config(json.loads(PYNQ.to_json())) == PYNQ


@pytest.mark.parametrize(("key", "value"), [("DMA_EFFICIENCY", 0), ("DMA_EFFICIENCY", 1.5), ("LAUNCH_US", -1),
                                            ("HOST_INSN_NS", float("nan")), ("COMPUTE_LOOP_CYCLES", True),
                                            ("CACHE_NS_PER_BYTE", "fast")])
def test_bad_latency_values_are_refused_naming_the_key(key, value):
    with pytest.raises(ConfigError) as info:
        load_config("pynq", **{key: value})
    assert info.value.key == key and key in str(info.value)
