"""The host compiler: operators written once as compute definitions, scheduled by rules, compiled by llvmlite.

This package is the home of the host side below ``graph_pack`` (issue 43): the loop-nest IR (``host.loop_ir``),
the compute definition of every host op (``host.ops``), schedules and Ansor's CPU sketch rules
(``host.schedule``, ``host.sketch``), code generation through llvmlite (``host.codegen``, ``host.llvm_backend``),
the per-statement features a learned cost model reads (``host.features``), schedules as record knobs
(``host.knobs``), the fixed JIT kernels ``build`` runs by default (``host.jit``) and the AutoTVM-style templates
(``host.templates``). Both back ends compile under one lock, for one target (``host.jit``'s, with ``VTA_HOST_ISA``
applied). The search that picks schedules (evolution, cost model, task scheduler) lives in ``tuning``.

    from host import compile_schedule, default_schedule, ops
    dag = ops.conv2d((1, 8, 14, 14), (16, 8, 3, 3), padding=(1, 1, 1, 1), consumers=[("relu",)])
    kernel = compile_schedule(dag, default_schedule(dag))
    y = kernel(x, w)                       # float32 NCHW, bit-equal to graph_pack.kernels' conv2d + relu
"""

from host.loop_ir import ComputeDag
from host.schedule import Schedule, default_schedule

__all__ = ["CompiledKernel", "ComputeDag", "Schedule", "compile_schedule", "default_schedule"]


def __getattr__(name: str):
    """The code generator on first use: it imports llvmlite, which a board running graph_pack's numpy kernels
    (a Pynq) may lack; graph_pack imports this package's compute definitions either way."""
    if name in ("CompiledKernel", "compile_schedule"):
        from host import codegen
        return getattr(codegen, name)
    raise AttributeError(f"module 'host' has no attribute {name!r}")
