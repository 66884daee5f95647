"""Auto-scheduled host kernels cross-compiled for the ARM boards (issue 43, item 4, the tutorial's step): each op's
compute definition under its default schedule and under schedules sampled and mutated from its sketches (standing
in for schedules tuned on the board), compiled on this machine by ``host.cross`` for AArch64 (Cortex-A53) and ARMv7
(the Pynq's Cortex-A9 with NEON), linked by Debian's cross gcc and run under qemu-user on that CPU model: every
output bit-equal to the independent numpy reference of tests/test_host_loop_ir.py and to this CPU's JIT."""

from __future__ import annotations

import random

import numpy as np
import pytest
from extras import needs
from test_host_loop_ir import CASES, _inputs
from test_host_templates import CROSS_TARGETS, _cross_program, _run_under_qemu

from host import compile_schedule, default_schedule
from host.cross import cross_compile
from host.schedule import lower
from host.sketch import generate_sketches, mutate, sample

pytestmark = needs("llvmlite")

SCHEDULES_PER_SKETCH = 1   # sampled (and mutated) per sketch, beside the default schedule


def _schedules(dag, name: str) -> list:
    rng = random.Random(f"cross-{name}")
    picked = [default_schedule(dag)]
    for sketch in generate_sketches(dag):
        for _ in range(SCHEDULES_PER_SKETCH):
            sched = sample(dag, sketch, rng)
            picked.append(mutate(dag, sched, rng) or sched)
    return picked


@pytest.mark.parametrize("target", CROSS_TARGETS)
@pytest.mark.parametrize("name", sorted(CASES))
def test_auto_scheduled_kernels_cross_compiled_for_arm_give_the_references_bits_under_qemu(target, name, tmp_path):
    make, shapes, reference = CASES[name]
    dag = make()
    xs = _inputs(shapes)
    want = reference(*xs).astype(np.float32).reshape(dag.output_shape)
    schedules = _schedules(dag, name)
    by_arity: dict[int, list] = {}   # a sketch that inlines stages passes fewer buffers: one program per arity
    for sched in schedules:
        by_arity.setdefault(len(lower(dag, sched)[0].buffers), []).append(sched)
    for arity, group in by_arity.items():
        kernels = [cross_compile(dag, sched, target, name=f"kernel{i}") for i, sched in enumerate(group)]
        exe = _cross_program(target, [k.object for k in kernels], arity, tmp_path / f"arity{arity}")
        for i, (sched, kernel) in enumerate(zip(group, kernels, strict=True)):
            args = kernel.arguments(*xs)
            got = _run_under_qemu(target, exe, i, args[:-1], args[-1]).reshape(dag.output_shape)
            assert np.array_equal(got, want), (sched, float(np.abs(got - want).max()))
            assert np.array_equal(got, compile_schedule(dag, sched)(*xs))

def test_a_cross_kernel_refuses_inputs_of_the_wrong_count_or_shape_and_a_bad_entry_name():
    from host.templates import AARCH64
    make, shapes, _ = CASES["softmax"]
    dag = make()
    kernel = cross_compile(dag, default_schedule(dag), AARCH64)
    with pytest.raises(ValueError, match=r"takes 1 inputs \(x\), got 2"):
        kernel.arguments(*_inputs(shapes), *_inputs(shapes))
    with pytest.raises(ValueError, match=r"input x must be \(6, 17\), got \(2, 17\)"):
        kernel.arguments(np.zeros((2, 17), np.float32))
    with pytest.raises(ValueError, match="a C identifier"):
        cross_compile(dag, default_schedule(dag), AARCH64, name="my kernel")
