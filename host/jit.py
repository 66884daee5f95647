"""CPU kernels JIT-compiled through llvmlite, bit-identical to the numpy references in graph_pack.kernels.

The references fix every float reduction's order (conv2d: input channel, kernel row, kernel column; dense:
over K; pooling: row-major over the window; softmax and layer norm: host.numerics' lane partials, compiled through
the loop IR by host.row_ops) and round each product before adding it. The kernels here
generate LLVM IR specialised to one shape, keep that order for every output element and gain their speed
by putting *different output elements* in the vector lanes (output columns for conv2d and pooling), never
by reassociating a sum; no fast-math flag and no ``contract`` is ever set, so no fused multiply-add appears.
Integer sums (int8 x int8 -> int32) wrap modulo 2^32 like the reference, so their order is free.

    fn = jit.get_kernel("nn.conv2d", attrs, [x.shape, w.shape], ["float32", "float32"])
    y = fn(attrs, x, w) if fn is not None else kernels.KERNELS["nn.conv2d"](attrs, x, w)

This is the only module that imports llvmlite, and only on first use (a core dependency, except on 32-bit ARM
boards, which have no wheel for it: there ``build`` says so once and runs the numpy kernels).
Known differences, both outside "same bits for the same numbers": a NaN result may carry another NaN
payload, and max_pool2d of a window whose largest values are +0.0 and -0.0 may pick the other zero.
"""

from __future__ import annotations

import ctypes
import functools
import math
import os
import struct
import sys
import threading
import time
import warnings
import weakref
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np

from host.shapes import packed_factors, pair, pool_out, quad
from vta.numerics import transposed_to_direct

Kernel = Callable[..., np.ndarray]
COVERED = ("nn.conv2d", "nn.conv2d_transpose", "nn.dense", "nn.max_pool2d", "nn.avg_pool2d", "nn.global_avg_pool2d",
           "nn.softmax", "nn.layer_norm")
EPILOGUE_OPS = ("nn.bias_add", "nn.relu")   # what a float nn.conv2d can apply to its output (get_kernel)
EPILOGUES = (("nn.bias_add",), ("nn.relu",), ("nn.bias_add", "nn.relu"))
# what a float nn.max_pool2d can apply to its output: quantize to int8, then pack it (get_kernel)
POOL_EPILOGUES = (("qnn.quantize",), ("qnn.quantize", "layout_transform"))
_INSTALL_HINT = "host.jit needs llvmlite: reinstall the package (llvmlite is a core dependency) or pip install llvmlite"


def available() -> bool:
    """True when llvmlite can be imported (get_kernel then compiles instead of raising ImportError)."""
    try:
        import llvmlite.binding  # noqa: F401
    except ImportError:
        return False
    return True


class JitUnavailableWarning(UserWarning):
    """llvmlite is missing, so the host layers run on the numpy kernels (the same bits, slower)."""


@functools.cache
def _warn_unavailable() -> None:
    warnings.warn("llvmlite is not installed (32-bit ARM boards have no wheel for it): the host layers run on the "
                  "numpy kernels, with the same results, slower", JitUnavailableWarning, stacklevel=4)


def available_or_notice() -> bool:
    """``available()``, saying once per process (a ``JitUnavailableWarning``) that the host layers fall back to
    the numpy kernels when it is False: what ``build(cpu="auto")`` calls before it picks any kernel."""
    if available():
        return True
    _warn_unavailable()
    return False


# ---- one target machine per process, one MCJIT engine per compiled kernel ---------------------------------

@dataclass
class _Jit:
    llvm: object
    tm: object          # the optimiser's target machine (its data layout, its cost model)
    target: object      # the host's llvm Target: each engine takes a target machine of its own
    cpu: str
    features: str       # LLVM's "+avx2,-avx512f,...": every feature it knows, on or off
    feature_map: dict[str, bool]
    pto: object
    avx512: bool

    def engine(self, mod):
        """An MCJIT engine owning ``mod`` (and a target machine of its own, which the engine takes over)."""
        tm = self.target.create_target_machine(cpu=self.cpu, features=self.features, opt=3, jit=True)
        return self.llvm.create_mcjit_compiler(mod, tm)


class KernelCache:
    """Compiled kernels by key, the ``limit`` most recently used kept (default: ``MAX_CACHED_KERNELS`` as it is when
    one is added, so setting that module attribute applies at once). Each holds its machine code and per-thread
    staging buffers: a notebook or server that builds network after network, size after size, stays bounded; a
    kernel dropped here lives on in the modules that use it and is compiled again when asked for again."""

    def __init__(self, limit: int | None = None):
        self.limit = limit
        self._entries: OrderedDict[tuple, Any] = OrderedDict()
        self._lock = threading.Lock()
        _CACHES.append(weakref.ref(self))   # held across a fork (_before_fork)

    def get(self, key: tuple, make: Callable[[], Any]) -> Any:
        """The kernel of ``key``, made by ``make()`` (once, under the cache's lock) when missing."""
        with self._lock:
            if key in self._entries:
                self._entries.move_to_end(key)
                return self._entries[key]
            made = self._entries[key] = make()
            limit = MAX_CACHED_KERNELS if self.limit is None else self.limit
            while len(self._entries) > max(limit, 1):
                self._entries.popitem(last=False)
            return made

    def __len__(self) -> int:
        return len(self._entries)


# compiled host kernels kept per process, per cache (a network has tens of distinct ones: ResNet-50 on the CPU ~25)
MAX_CACHED_KERNELS = 256
_STATE: _Jit | None = None
_LOCK = threading.RLock()
_CACHES: list[weakref.ref[KernelCache]] = []   # every cache made (their locks are held across a fork)
_CACHE = KernelCache()
_COUNTER = [0]
_HELD: list[Any] = []   # the locks _before_fork took, each recorded as soon as it is taken


def _before_fork() -> None:
    """A fork waits for the compilations under way in other threads and holds off new ones until it is done (as
    ``logging`` holds its locks): a child forked mid-compilation (tuning's measuring workers) got the caches' and
    the compiler's locks held by a thread it does not have, and hung at its first compile.

    Each lock is recorded as it is taken and only recorded locks are released after the fork, so a Ctrl-C in the
    middle (CPython reports an exception in an at-fork hook and forks anyway) leaves no lock held: it used to
    record them all at the end, and an interrupt before that left the caches' locks held for good."""
    caches = [cache for cache in (ref() for ref in list(_CACHES)) if cache is not None]
    try:
        for lock in [*(cache._lock for cache in caches), _LOCK]:   # the order a compilation takes them in
            lock.acquire()
            _HELD.append(lock)
    except BaseException:
        _after_fork()
        raise


def _after_fork() -> None:
    while _HELD:
        _HELD.pop().release()


if hasattr(os, "register_at_fork"):   # POSIX
    os.register_at_fork(before=_before_fork, after_in_parent=_after_fork, after_in_child=_after_fork)


HOST_ISA_ENV = "VTA_HOST_ISA"
# what each VTA_HOST_ISA value turns off of the CPU's own features (LLVM's names, by prefix): "avx2" is
# x86-64-v3, the CPUs with AVX2 and FMA but no AVX-512, AVX10, AMX or the later VEX extensions
_ISA_OFF = {"avx2": ("avx512", "avx10", "evex512", "amx", "avxvnni", "avxifma", "avxneconvert")}


def host_isa() -> str | None:
    """The instruction set ``VTA_HOST_ISA`` limits the host kernels to, or None (unset or ``auto``: the CPU's own);
    not yet checked (``host_features`` refuses a value that is not one)."""
    want = os.environ.get(HOST_ISA_ENV, "")
    return None if want in ("", "auto") else want


def host_features(llvm) -> dict[str, bool]:
    """The host CPU's features as LLVM reports them, limited by ``VTA_HOST_ISA`` (unset or ``auto``: all of
    them; ``avx2``: what an AVX2-only CPU has, so that a machine with AVX-512 builds, runs and measures the host
    kernels such a CPU gets). Read once per process, when the first kernel is compiled."""
    feats = {str(name): bool(on) for name, on in llvm.get_host_cpu_features().items()}
    want = host_isa()
    if want is None:
        return feats
    if want not in _ISA_OFF:
        raise ValueError(f"{HOST_ISA_ENV}={want} is not a host ISA (allowed: auto, {', '.join(_ISA_OFF)})")
    if not feats.get(want):
        raise ValueError(f"{HOST_ISA_ENV}={want}, but this CPU ({llvm.get_host_cpu_name()}) does not support "
                         f"{want.upper()}: unset it to use the CPU's own features")
    return {name: on and not name.startswith(_ISA_OFF[want]) for name, on in feats.items()}


