"""``compile_op``: one operator, compiled once for a workload and a config, run on numpy arrays.

Inputs and outputs use the natural layouts (NCHW activations, OIHW weights, IOHW for
conv2d_transpose, (N, K) x (M, K) for dense); packing to VTA's tiled layouts (NCHW{b}n{c}c,
OIHW{c}o{c}i), zero padding of batch and channels to whole blocks, and cropping happen inside.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from hw_config import HwConfig
from simulator.image import ProgramImage
from simulator.stats import RunStats
from vta.device import SimDevice
from vta.environment import Environment, config_of
from vta.runtime import CommandQueue, Program, ScheduleError
from vta.space import Config, ConfigSpace, KnobError
from vta.templates import alu, conv

CONV_OPS = ("conv2d", "group_conv2d", "conv2d_transpose", "dense")
ALU_OPS = (*alu.BINARY, *alu.UNARY)


def _blocks(n: int, block: int) -> int:
    return -(-n // block)


def _pad_to(a: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    if a.shape == shape:
        return a
    out = np.zeros(shape, dtype=a.dtype)
    out[tuple(slice(0, s) for s in a.shape)] = a
    return out


def _check(name: str, a: np.ndarray, shape: tuple[int, ...], dtypes: tuple[str, ...]) -> np.ndarray:
    a = np.asarray(a)
    if a.shape != shape:
        raise ValueError(f"{name}: expected shape {shape}, got {a.shape}")
    if a.dtype.name not in dtypes:
        raise ValueError(f"{name}: expected dtype {' or '.join(dtypes)}, got {a.dtype}")
    return a


def wrap_int32(v: np.ndarray) -> np.ndarray:
    """int64 values wrapped to int32, as the hardware's 32-bit arithmetic wraps."""
    return ((v + (1 << 31)) % (1 << 32)) - (1 << 31)


def pack_blocks(a: np.ndarray, outer: int, inner: int) -> np.ndarray:
    """(D0, D1, ...) -> (D0/outer, D1/inner, ..., outer, inner), zero-padding D0 and D1 to whole blocks:
    VTA's NCHW{b}n{c}c activations (outer = BATCH, inner = BLOCK) and OIHW{o}o{i}i weights."""
    d0, d1, *rest = a.shape
    b0, b1 = _blocks(d0, outer), _blocks(d1, inner)
    a = _pad_to(a, (b0 * outer, b1 * inner, *rest))
    k = len(rest)
    return np.ascontiguousarray(a.reshape(b0, outer, b1, inner, *rest).transpose(0, 2, *range(4, 4 + k), 1, 3))


def unpack_blocks(x: np.ndarray, d0: int, d1: int) -> np.ndarray:
    """The inverse of ``pack_blocks``, cropped to ``d0`` x ``d1``."""
    b0, b1, *rest, outer, inner = x.shape
    k = len(rest)
    y = x.transpose(0, 2 + k, 1, 3 + k, *range(2, 2 + k)).reshape(b0 * outer, b1 * inner, *rest)
    return np.ascontiguousarray(y[:d0, :d1])


def pack_bias(bias: np.ndarray, blocks: int, batch: int, block: int) -> np.ndarray:
    """A per-channel vector as the conv template loads it into the accumulator: (blocks, batch, block),
    zero-padded to whole channel blocks and repeated for every batch row."""
    b = _pad_to(np.asarray(bias).reshape(-1), (blocks * block,)).reshape(blocks, 1, block)
    return np.ascontiguousarray(np.broadcast_to(b, (blocks, batch, block)))


def transposed_to_direct(w: np.ndarray) -> np.ndarray:
    """IOHW conv2d_transpose kernel -> the OIHW kernel of the equivalent direct convolution (flipped):
    out = conv(stride-dilated input, flip(W)^T)."""
    return np.ascontiguousarray(w.transpose(1, 0, 2, 3)[:, :, ::-1, ::-1])


