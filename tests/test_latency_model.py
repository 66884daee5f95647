"""The board latency model (simulator/latency.py): RunStats.latency_s, its terms, and the re-timed schedule.

The model must be the simulator itself when neutral (latency_s == cycles at the clock, the re-timer giving
the simulator's schedule with each transfer alone on the bus, on every kind of stream), add each term exactly
as docs/calibrate.md says, and
keep its LATENCY_KEYS in the config like any other platform parameter.
"""

from __future__ import annotations

import functools
import itertools
import json
from dataclasses import dataclass

import numpy as np
import pytest
from golden_files import GOLDEN_DIR, requires_golden
from test_fuzz import CONFIGS, _prepared, random_stream

from hw_config import ALU_OPCODES, LATENCY_KEYS, MEM_TYPES, OPCODES, ConfigError, load_config, presets
from hw_config.config import LATENCY_NEUTRAL
from simulator import Simulator, SimulatorError
from simulator.image import load_image
from simulator.latency import BoardProgram, board_latency
from simulator.reference import ReferenceSimulator
from simulator.stats import format_stats
from vta.isa import AluInsn, FinishInsn, GemmInsn, MemInsn, assemble
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
    prev, room, pop_a, pop_b, space_a, space_b = program._lists()
    for i in program._refs[0].tolist():
        while d <= i:
            r = room[d]
            last = max(last, start[r]) if r >= 0 else last
            last += fetch
            disp[d] = last
            d += 1
        s = disp[i]
        for j in (prev[i], pop_a[i], pop_b[i]):
            s = max(s, end[j]) if j >= 0 else s
        for j in (space_a[i], space_b[i]):
            s = max(s, start[j]) if j >= 0 else s
        start[i], end[i] = s, s + duration[i]
    return start, end, disp


def finished_random_streams(count: int = 40) -> list[tuple]:
    """(config, instructions) of the seeded random pynq streams the simulator runs to completion (the board model
    needs those; some of them are out of program order)."""
    cfg = CONFIGS["pynq"]
    out = []
    for seed in range(count):
        stream = random_stream(cfg, np.random.default_rng([seed, 99]))
        try:
            _prepared(Simulator, cfg, seed).run(stream, compute=False, max_cycles=20_000)
        except SimulatorError:
            continue
        out.append((cfg, np.frombuffer(stream, np.uint8)))
    return out


def numpy_footprint(first: np.ndarray, end: np.ndarray) -> int:
    """Bytes covered by the union of the ranges [first, end) (vta_dma_footprint does it in C)."""
    if first.size == 0:
        return 0
    order = np.argsort(first, kind="stable")
    first, end = first[order], end[order]
    reach = np.maximum.accumulate(end)
    starts = np.flatnonzero(first > np.concatenate(([-1], reach[:-1])))   # a range starting past all before
    last = np.concatenate((starts[1:] - 1, [first.size - 1]))
    return int((reach[last] - first[starts]).sum())


