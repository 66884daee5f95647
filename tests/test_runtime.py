"""The runtime's rules, checked on the streams it builds: VTA's dependency logic, the micro-op cache, flushes."""

from __future__ import annotations

import numpy as np
import pytest

from hw_config import load_config
from vta.device import SimDevice
from vta.isa import GemmInsn, MemInsn, decode_program
from vta.runtime import COMPUTE, LOAD, STORE, CommandQueue, ScheduleError, UopKernel
from vta.templates import compile_op, random_inputs


def _queue(preset: str = "pynq", **overrides) -> CommandQueue:
    return CommandQueue(SimDevice(load_config(preset, **overrides)), record=True)


def _flags(insn) -> set[str]:
    return {f for f in ("pop_prev_dep", "pop_next_dep", "push_prev_dep", "push_next_dep") if getattr(insn, f)}


def test_pending_pop_is_absorbed_by_the_next_instruction_of_its_stage():
    q = _queue()
    buf = q.device.alloc(4096)
    q.dep_pop(COMPUTE, LOAD)
    q.load_2d(buf, 0, 1, 1, 1, 0, "INP")
    insns = decode_program(q.assemble(), q.cfg)
    assert len(insns) == 1 and _flags(insns[0]) == {"pop_next_dep"}


def test_second_pending_pop_of_a_kind_commits_the_first_as_a_nop():
    q = _queue()
    q.dep_pop(LOAD, COMPUTE)
    q.dep_pop(LOAD, COMPUTE)
    q.push_kernel(UopKernel("gemm", [[0, 0, 0]], reset=True))
    insns = decode_program(q.assemble(), q.cfg)
    nop, load_uop, gemm = insns
    assert isinstance(nop, MemInsn) and nop.x_size == 0 and _flags(nop) == {"pop_prev_dep"}
    assert isinstance(load_uop, MemInsn) and _flags(load_uop) == {"pop_prev_dep"}  # absorbed by the uop load
    assert isinstance(gemm, GemmInsn) and not _flags(gemm)


def test_push_rides_on_the_last_instruction_or_a_nop():
    q = _queue()
    buf = q.device.alloc(4096)
    q.load_2d(buf, 0, 1, 1, 1, 0, "WGT")
    q.dep_push(LOAD, COMPUTE)       # rides on the load
    q.dep_push(LOAD, COMPUTE)       # flag taken: a load NOP carries it
    q.dep_push(STORE, COMPUTE)      # last instruction is not a store: a store NOP
    insns = decode_program(q.assemble(), q.cfg)
    assert _flags(insns[0]) == {"push_next_dep"}
    assert insns[1].x_size == 0 and insns[1].memory_type == 2 and _flags(insns[1]) == {"push_next_dep"}
    assert insns[2].opcode == 1 and insns[2].x_size == 0 and _flags(insns[2]) == {"push_prev_dep"}


def test_resident_kernels_are_not_reloaded_and_the_ring_evicts():
    q = _queue(LOG_UOP_BUFF_SIZE=6)  # 16 micro-ops
    a = UopKernel("gemm", [[i, 0, 0] for i in range(6)], reset=True)
    b = UopKernel("gemm", [[i, 0, 0] for i in range(8)], reset=True)
    c = UopKernel("gemm", [[i, 0, 0] for i in range(5)], reset=True)
    for kernel in (a, a, b, a, c, a):
        q.push_kernel(kernel)
    loads = [i for i in decode_program(q.assemble(), q.cfg) if isinstance(i, MemInsn)]
    # a (load), a (resident), b (load), a (resident), c (wraps to 0: evicts a), a (reload)
    assert [ld.x_size for ld in loads] == [6, 8, 5, 6]
    assert [ld.sram_base for ld in loads] == [0, 6, 0, 5]


def test_kernel_rules():
    with pytest.raises(ScheduleError, match="pipeline hazard"):
        UopKernel("gemm", [[3, 0, 0], [4, 0, 0], [3, 1, 1]])
    with pytest.raises(ScheduleError, match="at most 2 loops"):
        UopKernel("gemm", [[0, 0, 0]], loops=((2, 1, 0, 0),) * 3)
    q = _queue(LOG_UOP_BUFF_SIZE=4)  # 4 micro-ops
    with pytest.raises(ScheduleError, match="exceeds the micro-op buffer"):
        q.push_kernel(UopKernel("gemm", [[i, 0, 0] for i in range(5)], reset=True))


def test_unbalanced_pops_are_refused_at_flush():
    q = _queue()
    q.dep_pop(STORE, COMPUTE)
    q.push_kernel(UopKernel("gemm", [[0, 0, 0]], reset=True))
    with pytest.raises(ScheduleError, match="unbalanced"):
        q.program()


@pytest.mark.parametrize("name", ["conv2d", "add"])
def test_long_programs_split_into_balanced_streams_with_the_same_result(name):
    cfg = load_config("pynq")
    if name == "conv2d":
        kw = {"data_shape": (1, 32, 16, 16), "kernel_shape": (32, 32, 3, 3), "padding": 1,
              "epilogue": [("bias",), ("shr", 8), ("clip", 0, 127)],
              "config": {"tile_b": [1, 1], "tile_h": [8, 2], "tile_w": [4, 4], "tile_ci": [2, 1],
                         "tile_co": [2, 1], "oc_nthread": 2, "h_nthread": 1}}
    else:
        kw = {"data_shape": (1, 32, 16, 16), "epilogue": [("clip", 0, 127)],
              "config": {"tile_co": [2, 1], "tile_h": [16, 1], "tile_w": [1, 16]}}
    whole = compile_op(name, cfg, **kw)
    split = compile_op(name, cfg, max_insns=64, **kw)
    assert len(whole.program.streams) == 1 and len(split.program.streams) > 3
    inputs = random_inputs(whole, seed=5)
    want = whole.reference(**inputs)
    np.testing.assert_array_equal(whole.run(**inputs), want)
    np.testing.assert_array_equal(split.run(**inputs), want)
    for stream in split.program.streams:  # each stream ends like VTA's Synchronize
        tail = decode_program(stream.insns[-3:], cfg)
        assert tail[-1].__class__.__name__ == "FinishInsn"
    assert split.stats.gemm_counter == whole.stats.gemm_counter
    assert split.stats.alu_counter == whole.stats.alu_counter