def reference_epilogue(acc: np.ndarray, ops: tuple, bias: np.ndarray | None,
                       residual: np.ndarray | None) -> np.ndarray:
    """numpy model of the fused epilogue on an int32 NCHW accumulator, then the int8 store."""
    x = acc.astype(np.int64)
    wrap = wrap_int32
    for op in ops:
        name, *args = op
        if name == "bias":
            x = wrap(x + bias.astype(np.int64)[None, :, None, None])
        elif name == "residual":
            x = wrap(x + residual.astype(np.int64))
        elif name == "shr":
            x = x >> min(args[0], 31)
        elif name == "shl":
            x = wrap(x << min(args[0], 31))
        elif name == "clip":
            x = np.maximum(np.minimum(x, args[1]), args[0])
        elif name == "relu":
            x = np.maximum(x, 0)
        elif name == "min":
            x = np.minimum(x, args[0])
        elif name == "max":
            x = np.maximum(x, args[0])
        elif name == "add":
            x = wrap(x + args[0])
        elif name == "mul":
            x = wrap(x * args[0])
    return (x & 0xFF).astype(np.uint8).view(np.int8)  # STORE keeps the low 8 bits


@dataclass
class CompiledOp:
    """A compiled operator. ``run(**arrays)`` returns the output; ``space``/``config``/``stats`` describe it."""

    name: str
    cfg: HwConfig
    space: ConfigSpace
    config: Config
    program: Program
    stats: RunStats | None = None
    info: dict[str, Any] = field(default_factory=dict)

    @property
    def cycles(self) -> int:
        return self.stats.cycles if self.stats else 0

    @property
    def num_insns(self) -> int:
        return self.program.num_insns

    def _buffers(self) -> list:
        return [b for b in vars(self.buffers).values() if b is not None]

    def image(self, **inputs: np.ndarray) -> ProgramImage:
        """A program image of this op with ``inputs`` staged in DRAM (single-stream programs only)."""
        if len(self.program.streams) != 1:
            raise ScheduleError(f"this program has {len(self.program.streams)} streams; an image holds one")
        self.stage(**inputs)
        stream = self.program.streams[0]
        segments = [(b.addr, self.device.copy_out(b)) for b in self._buffers()]
        if stream.uop_words.size:
            segments.append((self.program.uop_buffer.addr, stream.uop_words.view(np.uint8).copy()))
        return ProgramImage(config=self.cfg, insns=stream.insns, insn_addr=0, segments=segments)


