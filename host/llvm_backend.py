"""llvmlite's back end for the host compiler: one target machine for this CPU, modules optimised at O3 without
fast-math (so float results are exactly the IR's), and functions kept alive by their MCJIT engine.

graph_pack.jit compiles its fixed kernels the same way with its own lock; both take LLVM's global context, so a
process compiling from two threads at once through both modules is not protected (tuning compiles in one thread).
libm's double ``exp``, ``erf`` and ``tanh`` are bound by address, so the JIT calls the same functions as
Python's ``math`` module (the tests' oracle).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import sys
import threading
from collections.abc import Callable, Sequence

LIBM_FUNCTIONS = ("exp", "erf", "tanh")
_LOCK = threading.RLock()


@functools.cache
def _target():
    """(llvm binding, target machine factory, pipeline options), made once per process."""
    try:
        import llvmlite.binding as llvm
    except ImportError as e:
        raise ImportError("the host compiler needs llvmlite (a core dependency): pip install llvmlite") from e
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    libm = ctypes.CDLL(ctypes.util.find_library("m") or "libm.so.6")
    for name in LIBM_FUNCTIONS:
        llvm.add_symbol(name, ctypes.cast(getattr(libm, name), ctypes.c_void_p).value)
    features = ",".join(f"{'+' if on else '-'}{k}" for k, on in llvm.get_host_cpu_features().items())
    target = llvm.Target.from_triple(llvm.get_process_triple())
    cpu = llvm.get_host_cpu_name()

    def machine():
        return target.create_target_machine(cpu=cpu, features=features, opt=3, jit=True)
    pto = llvm.create_pipeline_tuning_options(speed_level=3)
    pto.loop_unrolling = False   # unrolling is the schedule's annotation (and LLVM's doubles compile time)
    return llvm, machine, pto


def cpu_name() -> str:
    """LLVM's name of this CPU (e.g. znver5), which compiled kernels are tuned for."""
    llvm, _, _ = _target()
    return llvm.get_host_cpu_name()


class _Owner:
    """The engine behind a set of compiled functions, closed under the lock when the last one goes."""

    def __init__(self, engine):
        self.engine = engine

    def __del__(self, _lock=_LOCK, _finalizing=sys.is_finalizing) -> None:
        if not _finalizing():
            with _lock:
                self.engine.close()


def compile_functions(ir_text: str, names: Sequence[str], nbuf: int) -> list[Callable[..., None]]:
    """JIT ``ir_text`` and return its functions ``names``, each ``f(ptr * nbuf, int64 begin, int64 end)``."""
    llvm, machine, pto = _target()
    with _LOCK:
        mod = llvm.parse_assembly(ir_text)
        tm = machine()
        mod.triple = tm.triple
        mod.data_layout = str(tm.target_data)
        mod.verify()
        pb = llvm.create_pass_builder(tm, pto)
        pb.getModulePassManager().run(mod, pb)
        pb.close()
        owner = _Owner(llvm.create_mcjit_compiler(mod, machine()))
        owner.engine.finalize_object()
        addrs = [owner.engine.get_function_address(n) for n in names]
    proto = ctypes.CFUNCTYPE(None, *[ctypes.c_void_p] * nbuf, ctypes.c_int64, ctypes.c_int64)
    fns = []
    for name, addr in zip(names, addrs, strict=True):
        if not addr:
            raise RuntimeError(f"host.llvm_backend: no address for compiled function {name}")
        fn = proto(addr)
        fn.owner = owner
        fns.append(fn)
    return fns
