"""conv2d on the CPU: the code generator the host conv templates share, and AutoTVM's x86 template on it.

- ``conv2d_NCHWc.x86`` (AutoTVM's x86 template): input channels blocked by ``tile_ic`` (the NCHW[x]c layout),
  output channels by ``tile_oc`` (the vector lanes), ``tile_ow`` output columns per register tile (reg_n),
  ``unroll_kw`` unrolling the kernel columns; ``conv2d_NCHWc_int8.x86`` the same on int8 with int32 sums.
- The ARM family (``spatial_pack.py``) and depthwise conv2d (``depthwise.py``) use the same generator.

The kernel takes the NCHW input and OIHW weights of the graph: it copies the input into its padded,
channel-blocked scratch itself (padding written once), packs the weights once per weight array (a network's
constant), keeps tile_oh x tile_ow vector accumulators of tile_oc lanes in registers, and accumulates with
``llvm.fmuladd`` (one rounding per tap where the CPU fuses it). So its sums are reassociated: results are checked
with ``np.allclose`` against a float64 reference, not bit for bit like host.jit's fixed-order kernels.
An epilogue (bias, residual add, relu) is applied as each output is stored, in the graph's order.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from host import jit
from host.templates.base import (
    HostKernel,
    HostTemplate,
    PackedWeights,
    check_arrays,
    check_epilogue,
    check_host_extents,
    check_host_tensors,
    largest_divisor,
    register_host,
    timed_compile,
)
from host.templates.target import CpuTarget
from vta.numerics import wrap_int32
from vta.space import Config, ConfigSpace, Knob, divisors
from vta.templates.base import as_ints, as_pair, only_known

MAX_ACC_VECTORS = 28          # register tile: accumulators of one tile (AVX-512 and NEON have 32 vector registers)
MAX_BODY_FMAS = 4096          # vector multiply-adds one reduction step unrolls (bounds code size and compile time)


@dataclass(frozen=True)
class ConvShape:
    n: int
    c: int
    h: int
    w: int
    o: int
    kh: int
    kw: int
    sh: int
    sw: int
    pt: int
    pl: int
    pb: int
    pr: int
    dh: int = 1
    dw: int = 1

    @property
    def oh(self) -> int:
        return (self.h + self.pt + self.pb - self.dh * (self.kh - 1) - 1) // self.sh + 1

    @property
    def ow(self) -> int:
        return (self.w + self.pl + self.pr - self.dw * (self.kw - 1) - 1) // self.sw + 1

    @property
    def macs(self) -> int:
        return self.n * self.o * self.oh * self.ow * self.c * self.kh * self.kw


@dataclass(frozen=True)
class ConvSched:
    """The generator's schedule: both families' knobs map onto it."""

    ic_bn: int        # input channels per block (unrolled in the reduction)
    oc_bn: int        # output channels per vector
    t_oh: int         # output rows per register tile
    t_ow: int         # output columns per register tile
    tap_outer: bool   # kernel taps outside the input-channel-block loop
    unroll_kw: bool
    integer: bool = False   # int8 x int8 -> int32 (exact, wrapping) instead of float32
    vec_ow: bool = False    # vectorise output columns (t_ow lanes) instead of output channels (oc_bn lanes)

    def acc_vectors(self, lanes: int) -> int:
        """Vector registers the register tile's accumulators take."""
        if self.vec_ow:
            return self.oc_bn * self.t_oh * _vector_count(lanes, self.t_ow)
        return self.t_oh * self.t_ow * _vector_count(lanes, self.oc_bn)

    @property
    def types(self) -> tuple[str, str]:
        """(LLVM element type of the input and weights, of the accumulators and output)."""
        return ("i8", "i32") if self.integer else ("float", "float")