class ConvOp(CompiledOp):
    """conv2d / group_conv2d / conv2d_transpose / dense with a fused epilogue."""

    def __init__(self, name: str, cfg: HwConfig, device: SimDevice, geometry: conv.ConvGeometry,
                 shapes: dict[str, tuple[int, ...]], epilogue: conv.Epilogue, config: Config | None,
                 max_insns: int = 1 << 20, buffers: conv.ConvBuffers | None = None):
        dense = name == "dense"
        space = conv.conv_space(geometry, dense=dense)
        if config is None:
            config = conv.default_config(cfg, geometry, epilogue, space)
        else:
            config = {k: list(v) if isinstance(v, tuple) else v for k, v in space.normalize(config).items()}
        tiling = conv.tiling_of(config)
        reason = conv.check_config(cfg, geometry, tiling, epilogue)
        if reason:
            raise ScheduleError(f"{name} config refused: {reason}")
        for op in epilogue.ops:  # reject bad epilogue ops before emitting anything
            if op[0] not in ("bias", "residual"):
                conv.alu_immediates(op)
        self.device, self.geometry, self.tiling, self.epilogue, self.shapes = device, geometry, tiling, epilogue, shapes
        g, b, bi, bo = geometry, cfg.BATCH, cfg.BLOCK_IN, cfg.BLOCK_OUT
        need = {"data": g.nb * g.cib_total * g.height * g.width * b * bi,
                "kernel": g.cob * g.cib * g.kh * g.kw * bo * bi,
                "out": g.nb * g.cob * g.out_h * g.out_w * b * bo,
                "bias": g.cob * b * bo * 4 if epilogue.bias else 0,
                "residual": g.nb * g.cob * g.out_h * g.out_w * b * bo * 4 if epilogue.residual else 0}
        self.buffers = _bind_buffers(conv.ConvBuffers, device, need, buffers)
        queue = CommandQueue(device, max_insns=max_insns, record=True)
        conv.emit_conv(queue, geometry, tiling, epilogue, self.buffers)
        super().__init__(name, cfg, space, config, queue.program())

    # ---- packing ----
    def _unpack_out(self, raw: np.ndarray) -> np.ndarray:
        g, c = self.geometry, self.cfg
        n, co = self.shapes["out"][:2]
        packed = raw.view(np.int8).reshape(g.nb, g.cob, g.out_h, g.out_w, c.BATCH, c.BLOCK_OUT)
        return unpack_blocks(packed, n, co)

    def _conv_weight(self, kernel: np.ndarray) -> np.ndarray:
        """The OIHW weight of the equivalent direct convolution."""
        return transposed_to_direct(kernel) if self.name == "conv2d_transpose" else kernel

    # ---- running ----
    def _inputs(self, data, kernel, bias, residual):
        s = self.shapes
        data = _check("data", data, s["data"], ("int8",))
        kernel = _check("kernel", kernel, s["kernel"], ("int8",))
        if self.epilogue.bias:
            if bias is None:
                raise ValueError("this op's epilogue has ('bias',): pass bias=")
            bias = _check("bias", bias, (s["out"][1],), ("int32",))
        elif bias is not None:
            raise ValueError("bias= given but this op's epilogue has no ('bias',): it would be ignored")
        if self.epilogue.residual:
            if residual is None:
                raise ValueError("this op's epilogue has ('residual',): pass residual=")
            residual = _check("residual", residual, s["out"], ("int8", "int32"))
        elif residual is not None:
            raise ValueError("residual= given but this op's epilogue has no ('residual',): it would be ignored")
        return data, kernel, bias, residual

    def _nchw(self, a: np.ndarray) -> np.ndarray:
        return a.reshape(*a.shape, 1, 1) if self.name == "dense" else a

    def run(self, data: np.ndarray, kernel: np.ndarray, bias: np.ndarray | None = None,
            residual: np.ndarray | None = None, *, compute: bool = True) -> np.ndarray:
        self.stage(data, kernel, bias, residual)
        self.stats = self.program.run(compute=compute)
        out = self._unpack_out(self.device.copy_out(self.buffers.out))
        return out.reshape(out.shape[:2]) if self.name == "dense" else out

    def stage(self, data: np.ndarray, kernel: np.ndarray, bias: np.ndarray | None = None,
              residual: np.ndarray | None = None) -> None:
        """Pack the inputs into the device buffers (what ``run`` does before running)."""
        data, kernel, bias, residual = self._inputs(data, kernel, bias, residual)
        dev, bufs, c, g = self.device, self.buffers, self.cfg, self.geometry
        dev.copy_in(bufs.data, pack_blocks(self._nchw(data), c.BATCH, c.BLOCK_IN))
        dev.copy_in(bufs.kernel, pack_blocks(self._conv_weight(self._nchw(kernel)), c.BLOCK_OUT, c.BLOCK_IN))
        if bufs.bias is not None:
            dev.copy_in(bufs.bias, pack_bias(bias, g.cob, c.BATCH, c.BLOCK_OUT))
        if bufs.residual is not None:
            dev.copy_in(bufs.residual, pack_blocks(self._nchw(residual).astype(np.int32), c.BATCH, c.BLOCK_OUT))

    def reference(self, data: np.ndarray, kernel: np.ndarray, bias: np.ndarray | None = None,
                  residual: np.ndarray | None = None) -> np.ndarray:
        """numpy result of the same computation, independent of the template."""
        data, kernel, bias, residual = self._inputs(data, kernel, bias, residual)
        g = self.geometry
        x, w = self._nchw(data).astype(np.int64), self._nchw(kernel).astype(np.int64)
        if self.name == "conv2d_transpose":
            acc = reference_conv2d_transpose(x, w, (g.sh, g.sw), (g.ph, g.pw))
        else:
            acc = reference_conv2d(x, w, (g.sh, g.sw), (g.ph, g.pw), g.groups)
        res = None if residual is None else self._nchw(residual)
        out = reference_epilogue(acc, self.epilogue.ops, bias, res)
        return out.reshape(out.shape[:2]) if self.name == "dense" else out


