"""Code generation: a scheduled ComputeDag as LLVM IR (built with llvmlite.ir), one function per loop nest.

Each nest function takes a pointer per tensor of the DAG and the range [begin, end) of its parallel loop (the
fused outermost loops a schedule marks parallel; a nest without one runs whole for any range with begin < end).
A reduction nest with a tile (the space loops inside its first reduction loop) initialises the tile's
accumulators, runs the reduction loops in the schedule's order, then finalises the tile: its fused consumers are
applied to each value as it is stored. With ``cache_write`` the accumulators live in a local array (registers
once LLVM promotes it), otherwise in the stage's own buffer.

The vector loop evaluates the body in vector lanes: a load whose offset steps by 1 with the lane is one vector
load, any other is assembled lane by lane; padding (loads with a fill value) reads only in-bounds addresses.
Floats are computed exactly as written: no fast-math flags, so no reassociation and no fused multiply-add.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import numpy as np
from llvmlite import ir

from host import numerics as nm
from host.llvm_backend import compile_functions
from host.loop_ir import COMBINERS, Affine, Binary, ComputeDag, Const, Expr, Load, Unary, flat_index
from host.schedule import Nest, Schedule, lower

F32, F64, I64, I32 = ir.FloatType(), ir.DoubleType(), ir.IntType(64), ir.IntType(32)
MAX_SHUFFLED_STRIDE = 4   # a vector load with a larger lane stride is assembled lane by lane
Value = int | ir.Value


def _i64(x: Value) -> ir.Value:
    return ir.Constant(I64, x) if isinstance(x, int) else x


class _NestEmitter:
    """The IR of one nest's function."""

    def __init__(self, module: ir.Module, name: str, nest: Nest, shapes: dict[str, tuple[int, ...]],
                 buffers: tuple[str, ...]):
        self.module, self.nest, self.shapes = module, nest, shapes
        fnty = ir.FunctionType(ir.VoidType(), [ir.PointerType()] * len(buffers) + [I64, I64])
        self.fn = ir.Function(module, fnty, name)
        for arg in self.fn.args[:len(buffers)]:
            arg.add_attribute("noalias")
        self.buf = dict(zip(buffers, self.fn.args, strict=False))
        self.b = ir.IRBuilder(self.fn.append_basic_block("entry"))
        self.lanes: tuple[str, int] | None = None
        self.var_extent = {lp.var: lp.extent for lp in nest.loops}
        self.override: dict[str, tuple[ir.Value, bool]] = {}
        tile = nest.tile_loops
        self.tile_size = math.prod(lp.extent for lp in tile)
        self.acc = None
        if nest.stage.reduce and nest.cache_write:
            self.acc = self.b.alloca(F32, size=ir.Constant(I64, self.tile_size), name="acc")
            self.acc.align = 64
        stride, self.tile_offset = 1, Affine()
        for lp in reversed(tile):
            self.tile_offset = self.tile_offset + Affine.of(lp.var) * stride
            stride *= lp.extent
        body = self.fn.append_basic_block("body")
        self.b.branch(body)
        self.b.position_at_end(body)

    # ---- integers and memory ----

    def _int(self, aff: Affine, env: dict[str, Value]) -> Value:
        c, acc = aff.const, None
        for var, k in aff.terms:
            x = env[var]
            if isinstance(x, int):
                c += k * x
                continue
            t = x if k == 1 else self.b.mul(x, ir.Constant(I64, k))
            acc = t if acc is None else self.b.add(acc, t)
        if acc is None:
            return c
        return acc if c == 0 else self.b.add(acc, ir.Constant(I64, c))

    def _ptr(self, base: ir.Value, off: Value) -> ir.Value:
        p = self.b.gep(base, [_i64(off)], inbounds=True, source_etype=F32)
        p.type = ir.PointerType()   # opaque, as LLVM has it (llvmlite types a GEP's result float*)
        return p

    def _vt(self) -> ir.VectorType:
        return ir.VectorType(F32, self.lanes[1])

    def _splat(self, v: ir.Value) -> ir.Value:
        return self._splat_as(v, self._vt())

    def _lanewise(self, make: Callable[[dict], ir.Value], env: dict) -> ir.Value:
        """A vector of make(env with the lane's value of the vector variable), one scalar per lane."""
        var, n = self.lanes
        vec = ir.Constant(self._vt(), ir.Undefined)
        saved, self.lanes = self.lanes, None
        for j in range(n):
            vec = self.b.insert_element(vec, make({**env, var: j}), ir.Constant(I32, j))
        self.lanes = saved
        return vec

    def _mem_load(self, base: ir.Value, flat: Affine, env: dict) -> tuple[ir.Value, bool]:
        if self.lanes and flat.coef(self.lanes[0]):
            var, _ = self.lanes
            if flat.coef(var) == 1:
                v = self.b.load(self._ptr(base, self._int(flat, {**env, var: 0})), typ=self._vt())
                v.align = 4
                return v, True
            row = self._ptr(base, self._int(flat, {**env, var: 0}))
            step, n = flat.coef(var), self.lanes[1]
            if 1 < step <= MAX_SHUFFLED_STRIDE:
                # the span from the first lane's element to the last one's, loaded whole (never past the last
                # element read), then every step-th picked out: LLVM's interleaved-access lowering
                span = self.b.load(row, typ=ir.VectorType(F32, step * (n - 1) + 1))
                span.align = 4
                pick = ir.Constant(ir.VectorType(I32, n), [step * j for j in range(n)])
                return self.b.shuffle_vector(span, ir.Constant(span.type, ir.Undefined), pick), True
            return self._lanewise(lambda e: self.b.load(self._ptr(row, step * e[var]), typ=F32), env), True
        return self.b.load(self._ptr(base, self._int(flat, env)), typ=F32), False

    def _mem_store(self, base: ir.Value, flat: Affine, env: dict, value: ir.Value, is_vec: bool) -> None:
        if self.lanes and flat.coef(self.lanes[0]):
            var, n = self.lanes
            if not is_vec:
                value = self._splat(value)
            if flat.coef(var) == 1:
                st = self.b.store(value, self._ptr(base, self._int(flat, {**env, var: 0})))
                st.align = 4
                return
            row = self._ptr(base, self._int(flat, {**env, var: 0}))
            for j in range(n):
                lane = self.b.extract_element(value, ir.Constant(I32, j))
                self.b.store(lane, self._ptr(row, flat.coef(var) * j))
            return
        self.b.store(value, self._ptr(base, self._int(flat, env)))

    # ---- expressions ----

    def _load(self, ld: Load, axmap: dict[str, Affine], env: dict) -> tuple[ir.Value, bool]:
        if ld.tensor in self.override:
            return self.override[ld.tensor]
        shape = self.shapes[ld.tensor]
        idx = [i.subst(axmap) for i in ld.index]
        if ld.fill is None:
            return self._mem_load(self.buf[ld.tensor], flat_index(idx, shape), env)
        if self.lanes and any(i.coef(self.lanes[0]) for i in idx):
            if flat_index(idx, shape).coef(self.lanes[0]) == 1:
                return self._masked_load(ld, idx, shape, env), True
            return self._lanewise(lambda e: self._padded_load(ld, idx, shape, e), env), True
        return self._padded_load(ld, idx, shape, env), False

    def _masked_load(self, ld: Load, idx: list[Affine], shape: tuple, env: dict) -> ir.Value:
        """Contiguous lanes of a padded tensor: one masked vector load (lanes outside the tensor read nothing and
        take the fill value)."""
        var, n = self.lanes
        vt, mt = self._vt(), ir.VectorType(ir.IntType(1), n)
        lane = ir.Constant(ir.VectorType(I64, n), list(range(n)))
        mask = None
        for i, size in zip(idx, shape, strict=True):
            first = _i64(self._int(i, {**env, var: 0}))
            if i.coef(var):
                x = self._splat_as(first, ir.VectorType(I64, n))
                x = self.b.add(x, self.b.mul(lane, ir.Constant(ir.VectorType(I64, n), [i.coef(var)] * n)))
                c = self.b.icmp_unsigned("<", x, ir.Constant(ir.VectorType(I64, n), [size] * n))
            else:
                c = self._splat_as(self.b.icmp_unsigned("<", first, ir.Constant(I64, size)), mt)
            mask = c if mask is None else self.b.and_(mask, c)
        name = f"llvm.masked.load.v{n}f32.p0"
        fn = self.module.globals.get(name) or ir.Function(
            self.module, ir.FunctionType(vt, [ir.PointerType(), I32, mt, vt]), name)
        # the first lane's address: computed without inbounds (it may lie before the tensor when masked off)
        p = self.b.gep(self.buf[ld.tensor], [_i64(self._int(flat_index(idx, shape), {**env, var: 0}))],
                       source_etype=F32)
        p.type = ir.PointerType()
        fill = ir.Constant(vt, [ld.fill] * n)
        return self.b.call(fn, [p, ir.Constant(I32, 4), mask, fill])

    def _splat_as(self, v: ir.Value, vt: ir.VectorType) -> ir.Value:
        x = self.b.insert_element(ir.Constant(vt, ir.Undefined), v, ir.Constant(I32, 0))
        return self.b.shuffle_vector(x, ir.Constant(vt, ir.Undefined), ir.Constant(ir.VectorType(I32, vt.count),
                                                                                   [0] * vt.count))

    def _padded_load(self, ld: Load, idx: list[Affine], shape: tuple, env: dict) -> ir.Value:
        fill = ir.Constant(F32, ld.fill)
        valid = None
        extents = {**self.var_extent, **{v: 1 for v, x in env.items() if isinstance(x, int)}}
        for i, n in zip(idx, shape, strict=True):
            concrete = i.subst({v: Affine.of(x) for v, x in env.items() if isinstance(x, int)})
            lo, hi = concrete.bounds(extents)
            if 0 <= lo and hi < n:
                continue
            if not concrete.terms:
                return fill   # out of bounds for every iteration reaching here
            c = self.b.icmp_unsigned("<", _i64(self._int(i, env)), ir.Constant(I64, n))
            valid = c if valid is None else self.b.and_(valid, c)
        off = self._int(flat_index(idx, shape), env)
        if valid is None:
            return self.b.load(self._ptr(self.buf[ld.tensor], off), typ=F32)
        safe = self.b.select(valid, _i64(off), ir.Constant(I64, 0))
        v = self.b.load(self._ptr(self.buf[ld.tensor], safe), typ=F32)
        return self.b.select(valid, v, fill)

    def _libm(self, name: str) -> ir.Function:
        fn = self.module.globals.get(name)
        if fn is None:
            fn = ir.Function(self.module, ir.FunctionType(F64, [F64]), name)
        return fn

    def _unary(self, op: str, v: ir.Value, is_vec: bool) -> ir.Value:
        if op == "neg":
            return self.b.fneg(v)
        if op == "sqrt":
            suffix = f"v{v.type.count}f32" if is_vec else "f32"
            fn = self.module.globals.get(f"llvm.sqrt.{suffix}")
            if fn is None:
                fn = ir.Function(self.module, ir.FunctionType(v.type, [v.type]), f"llvm.sqrt.{suffix}")
            return self.b.call(fn, [v])
        if op == "exp":
            return self._exp(v)
        fn = self._libm(op)

        def one(x: ir.Value) -> ir.Value:
            return self.b.fptrunc(self.b.call(fn, [self.b.fpext(x, F64)]), F32)
        if not is_vec:
            return one(v)
        out = ir.Constant(v.type, ir.Undefined)
        for j in range(v.type.count):
            out = self.b.insert_element(out, one(self.b.extract_element(v, ir.Constant(I32, j))),
                                        ir.Constant(I32, j))
        return out

    def _exp(self, x: ir.Value) -> ir.Value:
        """``host.numerics.exp``, operation by operation, on a float or a vector of floats: clamp, round, reduce,
        the polynomial, then two power-of-two scales built from the exponent bits (no libm call, so it vectorises)."""
        b, lanes = self.b, x.type.count if isinstance(x.type, ir.VectorType) else 0
        ity = ir.VectorType(I32, lanes) if lanes else I32

        def f(c) -> ir.Value:
            return ir.Constant(x.type, [float(c)] * lanes) if lanes else ir.Constant(F32, float(c))

        def i(c: int) -> ir.Value:
            return ir.Constant(ity, [c] * lanes) if lanes else ir.Constant(I32, c)
        c = b.select(b.fcmp_ordered("<=", x, f(nm.EXP_HI)), x, f(nm.EXP_HI))
        c = b.select(b.fcmp_ordered(">=", c, f(nm.EXP_LO)), c, f(nm.EXP_LO))
        t = b.fmul(c, f(nm.LOG2E))
        n = b.fsub(b.fadd(t, f(nm.ROUND_MAGIC)), f(nm.ROUND_MAGIC))
        r = b.fsub(b.fsub(c, b.fmul(n, f(nm.LN2_HI))), b.fmul(n, f(nm.LN2_LO)))
        p = b.fmul(f(nm.EXP_POLY[0]), r)
        for coef in nm.EXP_POLY[1:-1]:
            p = b.fmul(b.fadd(p, f(coef)), r)
        p = b.fadd(p, f(nm.EXP_POLY[-1]))
        y = b.fadd(b.fadd(b.fmul(p, b.fmul(r, r)), r), f(1.0))
        ni = b.fptosi(n, ity)
        n1 = b.ashr(ni, i(1))
        s1 = b.bitcast(b.shl(b.add(n1, i(127)), i(23)), x.type)
        s2 = b.bitcast(b.shl(b.add(b.sub(ni, n1), i(127)), i(23)), x.type)
        y = b.fmul(b.fmul(y, s1), s2)
        return b.select(b.fcmp_unordered("uno", x, x), x, y)

    def _binary(self, op: str, a: ir.Value, c: ir.Value) -> ir.Value:
        if op in ("max", "min"):
            pick_a = self.b.fcmp_ordered(">" if op == "max" else "<", a, c)
            return self.b.select(pick_a, a, c)
        return {"add": self.b.fadd, "sub": self.b.fsub, "mul": self.b.fmul, "div": self.b.fdiv}[op](a, c)

    def eval(self, e: Expr, axmap: dict[str, Affine], env: dict) -> tuple[ir.Value, bool]:
        if isinstance(e, Const):
            return ir.Constant(F32, e.value), False
        if isinstance(e, Load):
            return self._load(e, axmap, env)
        if isinstance(e, Unary):
            v, vec = self.eval(e.a, axmap, env)
            return self._unary(e.op, v, vec), vec
        assert isinstance(e, Binary)
        (a, va), (c, vc) = self.eval(e.a, axmap, env), self.eval(e.b, axmap, env)
        if va != vc:
            a, c = (a, self._splat(c)) if va else (self._splat(a), c)
        return self._binary(e.op, a, c), va or vc

    # ---- loops ----

    def _for(self, start: Value, stop: Value, body: Callable[[ir.Value], None], check_first: bool) -> None:
        b = self.b
        pre = b.block
        head, loop, done = (self.fn.append_basic_block(n) for n in ("head", "loop", "done"))
        start, stop = _i64(start), _i64(stop)
        if check_first:
            b.cbranch(b.icmp_signed("<", start, stop), head, done)
        else:
            b.branch(head)
        b.position_at_end(head)
        i = b.phi(I64)
        i.add_incoming(start, pre)
        b.branch(loop)
        b.position_at_end(loop)
        body(i)
        nxt = b.add(i, ir.Constant(I64, 1))
        i.add_incoming(nxt, b.block)
        b.cbranch(b.icmp_signed("<", nxt, stop), head, done)
        b.position_at_end(done)

    def _loops(self, loops: list, env: dict, inner: Callable[[dict], None]) -> None:
        if not loops:
            inner(env)
            return
        lp, rest = loops[0], loops[1:]
        if lp is self.nest.vector:
            self.lanes = (lp.var, lp.extent)
            self._loops(rest, {**env, lp.var: 0}, inner)
            self.lanes = None
        elif lp.var in self.nest.unrolled:
            for k in range(lp.extent):
                self._loops(rest, {**env, lp.var: k}, inner)
        else:
            self._for(0, lp.extent, lambda i: self._loops(rest, {**env, lp.var: i}, inner), check_first=False)

    # ---- the nest ----

    def _axmaps(self) -> list[dict[str, Affine]]:
        """Per stage (the nest's own, then each fused consumer) its axis names -> loop-variable affines."""
        st = self.nest.stage
        own = dict(self.nest.axis_value)
        maps = [own]
        for c in self.nest.fused:
            maps.append({ca.name: own[sa.name] for ca, sa in zip(c.axes, st.axes, strict=True)})
        return maps

    def _finish(self, value: ir.Value, is_vec: bool, env: dict) -> None:
        """Apply the fused consumers to the stage's final value and store the last one."""
        maps = self._axmaps()
        prev = self.nest.stage
        for c, axmap in zip(self.nest.fused, maps[1:], strict=True):
            self.override = {prev.name: (value, is_vec)}
            value, is_vec = self.eval(c.body, axmap, env)
            prev = c
        self.override = {}
        last = self.nest.fused[-1] if self.nest.fused else self.nest.stage
        out = flat_index([i.subst(maps[-1]) for i in last.identity_index], last.shape)
        self._mem_store(self.buf[last.name], out, env, value, is_vec)

    def emit(self) -> None:
        nest = self.nest
        par = nest.loops[:nest.parallel]
        if par:
            def body(p: ir.Value) -> None:
                env, div = {}, 1
                for lp in reversed(par):
                    q = p if div == 1 else self.b.udiv(p, ir.Constant(I64, div))
                    env[lp.var] = self.b.urem(q, ir.Constant(I64, lp.extent)) if lp is not par[0] else q
                    div *= lp.extent
                self._loops(nest.loops[nest.parallel:nest.first_reduce], env, self._tile)
            self._for(self.fn.args[-2], self.fn.args[-1], body, check_first=True)
        else:
            self._loops(nest.loops[:nest.first_reduce], {}, self._tile)
        self.b.ret_void()

    def _acc_ref(self) -> tuple[ir.Value, Affine]:
        if self.acc is not None:
            return self.acc, self.tile_offset
        st = self.nest.stage
        return self.buf[st.name], flat_index([i.subst(self.nest.axis_value) for i in st.identity_index], st.shape)

    def _tile(self, env: dict) -> None:
        nest, st = self.nest, self.nest.stage
        axmap = self._axmaps()[0]
        if not st.reduce:
            def compute(e: dict) -> None:
                v, vec = self.eval(st.body, axmap, e)
                self._finish(v, vec, e)
            self._loops(nest.loops[nest.first_reduce:], env, compute)
            return
        base, off = self._acc_ref()
        init = ir.Constant(F32, COMBINERS[st.combiner])
        op = "add" if st.combiner == "sum" else "max"

        def initialise(e: dict) -> None:
            self._mem_store(base, off, e, init, False)

        def accumulate(e: dict) -> None:
            v, vec = self.eval(st.body, axmap, e)
            old, ovec = self._mem_load(base, off, e)
            if vec != ovec:
                old, v = (old, self._splat(v)) if ovec else (self._splat(old), v)
            self._mem_store(base, off, e, self._binary(op, old, v), vec or ovec)

        def finalise(e: dict) -> None:
            v, vec = self._mem_load(base, off, e)
            self._finish(v, vec, e)

        self._loops(nest.tile_loops, env, initialise)
        self._loops(nest.loops[nest.first_reduce:], env, accumulate)
        if self.acc is not None or nest.fused:
            self._loops(nest.tile_loops, env, finalise)