def _vector_count(lanes: int, oc_bn: int) -> int:
    return -(-oc_bn // lanes)


def conv_ir(name: str, p: ConvShape, s: ConvSched, epilogue: tuple[str, ...] = ()) -> str:
    """conv2d(xin, x, w, bias, res, out): xin NCHW copied into the scratch x (N, C/ic_bn, Hp, Wp, ic_bn), w packed
    (O/oc_bn, C/ic_bn, KH, KW, ic_bn, oc_bn), out NCHW; bias / res read only with those epilogue steps."""
    f, vt, madd, accs = _kernel_fn(name, p, s, s.ic_bn)
    et = s.types[0]
    oh, ow = p.oh, p.ow
    hp, wp = p.h + p.pt + p.pb, p.w + p.pl + p.pr
    bn, ob = s.ic_bn, s.oc_bn
    ic_o, oc_o = p.c // bn, p.o // ob
    xs_row, xs_c = wp * bn, hp * wp * bn
    tile = list(accs)
    w_tap = bn * ob

    def body(xbase: str, wbase: str) -> None:
        """acc[r, c] += x[.., row r, col c, ici] * w[.., ici, :] for every ici of the block (unrolled)."""
        cur = {k: f.let(f"load {vt}, ptr {a}, align 64") for k, a in accs.items()}
        for ici in range(bn):
            wv = _load_vector(f, s, ob, f.gep(et, wbase, str(ici * ob)))
            for r, c in tile:
                xv = _load_splat(f, s, ob, f.gep(et, xbase, str(r * p.sh * xs_row + c * p.sw * bn + ici)))
                cur[r, c] = madd(xv, wv, cur[r, c])
        for k, a in accs.items():
            f.emit(f"store {vt} {cur[k]}, ptr {a}, align 64")

    with ExitStack() as loops:
        n = loops.enter_context(f.loop(p.n))
        oco = loops.enter_context(f.loop(oc_o))
        rb = loops.enter_context(f.loop(oh // s.t_oh))
        cb = loops.enter_context(f.loop(ow // s.t_ow))
        for a in accs.values():
            f.emit(f"store {vt} zeroinitializer, ptr {a}, align 64")
        tile_x = f.lin(0, (ic_o * xs_c, n), (s.t_oh * p.sh * xs_row, rb), (s.t_ow * p.sw * bn, cb))
        wtile = f.lin(0, (ic_o * p.kh * p.kw * w_tap, oco))

        def step(ico: str, i: str, j: str) -> None:
            xoff = f.lin(0, (1, tile_x), (xs_c, ico), (p.dh * xs_row, i), (p.dw * bn, j))
            woff = f.lin(0, (1, wtile), (p.kh * p.kw * w_tap, ico), (p.kw * w_tap, i), (w_tap, j))
            body(f.gep(et, "%x", xoff), f.gep(et, "%w", woff))

        _reduce(f, p, s, ic_o, step)

        obase = f.lin(0, (p.o * oh * ow, n), (ob * oh * ow, oco), (s.t_oh * ow, rb), (s.t_ow, cb))
        emit_store(f, p, ob, accs, oco, obase, epilogue, s.types[1])
    return f.text()


def _reduce(f: jit._Fn, p: ConvShape, s: ConvSched, ic_blocks: int, step: Callable[[str, str, str], None]) -> None:
    """The reduction loops around ``step(ico, i, j)``: input-channel blocks and kernel taps (the taps outermost with
    ``s.tap_outer``), the kernel columns unrolled with ``s.unroll_kw``."""
    def taps(inner: Callable[[str, str], None]) -> None:
        with f.loop(p.kh) as i:
            for jj in range(p.kw) if s.unroll_kw else [None]:
                with ExitStack() as st:
                    inner(i, str(jj) if jj is not None else st.enter_context(f.loop(p.kw)))

    if s.tap_outer:
        def over_ic(i: str, j: str) -> None:
            with f.loop(ic_blocks) as ico:
                step(ico, i, j)
        taps(over_ic)
    else:
        with f.loop(ic_blocks) as ico:
            taps(lambda i, j: step(ico, i, j))


def relu(f: jit._Fn, ty: str, val: str) -> str:
    """numpy's maximum(x, 0) on a float or a float vector of type ``ty``: x where x > 0 or NaN, else +0.0."""
    keep = f.let(f"fcmp ugt {ty} {val}, zeroinitializer")
    return f.let(f"select {ty.replace('float', 'i1')} {keep}, {ty} {val}, {ty} zeroinitializer")


def _kernel_fn(name: str, p: ConvShape, s: ConvSched, stage_bn: int) -> tuple[jit._Fn, str, Callable, dict]:
    """A conv kernel's function (xin, x, w, bias, res, out) with the input staged in blocks of ``stage_bn`` channels:
    (function, vector type of oc_bn accumulators, ``madd(x, w, acc)`` emitting acc + x * w, the register tile's
    accumulators). Floats: ``llvm.fmuladd`` (fused where the CPU has FMA); int8: exact products, wrapping sums."""
    f = jit._Fn(name, ["ptr noalias readonly %xin", "ptr noalias %x", "ptr noalias readonly %w",
                       "ptr noalias readonly %bias", "ptr noalias readonly %res", "ptr noalias %out"])
    et, at = s.types
    vt = f"<{s.oc_bn} x {at}>"
    if s.integer:
        def madd(x: str, w: str, acc: str) -> str:
            return f.let(f"add {vt} {acc}, {f.let(f'mul {vt} {x}, {w}')}")
    else:
        fma = f"@llvm.fmuladd.v{s.oc_bn}f32"
        f.decls.add(f"declare {vt} {fma}({vt}, {vt}, {vt})")

        def madd(x: str, w: str, acc: str) -> str:
            return f.let(f"call {vt} {fma}({vt} {x}, {vt} {w}, {vt} {acc})")
    emit_stage(f, p, stage_bn, et)
    return f, vt, madd, {(r, c): f.alloca(vt) for r in range(s.t_oh) for c in range(s.t_ow)}


def _load_vector(f: jit._Fn, s: ConvSched, lanes: int, ptr: str) -> str:
    """``lanes`` consecutive inputs or weights at ``ptr``, widened to the accumulator type."""
    et = s.types[0]
    v = f.let(f"load <{lanes} x {et}>, ptr {ptr}, align 1")
    return f.let(f"sext <{lanes} x i8> {v} to <{lanes} x i32>") if s.integer else v


def _load_splat(f: jit._Fn, s: ConvSched, lanes: int, ptr: str) -> str:
    """The input at ``ptr``, widened and broadcast to ``lanes`` lanes."""
    et, at = s.types
    v = f.let(f"load {et}, ptr {ptr}, align 1")
    return f.splat(at, lanes, f.let(f"sext i8 {v} to i32") if s.integer else v)


def emit_stage(f: jit._Fn, p: ConvShape, bn: int, et: str = "float") -> None:
    """Copy %xin (NCHW) into the padded, channel-blocked scratch %x (N, C/bn, Hp, Wp, bn):
    x[n, cb, r + pt, col + pl, ci] = xin[n, cb * bn + ci, r, col]; the padding stays as _Scratch wrote it."""
    hp, wp = p.h + p.pt + p.pb, p.w + p.pl + p.pr
    xs_row, xs_c, c_o = wp * bn, hp * wp * bn, p.c // bn
    with f.loop(p.n) as n, f.loop(c_o) as ico, f.loop(bn) as ici, f.loop(p.h) as r:
        src = f.gep(et, "%xin", f.lin(0, (p.c * p.h * p.w, n), (bn * p.h * p.w, ico), (p.h * p.w, ici), (p.w, r)))
        dst = f.gep(et, "%x", f.lin(p.pt * xs_row + p.pl * bn, (c_o * xs_c, n), (xs_c, ico), (xs_row, r), (1, ici)))
        with f.loop(p.w) as col:
            v = f.let(f"load {et}, ptr {f.gep(et, src, col)}, align 1")
            f.emit(f"store {et} {v}, ptr {f.gep(et, dst, f.lin(0, (bn, col)))}, align 1")


def emit_store(f: jit._Fn, p: ConvShape, ob: int, accs: dict, oco: str, obase: str, epilogue: tuple[str, ...],
               at: str = "float") -> None:
    """Store the register tile ``accs`` ((row, col) -> vector of ``ob`` output channels, channel block ``oco``) into
    %out (NCHW) from ``obase``, each lane one channel; the bias (vector), residual and relu in the graph's order
    (float only: an int32 output is stored as it is)."""
    oh, ow = p.oh, p.ow
    vt = f"<{ob} x {at}>"
    bias = None
    if "bias" in epilogue:
        bias = f.let(f"load {vt}, ptr {f.gep('float', '%bias', f.lin(0, (ob, oco)))}, align 4")
    for (r, c), acc in accs.items():
        val = f.let(f"load {vt}, ptr {acc}, align 64")
        if bias is not None:
            val = f.let(f"fadd {vt} {val}, {bias}")
        if "relu" in epilogue and "residual" not in epilogue:
            val = relu(f, vt, val)
        for lane in range(ob):
            off = f.lin(lane * oh * ow + r * ow + c, (1, obase))
            e = f.let(f"extractelement {vt} {val}, i64 {lane}")
            if "residual" in epilogue:
                rv = f.let(f"load float, ptr {f.gep('float', '%res', off)}, align 4")
                e = f.let(f"fadd float {e}, {rv}")
                if "relu" in epilogue:
                    e = relu(f, "float", e)
            f.emit(f"store {at} {e}, ptr {f.gep(at, '%out', off)}, align 4")


def pack_weights(w: np.ndarray, ic_bn: int, oc_bn: int) -> np.ndarray:
    """OIHW -> (O/oc_bn, I/ic_bn, KH, KW, ic_bn, oc_bn), contiguous, of the same dtype."""
    o, i, kh, kw = w.shape
    blocked = w.reshape(o // oc_bn, oc_bn, i // ic_bn, ic_bn, kh, kw).transpose(0, 2, 4, 5, 3, 1)
    return np.ascontiguousarray(blocked)


def conv_reference(x: np.ndarray, w: np.ndarray, p: ConvShape, bias=None, residual=None,
                   relu: bool = False, depthwise: bool = False) -> np.ndarray:
    """float64 conv2d (+ bias, + residual, relu) by im2col and one tensor contraction (per channel when
    ``depthwise``): the independent oracle. Integer inputs: exact int64 sums, wrapped to int32."""
    integer = np.issubdtype(x.dtype, np.integer)
    calc = np.int64 if integer else np.float64
    xp = np.pad(x.astype(calc), ((0, 0), (0, 0), (p.pt, p.pb), (p.pl, p.pr)))
    cols = np.empty((p.n, p.c, p.kh, p.kw, p.oh, p.ow), calc)
    for i in range(p.kh):
        for j in range(p.kw):
            r0, c0 = i * p.dh, j * p.dw
            cols[:, :, i, j] = xp[:, :, r0:r0 + p.sh * (p.oh - 1) + 1:p.sh, c0:c0 + p.sw * (p.ow - 1) + 1:p.sw]
    if depthwise:
        out = np.einsum("nckjhw,ckj->nchw", cols, w[:, 0].astype(calc), optimize=True)
    else:
        out = np.einsum("nckjhw,ockj->nohw", cols, w.astype(calc), optimize=True)
    if integer:
        return wrap_int32(out)
    if bias is not None:
        out += np.asarray(bias, np.float64)[None, :, None, None]
    if residual is not None:
        out += residual
    return np.maximum(out, 0) if relu else out


class _Conv2d(HostTemplate):
    """What both conv2d families share: the workload, the reference, the estimate, the compiled kernel."""

    inputs: ClassVar[tuple[str, ...]] = ("data", "kernel", "bias", "residual")
    depthwise: ClassVar[bool] = False    # one input channel per output channel (kernel (C, 1, KH, KW))
    integer: ClassVar[bool] = False      # int8 data and kernel, int32 output (exact, wrapping like the accelerator)

    def __init__(self, op: str, p: ConvShape, target: CpuTarget | None = None):
        super().__init__(op, target)
        self.p = p

    @classmethod
    def parse(cls, op: str, cfg: Any, epilogue: tuple, workload: dict[str, Any]) -> _Conv2d:
        only_known(op, workload, {"data_shape", "kernel_shape", "strides", "padding", "dilation"},
                   ("data_shape", "kernel_shape"))
        n, c, h, w = as_ints("data_shape", workload["data_shape"], 4)
        o, ci, kh, kw = as_ints("kernel_shape", workload["kernel_shape"], 4)
        if cls.depthwise and (o, ci) != (c, 1):
            raise ValueError(f"{op}: a depthwise kernel_shape is ({c}, 1, KH, KW) for {c} channels, got "
                             f"{workload['kernel_shape']}")
        if not cls.depthwise and ci != c:
            raise ValueError(f"{op}: kernel_shape {workload['kernel_shape']} takes {ci} input channels, the data "
                             f"has {c} (groups are not supported by this template)")
        sh, sw = as_pair("strides", workload.get("strides", 1))
        dh, dw = as_pair("dilation", workload.get("dilation", 1))
        pad = workload.get("padding", 0)
        pad = as_pair("padding", pad) if not isinstance(pad, (list, tuple)) or len(pad) == 2 else as_ints("padding", pad)
        if len(pad) not in (2, 4):
            raise ValueError(f"{op}: padding is (top/bottom, left/right) or (top, left, bottom, right), got {pad}")
        pt, pl, pb, pr = pad if len(pad) == 4 else (pad[0], pad[1], pad[0], pad[1])
        if min(n, c, h, w, o, kh, kw, sh, sw, dh, dw) < 1 or min(pt, pl, pb, pr) < 0:
            raise ValueError(f"{op}: shapes, strides and dilation must be >= 1 and padding >= 0, got {workload}")
        check_host_extents(op, "data_shape", (n, c, h, w), ("N", "C", "H", "W"))
        check_host_extents(op, "kernel_shape", (o, ci, kh, kw), ("O", "I", "KH", "KW"))
        check_host_extents(op, "strides / dilation / padding", (sh, sw, dh, dw, pt, pl, pb, pr),
                           ("SH", "SW", "DH", "DW", "PT", "PL", "PB", "PR"))
        p = ConvShape(n, c, h, w, o, kh, kw, sh, sw, pt, pl, pb, pr, dh, dw)
        if p.oh < 1 or p.ow < 1:
            raise ValueError(f"{op}: the output would be empty ({p.oh} x {p.ow})")
        check_host_tensors(op, {"padded input": n * c * (h + pt + pb) * (w + pl + pr), "kernel": o * ci * kh * kw,
                                "output": n * o * p.oh * p.ow})
        return cls(op, p, cfg if isinstance(cfg, CpuTarget) else None)

    def task_workload(self) -> dict[str, Any]:
        p = self.p
        return {"op": self.op, "data_shape": (p.n, p.c, p.h, p.w), "kernel_shape": self.kernel_shape,
                "strides": (p.sh, p.sw), "padding": (p.pt, p.pl, p.pb, p.pr), "dilation": (p.dh, p.dw)}

    @property
    def kernel_shape(self) -> tuple[int, int, int, int]:
        p = self.p
        return (p.o, 1 if self.depthwise else p.c, p.kh, p.kw)

    @property
    def macs(self) -> int:
        return self.p.macs // (self.p.c if self.depthwise else 1)

    @property
    def flop(self) -> int:
        return 2 * self.p.macs

    @property
    def out_shape(self) -> tuple[int, int, int, int]:
        return (self.p.n, self.p.o, self.p.oh, self.p.ow)

    # ---- schedule ----
    def sched(self, config: Config) -> ConvSched:
        raise NotImplementedError

    def check(self, config: Config) -> str | None:
        s = self.sched(config)
        acc = s.acc_vectors(self.target.lanes)
        if acc > MAX_ACC_VECTORS:
            return (f"a register tile of {s.t_oh} x {s.t_ow} x {s.oc_bn} channels needs {acc} vector accumulators; "
                    f"at most {MAX_ACC_VECTORS} fit in the registers")
        calls = s.oc_bn * s.t_oh if s.vec_ow else s.t_oh * s.t_ow   # multiply-adds (one IR vector each) per input channel
        fmas = calls * s.ic_bn * (self.p.kw if s.unroll_kw else 1)
        if fmas > MAX_BODY_FMAS:
            return f"the unrolled reduction step holds {fmas} multiply-adds; at most {MAX_BODY_FMAS} (code size)"
        return None

    def estimate(self, knobs: dict[str, tuple[np.ndarray, np.ndarray]]) -> dict[str, np.ndarray]:
        """A roofline-like time in ns at 1 GHz per vector op: multiply-adds over the lanes actually used, plus the
        loads of inputs and weights, the scalar stores, and a loop overhead per reduction step."""
        p, lanes = self.p, self.target.lanes
        s = self._sched_arrays(knobs)
        vec_ow = s.get("vec_ow", 0) > 0
        vecs = np.where(vec_ow, np.ceil(s["t_ow"] / lanes), np.ceil(s["oc_bn"] / lanes))
        acc = np.where(vec_ow, s["oc_bn"] * s["t_oh"] * vecs, s["t_oh"] * s["t_ow"] * vecs)
        loads = np.where(vec_ow, s["t_oh"] * vecs + s["oc_bn"], s["t_oh"] * s["t_ow"] + vecs)
        tiles = p.n * (p.o / s["oc_bn"]) * (p.oh / s["t_oh"]) * (p.ow / s["t_ow"])
        steps = tiles * (1 if self.depthwise else p.c / s["ic_bn"]) * p.kh * p.kw
        per_step = s["ic_bn"] * (acc + loads / 2)
        overhead = np.where(s["unroll_kw"] > 0, 2.0, 6.0) + 2 * acc  # accumulators spilled at loop edges
        spill = np.maximum(0, acc - 24) * 8
        est = steps * (per_step / 2 + overhead / np.maximum(1, s["ic_bn"]) + spill) + p.n * p.o * p.oh * p.ow * 1.5
        return {"est_cycles": est, "log_co_inner": np.log2(s["oc_bn"]), "log_ci_inner": np.log2(s["ic_bn"]),
                "log_w_inner": np.log2(s["t_ow"]), "log_h_inner": np.log2(s["t_oh"]),
                "threads": s["unroll_kw"], "log_tiles": np.log2(tiles), "log_chunks": np.log2(steps),
                "kh_kw": float(p.kh * p.kw), "stride": float(p.sh), "is_conv": 1.0}

    def _sched_arrays(self, knobs: dict[str, tuple[np.ndarray, np.ndarray]]) -> dict[str, np.ndarray]:
        raise NotImplementedError

    # ---- code ----
    def ir(self, config: Config | None = None, target: CpuTarget | None = None, epilogue: tuple[str, ...] = (),
           name: str = "kernel") -> str:
        return self._ir(name, self.sched(self.checked(config)), self._epilogue(epilogue))

    def _epilogue(self, epilogue: tuple[str, ...]) -> tuple[str, ...]:
        epilogue = check_epilogue(epilogue)
        if epilogue and self.integer:
            raise ValueError(f"{self.op} stores its int32 sums as they are: no epilogue (the graph's requantizing ops "
                             f"run after it), got {list(epilogue)}")
        return epilogue

    def _ir(self, name: str, s: ConvSched, epilogue: tuple[str, ...]) -> str:
        return conv_ir(name, self.p, s, epilogue)

    def pack_kernel(self, w: np.ndarray, s: ConvSched) -> np.ndarray:
        return pack_weights(w, s.ic_bn, s.oc_bn)

    def build(self, config: Config | None = None, epilogue: tuple[str, ...] = ()) -> HostKernel:
        p, normal = self.p, self.checked(config)
        epilogue = self._epilogue(epilogue)
        s = self.sched(normal)
        name = jit._fresh_name(self.op.split(".")[0])
        cfn, seconds = timed_compile(lambda: jit._compile(self._ir(name, s, epilogue), name, 6))
        dtype, out_dtype = ("int8", "int32") if self.integer else ("float32", "float32")
        scratch = jit._Scratch((p.n, p.c // s.ic_bn, p.h + p.pt + p.pb, p.w + p.pl + p.pr, s.ic_bn), dtype, 0)
        packed = PackedWeights(lambda w: self.pack_kernel(w, s))
        zero = np.zeros(1, np.float32)
        shapes = {"data": (p.n, p.c, p.h, p.w), "kernel": self.kernel_shape, "bias": (p.o,),
                  "residual": self.out_shape}

        def run(data: np.ndarray, kernel: np.ndarray, bias: np.ndarray | None = None,
                residual: np.ndarray | None = None) -> np.ndarray:
            given = {"data": data, "kernel": kernel, "bias": bias, "residual": residual}
            check_arrays(self.op, given, shapes, ("data", "kernel"), dtype)
            check_arrays(self.op, given, shapes, [k for k in ("bias", "residual") if k in epilogue])
            x = np.ascontiguousarray(data)
            b = np.ascontiguousarray(bias) if "bias" in epilogue else zero
            res = np.ascontiguousarray(residual) if "residual" in epilogue else zero
            out = np.empty(self.out_shape, out_dtype)
            cfn(jit._ptr(x), jit._ptr(scratch.get()), jit._ptr(packed.get(kernel)), jit._ptr(b), jit._ptr(res),
                jit._ptr(out))
            return out

        return HostKernel(self, normal, epilogue, run, seconds, {"sched": s})

    # ---- data ----
    def reference(self, **inputs: np.ndarray) -> np.ndarray:
        return conv_reference(inputs["data"], inputs["kernel"], self.p, inputs.get("bias"), inputs.get("residual"),
                              bool(inputs.get("relu", False)), self.depthwise)

    def random_inputs(self, rng: np.random.Generator) -> dict[str, np.ndarray]:
        p = self.p
        if self.integer:
            return {"data": rng.integers(-128, 128, (p.n, p.c, p.h, p.w), dtype=np.int8),
                    "kernel": rng.integers(-128, 128, self.kernel_shape, dtype=np.int8)}
        return {"data": rng.standard_normal((p.n, p.c, p.h, p.w)).astype(np.float32),
                "kernel": rng.standard_normal(self.kernel_shape).astype(np.float32)}


def _split(name: str, extent: int, limit: int) -> Knob:
    return Knob(name, tuple((extent // f, f) for f in divisors(extent) if f <= limit))


@register_host
class Conv2dNCHWc(_Conv2d):
    """AutoTVM's x86 conv2d_NCHWc knobs: tile_ic, tile_oc, tile_ow, unroll_kw."""

    ops: ClassVar[tuple[str, ...]] = ("conv2d_NCHWc.x86",)
    family: ClassVar[str] = "x86"

    def space(self) -> ConfigSpace:
        p = self.p
        return ConfigSpace([_split("tile_ic", p.c, 64), _split("tile_oc", p.o, 64), _split("tile_ow", p.ow, 32),
                            Knob.choice("unroll_kw", (0, 1))])

    def sched(self, config: Config) -> ConvSched:
        return ConvSched(config["tile_ic"][1], config["tile_oc"][1], 1, config["tile_ow"][1], False,
                         bool(config["unroll_kw"]))

    def _sched_arrays(self, knobs):
        return {"ic_bn": knobs["tile_ic"][0], "oc_bn": knobs["tile_oc"][0], "t_oh": np.ones_like(knobs["tile_ow"][0]),
                "t_ow": knobs["tile_ow"][0], "unroll_kw": knobs["unroll_kw"][0]}

    def default_config(self) -> Config:
        """AutoTVM's fallback for x86: one vector of output channels, input channels blocked likewise, the largest
        register tile of output columns that fits (reg_n), kernel columns not unrolled."""
        p, lanes = self.p, self.target.lanes
        oc_bn = largest_divisor(p.o, lanes)
        ic_bn = largest_divisor(p.c, lanes)
        reg_n = largest_divisor(p.ow, MAX_ACC_VECTORS // _vector_count(lanes, oc_bn))
        return {"tile_ic": [p.c // ic_bn, ic_bn], "tile_oc": [p.o // oc_bn, oc_bn], "tile_ow": [p.ow // reg_n, reg_n],
                "unroll_kw": 0}


@register_host
class Conv2dNCHWcInt8(Conv2dNCHWc):
    """The x86 NCHWc template on int8 data and kernels with int32 sums (exact; a quantized graph's host conv):
    the same knobs, sign-extended products in int32 lanes (no VNNI dot products yet)."""

    ops: ClassVar[tuple[str, ...]] = ("conv2d_NCHWc_int8.x86",)
    integer: ClassVar[bool] = True

    def sched(self, config: Config) -> ConvSched:
        s = super().sched(config)
        return ConvSched(s.ic_bn, s.oc_bn, s.t_oh, s.t_ow, s.tap_outer, s.unroll_kw, integer=True)