class AluOp(CompiledOp):
    """Element-wise add / multiply / minimum / maximum / right_shift (tensor or immediate rhs), relu, clip."""

    def __init__(self, name: str, cfg: HwConfig, device: SimDevice, geometry: alu.AluGeometry,
                 shape: tuple[int, ...], epilogue: tuple, config: Config | None, max_insns: int = 1 << 20,
                 buffers: AluBuffers | None = None):
        space = alu.alu_space(geometry)
        ops = alu.alu_ops(geometry, epilogue)  # validates immediates before anything is emitted
        if config is None:
            config = alu.default_alu_config(cfg, geometry, space)
        else:
            config = {k: list(v) for k, v in space.normalize(config).items()}
        tiling = alu.alu_tiling(config)
        reason = alu.check_alu(cfg, geometry, tiling)
        if reason:
            raise ScheduleError(f"{name} config refused: {reason}")
        self.device, self.geometry, self.shape, self.epilogue = device, geometry, shape, epilogue
        g = geometry
        packed = g.nb * g.cob * g.height * g.width * cfg.BATCH * cfg.BLOCK_OUT
        need = {"lhs": 4 * packed, "out": packed, "rhs": 4 * packed if g.tensor_rhs else 0}
        self.buffers = _bind_buffers(AluBuffers, device, need, buffers)
        queue = CommandQueue(device, max_insns=max_insns, record=True)
        alu.emit_alu(queue, geometry, tiling, ops, self.buffers)
        super().__init__(name, cfg, space, config, queue.program())

    def _pack(self, a: np.ndarray) -> np.ndarray:
        return pack_blocks(a.astype(np.int32), self.cfg.BATCH, self.cfg.BLOCK_OUT)

    def _inputs(self, lhs, rhs):
        lhs = _check("lhs", lhs, self.shape, ("int8", "int32"))
        if self.geometry.tensor_rhs:
            if rhs is None:
                raise ValueError(f"{self.name} with a tensor operand: pass rhs=")
            rhs = _check("rhs", rhs, self.shape, ("int8", "int32"))
        elif rhs is not None:
            raise ValueError(f"rhs= given but this {self.name} has no tensor operand: it would be ignored")
        return lhs, rhs

    def stage(self, lhs: np.ndarray, rhs: np.ndarray | None = None) -> None:
        """Pack the operands into the device buffers (what ``run`` does before running)."""
        lhs, rhs = self._inputs(lhs, rhs)
        self.device.copy_in(self.buffers.lhs, self._pack(lhs))
        if rhs is not None:
            self.device.copy_in(self.buffers.rhs, self._pack(rhs))

    def run(self, lhs: np.ndarray, rhs: np.ndarray | None = None, *, compute: bool = True) -> np.ndarray:
        self.stage(lhs, rhs)
        self.stats = self.program.run(compute=compute)
        g, c = self.geometry, self.cfg
        packed = self.device.copy_out(self.buffers.out).view(np.int8).reshape(
            g.nb, g.cob, g.height, g.width, c.BATCH, c.BLOCK_OUT)
        return unpack_blocks(packed, self.shape[0], self.shape[1])

    def reference(self, lhs: np.ndarray, rhs: np.ndarray | None = None) -> np.ndarray:
        lhs, rhs = self._inputs(lhs, rhs)
        g = self.geometry
        x = lhs.astype(np.int64)
        if g.op in alu.BINARY:
            ops = {"add": ("add",), "multiply": ("mul",), "minimum": ("min",), "maximum": ("max",),
                   "right_shift": ("shr",)}[g.op]
            if g.rhs_imm is not None:
                first = (*ops, g.rhs_imm)
                return reference_epilogue(x, (first, *self.epilogue), None, None)
            y = rhs.astype(np.int64)
            x = {"add": lambda: x + y, "multiply": lambda: x * y, "minimum": lambda: np.minimum(x, y),
                 "maximum": lambda: np.maximum(x, y),
                 "right_shift": lambda: np.where(y >= 0, x >> np.minimum(y, 31), x << np.minimum(-y, 31))}[g.op]()
            return reference_epilogue(wrap_int32(x), self.epilogue, None, None)
        first = ("relu",) if g.op == "relu" else ("clip", *g.args)
        return reference_epilogue(x, (first, *self.epilogue), None, None)


