"""A network's accelerator groups in one simulator call (graph_pack.batched over simulator.batch): the same outputs,
counters, cycles and per-group records as running them one by one, and a batch's failures are the errors its
writes and runs would raise."""

from __future__ import annotations

import numpy as np
import pytest
from test_graph_pipeline import SIM, check_exact, pipeline, resnet_block
from test_semantics import finish, load, store

from graph_pack import batched
from graph_pack.build import AccelStep, build
from simulator.batch import BatchStep
from simulator.core import Simulator
from simulator.errors import InvalidInstruction, MemoryAccessError, SimulatorError


def _records(mod) -> list[tuple]:
    return [(r.name, r.where, r.fused, r.macs, r.stats.to_dict() if r.stats else None) for r in mod.records]


def test_a_network_runs_in_batches_as_step_by_step():
    n, g, p = resnet_block(seed=15)
    inputs = n.inputs(seed=16)
    qg, qp, packed, mod = pipeline(g, p, inputs)
    sizes = [len(s.steps) for s in mod._plan if isinstance(s, batched.AccelBatch)]
    assert sum(sizes) == sum(isinstance(s, AccelStep) for s in mod.steps) and max(sizes) > 1, sizes
    alone = build(packed, SIM, qp, cpu="numpy", fallback="error")
    alone._plan = list(alone.steps)   # every group on its own (what other devices do)
    sim_runs = []
    run = mod.device.sim.run
    mod.device.sim.run = lambda *a, **k: sim_runs.append(1) or run(*a, **k)
    try:
        for seed in (16, 17):
            inputs = n.inputs(seed=seed)
            check_exact(alone, qg, qp, inputs)
            check_exact(mod, qg, qp, inputs)
            np.testing.assert_array_equal(mod.get_output(0), alone.get_output(0))
            assert mod.stats.to_dict() == alone.stats.to_dict() and mod.stats.cycles > 0
            assert _records(mod) == _records(alone)
            assert mod.device.last_stats.to_dict() == alone.device.last_stats.to_dict()
    finally:
        del mod.device.sim.run
    assert not sim_runs   # no group ran through Simulator.run


def test_stats_of_a_failed_run_stay_the_last_good_runs():
    n, g, p = resnet_block(seed=15)
    _, _, _, mod = pipeline(g, p, n.inputs(seed=16))
    cycles = mod.stats.cycles
    with pytest.raises(Exception):   # noqa: B017 - a bad input shape: refused before any group runs
        mod.run(data=np.zeros((1, 3, 2, 2), np.float32))
    assert mod.stats.cycles == cycles


def _sim_with_out() -> tuple[Simulator, int, int]:
    sim = Simulator(SIM, threads=1)
    acc, out = sim.alloc(4096), sim.alloc(4096)
    return sim, acc, out


def _copy_store(cfg, acc: int, out: int) -> bytes:
    """LOAD ACC row 0 from ``acc``, STORE it to ``out``: the low bytes of the int32 lanes."""
    return (load(cfg, "ACC", 0, acc // cfg.ACC_ELEM_BYTES, push_next=1) +
            store(cfg, 0, out // cfg.OUT_ELEM_BYTES, pop_prev=1) + finish(cfg))


def test_a_batch_copies_then_runs_each_step_in_order():
    sim, acc, out = _sim_with_out()
    cfg = sim.cfg
    lanes = cfg.ACC_ELEM_BYTES // 4
    rows = [np.arange(lanes, dtype=np.int32) * k for k in (3, 5)]
    prog = _copy_store(cfg, acc, out)
    batch = sim.batch([BatchStep(prog, acc, rows[0]), BatchStep(copy_addr=acc, copy_bytes=4 * lanes),
                       BatchStep(prog)])
    assert batch.streams == 2
    batch.set_copy(1, rows[1])
    first, second = batch.run()
    np.testing.assert_array_equal(sim.read(out, lanes), (rows[1] & 0xFF).astype(np.uint8))
    alone = sim.run(prog)
    assert first.to_dict() == second.to_dict() == alone.to_dict()
    batch.set_copy(1, None)   # no copy: the second run stores what the first step copied
    batch.run()
    np.testing.assert_array_equal(sim.read(out, lanes), (rows[0] & 0xFF).astype(np.uint8))


def test_a_failing_step_raises_its_error_after_the_steps_before_it():
    sim, acc, out = _sim_with_out()
    cfg = sim.cfg
    lanes = cfg.ACC_ELEM_BYTES // 4
    row = np.full(lanes, 7, np.int32)
    good = _copy_store(cfg, acc, out)
    bad = load(cfg, "ACC", cfg.ACC_BUFF_DEPTH, acc // cfg.ACC_ELEM_BYTES) + finish(cfg)   # past the SRAM
    with pytest.raises(InvalidInstruction) as err:
        sim.batch([BatchStep(good, acc, row), BatchStep(bad)]).run()
    assert err.value.index == 0 and "exceeds" in str(err.value)
    np.testing.assert_array_equal(sim.read(out, lanes), np.full(lanes, 7, np.uint8))   # the first step ran
    with pytest.raises(MemoryAccessError, match="not inside one mapped region"):
        sim.batch([BatchStep(good, 1 << 40, row)]).run()
    batch = sim.batch([BatchStep(copy_addr=acc, copy_bytes=8)])
    with pytest.raises(SimulatorError, match="at most 8"):
        batch.set_copy(0, np.zeros(3, np.int32))
    with pytest.raises(SimulatorError, match="no open copy"):
        sim.batch([BatchStep(good)]).set_copy(0, row)
    with pytest.raises(SimulatorError, match="whole number of 16-byte"):
        sim.batch([BatchStep(good[:-1])])