# ---- compiled kernels ----------------------------------------------------------------------------------------

_POOL: dict[int, ThreadPoolExecutor] = {}
_POOL_LOCK = threading.Lock()


def _pool(threads: int) -> ThreadPoolExecutor:
    with _POOL_LOCK:
        if threads not in _POOL:
            _POOL[threads] = ThreadPoolExecutor(threads, thread_name_prefix="host-kernel")
        return _POOL[threads]


def emit_nests(dag: ComputeDag, schedule: Schedule, prefix: str = "nest"
               ) -> tuple[ComputeDag, list[Nest], ir.Module, list[str]]:
    """(the transformed DAG, its loop nests, an IR module with one function per nest, their names ``prefix0``,
    ``prefix1``, ...): what this CPU's JIT compiles, and what ``host.cross`` compiles for a board."""
    tdag, nests = lower(dag, schedule)
    shapes = {name: tdag.shape_of(name) for name in tdag.buffers}
    module = ir.Module(name=dag.name)
    names = [f"{prefix}{i}" for i in range(len(nests))]
    for name, nest in zip(names, nests, strict=True):
        _NestEmitter(module, name, nest, shapes, tdag.buffers).emit()
    return tdag, nests, module, names


def add_entry(module: ir.Module, name: str, names: list[str], nests: list[Nest], nbuf: int, ranged: bool
              ) -> ir.Function:
    """A function ``name`` running the nests in order, each over its whole parallel range (one thread): it takes
    the buffers, and with ``ranged`` also the nests' two range arguments, ignored (one call signature for all)."""
    args = [ir.PointerType()] * nbuf + ([I64, I64] if ranged else [])
    entry = ir.Function(module, ir.FunctionType(ir.VoidType(), args), name)
    b = ir.IRBuilder(entry.append_basic_block("entry"))
    for nest_name, nest in zip(names, nests, strict=True):
        b.call(module.get_global(nest_name), [*entry.args[:nbuf], ir.Constant(I64, 0),
                                              ir.Constant(I64, nest.parallel_extent)])
    b.ret_void()
    return entry