@dataclass
class AluBuffers:
    lhs: object
    out: object
    rhs: object | None = None




def _bind_buffers(kind, device: SimDevice, need: dict[str, int], given):
    """``given`` buffers checked against what the template reads and writes, or fresh ones."""
    if given is None:
        return kind(**{k: device.alloc(n) if n else None for k, n in need.items()})
    for k, n in need.items():
        buf = getattr(given, k)
        if n and (buf is None or buf.nbytes < n):
            raise ValueError(f"buffer {k!r} must hold {n} bytes, got {None if buf is None else buf.nbytes}")
    return given


def reference_conv2d(x: np.ndarray, w: np.ndarray, strides, padding, groups: int = 1) -> np.ndarray:
    """Direct NCHW x OIHW convolution in int64 (sum over windows), grouped by input/output channel slices."""
    n, ci, h, wd = x.shape
    co, cig, kh, kw = w.shape
    sh, sw = strides
    ph, pw = padding
    xp = np.zeros((n, ci, h + 2 * ph, wd + 2 * pw), dtype=np.int64)
    xp[:, :, ph:ph + h, pw:pw + wd] = x
    oh, ow = (h + 2 * ph - kh) // sh + 1, (wd + 2 * pw - kw) // sw + 1
    out = np.zeros((n, co, oh, ow), dtype=np.int64)
    cog = co // groups
    for grp in range(groups):
        xs = xp[:, grp * cig:(grp + 1) * cig]
        ws = w[grp * cog:(grp + 1) * cog]
        for i in range(kh):
            for j in range(kw):
                patch = xs[:, :, i:i + sh * oh:sh, j:j + sw * ow:sw]  # (n, cig, oh, ow)
                out[:, grp * cog:(grp + 1) * cog] += np.einsum("nchw,oc->nohw", patch, ws[:, :, i, j])
    return out


def reference_conv2d_transpose(x: np.ndarray, w: np.ndarray, strides, padding) -> np.ndarray:
    """NCHW x IOHW transposed convolution by scattering each input pixel (int64)."""
    n, _, h, wd = x.shape
    _, co, kh, kw = w.shape
    sh, sw = strides
    ph, pw = padding
    full = np.zeros((n, co, (h - 1) * sh + kh, (wd - 1) * sw + kw), dtype=np.int64)
    for i in range(kh):
        for j in range(kw):
            full[:, :, i:i + sh * h:sh, j:j + sw * wd:sw] += np.einsum("nchw,co->nohw", x, w[:, :, i, j])
    return full[:, :, ph:full.shape[2] - ph, pw:full.shape[3] - pw]


def _int(name: str, v) -> int:
    """An exact integer (bools and fractions refused, so nothing is silently reinterpreted)."""
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer, float, np.floating)) or v != int(v):
        raise ValueError(f"{name}: expected an integer, got {v!r}")
    return int(v)


def _ints(name: str, v, length: int | None = None) -> tuple[int, ...]:
    if not isinstance(v, (list, tuple, np.ndarray)):
        raise ValueError(f"{name}: expected a sequence of integers, got {v!r}")  # noqa: TRY004 - bad input is a ValueError here
    out = tuple(_int(name, x) for x in v)
    if length is not None and len(out) != length:
        raise ValueError(f"{name}: expected {length} values, got {len(out)}: {v!r}")
    return out


def _pair(name: str, v) -> tuple[int, int]:
    """One integer for both dimensions, or exactly two."""
    if isinstance(v, (list, tuple, np.ndarray)):
        return _ints(name, v, 2)  # type: ignore[return-value]
    n = _int(name, v)
    return n, n


def _epilogue_ops(epilogue) -> tuple[tuple, ...]:
    ops = []
    for op in epilogue:
        if not isinstance(op, (list, tuple)) or not op or not isinstance(op[0], str):
            raise ValueError(f"epilogue op {op!r}: expected a tuple starting with the op's name, e.g. ('shr', 8)")
        ops.append(tuple(op))
    return tuple(ops)


