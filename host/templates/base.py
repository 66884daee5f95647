"""What a host (CPU) template is: the accelerator's Template interface (vta/templates/base.py) for code that
runs on the board's CPU instead of the accelerator.

A host template parses a workload, declares its knob space (AutoTVM's knobs for the operator on that CPU
family), refuses configs with a reason, gives a default config and an analytical estimate the cost model
reuses, and the numpy reference (float64 for float ops, exact for int8). Where an accelerator template
emits an instruction stream, a host template generates LLVM IR (``ir``) and compiles it: for this host,
into a callable (``build``), for any CPU target, into object code (``object_code``).
"""

from __future__ import annotations

import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from host.templates.target import CpuTarget, host, object_code
from vta.runtime import ScheduleError
from vta.space import Config, ConfigSpace, KnobError
from vta.templates.base import Template, check_extents

# The most a host workload's dimension may be: 2^31 - 1 (a float32 tensor of that many elements is 8 GiB); it keeps
# a task parsed from a log bounded (its knob space is built from the dimensions' divisors). docs/limits.md
HOST_MAX_EXTENT = (1 << 31) - 1


# ... and a tensor's elements (the padded input, the kernel, the output): 2^29, 2 GiB of float32 and the 4 GiB of
# its float64 check; a padding of 10^6 on a 32 x 32 input asked for a 12.9 GiB reference before any check
HOST_MAX_ELEMENTS = 1 << 29


def check_host_extents(op: str, name: str, shape: tuple[int, ...], axes: tuple[str, ...]) -> None:
    check_extents(op, name, shape, axes, HOST_MAX_EXTENT, "2^31 - 1, the host templates' limit")


def check_host_tensors(op: str, elements: dict[str, int]) -> None:
    """Refuse a workload one of whose tensors (name -> element count) has more than HOST_MAX_ELEMENTS elements."""
    for name, n in elements.items():
        if n > HOST_MAX_ELEMENTS:
            raise ValueError(f"{op}: its {name} would have {n:,} elements, above the limit {HOST_MAX_ELEMENTS:,} "
                             "(2^29: 2 GiB of float32, the host templates' limit)")

HOST_TEMPLATES: dict[str, type[HostTemplate]] = {}   # task op name -> host template class
# the version of the host templates' code, written into their tuning records: bump it when a config's
# generated code changes, so records measured on the old code are never applied to the new
HOST_TEMPLATE_VERSION = "cpu-1"
EPILOGUES = ((), ("bias",), ("bias", "relu"), ("bias", "residual", "relu"), ("relu",), ("bias", "residual"))


def register_host(cls: type[HostTemplate]) -> type[HostTemplate]:
    for name in cls.ops:
        HOST_TEMPLATES[name] = cls
    return cls


def host_template_of(op: str) -> type[HostTemplate]:
    if op not in HOST_TEMPLATES:
        raise ValueError(f"unknown host template {op!r}; allowed: {', '.join(HOST_TEMPLATES)}")
    return HOST_TEMPLATES[op]


class PackedWeights:
    """A kernel's packed copy of the weight array it was given last, kept while that array lives (a network's
    constant: repeated calls pay no packing) and dropped with it. Kernels are cached per process
    (``graph.tuned_kernel``): holding the array itself kept a dropped network's weights, and their packed copies,
    for the life of the process (88 MB of ResNet-18's after its module was gone)."""

    def __init__(self, pack: Callable[[np.ndarray], np.ndarray]):
        self.pack = pack
        self._last: tuple[weakref.ref, np.ndarray] | None = None   # one attribute: read and replaced atomically

    def get(self, w: np.ndarray) -> np.ndarray:
        """``pack(w)``, packed again only when ``w`` is not the array of the last call. Thread-safe: two threads
        running one kernel with different weights each get their own (read once, returned as read)."""
        last = self._last
        if last is not None and last[0]() is w:
            return last[1]
        packed = self.pack(w)
        self._last = (weakref.ref(w, self._forget), packed)
        return packed

    def _forget(self, ref: weakref.ref) -> None:
        last = self._last
        if last is not None and last[0] is ref:
            self._last = None


@dataclass
class HostKernel:
    """A compiled host kernel: ``kernel(x, w, bias=None, residual=None)`` -> the output array. The packed
    weights are kept for the last ``w`` object given while it lives (``PackedWeights``), so repeated calls with a
    network's constant pay no packing."""

    template: HostTemplate
    config: Config
    epilogue: tuple[str, ...]
    run: Callable[..., np.ndarray]
    compile_seconds: float = 0.0
    info: dict[str, Any] = field(default_factory=dict)

    def __call__(self, *arrays: np.ndarray, **named: np.ndarray) -> np.ndarray:
        return self.run(*arrays, **named)


