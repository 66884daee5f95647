"""Host kernels compiled for another CPU: a scheduled DAG as ELF object code for an ARM board (AArch64, or the
Pynq's ARMv7 Cortex-A9), the tutorial's cross-compilation step. The schedule is the one tuned on the board (over
RPC); the object links into the board's program, which calls ``<name>(buffer pointers...)``.

The entry function runs the nests in order, each over its whole parallel range, in one thread (a board's runtime
parallelises by calling the nest functions itself). Its arguments are the DAG's buffers in ``buffers`` order:
the inputs, the constants (``constants``: pooling counts and the like, values the caller passes), zeroed scratch
of ``shapes``, and the output last. libm's ``erf`` and ``tanh`` are external symbols: link with ``-lm`` (exp is inline code).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from host.codegen import add_entry, emit_nests, scratch_shapes
from host.loop_ir import ComputeDag
from host.schedule import Schedule


class Target(Protocol):
    """A CPU to compile for, as LLVM names it (host.templates' CpuTarget is one)."""

    triple: str
    cpu: str
    features: str


@dataclass(frozen=True)
class CrossKernel:
    """A scheduled DAG compiled for ``target``: the object code and what its entry function takes."""

    name: str
    object: bytes
    buffers: tuple[str, ...]
    shapes: dict[str, tuple[int, ...]]
    constants: dict[str, np.ndarray]
    inputs: tuple[str, ...]

    def arguments(self, *inputs: np.ndarray) -> list[np.ndarray]:
        """The entry function's arguments (float32, C order) for ``inputs``, the output last and zeroed."""
        if len(inputs) != len(self.inputs):
            raise ValueError(f"{self.name} takes {len(self.inputs)} inputs ({', '.join(self.inputs)}), got {len(inputs)}")
        given = dict(zip(self.inputs, inputs, strict=True))
        args = []
        for b in self.buffers:
            if b in given:
                a = np.ascontiguousarray(given[b], np.float32)
                if a.shape != self.shapes[b]:
                    raise ValueError(f"{self.name}: input {b} must be {self.shapes[b]}, got {a.shape}")
            elif b in self.constants:
                a = np.ascontiguousarray(self.constants[b], np.float32)
            else:
                a = np.zeros(self.shapes[b], np.float32)
            args.append(a)
        return args


@functools.cache
def _target_machine(triple: str, cpu: str, features: str):
    """One LLVM target machine per CPU, made once per process (as host.templates made its own before)."""
    from host.llvm_backend import _target

    llvm = _target()[0]
    llvm.initialize_all_targets()
    llvm.initialize_all_asmprinters()
    return llvm.Target.from_triple(triple).create_target_machine(
        cpu=cpu, features=features, opt=3, reloc="pic", codemodel="default")


def object_code(ir_text: str, target: Target) -> bytes:
    """Optimised (O3, no fast-math, so float results are the IR's) ELF object code of an LLVM IR module for
    ``target``, position independent."""
    from host.llvm_backend import _LOCK, _target

    llvm = _target()[0]
    with _LOCK:
        tm = _target_machine(target.triple, target.cpu, target.features)
        mod = llvm.parse_assembly(ir_text)
        mod.triple = target.triple
        mod.data_layout = str(tm.target_data)
        mod.verify()
        pto = llvm.create_pipeline_tuning_options(speed_level=3)
        pto.loop_unrolling = False   # unrolling is the schedule's annotation
        pb = llvm.create_pass_builder(tm, pto)
        pb.getModulePassManager().run(mod, pb)
        return tm.emit_object(mod)


def cross_compile(dag: ComputeDag, schedule: Schedule, target: Target, name: str = "kernel") -> CrossKernel:
    """``dag`` under ``schedule`` as object code for ``target``, its entry function ``name`` (its nests are
    ``name_nest0``, ... so several kernels link into one program). ValueError for an invalid schedule."""
    if not name.isidentifier():
        raise ValueError(f"a kernel's entry name must be a C identifier, got {name!r}")
    tdag, nests, module, names = emit_nests(dag, schedule, prefix=f"{name}_nest")
    nbuf = len(tdag.buffers)
    add_entry(module, name, names, nests, nbuf, ranged=False)
    scratch = scratch_shapes(tdag, nests)
    shapes = {n: scratch.get(n) or tdag.shape_of(n) for n in tdag.buffers}
    return CrossKernel(name, object_code(str(module), target), tdag.buffers, shapes, dict(tdag.constants),
                       tuple(t.name for t in dag.inputs))