def scratch_shapes(tdag: ComputeDag, nests: list[Nest]) -> dict[str, tuple[int, ...]]:
    """The intermediate stages' buffers a kernel passes its nests: whole where a nest writes them, else a single
    float (a stage inlined, or kept in a tile's accumulators)."""
    written = {n.out for n in nests} | {n.stage.name for n in nests if n.stage.reduce and not n.cache_write}
    return {s.name: s.shape if s.name in written else (1,) for s in tdag.stages[:-1]}


class CompiledKernel:
    """A scheduled DAG compiled for this CPU: ``kernel(*inputs, threads=1)`` -> the output (float32, C order).
    Intermediate tensors are kept between calls (one call at a time per kernel)."""

    def __init__(self, dag: ComputeDag, schedule: Schedule):
        self.dag, self.schedule = dag, schedule
        self.tdag, self.nests, module, names = emit_nests(dag, schedule)
        add_entry(module, "run_all", names, self.nests, len(self.tdag.buffers), ranged=True)
        self.ir = str(module)
        *self._fns, self._run_all = compile_functions(self.ir, [*names, "run_all"], len(self.tdag.buffers))
        self._scratch = {name: np.zeros(shape, np.float32)
                         for name, shape in scratch_shapes(self.tdag, self.nests).items()}
        self._consts = {k: np.ascontiguousarray(v, np.float32) for k, v in self.tdag.constants.items()}

    def __call__(self, *inputs: np.ndarray, threads: int = 1) -> np.ndarray:
        if len(inputs) != len(self.dag.inputs):
            raise ValueError(f"{self.dag.name} takes {len(self.dag.inputs)} inputs "
                             f"({', '.join(t.name for t in self.dag.inputs)}), got {len(inputs)}")
        arrays = []
        for a, t in zip(inputs, self.dag.inputs, strict=True):
            if a.shape != t.shape or a.dtype != np.float32:
                raise ValueError(f"{self.dag.name}: input {t.name} must be float32 {t.shape}, got {a.dtype} {a.shape}")
            arrays.append(np.ascontiguousarray(a))
        out = np.empty(self.tdag.output.shape, np.float32)
        bufs = [*arrays, *self._consts.values(), *self._scratch.values(), out]
        ptrs = [b.ctypes.data for b in bufs]
        if threads <= 1:   # one call into the kernel (a call per nest costs microseconds on small rows)
            self._run_all(*ptrs, 0, 0)
            return out.reshape(self.dag.output_shape)
        for fn, nest in zip(self._fns, self.nests, strict=True):
            total = nest.parallel_extent
            if threads <= 1 or nest.parallel == 0 or total < 2:
                fn(*ptrs, 0, total)
                continue
            step = -(-total // threads)
            chunks = [(s, min(total, s + step)) for s in range(0, total, step)]
            list(_pool(threads).map(lambda c, fn=fn: fn(*ptrs, *c), chunks))
        return out.reshape(self.dag.output_shape)


def compile_schedule(dag: ComputeDag, schedule: Schedule) -> CompiledKernel:
    """Compile ``dag`` under ``schedule`` (ValueError naming what is wrong with an invalid schedule)."""
    return CompiledKernel(dag, schedule)