class HostTemplate(Template):
    """One host workload; subclasses set ``ops``, ``family`` and the methods below."""

    kind: ClassVar[str] = "cpu"
    family: ClassVar[str] = ""            # "x86" or "arm": the CPU family the knob space follows
    inputs: ClassVar[tuple[str, ...]] = ("data", "kernel")

    def __init__(self, op: str, target: CpuTarget | None = None):   # no accelerator config, no ALU epilogue
        self.op = op
        self.target = target or host()

    # ---- workload ----
    @classmethod
    def task_program(cls, workload: dict[str, Any]) -> tuple[dict[str, Any], tuple]:
        return {k: v for k, v in workload.items() if k != "op"}, ()

    @classmethod
    def from_task_workload(cls, workload: dict[str, Any], cfg: Any = None) -> HostTemplate:
        args, epilogue = cls.task_program(workload)
        return cls.parse(workload["op"], cfg if isinstance(cfg, CpuTarget) else None, epilogue, args)

    def default_config(self) -> Config:
        raise NotImplementedError

    def checked(self, config: Config | None) -> dict[str, Any]:
        """``config`` (None: the default) normalised, or ScheduleError naming what the template refuses."""
        try:
            normal = self.space().normalize(config if config is not None else self.default_config())
        except KnobError as e:
            raise ScheduleError(f"{self.op} config refused: {e}") from None
        reason = self.check(normal)
        if reason:
            raise ScheduleError(f"{self.op} config refused: {reason}")
        return normal

    # ---- code ----
    def ir(self, config: Config | None = None, target: CpuTarget | None = None, epilogue: tuple[str, ...] = (),
           name: str = "kernel") -> str:
        """The LLVM IR of this workload under ``config`` for ``target`` (default: this host)."""
        raise NotImplementedError

    def object_code(self, config: Config | None = None, target: CpuTarget | None = None,
                    epilogue: tuple[str, ...] = ()) -> bytes:
        """ELF object code for ``target``: what a board compiles for itself (or a cross-compile checks)."""
        t = target or self.target
        return object_code(self.ir(config, t, epilogue), t)

    def build(self, config: Config | None = None, epilogue: tuple[str, ...] = ()) -> HostKernel:
        """JIT-compile for this host; ``epilogue`` (``EPILOGUES``) fuses a bias add, a residual add and a relu."""
        raise NotImplementedError

    # the accelerator's program interface does not apply: a host template compiles a function
    def buffer_bytes(self) -> dict[str, int]:
        raise ScheduleError(f"{self.op} runs on the CPU: it has no accelerator buffers (use build())")

    def emit(self, queue, config, buffers) -> None:
        raise ScheduleError(f"{self.op} runs on the CPU: it emits no instructions (use build())")

    def check_inputs(self, inputs: dict[str, np.ndarray | None]) -> dict[str, np.ndarray]:
        return {k: v for k, v in inputs.items() if v is not None}

    def pack(self, name: str, value: np.ndarray) -> np.ndarray:
        return value

    def unpack_output(self, raw: np.ndarray) -> np.ndarray:
        return raw


def check_epilogue(epilogue: tuple[str, ...]) -> tuple[str, ...]:
    epilogue = tuple(epilogue)
    if epilogue not in EPILOGUES:
        raise ValueError(f"host epilogue {epilogue}; allowed: {[list(e) for e in EPILOGUES]}")
    return epilogue


def check_arrays(op: str, given: dict[str, np.ndarray | None], shapes: dict[str, tuple], names,
                 dtype: str = "float32") -> None:
    """Each of ``names`` given as a ``dtype`` array of its shape (the kernel's workload), or a ValueError naming it."""
    for key in names:
        a = given[key]
        if a is None or a.shape != shapes[key] or a.dtype != np.dtype(dtype):
            got = "nothing" if a is None else f"{a.shape} {a.dtype}"
            raise ValueError(f"{op}: {key} must be {shapes[key]} {dtype} (this kernel's workload), got {got}")


def timed_compile(fn: Callable[[], Any]) -> tuple[Any, float]:
    t0 = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t0


def largest_divisor(n: int, limit: int) -> int:
    return max(d for d in range(1, min(n, limit) + 1) if n % d == 0)


def split_knob_values(space: ConfigSpace, name: str) -> list[int]:
    """The inner factors a split knob allows."""
    knob = next(k for k in space.knobs if k.name == name)
    return [o[1] for o in knob.options]