def check_host_isa() -> None:
    """A ``VTA_HOST_ISA`` that is not ``auto`` checked now (ValueError), as a command starts, rather than when its
    first host kernel is compiled, after the work before it (a tuning run's)."""
    if host_isa() is not None and available():
        _jit()


def _jit() -> _Jit:
    """The process-wide host target, created on first use."""
    global _STATE
    with _LOCK:
        if _STATE is None:
            try:
                import llvmlite.binding as llvm
            except ImportError as e:
                raise ImportError(_INSTALL_HINT) from e
            llvm.initialize_native_target()
            llvm.initialize_native_asmprinter()
            feature_map = host_features(llvm)
            features = ",".join(f"{'+' if on else '-'}{name}" for name, on in feature_map.items())
            target = llvm.Target.from_triple(llvm.get_process_triple())
            cpu = llvm.get_host_cpu_name()
            tm = target.create_target_machine(cpu=cpu, features=features, opt=3, jit=True)
            pto = llvm.create_pipeline_tuning_options(speed_level=3)
            pto.loop_unrolling = False  # the IR is unrolled where it pays; LLVM's unrolling doubled compile time
            _STATE = _Jit(llvm, tm, target, cpu, features, feature_map, pto, feature_map.get("avx512f", False))
        return _STATE


def _compile(ir: str, name: str, nargs: int) -> Callable[..., None]:
    """Optimise (O3, no fast-math) and JIT one module; the C function taking ``nargs`` pointers.

    The function owns its engine (the module's IR and machine code): both are freed with the last reference to
    it, so a process compiling config after config (host tuning: ``tuning.cpu``) keeps only the kernels in use.
    One engine for the whole process kept every module it was ever given, ~65 KB per kernel."""
    st = _jit()
    llvm = st.llvm
    with _LOCK:
        mod = llvm.parse_assembly(ir)
        mod.triple = st.tm.triple
        mod.data_layout = str(st.tm.target_data)
        mod.verify()
        pb = llvm.create_pass_builder(st.tm, st.pto)
        pb.getModulePassManager().run(mod, pb)
        pb.close()   # here, under the lock, not whenever the collector gets to it
        engine = _Engine(st.engine(mod))
        engine.ref.finalize_object()
        addr = engine.ref.get_function_address(name)
    if not addr:
        raise RuntimeError(f"host.jit: no address for compiled function {name}")
    fn = ctypes.CFUNCTYPE(None, *[ctypes.c_void_p] * nargs)(addr)
    fn.engine = engine   # the code at addr lives as long as its engine, which lives as long as fn
    return fn


class _Engine:
    """An MCJIT engine disposed under ``_LOCK``: a kernel dropped in one thread must not free LLVM objects while
    another thread compiles (llvmlite's objects share LLVM's global context, which is not thread-safe)."""

    def __init__(self, ref):
        self.ref = ref

    def __del__(self, _lock=_LOCK, _finalizing=sys.is_finalizing) -> None:   # (bound here: globals go at exit)
        if _finalizing():   # the interpreter is exiting, llvmlite's library with it (its own objects skip too)
            return
        with _lock:   # an RLock: a collection inside a compile, in the compiling thread, takes it again
            self.ref.close()


def _fresh_name(op: str) -> str:
    _COUNTER[0] += 1
    return f"vta_{op.replace('nn.', '')}_{_COUNTER[0]}"


# ---- IR text builder ----------------------------------------------------------------------------------------

class _Fn:
    """One LLVM function as text: SSA names, counted loops (phi-based), entry-block allocas (mem2reg'd)."""

    def __init__(self, name: str, args: Sequence[str]):
        self.head = f"define void @{name}({', '.join(args)}) nounwind {{"
        self.allocas: list[str] = []
        self.body: list[str] = ["L0:"]
        self.cur = "L0"
        self.n = 0
        self.decls: set[str] = set()

    def new(self, prefix: str = "t") -> str:
        self.n += 1
        return f"%{prefix}{self.n}"

    def label(self, prefix: str) -> str:
        self.n += 1
        return f"{prefix}{self.n}"

    def emit(self, line: str) -> None:
        self.body.append("  " + line)

    def let(self, rhs: str, prefix: str = "t") -> str:
        name = self.new(prefix)
        self.emit(f"{name} = {rhs}")
        return name

    def start(self, label: str) -> None:
        self.body.append(f"{label}:")
        self.cur = label

    def alloca(self, ty: str) -> str:
        name = self.new("a")
        self.allocas.append(f"  {name} = alloca {ty}, align 64")
        return name

    def lin(self, const: int, *terms: tuple[int, str]) -> str:
        """i64 value const + sum(coef * value)."""
        acc = None
        for coef, v in terms:
            if coef == 0 or v == "0":
                continue
            t = v if coef == 1 else self.let(f"mul nuw nsw i64 {v}, {coef}")
            acc = t if acc is None else self.let(f"add nuw nsw i64 {acc}, {t}")
        if acc is None:
            return str(const)
        return self.let(f"add nuw nsw i64 {acc}, {const}") if const else acc

    def gep(self, elt: str, base: str, off: str, inbounds: bool = True) -> str:
        kw = "getelementptr inbounds" if inbounds else "getelementptr"
        return self.let(f"{kw} {elt}, ptr {base}, i64 {off}", "p")

    def splat(self, ty: str, lanes: int, value: str) -> str:
        v = self.let(f"insertelement <{lanes} x {ty}> poison, {ty} {value}, i64 0")
        return self.let(f"shufflevector <{lanes} x {ty}> {v}, <{lanes} x {ty}> poison, <{lanes} x i32> zeroinitializer")

    @contextmanager
    def loop(self, count: int) -> Iterator[str]:
        """for i in range(count) (count >= 1); yields the i64 induction variable."""
        if count == 1:
            yield "0"
            return
        head, latch, done = self.label("loop"), self.label("latch"), self.label("done")
        i, nxt, pre = self.new("i"), self.new("inext"), self.cur
        self.emit(f"br label %{head}")
        self.start(head)
        self.emit(f"{i} = phi i64 [ 0, %{pre} ], [ {nxt}, %{latch} ]")
        yield i
        self.emit(f"br label %{latch}")
        self.start(latch)
        self.emit(f"{nxt} = add nuw nsw i64 {i}, 1")
        c = self.let(f"icmp ult i64 {nxt}, {count}")
        self.emit(f"br i1 {c}, label %{head}, label %{done}")
        self.start(done)

    def masked_store(self, ty: str, lanes: int, value: str, ptr: str, mask: str | None) -> None:
        vt = f"<{lanes} x {ty}>"
        if mask is None:
            self.emit(f"store {vt} {value}, ptr {ptr}, align 1")
            return
        name = f"@llvm.masked.store.v{lanes}{'f32' if ty == 'float' else ty}.p0"
        self.decls.add(f"declare void {name}({vt}, ptr, i32 immarg, <{lanes} x i1>)")
        self.emit(f"call void {name}({vt} {value}, ptr {ptr}, i32 1, <{lanes} x i1> {mask})")

    def text(self) -> str:
        return "\n".join([*sorted(self.decls), self.head, "entry:", *self.allocas, "  br label %L0",
                          *self.body, "  ret void", "}", ""])


def _fconst(v: float) -> str:
    """A float32 value as an exact LLVM IR constant (hex of the double it widens to)."""
    bits = struct.unpack("<Q", struct.pack("<d", float(np.float32(v))))[0]
    return f"0x{bits:016X}"


def _vconst(ty: str, value: str, lanes: int) -> str:
    """A constant vector of ``lanes`` copies of ``value`` (IR text: _fconst for floats)."""
    return f"<{', '.join([f'{ty} {value}'] * lanes)}>"


def _store_mask(f, lanes: int, need_col: bool, col, ow: int, valid):
    """The lanes a vector store may write: columns inside the row (when the tile can overhang it) and the
    whole vector only when the tile's channel/row conditions hold; None when every lane is always valid."""
    if need_col:
        return _lane_mask(f, lanes, col, ow, valid)
    if valid is not None:
        return f.let(f"select i1 {valid}, <{lanes} x i1> {_vconst('i1', 'true', lanes)}, "
                     f"<{lanes} x i1> zeroinitializer")
    return None