def numpy_board_program(cfg, insns: np.ndarray) -> dict[str, np.ndarray]:
    """What BoardProgram reads from a stream (vta_board_program does it in C), defined in numpy from the decoded
    fields: durations and features, micro-op words, DMA byte ranges, the module and queue references."""
    from hw_config.isa_rules import DEP_FLAGS, QUEUES, module_indices, queue_table
    from hw_config.layout import dma_byte_ranges
    from simulator import timing

    rows = np.ascontiguousarray(insns, dtype=np.uint8).reshape(-1, 16)
    n = rows.shape[0]
    head = cfg.insn_formats["finish"].decode_rows(rows)
    mem = cfg.insn_formats["mem"].decode_rows(rows)
    loop = cfg.insn_formats["gemm"].decode_rows(rows)   # the loop fields sit alike in GEMM and ALU
    op, mt = head["opcode"], mem["memory_type"]
    load, store, gemm, alu = (OPCODES[k] for k in ("LOAD", "STORE", "GEMM", "ALU"))
    module = module_indices(op, mt)
    x, y, stride = mem["x_size"], mem["y_size"], mem["x_stride"]
    dma = ((op == load) | (op == store)) & (x > 0)
    elem = cfg.elem_bytes_by_type[mt]
    one_row = (y == 1) | (stride == x)
    n_rows = np.where(one_row, 1, y)
    row_bytes = np.where(one_row, x * y * elem, x * elem)
    beats = -(-row_bytes // cfg.BUS_BYTES)
    padded = (mem["y_pad_0"] + y + mem["y_pad_1"]) * (mem["x_pad_0"] + x + mem["x_pad_1"]) - x * y
    dma_cycles = timing.dma_cycles(cfg, n_rows, row_bytes) + np.where(op == load, padded, 0)
    is_loop = (op == gemm) | (op == alu)
    outer = loop["iter_out"] * loop["iter_in"]
    uops = loop["uop_end"] - loop["uop_bgn"]
    duration = np.ones(n)
    duration[dma] = dma_cycles[dma]
    iterations = outer * np.maximum(uops, 0)   # uop_end <= uop_bgn: the loop does not run
    ii = np.where(op == gemm, cfg.GEMM_II, cfg.ALU_II)
    duration[is_loop] = np.maximum(1, cfg.COMPUTE_LATENCY + iterations * ii)[is_loop]
    features = np.zeros((n, 3))
    features[dma, 0] = (n_rows * beats)[dma]
    features[dma, 1] = n_rows[dma]
    features[is_loop, 2] = np.where(uops > 0, outer, 0)[is_loop]
    first, end = dma_byte_ranges(mem, elem)
    refs = np.full((6, n), -1, dtype=np.int64)   # prev, room, pop_a, pop_b, space_a, space_b
    for m in range(3):
        idx = np.flatnonzero(module == m)
        refs[0, idx[1:]] = idx[:-1]
        depth = cfg.INSN_QUEUE_DEPTH
        refs[1, idx[depth:]] = idx[:-depth] if idx.size > depth else idx[:0]
    table = queue_table()

    def users(q: int, slots: tuple[int, int]) -> list[tuple[int, int]]:
        """(instruction, flag) of each pop (slots 0, 1) or push (2, 3) of queue q, in program order."""
        return sorted((i, k) for k in slots for i in np.flatnonzero((table[module, k] == q) & (head[DEP_FLAGS[k]] == 1)))

    for q in range(len(QUEUES)):
        pops, pushes = users(q, (0, 1)), users(q, (2, 3))
        assert len(pops) <= len(pushes)
        for (i, k), (j, _) in zip(pops, pushes):
            refs[2 + k, i] = j
        for (i, k), (j, _) in zip(pushes[cfg.TOKEN_QUEUE_DEPTH:], pops):
            refs[4 + k - 2, i] = j
    uop_load = dma & (op == load) & (mt == MEM_TYPES["UOP"])
    return {"duration": duration, "features": features, "refs": refs, "first": first[dma], "end": end[dma],
            "uop_words": int((x * y)[uop_load].sum())}


def test_c_board_program_equals_its_numpy_definition():
    """vta_board_program against numpy_board_program on template programs and random streams the simulator
    finishes (the board model's inputs: durations, features, references, DMA ranges, micro-op words)."""
    streams = [(NEUTRAL, insns) for insns, _ in streams_of(conv(NEUTRAL, SCHEDULES[1], 300))]
    streams += [(PYNQ, insns) for schedule in SCHEDULES for insns, _ in streams_of(conv(PYNQ, schedule))]
    streams += finished_random_streams()
    assert len(streams) > 12
    for cfg, insns in streams:
        program, want = BoardProgram(cfg, insns), numpy_board_program(cfg, insns)
        np.testing.assert_array_equal(program.duration, want["duration"])
        np.testing.assert_array_equal(program.features, want["features"])
        np.testing.assert_array_equal(np.stack(program._refs[1:]), want["refs"])
        assert program.uop_words == want["uop_words"]
        assert program.cache_bytes == 16 * program.n + numpy_footprint(want["first"], want["end"])


def test_a_loop_with_uop_end_before_uop_bgn_runs_no_iteration_on_the_board_model():
    """A stream the simulator refuses at decode can still reach the board model (it times what a board would
    run): a GEMM / ALU whose uop_end is below its uop_bgn runs its loop zero times, so it takes COMPUTE_LATENCY."""
    insns = assemble([GemmInsn(uop_bgn=5, uop_end=2, iter_out=3, iter_in=4),
                      AluInsn(uop_bgn=7, uop_end=1, iter_out=2, iter_in=2, alu_opcode=ALU_OPCODES["MAX"]),
                      GemmInsn(uop_bgn=1, uop_end=3, iter_out=3, iter_in=4), FinishInsn()], PYNQ)
    program = BoardProgram(PYNQ, insns)
    np.testing.assert_array_equal(program.duration, numpy_board_program(PYNQ, insns)["duration"])
    assert list(program.duration) == [PYNQ.COMPUTE_LATENCY, PYNQ.COMPUTE_LATENCY,
                                      PYNQ.COMPUTE_LATENCY + 24 * PYNQ.GEMM_II, 1]


def test_c_footprint_equals_its_numpy_definition():
    """vta_dma_footprint (a radix sort, 11 bits a pass) against the numpy definition on random ranges: addresses
    from a few bits to 2^47 (one to five passes), repeated starts, empty and reversed ranges, ranges not DMA."""
    from simulator.core import ffi, lib

    rng = np.random.default_rng(11)
    for trial in range(300):
        n = int(rng.integers(0, 400))
        top = 1 << int(rng.integers(1, 48))
        first = rng.integers(0, top, n, dtype=np.int64)
        if trial % 3 == 0:
            first = np.repeat(first[: max(1, n // 8)], 8)[:n]   # replays: the same starts again
        end = first + rng.integers(-50, 5000, first.size, dtype=np.int64)
        dma = (rng.random(first.size) < 0.8).astype(np.uint8)
        got = ffi.new("int64_t *")
        assert lib.vta_dma_footprint(first.size, ffi.from_buffer("int64_t[]", first),
                                     ffi.from_buffer("int64_t[]", end), ffi.from_buffer("uint8_t[]", dma), got) == 0
        mask = dma.view(bool)
        assert got[0] == numpy_footprint(first[mask], end[mask]), (trial, n, top)
    one = np.array([-4], dtype=np.int64)
    assert lib.vta_dma_footprint(1, ffi.from_buffer("int64_t[]", one), ffi.from_buffer("int64_t[]", one),
                                 ffi.from_buffer("uint8_t[]", np.ones(1, np.uint8)), got) != 0   # not a byte address


def test_c_retimer_equals_the_python_recurrence_bit_for_bit():
    """Board durations (non-neutral extras), template programs and random streams (some out of program order)."""
    rng = np.random.default_rng(7)
    programs = [BoardProgram(NEUTRAL, insns) for insns, _ in streams_of(conv(NEUTRAL, SCHEDULES[1], 300))]
    programs += [BoardProgram(cfg, insns) for cfg, insns in finished_random_streams()]
    assert len(programs) > 10 and any(not p._in_order for p in programs)
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

def solo_bus_cycles(op, insns: np.ndarray, uop_words: np.ndarray) -> int:
    """A compiled op's stream on the reference simulator with every transfer timed alone (``shared_bus=False``):
    the schedule the board model re-times."""
    sim = ReferenceSimulator(op.cfg, shared_bus=False)
    for b in (op.buffers.data, op.buffers.kernel, op.buffers.out, op.buffers.bias, op.program.uop_buffer):
        sim.map(b.addr, b.nbytes)
    sim.write(op.program.uop_buffer.addr, uop_words.view(np.uint8))
    return sim.run(insns, compute=False).cycles


@pytest.mark.parametrize("schedule", range(len(SCHEDULES)))
def test_retimer_reproduces_the_solo_bus_schedule_on_template_programs(schedule):
    """The re-timer is the simulator's schedule with each transfer alone on the bus; the simulator, which
    shares the bus, is never faster (sharing only slows transfers)."""
    shared = 0
    for cfg in (NEUTRAL, load_config("batch4"), load_config("block32")):
        op = conv(cfg, SCHEDULES[schedule] if cfg is NEUTRAL else None, max_insns=200)
        for s, (insns, stats) in zip(op.program.streams, streams_of(op), strict=True):
            program = BoardProgram(cfg, insns)
            assert program.accel_cycles() == solo_bus_cycles(op, insns, s.uop_words)
            assert stats.cycles >= program.accel_cycles()
            shared += stats.cycles > program.accel_cycles()
            assert program.uop_words * 4 == stats.uop_load_nbytes
            assert stats.latency_s == stats.seconds if not cfg.board_model else True
    assert shared   # some transfers overlapped, so the two differ somewhere


@requires_golden
def test_retimer_reproduces_the_solo_bus_schedule_on_vta_golden_programs():
    names = sorted(p for p in GOLDEN_DIR.glob("*.npz") if not p.name.endswith(".expect.npz"))
    assert names
    for path in names:
        image = load_image(path)
        solo = ReferenceSimulator(image.config, shared_bus=False).replay(image)
        assert BoardProgram(image.config, image.insns).accel_cycles() == solo.stats["cycles"], path.name
        assert Simulator(image.config).replay(image).stats["cycles"] >= solo.stats["cycles"], path.name


def test_retimer_reproduces_the_solo_bus_schedule_on_random_streams():
    """Random token-balanced streams (the fuzz generator), including ones whose program order is not an order
    of their dependencies (a push waiting for a pop that comes later in the stream)."""
    seen, out_of_order = 0, 0
    solo = functools.partial(ReferenceSimulator, shared_bus=False)
    for name, cfg in CONFIGS.items():
        for seed in range(80):
            stream = random_stream(cfg, np.random.default_rng([seed, 99]))
            try:
                stats = _prepared(solo, cfg, seed).run(stream, compute=False, max_cycles=20_000)
            except SimulatorError:
                continue
            program = BoardProgram(cfg, np.frombuffer(stream, np.uint8))
            assert program.accel_cycles() == stats.cycles, (name, seed)
            seen += 1
            out_of_order += not program._in_order
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
        assert stats.latency_s == pytest.approx(board_latency(PYNQ, insns, stats.cycles).total_s, rel=1e-12)
        assert stats.to_dict()["latency_s"] == stats.latency_s


def test_the_board_time_starts_from_the_simulators_cycles_never_below_them():
    """The simulator's cycles (its shared DRAM bus: the count the RTL is held to) exceed the re-timed schedule,
    each transfer alone, where transfers overlap (this conv). The board's accelerator time is those cycles plus
    what the board's durations add to the re-timed schedule: the simulator's at no extra, and never less at any
    extra (re-timed alone, a board a hair slower than the port's peak came out 2 % faster than the neutral model)."""
    insns, stats = streams_of(conv(NEUTRAL))[0]
    program = BoardProgram(NEUTRAL, insns, stats.cycles)
    assert stats.cycles > program.accel_cycles()            # the shared bus cost this stream cycles
    assert program.board_cycles() == stats.cycles
    for extra in ((1e-9, 0.0, 0.0), (0.0, 1e-6, 0.0), (0.4, 17.0, 9.0)):
        added = program.accel_cycles(extra) - program.accel_cycles()
        assert program.board_cycles(extra) == pytest.approx(stats.cycles + added, rel=1e-15, abs=0)
        assert program.board_cycles(extra) > stats.cycles
    barely = NEUTRAL.replace(DMA_EFFICIENCY=0.99999, CALIBRATED_FOR="")   # a board model, nearly neutral
    assert barely.board_model and not NEUTRAL.board_model
    slower = board_latency(barely, insns, stats.cycles).accel_s
    assert stats.seconds < slower < stats.seconds * 1.001 and board_latency(NEUTRAL, insns, stats.cycles).accel_s == \
        stats.seconds
    timed = conv(barely).time()   # the simulator's own path (RunStats.latency_s)
    assert timed.cycles == stats.cycles and timed.seconds < timed.latency_s < timed.seconds * 1.001
    with pytest.raises(ValueError, match=r"cycles=\d+: fewer than this stream takes with every transfer alone"):
        BoardProgram(NEUTRAL, insns, int(program.accel_cycles()) - 1).board_cycles((0.5, 0.0, 0.0))


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
    runs = streams_of(op)
    parts = [board_latency(PYNQ, insns, run.cycles).total_s for insns, run in runs]
    assert stats.latency_s == pytest.approx(sum(parts), rel=1e-12) and stats.latency_s > stats.seconds
    insns, run = runs[0]
    base = board_latency(PYNQ, insns, run.cycles).total_s
    for key in LATENCY_KEYS:
        worse = PYNQ.replace(**{key: PYNQ.DMA_EFFICIENCY / 2 if key == "DMA_EFFICIENCY" else getattr(PYNQ, key) * 2})
        assert board_latency(worse, insns, run.cycles).total_s > base, key


def test_compiled_ops_and_stats_report_board_latency():
    op = conv(PYNQ)
    op.run(**random_inputs(op))
    assert op.stats.latency_s > op.stats.seconds > 0
    text = format_stats(op.stats, PYNQ)
    assert "board:" in text and f"{op.stats.latency_s * 1e3:.3f} ms" in text
    neutral = conv(NEUTRAL)
    neutral.run(**random_inputs(neutral))
    assert neutral.stats.latency_s == neutral.stats.seconds and "board:" not in format_stats(neutral.stats, NEUTRAL)


# ---- by hand: small streams whose latency is worked out here, term by term -------------------------------------
#
# None of the figures below calls the model: they apply docs/simulator.md ("Timing model": durations, dispatch,
# tokens) and docs/calibrate.md (its table: what each term counts, and the pynq column) by hand. pynq's timing
# numbers: bus B = 8 bytes, DRAM_LATENCY 32, DMA_BURST_BEATS 16, DMA_BURST_GAP 2, COMPUTE_LATENCY 9, GEMM_II 1,
# ALU_II 2, 100 MHz. Fetching an instruction takes ceil(16 / 8) = 2 cycles, so instruction i (no queue ever full
# here) is dispatched at 32 + 2 (i + 1): 34, 36, 38, ... DRAM element bytes: INP and OUT 16, WGT 256, UOP 4.
# A DMA is DRAM_LATENCY + rows * (beats + bursts * 2), with rows = y_size unless the transfer is contiguous
# (y_size 1 or x_stride == x_size: one row of all its bytes), beats = ceil(row bytes / 8), bursts = ceil(beats / 16).
# The board adds BEAT per beat of every row and ROW per row of a DMA, LOOP per iter_out x iter_in iteration of a
# GEMM/ALU, all re-timed through the same schedule; then launch + host + cache, which add.

LAUNCH_S = 41.81e-6     # LAUNCH_US, once per stream
INSN_S = 376.1e-9       # HOST_INSN_NS, per instruction
UOP_S = 7.963e-9        # HOST_UOP_NS, per micro-op word the stream loads
BYTE_S = 0.3438e-9      # CACHE_NS_PER_BYTE, per byte of the stream and of the DRAM its transfers span
BEAT = 1 / 0.7095 - 1   # DMA_EFFICIENCY 0.7095: extra cycles per bus beat
ROW = 44.85             # DMA_ROW_CYCLES, per DMA row
LOOP = 18.97            # COMPUTE_LOOP_CYCLES, per loop iteration
CLOCK_HZ = 100e6
INP_AT, UOP_AT, OUT_AT = 0x10000, 0x20000, 0x30000   # DRAM byte addresses of the streams' data
INP, WGT, UOP, OUT = (MEM_TYPES[k] for k in ("INP", "WGT", "UOP", "OUT"))


@dataclass(frozen=True)
class Hand:
    """A stream and its figures, worked out by hand."""

    insns: np.ndarray
    cycles: int           # the simulator's (every board key neutral)
    board_cycles: float   # the simulator's cycles + what the board's durations add to the re-timed schedule
    uop_words: int
    cache_bytes: int

    def seconds(self) -> dict[str, float]:
        return {"launch_s": LAUNCH_S, "host_s": len(self.insns) * INSN_S + self.uop_words * UOP_S,
                "cache_s": self.cache_bytes * BYTE_S, "accel_s": self.board_cycles / CLOCK_HZ}

    @property
    def total_s(self) -> float:
        return sum(self.seconds().values())


def _load(mem: int, at: int, y: int, x: int, stride: int, **flags) -> MemInsn:
    elem = {INP: 16, WGT: 256, UOP: 4}[mem]
    return MemInsn(memory_type=mem, dram_base=at // elem, y_size=y, x_size=x, x_stride=stride, **flags)


def hand_programs() -> dict[str, Hand]:
    fin = FinishInsn()
    out = {}
    # 4 rows of 3 INP elements, 10 apart: 48-byte rows, 6 beats, 1 burst: 32 + 4 * (6 + 2) = 64, [34, 98]; FINISH
    # (compute, no tokens) [36, 37]. Board: 4 rows x 6 beats. Cache: two instructions and the span from the first
    # row to the end of the last, (3 * 10 + 3) * 16 bytes.
    out["inp 4 rows"] = Hand(assemble([_load(INP, INP_AT, 4, 3, 10), fin], PYNQ),
                             34 + 64, 34 + 64 + 4 * 6 * BEAT + 4 * ROW, 0, 2 * 16 + (3 * 10 + 3) * 16)
    # the same 64 cycles as one contiguous row of 14 elements: 224 bytes, 28 beats, 2 bursts: 32 + 28 + 2 * 2
    out["inp 1 long row"] = Hand(assemble([_load(INP, INP_AT, 1, 14, 14), fin], PYNQ),
                                 34 + 64, 34 + 64 + 28 * BEAT + 1 * ROW, 0, 2 * 16 + 14 * 16)
    # 3 rows of one WGT element, 2 apart: 256-byte rows, 32 beats, 2 bursts: 32 + 3 * (32 + 2 * 2) = 140
    out["wgt 3 rows"] = Hand(assemble([_load(WGT, INP_AT, 3, 1, 2), fin], PYNQ),
                             34 + 140, 34 + 140 + 3 * 32 * BEAT + 3 * ROW, 0, 2 * 16 + (2 * 2 + 1) * 256)
    # 5 rows of 2 INP elements back to back (x_stride == x_size): one row of 160 bytes, 20 beats, 2 bursts
    out["inp 5 rows contiguous"] = Hand(assemble([_load(INP, INP_AT, 5, 2, 2), fin], PYNQ),
                                        34 + 32 + 20 + 2 * 2, 34 + 56 + 20 * BEAT + 1 * ROW, 0, 2 * 16 + 10 * 16)
    # load -> compute -> store -> compute, each waiting for the one before through a token:
    #  0 LOAD INP (4 rows, as above; pushes l2g)    load     [34, 98]                    board + 24 BEAT + 4 ROW
    #  1 LOAD UOP, 2 words back to back: one     compute  [36, 36 + 32 + 1 + 2 = 71]  board + BEAT + ROW, ends
    #    row of 8 bytes, 1 beat                               at ~116, before 0 does: off the critical path
    #  2 GEMM 3 x 2 iterations x 2 uops (pops l2g)   compute  [98, 98 + 9 + 12 = 119]     board + 6 LOOP
    #  3 ALU 2 x 5 iterations x 1 uop, II 2          compute  [119, 119 + 9 + 20 = 148]   board + 10 LOOP
    #    (pushes g2s)
    #  4 STORE 20 OUT elements: 320 bytes, 40 beats, store    [148, 148 + 32 + 40 + 3 * 2 = 226]
    #    3 bursts (pops g2s, pushes s2g)                                                 board + 40 BEAT + ROW
    #  5 FINISH (pops s2g)                           compute  [226, 227]
    # That is the schedule the board model re-times (each transfer alone). The simulator shares the bus: 0 asks
    # 24 beats over 32 cycles (0.75 a cycle), 1 one beat over 3 (1/3); together over one beat a cycle during
    # [36, 39], so 1 gets what it asks and 0 the 2/3 left, floor(2/3 / 0.75 * 2^20) = 932,067 of 2^20 of its
    # solo timeline a cycle: 0's last beat goes out at 39 + ceil((30 * 2^20 - 3 * 932,067) / 2^20) = 67, and
    # everything after moves by one cycle: 228. The board's time starts from the simulator's 228 and adds what its
    # durations add to the re-timed schedule (227 + the terms on its critical path).
    serial = [_load(INP, INP_AT, 4, 3, 10, push_next_dep=1), _load(UOP, UOP_AT, 2, 1, 1),
              GemmInsn(pop_prev_dep=1, uop_bgn=0, uop_end=2, iter_out=3, iter_in=2),
              AluInsn(push_next_dep=1, uop_bgn=0, uop_end=1, iter_out=2, iter_in=5, alu_opcode=ALU_OPCODES["MAX"],
                      use_imm=1, imm=0),
              MemInsn(opcode=OPCODES["STORE"], memory_type=OUT, dram_base=OUT_AT // 16, y_size=1, x_size=20,
                      x_stride=20, pop_prev_dep=1, push_prev_dep=1),
              FinishInsn(pop_next_dep=1)]
    out["serial"] = Hand(assemble(serial, PYNQ), 228, 228 + (24 + 40) * BEAT + (4 + 1) * ROW + (6 + 10) * LOOP,
                         2, 6 * 16 + (3 * 10 + 3) * 16 + 2 * 4 + 20 * 16)
    # a load beside a long GEMM, no token between them: load [34, 98], GEMM 10 x 10 iterations [36, 36 + 109 = 145],
    # FINISH [145, 146]. On the board the load grows to ~287 and still ends under the GEMM (145 + 100 LOOP):
    # its extra DMA time hides, only the GEMM's loop term shows.
    gemm = GemmInsn(uop_bgn=0, uop_end=1, iter_out=10, iter_in=10)
    out["overlapped"] = Hand(assemble([_load(INP, INP_AT, 4, 3, 10), gemm, fin], PYNQ),
                             146, 146 + 100 * LOOP, 0, 3 * 16 + (3 * 10 + 3) * 16)
    # the same with the GEMM waiting for the load (l2g): GEMM [98, 207], FINISH [207, 208]; on the board every term adds
    waits = GemmInsn(pop_prev_dep=1, uop_bgn=0, uop_end=1, iter_out=10, iter_in=10)
    out["dependent"] = Hand(assemble([_load(INP, INP_AT, 4, 3, 10, push_next_dep=1), waits, fin], PYNQ),
                            208, 208 + 24 * BEAT + 4 * ROW + 100 * LOOP, 0, 3 * 16 + (3 * 10 + 3) * 16)
    return out


HAND = hand_programs()


def hand_sim(cfg) -> Simulator:
    sim = Simulator(cfg)
    for addr in (INP_AT, UOP_AT, OUT_AT):
        sim.map(addr, 4096)
    return sim


def test_the_hand_figures_use_the_pynq_presets_numbers():
    """The constants above are docs/calibrate.md's pynq column and the pynq preset's timing numbers."""
    assert PYNQ.latency_params() == {"LAUNCH_US": 41.81, "HOST_INSN_NS": 376.1, "HOST_UOP_NS": 7.963,
                                     "CACHE_NS_PER_BYTE": 0.3438, "DMA_EFFICIENCY": 0.7095, "DMA_ROW_CYCLES": 44.85,
                                     "COMPUTE_LOOP_CYCLES": 18.97}
    timing = ("BUS_BYTES", "DRAM_LATENCY", "DMA_BURST_BEATS", "DMA_BURST_GAP", "COMPUTE_LATENCY", "GEMM_II", "ALU_II",
              "CLOCK_MHZ", "INP_WIDTH", "WGT_WIDTH", "BATCH", "BLOCK_IN", "BLOCK_OUT")
    assert [getattr(PYNQ, k) for k in timing] == [8, 32, 16, 2, 9, 1, 2, 100, 8, 8, 1, 16, 16]
    assert PYNQ.INSN_QUEUE_DEPTH > 6 and PYNQ.TOKEN_QUEUE_DEPTH >= 1


@pytest.mark.parametrize("name", list(HAND))
def test_latency_by_hand(name):
    """Each term of board_latency, and RunStats.latency_s, equal the figures worked out by hand; with every key
    neutral the simulator's cycles are the hand-computed ones and latency_s is exactly cycles at the clock."""
    hand = HAND[name]
    got = board_latency(PYNQ, hand.insns, hand.cycles)
    assert {k: getattr(got, k) for k in ("launch_s", "host_s", "cache_s", "accel_s")} == \
        pytest.approx(hand.seconds(), rel=1e-12)
    neutral = hand_sim(NEUTRAL).run(hand.insns)
    assert neutral.cycles == hand.cycles and neutral.latency_s == hand.cycles / CLOCK_HZ
    board = hand_sim(PYNQ).run(hand.insns)
    assert board.cycles == hand.cycles and board.latency_s == pytest.approx(hand.total_s, rel=1e-12)


def test_a_simulator_reuses_a_streams_board_latency_and_keeps_its_cache_bounded(monkeypatch):
    """A stream run again (a network's layers every inference) reuses its board-model result, which must be that
    stream's own hand-computed figure, never another's (two streams here share their cycle count, several their
    length); the cache holds at most LATENCY_CACHE_STREAMS, oldest out."""
    from simulator import core
    monkeypatch.setattr(core, "LATENCY_CACHE_STREAMS", 2)
    evaluated = []
    real = core.board_latency
    monkeypatch.setattr(core, "board_latency", lambda *args: evaluated.append(args) or real(*args))
    sim = hand_sim(PYNQ)
    for _ in range(2):
        for name, hand in HAND.items():
            for _ in range(2):   # the second run in a row comes from the cache
                assert sim.run(hand.insns).latency_s == pytest.approx(hand.total_s, rel=1e-12), name
                assert len(sim._latency_cache) <= 2
    assert len(evaluated) == 2 * len(HAND)   # once per stream and pass: seven streams overflow a cache of two
    figures = sorted(h.total_s for h in HAND.values())
    assert all(b > a * (1 + 1e-9) for a, b in itertools.pairwise(figures))   # a wrong hit could not pass


def test_a_fresh_simulators_first_stream_is_hashed_only_when_a_second_runs(monkeypatch):
    """A tuning trial runs one stream on a fresh simulator: its cache key (a hash of the stream) is not computed
    until a second run needs the cache, and is the stream as it ran, even if the caller's array changed since."""
    from simulator import core
    hashed = []
    real = core.hashlib.blake2b
    monkeypatch.setattr(core.hashlib, "blake2b", lambda data, **kw: hashed.append(1) or real(data, **kw))
    by_length: dict[int, list] = {}
    for hand in HAND.values():
        by_length.setdefault(len(hand.insns), []).append(hand)
    a, b = next(hands for hands in by_length.values() if len(hands) > 1)[:2]
    sim = hand_sim(PYNQ)
    stream = np.array(a.insns, dtype=np.uint8)
    assert sim.run(stream).latency_s == pytest.approx(a.total_s, rel=1e-12) and not hashed
    stream[:] = np.asarray(b.insns, dtype=np.uint8)   # the same array, now holding another stream
    assert sim.run(stream).latency_s == pytest.approx(b.total_s, rel=1e-12) and len(hashed) == 2
    assert sim.run(np.array(a.insns, dtype=np.uint8)).latency_s == pytest.approx(a.total_s, rel=1e-12)


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


def test_the_board_model_changes_no_hardware_fingerprint():
    """The board latency model changes no hardware: the calibrated pynq preset's RTL and Yosys caches are those
    of its design uncalibrated (one build, one 40-minute synthesis, for `--config pynq` and `--set
    COMPUTE_LATENCY=9` alike); everywhere else the hardware fingerprint is the fingerprint."""
    from hardware.build import build_dir
    from hardware.fpga.synth import result_dir

    bare = PYNQ.replace(**LATENCY_NEUTRAL)
    assert PYNQ.fingerprint != bare.fingerprint and PYNQ.hardware_fingerprint == bare.fingerprint
    assert build_dir(PYNQ) == build_dir(bare) and result_dir(PYNQ, "xc7") == result_dir(bare, "xc7")
    assert all(c.hardware_fingerprint == c.fingerprint for c in map(load_config, presets()) if not c.board_model)
    assert load_config("pynq", COMPUTE_LATENCY=8).hardware_fingerprint != PYNQ.hardware_fingerprint


@pytest.mark.parametrize(("key", "value"), [("DMA_EFFICIENCY", 0), ("DMA_EFFICIENCY", 1.5), ("LAUNCH_US", -1),
                                            ("HOST_INSN_NS", float("nan")), ("COMPUTE_LOOP_CYCLES", True),
                                            ("CACHE_NS_PER_BYTE", "fast")])
def test_bad_latency_values_are_refused_naming_the_key(key, value):
    with pytest.raises(ConfigError) as info:
        load_config("pynq", **{key: value})
    assert info.value.key == key and key in str(info.value)


# ---- which configs the board model applies to (issue 39, item 5) ---------------------------------------------------

@pytest.mark.parametrize("override", [{"LOG_BUS_WIDTH": 7}, {"LOG_BUS_WIDTH": 5}, {"LOG_WGT_BUFF_SIZE": 17},
                                      {"CLOCK_MHZ": 200}, {"INSN_QUEUE_DEPTH": 256}, {"DRAM_LATENCY": 64}])
def test_the_pynq_board_model_applies_only_to_the_design_it_was_calibrated_on(override):
    """The Pynq-Z1 calibration was fitted on VTA's pynq bitstream (64-bit bus, 100 MHz, pynq's buffers and queues):
    a variant keeps the keys but gets the simulator's cycles at its clock, says why, and its fingerprint is the
    uncalibrated variant's (the keys change nothing there)."""
    assert PYNQ.board_model and PYNQ.CALIBRATED_FOR == PYNQ.design_fingerprint
    variant = load_config("pynq", **override)
    assert variant.latency_params() == PYNQ.latency_params() and not variant.board_model
    assert variant.fingerprint == variant.replace(**LATENCY_NEUTRAL).fingerprint
    stats = conv(variant).time()
    assert stats.latency_s == stats.cycles / (variant.CLOCK_MHZ * 1e6)   # cycles at the clock, exactly
    pynq = conv(PYNQ).time()
    assert pynq.latency_s > 1.5 * pynq.cycles / 100e6                      # the board model adds its terms there
    note = variant.board_model_note()
    assert note.startswith("no board model: its board latency model was calibrated for another design (the pynq "
                           "preset's design)") and note.endswith("times are the simulator's cycles at the clock")
    assert PYNQ.board_model_note() is None
    for name in ("sim", "ultra96", "block32"):   # no board model at all: they say that none is calibrated
        cfg = load_config(name)
        assert cfg.board_model_note() == (f"no board model: none is calibrated for {cfg.name}'s design (vta calibrate "
                                          "fits one to board measurements, docs/calibrate.md); times are the "
                                          "simulator's cycles at the clock")
    # through a file: a variant written and read back, an older file without CALIBRATED_FOR (the preset's keys
    # copied into it, as dse/front/NN.json had them), VTA's own vta_config.json of the variant
    written = json.loads(variant.to_json())
    assert not load_config(written).board_model
    assert not load_config({k: v for k, v in written.items() if k != "CALIBRATED_FOR"}).board_model
    assert not load_config(variant.vta_dict()).board_model or variant.vta_dict() == PYNQ.vta_dict()


def test_the_same_design_keeps_its_board_model_and_keys_set_by_hand_apply_as_given():
    assert load_config("pynq", CLOCK_MHZ=100.0).board_model                  # 100 and 100.0 MHz: one design
    assert load_config(PYNQ.vta_dict()).board_model                          # VTA's vta_config.json of pynq
    old = {k: v for k, v in json.loads(PYNQ.to_json()).items() if k != "CALIBRATED_FOR"}
    assert load_config(old).board_model and load_config(old).fingerprint == PYNQ.fingerprint
    mine = load_config("sim", LAUNCH_US=10)   # CALIBRATED_FOR "": the keys apply as given
    assert mine.board_model and mine.CALIBRATED_FOR == ""
    stats = conv(mine).time()
    assert stats.latency_s == pytest.approx(stats.cycles / (mine.CLOCK_MHZ * 1e6) + 10e-6 * len(conv(mine).program.streams))
    with pytest.raises(ConfigError, match="CALIBRATED_FOR"):
        load_config("pynq", CALIBRATED_FOR="pynq")
