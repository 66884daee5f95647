"""llvmlite's back end for the host compiler: modules optimised at O3 without fast-math (so float results are
exactly the IR's), functions kept alive by their MCJIT engine.

It shares ``host.jit``'s target (the CPU's features with ``VTA_HOST_ISA`` applied, so records and kernels agree on
what they ran on) and its lock: both back ends use LLVM's global context, so one lock serialises every compilation
and engine disposal in the process, and ``host.jit``'s fork hooks hold it across a fork (a tuning worker forked
mid-compilation never inherits it held). libm's double ``erf`` and ``tanh`` are bound by address, so the JIT calls
the same functions as Python's ``math`` module (the tests' oracle); exp is inline float32 code (``host.numerics``).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import sys
from collections.abc import Callable, Sequence

from host import jit

LIBM_FUNCTIONS = ("erf", "tanh")
_LOCK = jit._LOCK   # the process's one LLVM lock


@functools.cache
def _target():
    """(llvm binding, target machine factory, pipeline options), from ``host.jit``'s target, with libm bound."""
    st = jit._jit()   # ImportError with the install hint when llvmlite is missing
    llvm = st.llvm
    libm = ctypes.CDLL(ctypes.util.find_library("m") or "libm.so.6")
    with _LOCK:
        for name in LIBM_FUNCTIONS:
            llvm.add_symbol(name, ctypes.cast(getattr(libm, name), ctypes.c_void_p).value)

    def machine():
        return st.target.create_target_machine(cpu=st.cpu, features=st.features, opt=3, jit=True)
    return llvm, machine, st.pto   # (unrolling off: it is the schedule's annotation)


def cpu_name() -> str:
    """LLVM's name of this CPU (e.g. znver5), which compiled kernels are tuned for."""
    return jit._jit().cpu


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