def _lane_mask(f: _Fn, lanes: int, col0: str, limit: int, valid: str | None) -> str:
    """<lanes x i1>: col0 + lane < limit, and-ed with the scalar i1 ``valid`` (None: all true)."""
    c = f.let(f"trunc i64 {col0} to i32")
    s = f.splat("i32", lanes, c)
    seq = ", ".join(f"i32 {k}" for k in range(lanes))
    idx = f.let(f"add <{lanes} x i32> {s}, <{seq}>")
    lim = ", ".join(f"i32 {limit}" for _ in range(lanes))
    m = f.let(f"icmp slt <{lanes} x i32> {idx}, <{lim}>")
    if valid is not None:
        m = f.let(f"select i1 {valid}, <{lanes} x i1> {m}, <{lanes} x i1> zeroinitializer")
    return m


def _valid(f: _Fn, conds: list[tuple[str, int]]) -> str | None:
    """i1 and of (value < limit) over conds; None when there are none."""
    out = None
    for v, lim in conds:
        c = f.let(f"icmp ult i64 {v}, {lim}")
        out = c if out is None else f.let(f"and i1 {out}, {c}")
    return out


# ---- input staging: padding and stride phases ---------------------------------------------------------------

class _Scratch:
    """The staged-input buffer of one kernel, kept per thread. Its padding is written once (here); every call
    the kernel copies only the interior, since a fresh multi-MB buffer per call would cost more in page
    faults than the kernel itself."""

    def __init__(self, shape: tuple, dtype: str, fill):
        self.shape, self.dtype, self.fill = shape, np.dtype(dtype), fill
        self.local = threading.local()

    def get(self) -> np.ndarray:
        buf = getattr(self.local, "buf", None)
        if buf is None:
            buf = self.local.buf = np.full(self.shape, self.fill, self.dtype)
        return buf