def compile_op(name: str, env: Environment | HwConfig | str | None = None, *, config: Config | None = None,
               epilogue=(), device: SimDevice | None = None, max_insns: int = 1 << 20, buffers=None,
               **workload) -> CompiledOp:
    """Compile one operator for a workload; ``config`` is a dict of knob values, a ``space`` entry, or None.

    conv2d / group_conv2d: ``data_shape=(N, CI, H, W)``, ``kernel_shape=(CO, CI // groups, KH, KW)``,
    ``strides``, ``padding``, ``groups``. conv2d_transpose: ``kernel_shape=(CI, CO, KH, KW)`` (IOHW),
    ``strides``, ``padding``. dense: ``data_shape=(N, K)``, ``kernel_shape=(M, K)``.
    ``epilogue`` lists, in order: ("bias",), ("residual",), ("shr", n), ("shl", n), ("clip", lo, hi),
    ("relu",), ("min", v), ("max", v), ("add", v), ("mul", v); the result is cast to int8.
    ``max_insns`` bounds one stream; longer programs are split into several token-balanced streams.
    ``device`` and ``buffers`` (``conv.ConvBuffers`` / ``AluBuffers``) let a graph executor chain operators
    through shared DRAM buffers in the packed layouts; by default the op allocates its own.
    """
    cfg = config_of(env)
    if name in ALU_OPS:
        return _compile_alu(name, cfg, config, epilogue, device, max_insns, workload, buffers)
    if name not in CONV_OPS:
        raise ValueError(f"unknown operator {name!r}; allowed: {', '.join(CONV_OPS + ALU_OPS)}")
    known = {"data_shape", "kernel_shape", "strides", "padding", "groups"}
    unknown = set(workload) - known
    if unknown:
        raise ValueError(f"{name}: unknown workload argument(s) {sorted(unknown)}; allowed: {sorted(known)}")
    for key in ("data_shape", "kernel_shape"):
        if key not in workload:
            raise ValueError(f"{name}: missing workload argument {key!r}")
    data_shape = _ints("data_shape", workload["data_shape"])
    kernel_shape = _ints("kernel_shape", workload["kernel_shape"])
    ops = _epilogue_ops(epilogue)
    if name == "dense":
        extra = {"strides", "padding", "groups"} & set(workload)
        if extra:
            raise ValueError(f"dense: {sorted(extra)} do not apply to dense")
        if len(data_shape) != 2 or len(kernel_shape) != 2 or data_shape[1] != kernel_shape[1]:
            raise ValueError(f"dense: data_shape (N, K) and kernel_shape (M, K) must agree on K, got "
                             f"{data_shape} and {kernel_shape}")
        data4, kernel4 = (*data_shape, 1, 1), (*kernel_shape, 1, 1)
        strides, padding, groups = (1, 1), (0, 0), 1
    else:
        data4, kernel4 = data_shape, kernel_shape
        strides, padding = _pair("strides", workload.get("strides", 1)), _pair("padding", workload.get("padding", 0))
        groups = _int("groups", workload.get("groups", 1))
    if len(data4) != 4 or len(kernel4) != 4 or min(*data4, *kernel4) <= 0:
        raise ValueError(f"{name}: data_shape and kernel_shape need 4 positive dims, got {data_shape}, {kernel_shape}")
    n, ci, h, w = data4
    transpose = name == "conv2d_transpose"
    if transpose:
        ci_k, co, kh, kw = kernel4
        if groups != 1:
            raise ValueError("conv2d_transpose: groups must be 1")
    else:
        co, ci_k, kh, kw = kernel4
    if ci_k * (1 if transpose else groups) != ci:
        raise ValueError(f"{name}: kernel_shape {kernel_shape} does not match {ci} input channels with groups={groups}")
    if groups < 1 or ci % groups or co % groups:
        raise ValueError(f"{name}: groups={groups} must divide both {ci} input and {co} output channels")
    if groups > 1 and ((ci // groups) % cfg.BLOCK_IN or (co // groups) % cfg.BLOCK_OUT):
        raise ValueError(f"{name}: with groups={groups} each group's channels ({ci // groups} in, {co // groups} out) "
                         f"must be multiples of BLOCK={cfg.BLOCK_IN} (VTA groups whole channel blocks)")
    if min(strides) < 1 or min(padding) < 0:
        raise ValueError(f"{name}: strides must be >= 1 and padding >= 0, got {strides}, {padding}")
    geometry = conv.ConvGeometry(
        nb=_blocks(n, cfg.BATCH), cib=_blocks(ci // groups, cfg.BLOCK_IN), cob=_blocks(co, cfg.BLOCK_OUT),
        groups=groups, height=h, width=w, kh=kh, kw=kw, sh=strides[0], sw=strides[1], ph=padding[0],
        pw=padding[1], transpose=transpose)
    if geometry.out_h <= 0 or geometry.out_w <= 0:
        raise ValueError(f"{name}: the output would be empty ({geometry.out_h} x {geometry.out_w})")
    out_shape = (n, co) if name == "dense" else (n, co, geometry.out_h, geometry.out_w)
    shapes = {"data": data_shape, "kernel": kernel_shape, "out": out_shape}
    try:
        return ConvOp(name, cfg, device or SimDevice(cfg), geometry, shapes, conv.Epilogue(ops), config, max_insns,
                      buffers)
    except KnobError as e:
        raise ScheduleError(f"{name} config refused: {e}") from None


def _compile_alu(name: str, cfg: HwConfig, config, epilogue, device, max_insns: int, workload,
                 buffers=None) -> AluOp:
    known = {"data_shape", "imm", "bounds"}
    unknown = set(workload) - known
    if unknown:
        raise ValueError(f"{name}: unknown workload argument(s) {sorted(unknown)}; allowed: {sorted(known)}")
    if "data_shape" not in workload:
        raise ValueError(f"{name}: missing workload argument 'data_shape' (N, C, H, W)")
    shape = _ints("data_shape", workload["data_shape"])
    if len(shape) != 4 or min(shape) <= 0:
        raise ValueError(f"{name}: data_shape needs 4 positive dims (N, C, H, W), got {shape}")
    imm = None if workload.get("imm") is None else _int("imm", workload["imm"])
    if imm is not None and name not in alu.BINARY:
        raise ValueError(f"{name}: imm= applies only to {', '.join(alu.BINARY)}")
    if name == "clip":
        if "bounds" not in workload:
            raise ValueError("clip: pass bounds=(lo, hi)")
        args = _ints("bounds", workload["bounds"], 2)
    elif "bounds" in workload:
        raise ValueError(f"{name}: bounds= applies only to clip")
    else:
        args = ()
    n, c, h, w = shape
    geometry = alu.AluGeometry(nb=_blocks(n, cfg.BATCH), cob=_blocks(c, cfg.BLOCK_OUT), height=h, width=w,
                               op=name, rhs_imm=imm, args=args)
    try:
        return AluOp(name, cfg, device or SimDevice(cfg), geometry, shape, _epilogue_ops(epilogue), config,
                     max_insns, buffers)
    except KnobError as e:
        raise ScheduleError(f"{name} config refused: {e}") from None


def random_inputs(op: CompiledOp, seed: int = 0) -> dict[str, np.ndarray]:
    """Inputs for ``op`` in VTA's test ranges: int8 data/weights in [-128, 128), int32 bias in +-2^14."""
    rng = np.random.default_rng(seed)
    if isinstance(op, AluOp):
        out = {"lhs": rng.integers(-512, 512, op.shape).astype(np.int32)}
        if op.geometry.tensor_rhs:
            out["rhs"] = rng.integers(-512, 512, op.shape).astype(np.int32)
        return out
    s = op.shapes
    out = {"data": rng.integers(-128, 128, s["data"], dtype=np.int8),
           "kernel": rng.integers(-128, 128, s["kernel"], dtype=np.int8)}
    if op.epilogue.bias:
        out["bias"] = rng.integers(-(1 << 14), 1 << 14, s["out"][1]).astype(np.int32)
    if op.epilogue.residual:
        out["residual"] = rng.integers(-(1 << 14), 1 << 14, s["out"]).astype(np.int32)
    return out
