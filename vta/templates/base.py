"""What an operator template is, the registry ``compile_op`` looks templates up in, and the compiled op.

A template is a class; an instance is one workload of it on one hardware config (its geometry in packed
units and its fused epilogue, parsed and checked once). The class carries everything about the operator:

- ``parse(op, cfg, epilogue, workload)``: the user's arguments checked and turned into an instance;
- ``space()``, ``check(config)`` (why a config cannot run, or None), ``default_config()``;
- ``estimate(knobs)``: the analytical cost model (vectorised over configs) the tuner's features reuse;
- ``buffer_bytes()``, ``emit(queue, config, buffers)``: the DRAM it needs and the instruction stream;
- ``pack(name, array)`` / ``unpack(name, raw)`` / ``unpack_output(raw)``: natural layouts to VTA's packed ones
  and back (``unpack`` lets a graph check a group on the very data it read);
- ``reference(**inputs)``: the numpy result, independent of the emitter; ``random_inputs(rng)``;
- ``task_workload()`` / ``task_program(workload)``: the tuning task key and the op tuning measures for it;
  ``macs`` / ``flop``: the work of one run;
- ``from_graph(head, ...)``: how graph_pack turns a graph node into this template's workload (optional).

Adding an operator is writing one such class and decorating it with ``@register``.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from hw_config import HwConfig
from hw_config.layout import MEMOP_DRAM_ADDR_BITS
from simulator.image import ProgramImage
from simulator.stats import RunStats
from vta.device import Buffer, SimDevice, cleanup_on_error, close_on_exit, free_all
from vta.environment import Environment, config_of
from vta.runtime import CommandQueue, Program, ScheduleError
from vta.space import Config, ConfigSpace, KnobError
from vta.templates.epilogue import (
    OPERAND_OPS,
    Epilogue,
    alu_immediates,
    alu_opcodes,
    missing_alu,
    parse_ops,
    unsupported_shifts,
)

TEMPLATES: dict[str, type[Template]] = {}   # operator name -> its template class


def register(cls: type[Template]) -> type[Template]:
    """Class decorator: ``compile_op``, tuning and graph_pack find the template by its ``ops`` names."""
    for name in cls.ops:
        if name in TEMPLATES and TEMPLATES[name] is not cls:
            raise ValueError(f"operator {name!r} is already registered by {TEMPLATES[name].__name__}")
        TEMPLATES[name] = cls
    return cls


@contextmanager
def registered(cls: type[Template]) -> Iterator[type[Template]]:
    """``register(cls)`` for the duration of a ``with`` block (tests, experiments); afterwards the registry is as
    it was (a class that was already registered stays registered)."""
    before = {name: TEMPLATES[name] for name in cls.ops if name in TEMPLATES}
    register(cls)
    try:
        yield cls
    finally:
        for name in cls.ops:
            TEMPLATES.pop(name, None)
        TEMPLATES.update(before)


def template_of(op: str) -> type[Template]:
    if op not in TEMPLATES:
        raise ValueError(f"unknown operator {op!r}; allowed: {', '.join(TEMPLATES)}")
    return TEMPLATES[op]


class Template:
    """One workload of an operator on one config. Subclasses set the class attributes and the methods."""

    ops: ClassVar[tuple[str, ...]] = ()          # operator names compile_op accepts for this template
    inputs: ClassVar[tuple[str, ...]] = ()       # run()'s arguments, in order (optional ones last)
    Buffers: ClassVar[type] = object             # dataclass of the op's DRAM buffers (fields: buffer names)

    def __init__(self, op: str, cfg: HwConfig, epilogue: Epilogue):
        self.op, self.cfg, self.epilogue = op, cfg, epilogue
        lacking = missing_alu(cfg, alu_opcodes(epilogue.ops)) or unsupported_shifts(
            cfg, [step for o in epilogue.ops if o[0] not in OPERAND_OPS for step in alu_immediates(o)])
        if lacking:
            raise ScheduleError(f"{op} epilogue: {lacking}")

    # ---- workload ----
    @classmethod
    def parse(cls, op: str, cfg: HwConfig, epilogue: tuple, workload: dict[str, Any]) -> Template:
        raise NotImplementedError

    def task_workload(self) -> dict[str, Any]:
        """The tuning task's key: what changes the schedule space or the cycles (not the epilogue's constants)."""
        raise NotImplementedError

    @classmethod
    def task_program(cls, workload: dict[str, Any]) -> tuple[dict[str, Any], tuple]:
        """(compile_op workload arguments, epilogue) that tuning measures a task workload with: constants
        like a network's, so a schedule tuned on it is valid inside a graph and ranks the same."""
        raise NotImplementedError

    @classmethod
    def from_task_workload(cls, workload: dict[str, Any], cfg: HwConfig) -> Template:
        args, epilogue = cls.task_program(workload)
        return cls.parse(workload["op"], cfg, epilogue, args)

    # ---- schedule ----
    def space(self) -> ConfigSpace:
        raise NotImplementedError

    def check(self, config: Config) -> str | None:
        raise NotImplementedError

    def default_config(self) -> Config:
        raise NotImplementedError

    def estimate(self, knobs: dict[str, tuple[np.ndarray, np.ndarray]]) -> dict[str, np.ndarray]:
        """Analytical quantities over configs (``knobs``: name -> (inner or value, outer) arrays): "est_cycles"
        (the cycle estimate) and any of the tuner's named features (``tuning.features.feature_names``; the tuner
        reads the ones given and 0 for the rest)."""
        raise NotImplementedError

    @property
    def macs(self) -> int:
        """Operations as VTA's GOPS counts them: multiply-accumulates on the GEMM core, elements on the ALU."""
        raise NotImplementedError

    @property
    def flop(self) -> int:
        """Useful operations of one run (a multiply-accumulate counts two)."""
        return self.macs

    # ---- program and data ----
    def buffer_bytes(self) -> dict[str, int]:
        raise NotImplementedError

    def emit(self, queue: CommandQueue, config: Config, buffers: Any) -> None:
        raise NotImplementedError

    def required(self, name: str) -> bool:
        """Whether input ``name`` must be given (optional inputs exist only with some epilogues)."""
        return self.buffer_bytes().get(name, 0) > 0

    def check_inputs(self, inputs: dict[str, np.ndarray | None]) -> dict[str, np.ndarray]:
        raise NotImplementedError

    def pack(self, name: str, value: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def unpack_output(self, raw: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def unpack(self, name: str, raw: np.ndarray) -> np.ndarray:
        """The inverse of ``pack``: input ``name`` read back from its device buffer's bytes (for checking a
        program against ``reference`` on exactly the data it read)."""
        raise NotImplementedError

    def reference(self, **inputs: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def random_inputs(self, rng: np.random.Generator) -> dict[str, np.ndarray]:
        raise NotImplementedError

    # ---- graphs (optional) ----
    graph_ops: ClassVar[tuple[str, ...]] = ()    # graph ops that can head a group of this template
    kind: ClassVar[str] = "alu"                  # "conv" (GEMM core) or "alu": how reports name the unit
    fusable_operands: ClassVar[tuple[str, ...]] = ()   # epilogue operand ops ("bias", "residual") it can fuse
    input_dtypes: ClassVar[dict[str, str]] = {}  # each input's dtype in device DRAM (int8 ones chain in place)

    @classmethod
    def from_graph(cls, head: Any, inputs: list[Any], kinds: list[str], cfg: HwConfig) -> GraphHead | str | None:
        """How a graph node starts a group of this template: a ``GraphHead``, why it cannot (shown as the
        node's CPU note), or None when the node is simply not this template's (say nothing). ``head`` and
        ``inputs`` have ``op``, ``attrs``, ``shape``, ``dtype``; ``kinds[i]`` is "scalar" (a one-value
        constant), "per_channel" (a constant per channel of ``head``), "const" or "tensor"."""
        return None

    @classmethod
    def graph_workload(cls, op: str, workload: dict[str, Any], epilogue: list[tuple]
                       ) -> tuple[dict[str, Any], list[tuple]]:
        """The compile_op workload and epilogue of a graph group once its scalar constants are known (a
        template may move part of a constant into the epilogue, e.g. an add wider than one immediate)."""
        return workload, epilogue


@dataclass
class GraphHead:
    """A graph node as the head of a template's group, decided once when graph_pack plans the groups."""

    op: str                                   # the operator name compile_op takes
    workload: dict[str, Any]                  # compile_op workload, shapes padded to whole blocks
    operands: dict[str, str]                  # template input -> the graph value feeding it
    scalars: dict[str, str] = field(default_factory=dict)   # workload argument -> scalar constant node (build reads it)


# ---- argument parsing helpers the templates share ------------------------------------------------------------

def as_int(name: str, v) -> int:
    """An exact integer (bools and fractions refused, so nothing is silently reinterpreted)."""
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer, float, np.floating)) or \
            (isinstance(v, (float, np.floating)) and not math.isfinite(v)) or v != int(v):
        raise ValueError(f"{name}: expected an integer, got {v!r}")
    return int(v)


def as_ints(name: str, v, length: int | None = None) -> tuple[int, ...]:
    if not isinstance(v, (list, tuple, np.ndarray)):
        raise ValueError(f"{name}: expected a sequence of integers, got {v!r}")  # noqa: TRY004 - bad input is a ValueError here
    out = tuple(as_int(name, x) for x in v)
    if length is not None and len(out) != length:
        raise ValueError(f"{name}: expected {length} values, got {len(out)}: {v!r}")
    return out


def as_pair(name: str, v) -> tuple[int, int]:
    """One integer for both dimensions, or exactly two."""
    if isinstance(v, (list, tuple, np.ndarray)):
        return as_ints(name, v, 2)  # type: ignore[return-value]
    n = as_int(name, v)
    return n, n


# The most a workload may ask for: what the 32-bit DRAM address of a VTA LOAD or STORE reaches (docs/limits.md).
# A tensor dimension past MAX_EXTENT elements, or a tensor past MAX_TENSOR_BYTES, cannot be addressed by any
# instruction (a board's own DMA window is smaller still: 1 GiB on a PYNQ); refusing it when the workload is
# parsed keeps the work that follows (its knob spaces, buffers and program) bounded.
MAX_EXTENT = (1 << MEMOP_DRAM_ADDR_BITS) - 1
MAX_TENSOR_BYTES = 1 << MEMOP_DRAM_ADDR_BITS


def _shown(n: int) -> str:
    text = str(n)
    return text if len(text) <= 40 else f"{text[:12]}... ({len(text)} digits)"


def check_extents(op: str, name: str, shape: tuple[int, ...], axes: tuple[str, ...], limit: int = MAX_EXTENT,
                  why: str = "2^32 - 1, what a 32-bit VTA DRAM address reaches") -> None:
    """Refuse a dimension of ``shape`` (``axes`` names them, e.g. ("N", "C", "H", "W")) past ``limit``."""
    for axis, n in zip(axes, shape):
        if n > limit:
            raise ValueError(f"{op}: {name} {axis}={_shown(n)} is above the limit {limit} ({why})")


def check_buffer_sizes(t: Template) -> None:
    """Refuse a workload one of whose DRAM tensors is larger than ``MAX_TENSOR_BYTES``."""
    for name, n in t.buffer_bytes().items():
        if n > MAX_TENSOR_BYTES:
            raise ValueError(f"{t.op}: its {name} tensor would take {n} bytes, above the limit {MAX_TENSOR_BYTES} "
                             "(4 GiB, what a 32-bit VTA DRAM address reaches)")


def only_known(op: str, workload: dict, known: set[str], required: tuple[str, ...] = ()) -> None:
    unknown = set(workload) - known
    if unknown:
        raise ValueError(f"{op}: unknown workload argument(s) {sorted(unknown)}; allowed: {sorted(known)}")
    for key in required:
        if key not in workload:
            raise ValueError(f"{op}: missing workload argument {key!r}")


def checked_array(name: str, a: np.ndarray, shape: tuple[int, ...], dtypes: tuple[str, ...]) -> np.ndarray:
    a = np.asarray(a)
    if a.shape != shape:
        raise ValueError(f"{name}: expected shape {shape}, got {a.shape}")
    if a.dtype.name not in dtypes:
        raise ValueError(f"{name}: expected dtype {' or '.join(dtypes)}, got {a.dtype}")
    return a


def present_inputs(t: Template, inputs: dict[str, Any], hints: dict[str, str]) -> dict[str, Any]:
    """The inputs a workload takes, refusing a missing one and one it would ignore; ``hints`` name, per optional
    input, what reads it (e.g. "an epilogue with ('bias',)")."""
    out = {}
    for name in t.inputs:
        value = inputs.get(name)
        if t.required(name):
            if value is None:
                raise ValueError(f"{name}: this {t.op} has {hints.get(name, 'it as an operand')}: pass {name}=")
            out[name] = value
        elif value is not None:
            raise ValueError(f"{name}= given, but only {hints.get(name, 'another op')} reads it and this {t.op} has "
                             "none: it would be ignored")
    return out


# ---- the compiled op -----------------------------------------------------------------------------------------

@dataclass
class CompiledOp:
    """A template compiled for a config: ``run(**inputs)`` packs, runs and unpacks; ``stage`` only packs and
    copies in; ``write(name, packed)`` copies an operand already in the packed layout (what a graph does).
    ``close()`` frees the device buffers it allocated (``owned``): an op on a device that outlives it (a board, a
    remote session, a shared simulator) holds them until then; one on a device of its own needs no close.

    Threads: an op may be shared; its calls take turns (``run`` stages, runs and reads back as one step), so each
    ``run`` returns the output of its own inputs. ``stats`` is the last run's, whichever thread ran it.
    """

    template: Template
    config: Config
    program: Program
    device: SimDevice
    buffers: Any
    stats: RunStats | None = None
    info: dict[str, Any] = field(default_factory=dict)
    owned: list[Buffer] = field(default_factory=list)   # what compile_template allocated: close() frees it
    closed: bool = False
    # held by a call that stages, runs or reads this op's buffers: one at a time (RLock: run stages)
    _lock: threading.RLock = field(default_factory=threading.RLock, init=False, repr=False, compare=False)

    @property
    def name(self) -> str:
        return self.template.op

    @property
    def cfg(self) -> HwConfig:
        return self.template.cfg

    @property
    def space(self) -> ConfigSpace:
        return self.template.space()

    def __getattr__(self, name: str):
        """The template's workload attributes (``geometry``, ``epilogue``, ``shapes`` ...) read through the op."""
        if name.startswith("__") or name == "template":
            raise AttributeError(name)
        return getattr(self.template, name)

    @property
    def cycles(self) -> int:
        return self.stats.cycles if self.stats else 0

    @property
    def num_insns(self) -> int:
        return self.program.num_insns

    def _named(self, args: tuple, inputs: dict[str, Any]) -> dict[str, Any]:
        names = self.template.inputs
        if len(args) > len(names):
            raise TypeError(f"{self.name} takes at most {len(names)} inputs ({', '.join(names)}), got {len(args)}")
        for name, value in zip(names, args):
            if name in inputs:
                raise TypeError(f"{self.name}: input {name!r} given twice")
            inputs[name] = value
        unknown = set(inputs) - set(names)
        if unknown:
            raise TypeError(f"{self.name}: unknown input(s) {sorted(unknown)}; inputs are {', '.join(names)}")
        return inputs

    def write(self, name: str, packed: np.ndarray) -> None:
        """Copy an operand, already in the template's packed layout, into its device buffer."""
        with self._lock:
            self._check_open()
            self.device.copy_in(getattr(self.buffers, name), packed)

    def _check_open(self) -> None:
        if self.closed:   # its buffers may belong to someone else by now
            raise ScheduleError(f"this {self.name} op was closed: its device buffers are freed; compile it again")

    def close(self) -> None:
        """Free the device buffers this op allocated (its micro-op buffer, and its operand buffers unless they were
        given); running it afterwards raises ScheduleError. Safe to call twice."""
        with self._lock:
            self.closed = True
            owned, self.owned = self.owned, []
            free_all(self.device, owned)

    def __enter__(self) -> CompiledOp:
        return self

    def __exit__(self, exc_type, *exc) -> None:
        close_on_exit(self.close, exc_type is not None)

    def stage(self, *args: np.ndarray, **inputs: np.ndarray) -> None:
        """Pack the inputs into the device buffers (what ``run`` does before running)."""
        self._check_open()   # before the inputs: a closed op's error is that it is closed
        checked = self.template.check_inputs(self._named(args, inputs))
        packed = {name: self.template.pack(name, value) for name, value in checked.items()}
        with self._lock:
            for name, value in packed.items():
                self.write(name, value)

    def run(self, *args: np.ndarray, compute: bool = True, **inputs: np.ndarray) -> np.ndarray:
        with self._lock:
            self.stage(*args, **inputs)
            self.stats = self.program.run(compute=compute)
            raw = self.device.copy_out(self.buffers.out)
        return self.template.unpack_output(raw)

    def time(self) -> RunStats:
        """Run the program with the timing model only: cycles and the board model's latency depend on the stream
        alone, not on data (docs/simulator.md), so nothing is staged and no output is read (what tuning measures
        in ``timing_only`` mode)."""
        with self._lock:
            self._check_open()
            self.stats = stats = self.program.run(compute=False)
        return stats

    def reference(self, *args: np.ndarray, **inputs: np.ndarray) -> np.ndarray:
        """numpy result of the same computation, independent of the template's emitter."""
        return self.template.reference(**self.template.check_inputs(self._named(args, inputs)))

    def image(self, **inputs: np.ndarray) -> ProgramImage:
        """A program image of this op with ``inputs`` staged in DRAM (single-stream programs only)."""
        if len(self.program.streams) != 1:
            raise ScheduleError(f"this program has {len(self.program.streams)} streams; an image holds one")
        stream = self.program.streams[0]
        bufs = [b for b in vars(self.buffers).values() if b is not None]
        with self._lock:
            self.stage(**inputs)
            segments = [(b.addr, self.device.copy_out(b)) for b in bufs]
        if stream.uop_words.size:
            segments.append((self.program.uop_buffer.addr, stream.uop_words.view(np.uint8).copy()))
        return ProgramImage(config=self.cfg, insns=stream.insns, insn_addr=0, segments=segments)


def bind_buffers(t: Template, device: SimDevice, given: Any = None) -> Any:
    """``given`` buffers checked against what the template reads and writes, or fresh ones."""
    need = t.buffer_bytes()
    if given is None:
        fresh: dict[str, Buffer | None] = {}
        with cleanup_on_error(lambda: free_all(device, [b for b in fresh.values() if b is not None])):
            for k, n in need.items():
                fresh[k] = device.alloc(n) if n else None
        return t.Buffers(**fresh)
    for k, n in need.items():
        buf = getattr(given, k)
        if n and (buf is None or buf.nbytes < n):
            raise ValueError(f"buffer {k!r} must hold {n} bytes, got {None if buf is None else buf.nbytes}")
    return given


def compile_template(t: Template, config: Config | None = None, *, device: SimDevice | None = None,
                     max_insns: int = 1 << 20, buffers: Any = None) -> CompiledOp:
    """Emit ``t``'s program for ``config`` (None: the template's default) on ``device``'s buffers."""
    try:
        if config is None:
            config = t.default_config()
        else:
            config = {k: list(v) if isinstance(v, tuple) else v for k, v in t.space().normalize(config).items()}
    except KnobError as e:
        raise ScheduleError(f"{t.op} config refused: {e}") from None
    reason = t.check(config)
    if reason:
        raise ScheduleError(f"{t.op} config refused: {reason}")
    device = device or SimDevice(t.cfg)
    bufs = bind_buffers(t, device, buffers)
    owned = [b for b in vars(bufs).values() if b is not None] if buffers is None else []
    with cleanup_on_error(lambda: free_all(device, owned)):   # nothing this call allocated stays on the device
        queue = CommandQueue(device, max_insns=max_insns, record=True)
        owned.append(queue.uop_buffer)
        t.emit(queue, config, bufs)
        program = queue.program()
    return CompiledOp(t, config, program, device, bufs, owned=owned)


def compile_op(name: str, env: Environment | HwConfig | str | None = None, *, config: Config | None = None,
               epilogue=(), device: SimDevice | None = None, max_insns: int = 1 << 20, buffers=None,
               **workload) -> CompiledOp:
    """Compile one operator for a workload; ``config`` is a dict of knob values, a ``space`` entry, or None.

    conv2d / group_conv2d: ``data_shape=(N, CI, H, W)``, ``kernel_shape=(CO, CI // groups, KH, KW)``,
    ``strides``, ``padding``, ``groups``. conv2d_transpose: ``kernel_shape=(CI, CO, KH, KW)`` (IOHW),
    ``strides``, ``padding``. dense: ``data_shape=(N, K)``, ``kernel_shape=(M, K)``. batch_matmul:
    ``data_shape=(B, M, K)``, ``kernel_shape=(B, N, K)`` (out[b] = data[b] @ kernel[b].T). Element-wise ops
    (add, multiply, minimum, maximum, right_shift, relu, clip): ``data_shape``, ``imm`` or ``bounds``.
    ``epilogue`` lists, in order: ("bias",), ("residual",), ("shr", n), ("shl", n), ("clip", lo, hi),
    ("relu",), ("min", v), ("max", v), ("add", v), ("mul", v); the result is cast to int8.
    ``max_insns`` bounds one stream; longer programs are split into several token-balanced streams.
    ``device`` and ``buffers`` (the template's ``Buffers``) let a graph executor chain operators
    through shared DRAM buffers in the packed layouts; by default the op allocates its own.
    """
    cfg = config_of(env)
    t = template_of(name).parse(name, cfg, parse_ops(epilogue), workload)
    return compile_template(t, config, device=device, max_insns=max_insns, buffers=buffers)


def random_inputs(op: CompiledOp, seed: int = 0) -> dict[str, np.ndarray]:
    """Inputs for ``op`` in VTA's test ranges (the template's ``random_inputs``)."""
    return op.template.random_inputs(np.random.default_rng(seed))