def _emit_stage(f: _Fn, ety: str, nc: int, h: int, w: int, pt: int, pl: int, sw: int, hn: int, wc: int) -> None:
    """Copy %xin (NC x h x w) into the staged buffer %x (NC x hn x sw x wc):
    [c, r, p, col] = xin[c, r - pt, col*sw + p - pl]. Splitting columns into stride phases makes every
    output-column vector one contiguous load for any horizontal stride/dilation; the padding and the columns
    read past the last output are real memory (filled once by _Scratch). The main column loop reads whole
    groups of sw neighbours, which LLVM vectorises as interleaved accesses."""
    r0, r1 = min(pt, hn), min(pt + h, hn)
    if r1 <= r0:
        return
    ranges = [(max(0, -((p - pl) // sw)), min(wc, (w - 1 - p + pl) // sw + 1)) for p in range(sw)]
    lo, hi = max(a for a, _ in ranges), min(b for _, b in ranges)
    if hi <= lo:
        lo = hi = ranges[0][0]
    with f.loop(nc) as c, f.loop(r1 - r0) as r:
        src = f.gep(ety, "%xin", f.lin(0, (h * w, c), (w, r)))  # r0 == pt here
        dst = f.gep(ety, "%x", f.lin(r0 * sw * wc, (hn * sw * wc, c), (sw * wc, r)))

        def copy(phases: range, a: int, b: int) -> None:
            if b <= a:
                return
            with f.loop(b - a) as q:
                for p in phases:
                    v = f.let(f"load {ety}, ptr {f.gep(ety, src, f.lin(a * sw + p - pl, (sw, q)))}, align 1")
                    f.emit(f"store {ety} {v}, ptr {f.gep(ety, dst, f.lin(p * wc + a, (1, q)))}, align 1")

        copy(range(sw), lo, hi)
        for p, (a, b) in enumerate(ranges):
            copy(range(p, p + 1), a, min(b, lo))
            copy(range(p, p + 1), max(a, hi), b)


def _ptr(a: np.ndarray) -> int:
    return a.__array_interface__["data"][0]


def _check(what: str, arrays: Sequence[np.ndarray], shapes: Sequence[tuple], dtypes: Sequence[str]) -> None:
    for k, (a, s, d) in enumerate(zip(arrays, shapes, dtypes, strict=True)):
        if a.shape != s or a.dtype != np.dtype(d):
            raise ValueError(f"host.jit: the {what} kernel was compiled for input {k} of {s} {d}, "
                             f"got {a.shape} {a.dtype}; ask get_kernel for this shape")


# ---- blocking plans -----------------------------------------------------------------------------------------

@dataclass(frozen=True)
class _Tile:
    """An output tile: ob output channels x r rows x v vectors of vw columns (ob*r*v accumulators)."""
    ob: int
    r: int
    v: int
    vw: int


def _widths(vwmax: int) -> tuple[int, ...]:
    return tuple(w for w in (4, 8, 16, 32, 64) if w <= vwmax)


def _plan(og: int, oh: int, ow: int, taps: int, regs: int, vwmax: int, max_acc: int) -> _Tile:
    """The tile with the fewest modelled cycles: per kernel tap, one vector mul+add per accumulator, one load
    per input vector and per weight, at least an add latency; plus per-tile set-up and stores."""
    best, best_cost = _Tile(1, 1, 1, 4), math.inf
    for vw in _widths(vwmax):
        nv = -(-ow // vw)
        for v in range(1, min(nv, 8) + 1):
            ncb = -(-nv // v)
            for r in range(1, min(oh, 8) + 1):
                nrb = -(-oh // r)
                for ob in range(1, min(og, 16) + 1):
                    nacc, loads = ob * r * v, r * v + ob
                    if nacc > max_acc or nacc + r * v + 2 > regs:
                        continue
                    per_tap = max(nacc, loads / 2, 4) + 0.25 * loads
                    cost = -(-og // ob) * nrb * ncb * (taps * per_tap + 2 * nacc + 10)
                    if cost < best_cost - 1e-9:
                        best, best_cost = _Tile(ob, r, v, vw), cost
    return best


# ---- nn.conv2d ----------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class _Conv:
    n: int
    c: int
    h: int
    w: int
    o: int
    cg: int
    kh: int
    kw: int
    oh: int
    ow: int
    strides: tuple[int, int]
    padding: tuple[int, int, int, int]
    dilation: tuple[int, int]
    groups: int
    integer: bool


def _conv_ir(name: str, p: _Conv, t: _Tile, epilogue: tuple[str, ...] = ()) -> tuple[str, dict]:
    """conv2d(xin, w[, bias]) -> out, staging xin into %x first. Each tile keeps ob*r*v vector accumulators in
    registers; for every input channel, kernel row and kernel column (the reference's order) it adds the
    rounded products of r*v input vectors (consecutive output columns) with ob broadcast weights. ``epilogue``
    (float only) applies ``nn.bias_add`` (%bias: one float per channel, padded like the weights) and/or
    ``nn.relu`` to each sum before it is stored, as the references do after the conv: the same float ops."""
    args = ["ptr noalias readonly %xin", "ptr noalias %x", "ptr noalias readonly %w", "ptr noalias %out"]
    f = _Fn(name, args + ["ptr noalias readonly %bias"] * ("nn.bias_add" in epilogue))
    (sh, sw), (dh, dw) = p.strides, p.dilation
    og = p.o // p.groups
    ogp = -(-og // t.ob) * t.ob
    nv = -(-p.ow // t.vw)
    nrb, ncb = -(-p.oh // t.r), -(-nv // t.v)
    hn = (nrb * t.r - 1) * sh + (p.kh - 1) * dh + 1
    wc = ncb * t.v * t.vw + ((p.kw - 1) * dw) // sw
    xs_row = sw * wc
    xs_c = hn * xs_row
    xs_n = p.c * xs_c
    taps = p.kh * p.kw
    w_o, w_g = p.cg * taps, ogp * p.cg * taps
    out_c = p.oh * p.ow
    out_n = p.o * out_c
    at, xt = ("i32", "i8") if p.integer else ("float", "float")
    lanes = t.vw
    vt, xvt = f"<{lanes} x {at}>", f"<{lanes} x {xt}>"
    nacc = t.ob * t.r * t.v
    accs = [f.alloca(vt) for _ in range(nacc)]
    acc_at = {(o, r, v): accs[(o * t.r + r) * t.v + v] for o in range(t.ob) for r in range(t.r) for v in range(t.v)}
    _emit_stage(f, xt, p.n * p.c, p.h, p.w, p.padding[0], p.padding[1], sw, hn, wc)

    def tap_row(xbase: str, wbase: str, i: str) -> None:
        """acc += x * w over kernel row ``i`` (a loop variable), kernel columns j unrolled."""
        cur = {k: f.let(f"load {vt}, ptr {a}, align 64") for k, a in acc_at.items()}
        xb, wb = f.gep(xt, xbase, f.lin(0, (dh * xs_row, i))), f.gep(xt, wbase, f.lin(0, (p.kw, i)))
        for j in range(p.kw):
            phase, coff = (j * dw) % sw, (j * dw) // sw
            xv = {}
            for r in range(t.r):
                for v in range(t.v):
                    q = f.gep(xt, xb, str(r * sh * xs_row + phase * wc + v * lanes + coff))
                    val = f.let(f"load {xvt}, ptr {q}, align 1")
                    xv[r, v] = f.let(f"sext {xvt} {val} to {vt}") if p.integer else val
            for o in range(t.ob):
                q = f.gep(xt, wb, str(o * w_o + j))
                s = f.let(f"load {xt}, ptr {q}, align 1")
                if p.integer:
                    s = f.let(f"sext i8 {s} to i32")
                ws = f.splat(at, lanes, s)
                for r in range(t.r):
                    for v in range(t.v):
                        if p.integer:  # exact products, wrapping sum: order is free
                            prod = f.let(f"mul nsw {vt} {xv[r, v]}, {ws}")
                            cur[o, r, v] = f.let(f"add {vt} {cur[o, r, v]}, {prod}")
                        else:  # rounded product, then the add: the reference's order per element
                            prod = f.let(f"fmul {vt} {xv[r, v]}, {ws}")
                            cur[o, r, v] = f.let(f"fadd {vt} {cur[o, r, v]}, {prod}")
        for k, a in acc_at.items():
            f.emit(f"store {vt} {cur[k]}, ptr {a}, align 64")

    with ExitStack() as loops:
        n = loops.enter_context(f.loop(p.n))
        g = loops.enter_context(f.loop(p.groups))
        ob = loops.enter_context(f.loop(ogp // t.ob))
        rb = loops.enter_context(f.loop(nrb))
        cb = loops.enter_context(f.loop(ncb))
        for a in accs:
            f.emit(f"store {vt} zeroinitializer, ptr {a}, align 64")
        with f.loop(p.cg) as ci:
            xoff = f.lin(0, (xs_n, n), (p.cg * xs_c, g), (xs_c, ci), (t.r * sh * xs_row, rb), (t.v * lanes, cb))
            woff = f.lin(0, (w_g, g), (t.ob * w_o, ob), (taps, ci))
            xbase, wbase = f.gep(xt, "%x", xoff), f.gep(xt, "%w", woff)
            with f.loop(p.kh) as i:  # a loop over kernel rows keeps the code (and compile time) small
                tap_row(xbase, wbase, i)
        # stores: column lanes past ow, rows past oh and padded channels past og are masked off
        row0 = f.lin(0, (t.r, rb))
        col0 = f.lin(0, (t.v * lanes, cb))
        ch0 = f.lin(0, (t.ob, ob))
        obase = f.lin(0, (out_n, n), (og * out_c, g), (t.ob * out_c, ob), (t.r * p.ow, rb), (t.v * lanes, cb))
        need_col = ncb * t.v * lanes != p.ow
        for o in range(t.ob):
            for r in range(t.r):
                conds = []
                if ogp != og:
                    conds.append((f.lin(o, (1, ch0)), og))
                if nrb * t.r != p.oh:
                    conds.append((f.lin(r, (1, row0)), p.oh))
                valid = _valid(f, conds)
                bias = None
                if "nn.bias_add" in epilogue:
                    q = f.gep("float", "%bias", f.lin(o, (ogp, g), (t.ob, ob)))
                    bias = f.splat("float", lanes, f.let(f"load float, ptr {q}, align 4"))
                for v in range(t.v):
                    mask = _store_mask(f, lanes, need_col, f.lin(v * lanes, (1, col0)), p.ow, valid)
                    val = f.let(f"load {vt}, ptr {acc_at[o, r, v]}, align 64")
                    if bias is not None:
                        val = f.let(f"fadd {vt} {val}, {bias}")
                    if "nn.relu" in epilogue:  # numpy's maximum(x, 0): x when x > 0 or NaN, else +0.0
                        keep = f.let(f"fcmp ugt {vt} {val}, zeroinitializer")
                        val = f.let(f"select <{lanes} x i1> {keep}, {vt} {val}, {vt} zeroinitializer")
                    q = f.gep(at, "%out", f.lin(o * out_c + r * p.ow + v * lanes, (1, obase)), inbounds=False)
                    f.masked_store(at, lanes, val, q, mask)
    return f.text(), {"hn": hn, "wc": wc, "ogp": ogp, "og": og}


# ---- pooling ------------------------------------------------------------------------------------------------

_ELT = {"float32": "float", "int8": "i8", "uint8": "i8", "int32": "i32"}


@dataclass(frozen=True)
class _Pool:
    nc: int
    h: int
    w: int
    pt: int
    pl: int
    oh: int
    ow: int
    kh: int
    kw: int
    strides: tuple[int, int]
    dtype: str
    kind: str  # "max" or "avg"
    count_const: float | None  # avg: the divisor when it is the same everywhere
    quant_scale: float | None = None  # max, float32: qnn.quantize to int8 as it stores (_quantize_ir)
    channels: int = 0  # with pack: C of the N x C rows in nc
    pack: tuple[int, int] | None = None  # then stored packed: (outer, inner) blocks of N and C (pack_blocks)


def _combine_max(f: _Fn, vt: str, lanes: int, dtype: str, m: str, x: str) -> str:
    if dtype == "float32":  # NaN-propagating like numpy's max: take x when x > m or x is NaN
        gt = f.let(f"fcmp ogt {vt} {x}, {m}")
        nan = f.let(f"fcmp uno {vt} {x}, {x}")
        take = f.let(f"or <{lanes} x i1> {gt}, {nan}")
        return f.let(f"select <{lanes} x i1> {take}, {vt} {x}, {vt} {m}")
    ity = _ELT[dtype]
    op = "umax" if dtype.startswith("u") else "smax"
    name = f"@llvm.{op}.v{lanes}{ity}"
    f.decls.add(f"declare {vt} {name}({vt}, {vt})")
    return f.let(f"call {vt} {name}({vt} {m}, {vt} {x})")


@functools.cache   # a property of this numpy build: asked once per process, not at every store the IR emits
def _nan_as_int8() -> int | None:
    """What numpy's float32 -> int8 cast makes of NaN here (0 on x86-64 and AArch64), or None if it is not one
    value: the quantize epilogue gives NaN that byte, exactly as qnn.quantize's reference does."""
    with np.errstate(invalid="ignore"):
        got = np.full(67, np.nan, np.float32).astype(np.int8)
    return int(got[0]) if (got == got[0]).all() else None


def _quantize_ir(f: _Fn, val: str, lanes: int, scale: float, nan_byte: int) -> str:
    """qnn.quantize's reference on a float vector: floor(x / scale + 0.5), clipped to [-127, 127], as int8
    (NaN: nan_byte, numpy's cast of NaN; +-inf clip to +-127). Every step is the IEEE operation numpy runs."""
    vt = f"<{lanes} x float>"

    def splat(v: float) -> str:
        return _vconst("float", _fconst(v), lanes)

    floor = f"@llvm.floor.v{lanes}f32"
    f.decls.add(f"declare {vt} {floor}({vt})")
    q = f.let(f"fdiv {vt} {val}, {splat(scale)}")
    q = f.let(f"fadd {vt} {q}, {splat(0.5)}")
    q = f.let(f"call {vt} {floor}({vt} {q})")
    nan = f.let(f"fcmp uno {vt} {q}, {q}")
    for cmp, bound in (("ogt", 127.0), ("olt", -127.0)):
        out = f.let(f"fcmp {cmp} {vt} {q}, {splat(bound)}")
        q = f.let(f"select <{lanes} x i1> {out}, {vt} {splat(bound)}, {vt} {q}")
    q = f.let(f"select <{lanes} x i1> {nan}, {vt} zeroinitializer, {vt} {q}")   # no poison from fptosi
    q = f.let(f"fptosi {vt} {q} to <{lanes} x i8>")
    return f.let(f"select <{lanes} x i1> {nan}, <{lanes} x i8> {_vconst('i8', str(nan_byte), lanes)}, "
                 f"<{lanes} x i8> {q}")


def _pool_ir(name: str, p: _Pool, t: _Tile) -> tuple[str, dict]:
    """max/avg pool of xin -> out over r*v output-column vectors per tile, window taken row-major; with
    ``p.quant_scale`` each max is quantized to int8 as it is stored, with ``p.pack`` stored in the packed layout
    (a scatter: the output columns of a vector are BATCH x BLOCK bytes apart there)."""
    f = _Fn(name, ["ptr noalias readonly %xin", "ptr noalias %x", "ptr noalias readonly %cnt", "ptr noalias %out"])
    sh, sw = p.strides
    nv = -(-p.ow // t.vw)
    nrb, ncb = -(-p.oh // t.r), -(-nv // t.v)
    hn = (nrb * t.r - 1) * sh + p.kh
    wc = ncb * t.v * t.vw + (p.kw - 1) // sw
    xs_row = sw * wc
    xs_c = hn * xs_row
    cw = ncb * t.v * t.vw  # count buffer row length
    ety = _ELT[p.dtype]
    lanes = t.vw
    vt = f"<{lanes} x {ety}>"
    if p.kind == "max":
        if p.dtype == "float32":
            init = _fconst(-np.inf)
        else:
            init = str(int(np.iinfo(p.dtype).min)) if not p.dtype.startswith("u") else "0"
        init_v = _vconst(ety, init, lanes)
    else:
        init_v = "zeroinitializer"
    keys = [(r, v) for r in range(t.r) for v in range(t.v)]
    accs = {k: f.alloca(vt) for k in keys}
    _emit_stage(f, ety, p.nc, p.h, p.w, p.pt, p.pl, sw, hn, wc)

    def row(xbase: str, i: str) -> None:
        """Fold kernel row ``i`` (a loop variable) into the accumulators, kernel columns j unrolled."""
        cur = {k: f.let(f"load {vt}, ptr {a}, align 64") for k, a in accs.items()}
        xb = f.gep(ety, xbase, f.lin(0, (xs_row, i)))
        for j in range(p.kw):
            phase, coff = j % sw, j // sw
            for r, v in keys:
                q = f.gep(ety, xb, str(r * sh * xs_row + phase * wc + v * lanes + coff))
                x = f.let(f"load {vt}, ptr {q}, align 1")
                if p.kind == "max":
                    cur[r, v] = _combine_max(f, vt, lanes, p.dtype, cur[r, v], x)
                else:  # the reference's row-major window sum
                    cur[r, v] = f.let(f"fadd {vt} {cur[r, v]}, {x}")
        for k, a in accs.items():
            f.emit(f"store {vt} {cur[k]}, ptr {a}, align 64")

    with ExitStack() as loops:
        nc = loops.enter_context(f.loop(p.nc))
        rb = loops.enter_context(f.loop(nrb))
        cb = loops.enter_context(f.loop(ncb))
        for a in accs.values():
            f.emit(f"store {vt} {init_v}, ptr {a}, align 64")
        xbase = f.gep(ety, "%x", f.lin(0, (xs_c, nc), (t.r * sh * xs_row, rb), (t.v * lanes, cb)))
        with f.loop(p.kh) as i:
            row(xbase, i)
        obase = f.lin(0, (p.oh * p.ow, nc), (t.r * p.ow, rb), (t.v * lanes, cb))
        cbase = f.lin(0, (t.r * cw, rb), (t.v * lanes, cb))
        row0, col0 = f.lin(0, (t.r, rb)), f.lin(0, (t.v * lanes, cb))
        need_col = ncb * t.v * lanes != p.ow
        for r in range(t.r):
            valid = _valid(f, [(f.lin(r, (1, row0)), p.oh)] if nrb * t.r != p.oh else [])
            for v in range(t.v):
                val = f.let(f"load {vt}, ptr {accs[r, v]}, align 64")
                if p.kind == "avg":
                    if p.count_const is not None:
                        cnt = _vconst("float", _fconst(p.count_const), lanes)
                    else:
                        q = f.gep("float", "%cnt", f.lin(r * cw + v * lanes, (1, cbase)))
                        cnt = f.let(f"load {vt}, ptr {q}, align 4")
                    val = f.let(f"fdiv {vt} {val}, {cnt}")
                mask = _store_mask(f, lanes, need_col, f.lin(v * lanes, (1, col0)), p.ow, valid)
                oty = ety
                if p.quant_scale is not None:
                    val, oty = _quantize_ir(f, val, lanes, p.quant_scale, _nan_as_int8()), "i8"
                if p.pack is None:
                    q = f.gep(oty, "%out", f.lin(r * p.ow + v * lanes, (1, obase)), inbounds=False)
                    f.masked_store(oty, lanes, val, q, mask)
                else:
                    _scatter_packed(f, p, lanes, val, oty, nc, f.lin(r, (1, row0)), f.lin(v * lanes, (1, col0)), mask)
    return f.text(), {"hn": hn, "wc": wc, "cw": cw, "rows": nrb * t.r}


def _scatter_packed(f: _Fn, p: _Pool, lanes: int, val: str, ety: str, nc: str, row: str, col0: str,
                    mask: str | None) -> None:
    """Store the vector ``val`` (output columns col0 .. col0 + lanes - 1 of row ``row`` of N x C row ``nc``)
    at its places in the packed layout (N/b, C/k, OH, OW, b, k): b * k elements apart."""
    b, k = p.pack
    n, c = f.let(f"udiv i64 {nc}, {p.channels}"), f.let(f"urem i64 {nc}, {p.channels}")
    nb, ni = f.let(f"udiv i64 {n}, {b}"), f.let(f"urem i64 {n}, {b}")
    cb, ci = f.let(f"udiv i64 {c}, {k}"), f.let(f"urem i64 {c}, {k}")
    base = f.lin(0, (p.channels // k * p.oh * p.ow * b * k, nb), (p.oh * p.ow * b * k, cb), (p.ow * b * k, row),
                 (b * k, col0), (k, ni), (1, ci))
    steps = ", ".join(f"i64 {lane * b * k}" for lane in range(lanes))
    idx = f.let(f"add <{lanes} x i64> {f.splat('i64', lanes, base)}, <{steps}>")
    ptrs = f.let(f"getelementptr {ety}, ptr %out, <{lanes} x i64> {idx}")
    mask = mask or _vconst("i1", "true", lanes)
    name = f"@llvm.masked.scatter.v{lanes}{ety}.v{lanes}p0"
    vt = f"<{lanes} x {ety}>"
    f.decls.add(f"declare void {name}({vt}, <{lanes} x ptr>, i32 immarg, <{lanes} x i1>)")
    f.emit(f"call void {name}({vt} {val}, <{lanes} x ptr> {ptrs}, i32 1, <{lanes} x i1> {mask})")


def _pool_counts(h: int, w: int, oh: int, ow: int, pool, strides, padding, rows: int, cw: int) -> np.ndarray:
    """count_include_pad=False divisors: real input elements under each window (the reference's sum of a
    zero-padded ones image), laid out (rows, cw) as the kernel reads them; unused entries are 1."""
    (kh, kw), (sh, sw), (pt, pl, _, _) = pool, strides, padding

    def inside(n_out: int, k: int, s: int, p0: int, size: int) -> np.ndarray:
        start = np.arange(n_out) * s - p0
        return (np.minimum(start + k, size) - np.maximum(start, 0)).clip(min=0)

    cnt = np.ones((rows, cw), np.float32)
    cnt[:oh, :ow] = np.outer(inside(oh, kh, sh, pt, h), inside(ow, kw, sw, pl, w)).astype(np.float32)
    return cnt


# ---- nn.dense and nn.global_avg_pool2d: row sums, one output per lane ---------------------------------------

def _transpose(f: _Fn, vt: str, lanes: int, rows: list[str]) -> list[str]:
    """lanes x lanes register transpose: log2(lanes) rounds of zipping row i with row i + lanes/2."""
    half = lanes // 2
    lo = ", ".join(f"i32 {v}" for q in range(half) for v in (q, q + lanes))
    hi = ", ".join(f"i32 {v}" for q in range(half, lanes) for v in (q, q + lanes))
    for _ in range(lanes.bit_length() - 1):
        out = []
        for i in range(half):
            a, b = rows[i], rows[i + half]
            out.append(f.let(f"shufflevector {vt} {a}, {vt} {b}, <{lanes} x i32> <{lo}>"))
            out.append(f.let(f"shufflevector {vt} {a}, {vt} {b}, <{lanes} x i32> <{hi}>"))
        rows = out
    return rows


def _rows_ir(name: str, n: int, k: int, m: int, lanes: int, mean: bool) -> str:
    """out[i, r] = sum over kk of x[i, kk] * w[r, kk] (mean: sum of w[r, kk], divided by k), accumulated in
    ascending kk from 0.0 like the reference. Lanes hold ``lanes`` consecutive rows r: each block of
    lanes x lanes weights is loaded row-wise and transposed in registers, so every load is contiguous."""
    args = ["ptr noalias readonly %w", "ptr noalias %out"]
    f = _Fn(name, args if mean else ["ptr noalias readonly %x", *args])
    vt = f"<{lanes} x float>"
    acc = f.alloca(vt)
    kc = k // lanes

    def block(i: str, m0: str, valid: int) -> None:
        f.emit(f"store {vt} zeroinitializer, ptr {acc}, align 64")
        wbase = f.gep("float", "%w", f.lin(0, (k, m0)))
        xrow = None if mean else f.gep("float", "%x", f.lin(0, (k, i)))
        row_off = [min(lane, valid - 1) * k for lane in range(lanes)]  # rows past m repeat the last one

        def add_columns(koff: str, cols: list[str]) -> None:
            cur = f.let(f"load {vt}, ptr {acc}, align 64")
            for kk, col in enumerate(cols):
                if mean:
                    cur = f.let(f"fadd {vt} {cur}, {col}")
                    continue
                xk = f.let(f"load float, ptr {f.gep('float', xrow, f.lin(kk, (1, koff)))}, align 4")
                prod = f.let(f"fmul {vt} {f.splat('float', lanes, xk)}, {col}")
                cur = f.let(f"fadd {vt} {cur}, {prod}")
            f.emit(f"store {vt} {cur}, ptr {acc}, align 64")

        if kc:
            with f.loop(kc) as c:
                koff = f.lin(0, (lanes, c))
                base = f.gep("float", wbase, koff)
                rows = [f.let(f"load {vt}, ptr {f.gep('float', base, str(off))}, align 4") for off in row_off]
                add_columns(koff, _transpose(f, vt, lanes, rows))
        cols = []
        for kk in range(kc * lanes, k):  # the last k % lanes columns, gathered element by element
            col = "poison"
            for lane, off in enumerate(row_off):
                e = f.let(f"load float, ptr {f.gep('float', wbase, str(off + kk))}, align 4")
                col = f.let(f"insertelement {vt} {col}, float {e}, i64 {lane}")
            cols.append(col)
        if cols:
            add_columns(str(kc * lanes), cols)
        val = f.let(f"load {vt}, ptr {acc}, align 64")
        if mean:
            val = f.let(f"fdiv {vt} {val}, {_vconst('float', _fconst(k), lanes)}")
        q = f.gep("float", "%out", f.lin(0, (m, i), (1, m0)))
        mask = None if valid == lanes else f"<{', '.join(['i1 true'] * valid + ['i1 false'] * (lanes - valid))}>"
        f.masked_store("float", lanes, val, q, mask)

    with f.loop(n) as i:
        if m < lanes:
            block(i, "0", m)
        else:  # the last block is moved back to end at row m: it recomputes (the same) rows, one code copy
            with f.loop(-(-m // lanes)) as mb:
                start = f.lin(0, (lanes, mb))
                inside = f.let(f"icmp ult i64 {start}, {m - lanes}")
                block(i, f.let(f"select i1 {inside}, i64 {start}, i64 {m - lanes}"), lanes)
    return f.text()


def _int_dense_ir(name: str, n: int, k: int, m: int) -> str:
    """int8 x int8 -> int32 dense; the wrapping sum's order is free, so LLVM vectorises along K."""
    f = _Fn(name, ["ptr noalias readonly %x", "ptr noalias readonly %w", "ptr noalias %out"])
    acc = f.alloca("i32")
    with f.loop(n) as i, f.loop(m) as j:
        f.emit(f"store i32 0, ptr {acc}, align 4")
        xrow = f.gep("i8", "%x", f.lin(0, (k, i)))
        wrow = f.gep("i8", "%w", f.lin(0, (k, j)))
        with f.loop(k) as kk:
            xq, wq = f.gep("i8", xrow, kk), f.gep("i8", wrow, kk)
            xv = f.let(f"sext i8 {f.let(f'load i8, ptr {xq}, align 1')} to i32")
            wv = f.let(f"sext i8 {f.let(f'load i8, ptr {wq}, align 1')} to i32")
            prod = f.let(f"mul nsw i32 {xv}, {wv}")
            s = f.let(f"load i32, ptr {acc}, align 4")
            f.emit(f"store i32 {f.let(f'add i32 {s}, {prod}')}, ptr {acc}, align 4")
        q = f.gep("i32", "%out", f.lin(0, (m, i), (1, j)))
        f.emit(f"store i32 {f.let(f'load i32, ptr {acc}, align 4')}, ptr {q}, align 4")
    return f.text()


# ---- get_kernel ---------------------------------------------------------------------------------------------

def _vwmax(itemsize: int) -> int:
    return (64 if _jit().avx512 else 32) // itemsize


def _finish(fn: Kernel, t0: float, **info) -> Kernel:
    fn.compile_seconds = time.perf_counter() - t0  # type: ignore[attr-defined]
    fn.info = info  # type: ignore[attr-defined]
    return fn


def _conv_spec(a: dict, shapes: list[tuple], dtypes: list[str], epilogue: tuple[str, ...] = ()):
    if a.get("data_layout", "NCHW") != "NCHW" or a.get("kernel_layout", "OIHW") != "OIHW":
        return None
    if len(shapes) != 2 or len(dtypes) != 2 or len(shapes[0]) != 4 or len(shapes[1]) != 4:
        return None
    out_dtype = np.dtype(a.get("out_dtype") or dtypes[0]).name
    if (dtypes[0], dtypes[1], out_dtype) == ("float32", "float32", "float32"):
        integer = False
    elif (dtypes[0], dtypes[1], out_dtype) == ("int8", "int8", "int32"):
        integer = True
    else:
        return None
    (n, c, h, w), (o, cg, kh, kw) = shapes
    strides, padding = pair(a["strides"], "strides"), quad(a["padding"], "padding")
    dilation, groups = pair(a["dilation"], "dilation"), int(a["groups"])
    if min(strides) < 1 or min(dilation) < 1 or min(padding) < 0 or groups < 1:
        raise ValueError(f"host.jit: strides/dilation must be >= 1, padding >= 0, groups >= 1; got {a}")
    if c % groups or o % groups or cg * groups != c:
        raise ValueError(f"host.jit: weight {shapes[1]} does not fit {c} input channels, groups={groups}")
    (sh, sw), (dh, dw), (pt, pl, pb, pr) = strides, dilation, padding
    oh = (h + pt + pb - dh * (kh - 1) - 1) // sh + 1
    ow = (w + pl + pr - dw * (kw - 1) - 1) // sw + 1
    if oh <= 0 or ow <= 0:
        raise ValueError(f"host.jit: the conv2d output would be empty ({oh} x {ow})")
    if 0 in (n, c, o, kh, kw):
        return None
    if epilogue and integer:
        return None
    p = _Conv(n, c, h, w, o, cg, kh, kw, oh, ow, strides, padding, dilation, groups, integer)
    return p, lambda: _build_conv(p, shapes, dtypes, out_dtype, epilogue)


def _conv_transpose_spec(a: dict, shapes: list[tuple], dtypes: list[str]):
    """nn.conv2d_transpose (NCHW x IOHW, one group, no dilation) as its reference defines it
    (kernels.conv2d_transpose_direct): the direct conv2d of the stride-dilated input with the flipped, transposed
    kernel, here by the compiled conv2d, so the same products summed in the same order (the dilation's zeros too)."""
    if a.get("data_layout", "NCHW") != "NCHW" or a.get("kernel_layout", "IOHW") != "IOHW":
        return None
    if len(shapes) != 2 or len(shapes[0]) != 4 or len(shapes[1]) != 4:
        return None
    if int(a["groups"]) != 1 or pair(a["dilation"], "dilation") != (1, 1):
        return None
    (n, c, h, w), (i, o, kh, kw) = shapes
    (sh, sw), (pt, pl, pb, pr) = pair(a["strides"], "strides"), quad(a["padding"], "padding")
    oph, opw = pair(a["output_padding"], "output_padding")
    if i != c or min(sh, sw) < 1 or 0 in (n, c, h, w):
        return None   # the reference's refusal, or nothing to compute
    pad = (kh - 1 - pt, kw - 1 - pl, kh - 1 - pb + oph, kw - 1 - pr + opw)
    dilated = (n, c, (h - 1) * sh + 1, (w - 1) * sw + 1)
    direct = {"strides": (1, 1), "padding": tuple(max(q, 0) for q in pad), "dilation": (1, 1), "groups": 1,
              "out_dtype": a.get("out_dtype", "")}
    spec = _conv_spec(direct, [dilated, (o, c, kh, kw)], dtypes)
    if spec is None:
        return None
    params, build_direct = spec
    ct, cl, cb, cr = (max(-q, 0) for q in pad)   # padding larger than the kernel: cropped afterwards

    def build() -> Kernel:
        conv = build_direct()

        def conv2d_transpose(attrs: dict, x: np.ndarray, wt: np.ndarray) -> np.ndarray:
            _check("nn.conv2d_transpose", (x, wt), shapes, dtypes)
            stretched = np.zeros(dilated, x.dtype)
            stretched[:, :, ::sh, ::sw] = x
            y = conv(direct, stretched, transposed_to_direct(wt))
            return y[:, :, ct:y.shape[2] - cb, cl:y.shape[3] - cr] if ct or cl or cb or cr else y

        return conv2d_transpose

    return (params, (sh, sw), (ct, cl, cb, cr)), build


def _build_conv(p: _Conv, shapes: list[tuple], dtypes: list[str], out_dtype: str,
                epilogue: tuple[str, ...] = ()) -> Kernel:
    t0 = time.perf_counter()
    st = _jit()
    og = p.o // p.groups
    tile = _plan(og, p.oh, p.ow, p.cg * p.kh * p.kw, 32 if st.avx512 else 16, _vwmax(4), 16)
    name = _fresh_name("nn.conv2d")
    ir, lay = _conv_ir(name, p, tile, epilogue)
    with_bias = "nn.bias_add" in epilogue
    cfn = _compile(ir, name, 4 + with_bias)
    ogp = lay["ogp"]
    wshape = (p.groups, og, p.cg, p.kh, p.kw)
    scratch = _Scratch((p.n, p.c, lay["hn"], p.strides[1], lay["wc"]), dtypes[0], 0)

    def conv2d(attrs: dict, x: np.ndarray, w: np.ndarray, *bias: np.ndarray) -> np.ndarray:
        _check("nn.conv2d", (x, w, *bias), [*shapes, *[(p.o,)] * with_bias], [*dtypes, *["float32"] * with_bias])
        if ogp != og:
            wq = np.zeros((p.groups, ogp, p.cg, p.kh, p.kw), w.dtype)
            wq[:, :og] = w.reshape(wshape)
        else:
            wq = np.ascontiguousarray(w)
        out = np.empty((p.n, p.o, p.oh, p.ow), out_dtype)
        x = np.ascontiguousarray(x)
        extra = []
        if with_bias:
            bq = np.zeros((p.groups, ogp), np.float32)
            bq[:, :og] = bias[0].reshape(p.groups, og)
            extra.append(_ptr(bq))
        cfn(_ptr(x), _ptr(scratch.get()), _ptr(wq), _ptr(out), *extra)
        return out

    return _finish(conv2d, t0, tile=tile, ir_lines=ir.count("\n"))


def _pool_epilogue(epilogue: tuple[tuple[str, dict], ...], shape: tuple, dtype: str):
    """The _Pool fields of a max_pool2d epilogue (POOL_EPILOGUES), or None when not covered: quantize to int8 of a
    float32 pool, then optionally the NCHW -> packed layout_transform with no padding (N and C whole blocks)."""
    if dtype != "float32" or tuple(op for op, _ in epilogue) not in POOL_EPILOGUES:
        return None
    quant = epilogue[0][1]
    if np.dtype(quant.get("out_dtype", "int8")) != np.int8 or _nan_as_int8() is None:
        return None
    if not isinstance(quant.get("scale"), (int, float, np.floating, np.integer)):
        return None
    scale = float(np.float32(quant["scale"]))
    if not (math.isfinite(scale) and scale > 0):
        return None
    fields = {"quant_scale": scale}
    if len(epilogue) == 2:
        lt = epilogue[1][1]
        f = packed_factors(str(lt.get("dst_layout", "")))
        if lt.get("src_layout") != "NCHW" or not f or shape[0] % f[0] or shape[1] % f[1]:
            return None
        fields.update(channels=shape[1], pack=(int(f[0]), int(f[1])))
    return fields


def _pool_spec(op: str, a: dict, shapes: list[tuple], dtypes: list[str],
               epilogue: tuple[tuple[str, dict], ...] = ()):
    if len(shapes) != 1 or len(shapes[0]) != 4:
        return None
    extra = {}
    if epilogue:
        extra = _pool_epilogue(epilogue, shapes[0], dtypes[0]) if op == "nn.max_pool2d" else None
        if extra is None:
            return None
    dtype = dtypes[0]
    if dtype not in (("float32", "int8", "uint8", "int32") if op == "nn.max_pool2d" else ("float32",)):
        return None
    pool = pair(a["pool_size"], "pool_size")
    strides = pair(a["strides"] if a.get("strides") is not None else pool, "strides")
    padding, ceil_mode = quad(a["padding"], "padding"), bool(a["ceil_mode"])
    if min(pool) < 1 or min(strides) < 1 or min(padding) < 0:
        raise ValueError(f"host.jit: pool_size/strides must be >= 1 and padding >= 0; got {a}")
    n, c, h, w = shapes[0]
    (kh, kw), (sh, sw), (pt, pl, pb, pr) = pool, strides, padding
    oh, ow = pool_out(h, kh, sh, pt, pb, ceil_mode), pool_out(w, kw, sw, pl, pr, ceil_mode)
    if oh <= 0 or ow <= 0:
        raise ValueError(f"host.jit: the {op} output would be empty ({oh} x {ow})")
    if 0 in (n, c, h, w):
        return None
    include_pad = bool(a.get("count_include_pad", False))
    kind = "max" if op == "nn.max_pool2d" else "avg"
    const = float(kh * kw) if kind == "avg" and include_pad else None
    p = _Pool(n * c, h, w, padding[0], padding[1], oh, ow, kh, kw, strides, dtype, kind, const, **extra)
    key = (p, padding, ceil_mode, include_pad)
    return key, lambda: _build_pool(op, p, shapes, dtypes, pool, padding)


def _build_pool(op: str, p: _Pool, shapes: list[tuple], dtypes: list[str], pool, padding) -> Kernel:
    t0 = time.perf_counter()
    st = _jit()
    itemsize = np.dtype(p.dtype).itemsize
    tile = _plan(1, p.oh, p.ow, p.kh * p.kw, 32 if st.avx512 else 16, _vwmax(itemsize), 8)
    name = _fresh_name(op)
    ir, lay = _pool_ir(name, p, tile)
    cfn = _compile(ir, name, 4)
    n, c, h, w = shapes[0]
    if p.kind == "max":
        fill = -np.inf if p.dtype == "float32" else np.iinfo(p.dtype).min
    else:
        fill = 0
    scratch = _Scratch((n, c, lay["hn"], p.strides[1], lay["wc"]), dtypes[0], fill)
    counts = (np.ones(1, np.float32) if p.count_const is not None or p.kind == "max" else
              _pool_counts(h, w, p.oh, p.ow, pool, p.strides, padding, lay["rows"], lay["cw"]))

    out_dtype = np.int8 if p.quant_scale is not None else np.dtype(dtypes[0])
    out_shape = (n, c, p.oh, p.ow)
    if p.pack:
        (b, k) = p.pack
        out_shape = (n // b, c // k, p.oh, p.ow, b, k)

    def pool2d(attrs: dict, x: np.ndarray) -> np.ndarray:
        _check(op, (x,), shapes, dtypes)
        x = np.ascontiguousarray(x)
        out = np.empty(out_shape, out_dtype)
        cfn(_ptr(x), _ptr(scratch.get()), _ptr(counts), _ptr(out))
        return out

    return _finish(pool2d, t0, tile=tile, ir_lines=ir.count("\n"))


def _gap_spec(a: dict, shapes: list[tuple], dtypes: list[str]):
    if len(shapes) != 1 or len(shapes[0]) != 4 or dtypes[0] != "float32" or 0 in shapes[0]:
        return None
    n, c, h, w = shapes[0]

    def build() -> Kernel:
        t0 = time.perf_counter()
        name = _fresh_name("nn.global_avg_pool2d")
        ir = _rows_ir(name, 1, h * w, n * c, _vwmax(4), mean=True)
        cfn = _compile(ir, name, 2)

        def global_avg_pool2d(attrs: dict, x: np.ndarray) -> np.ndarray:
            _check("nn.global_avg_pool2d", (x,), shapes, dtypes)
            x = np.ascontiguousarray(x)
            out = np.empty((n, c, 1, 1), np.float32)
            cfn(_ptr(x), _ptr(out))
            return out

        return _finish(global_avg_pool2d, t0, ir_lines=ir.count("\n"))

    return (), build


def _row_spec(op: str, a: dict, shapes: list[tuple], dtypes: list[str]):
    """softmax over the last axis, layer norm (with scale and bias) over the trailing axes: host.ops' definitions
    (host.numerics' order, graph_pack.kernels' reference) under host.row_ops' vectorised schedule."""
    x = shapes[0]
    if not x or 0 in x or any(d != "float32" for d in dtypes):
        return None
    axis = int(a.get("axis", -1)) % len(x)
    if op == "nn.softmax":
        if len(shapes) != 1 or axis != len(x) - 1:
            return None
    elif len(shapes) != 3 or any(math.prod(s) != math.prod(x[axis:]) for s in shapes[1:]):
        return None
    k = math.prod(x[axis:])
    rows = math.prod(x) // k
    eps = float(a.get("epsilon", 1e-5))

    def build() -> Kernel:
        from host import compile_schedule, ops  # the loop-IR compiler (it imports this module's target)
        from host.row_ops import row_schedule
        t0 = time.perf_counter()
        dag = ops.softmax((rows, k)) if op == "nn.softmax" else ops.layer_norm((rows, k), epsilon=eps)
        kernel = compile_schedule(dag, row_schedule(dag))
        lock = threading.Lock()

        def row_op(attrs: dict, *arrays: np.ndarray) -> np.ndarray:
            _check(op, arrays, shapes, dtypes)
            flat = [arrays[0].reshape(rows, k), *(b.reshape(k) for b in arrays[1:])]
            with lock:   # the kernel keeps its intermediate rows between calls
                return kernel(*flat).reshape(x)

        return _finish(row_op, t0, ir_lines=kernel.ir.count("\n"))

    return (eps,), build


def _dense_spec(a: dict, shapes: list[tuple], dtypes: list[str]):
    if a.get("data_layout", "NC") != "NC" or a.get("kernel_layout", "OI") != "OI":
        return None
    if len(shapes) != 2 or len(shapes[0]) != 2 or len(shapes[1]) != 2:
        return None
    out_dtype = np.dtype(a.get("out_dtype") or dtypes[0]).name
    combo = (dtypes[0], dtypes[1], out_dtype)
    if combo not in (("float32", "float32", "float32"), ("int8", "int8", "int32")):
        return None
    (n, k), (m, k2) = shapes
    if k != k2:
        raise ValueError(f"host.jit: data (N, K) {shapes[0]} and weight (M, K) {shapes[1]} must agree on K")
    if 0 in (n, k, m):
        return None
    integer = combo[0] == "int8"

    def build() -> Kernel:
        t0 = time.perf_counter()
        name = _fresh_name("nn.dense")
        ir = _int_dense_ir(name, n, k, m) if integer else _rows_ir(name, n, k, m, _vwmax(4), mean=False)
        cfn = _compile(ir, name, 3)

        def dense(attrs: dict, x: np.ndarray, w: np.ndarray) -> np.ndarray:
            _check("nn.dense", (x, w), shapes, dtypes)
            x, w = np.ascontiguousarray(x), np.ascontiguousarray(w)
            out = np.empty((n, m), out_dtype)
            cfn(_ptr(x), _ptr(w), _ptr(out))
            return out

        return _finish(dense, t0, ir_lines=ir.count("\n"))

    return (integer,), build


def get_packed_dense(x_shape: Sequence[int], w: np.ndarray) -> Kernel | None:
    """A float32 ``nn.dense`` for a constant weight ``w`` (units, K), rewritten once here as
    ``host.ops.pack_dense_weight`` so every vector of output units is one contiguous load (1.3-2.8x host.jit's
    dense, docs/benchmarks.md): ``fn(attrs, x, w)`` as ``get_kernel``'s, bit-identical to graph_pack.kernels' dense,
    computing with the weight as it was when packed (the ``w`` argument is not read). None when not covered."""
    if len(x_shape) != 2 or w.ndim != 2 or x_shape[1] != w.shape[1] or 0 in (*x_shape, *w.shape) or \
            w.dtype != np.float32:
        return None
    m, k = (int(d) for d in x_shape)
    units = int(w.shape[0])
    _jit()  # ImportError with the install hint before any work
    from host import compile_schedule, ops  # the loop-IR compiler (it imports this module's target)
    from host.row_ops import packed_dense_schedule

    def build() -> Kernel:
        dag = ops.dense_packed((m, k), units)
        return compile_schedule(dag, packed_dense_schedule(dag))
    kernel = _CACHE.get(("nn.dense.packed", ((m, k), (units, k))), build)
    packed = ops.pack_dense_weight(w)

    def dense(attrs: dict, x: np.ndarray, _w: np.ndarray) -> np.ndarray:
        _check("nn.dense", (x,), [(m, k)], ["float32"])
        y = kernel(x, packed)
        return y if y.shape[1] == units else np.ascontiguousarray(y[:, :units])

    return dense


def get_kernel(op: str, attrs: dict, in_shapes: Sequence[tuple], in_dtypes: Sequence[str],
               epilogue: Sequence[str | tuple[str, dict]] = ()) -> Kernel | None:
    """A compiled kernel for ``op`` (``attrs``: every attribute, as graph_pack's nodes hold them) on exactly these
    input shapes and dtypes, called like the reference (``fn(attrs, *arrays)``) and bit-identical to it; None when
    the op/dtype/layout is not covered, so the caller runs graph_pack.kernels instead. Compiled once per (op, attrs, shapes, dtypes, epilogue) and cached.

    ``epilogue``: ops applied to each output before it is stored, in order, bit-identical to running their
    references on the output, each an op name or (op, attrs); None when not covered. A float ``nn.conv2d``
    takes ``nn.bias_add`` on the channel axis (``EPILOGUE_OPS``; its bias is then the kernel's last argument),
    then ``nn.relu``; a float ``nn.max_pool2d`` takes ``("qnn.quantize", {"scale": s})`` to int8, then
    ``("layout_transform", {"src_layout": "NCHW", "dst_layout": packed})`` when N and C fill whole blocks
    (``POOL_EPILOGUES``): the kernel then returns the packed int8 array.

    Raises ImportError when a covered kernel is asked for and llvmlite is missing."""
    steps = tuple((e, {}) if isinstance(e, str) else (e[0], dict(e[1])) for e in epilogue)
    epilogue = tuple(name for name, _ in steps)
    if op not in COVERED or (epilogue and not (op == "nn.conv2d" and epilogue in EPILOGUES or
                                               op == "nn.max_pool2d" and epilogue in POOL_EPILOGUES)):
        return None
    shapes = [tuple(int(d) for d in s) for s in in_shapes]
    dtypes = [np.dtype(d).name for d in in_dtypes]
    a = dict(attrs)
    for key in ("data_layout", "kernel_layout"):
        if key in a and packed_factors(str(a[key])):
            return None
    if op == "nn.conv2d":
        spec = _conv_spec(a, shapes, dtypes, epilogue)
    elif op == "nn.conv2d_transpose":
        spec = _conv_transpose_spec(a, shapes, dtypes)
    elif op == "nn.dense":
        spec = _dense_spec(a, shapes, dtypes)
    elif op == "nn.global_avg_pool2d":
        spec = _gap_spec(a, shapes, dtypes)
    elif op in ("nn.softmax", "nn.layer_norm"):
        spec = _row_spec(op, a, shapes, dtypes)
    else:
        spec = _pool_spec(op, a, shapes, dtypes, steps)
    if spec is None:
        return None
    params, build = spec
    key = (op, tuple(shapes), tuple(dtypes), params, epilogue)
    _jit()  # ImportError with the install hint before any work
    return _CACHE.get(key, build)
