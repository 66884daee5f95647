"""conv2d on an ARM CPU: AutoTVM's ``conv2d_nchw_spatial_pack.arm`` knobs on the shared conv2d generator
(host.templates.conv2d), plus its output-column vectorisation (``vectorize=1``, AutoTVM's ann_spatial on
vw): the input kept NCHW (no channel blocking), a register tile of ``tile_co`` output channels x ``tile_oh`` rows x
``tile_ow`` columns, ``reorder`` choosing whether the input-channel or the kernel-tap loop is outer, ``unroll_kw``
unrolling the kernel columns.
"""

from __future__ import annotations

from contextlib import ExitStack
from typing import ClassVar

import numpy as np

from host import jit
from host.templates.base import largest_divisor, register_host
from host.templates.conv2d import (
    ConvSched,
    ConvShape,
    _Conv2d,
    _reduce,
    _split,
    conv_ir,
    emit_stage,
    relu,
)
from vta.space import Config, ConfigSpace, Knob


def spatial_ow_ir(name: str, p: ConvShape, s: ConvSched, epilogue: tuple[str, ...] = ()) -> str:
    """conv2d vectorised over output columns (the ARM template's ``vectorize=1``): a register tile of oc_bn channels x
    t_oh rows, each one vector of t_ow consecutive outputs; per tap, one (strided: loaded wide and shuffled) input
    row segment per row times a broadcast weight per channel. The input stays NCHW (staged with its padding); the
    outputs are stored as whole row segments, the epilogue applied on vectors."""
    f = jit._Fn(name, ["ptr noalias readonly %xin", "ptr noalias %x", "ptr noalias readonly %w",
                       "ptr noalias readonly %bias", "ptr noalias readonly %res", "ptr noalias %out"])
    tw, ob = s.t_ow, s.oc_bn
    vt = f"<{tw} x float>"
    fma = f"@llvm.fmuladd.v{tw}f32"
    f.decls.add(f"declare {vt} {fma}({vt}, {vt}, {vt})")
    emit_stage(f, p, 1)
    hp, wp = p.h + p.pt + p.pb, p.w + p.pl + p.pr
    xs_c = hp * wp
    span = (tw - 1) * p.sw + 1
    pick = ", ".join(f"i32 {k * p.sw}" for k in range(tw))
    accs = {(co, r): f.alloca(vt) for co in range(ob) for r in range(s.t_oh)}
    with ExitStack() as loops:
        n = loops.enter_context(f.loop(p.n))
        oco = loops.enter_context(f.loop(p.o // ob))
        rb = loops.enter_context(f.loop(p.oh // s.t_oh))
        cb = loops.enter_context(f.loop(p.ow // tw))
        for a in accs.values():
            f.emit(f"store {vt} zeroinitializer, ptr {a}, align 64")
        tile_x = f.lin(0, (p.c * xs_c, n), (s.t_oh * p.sh * wp, rb), (tw * p.sw, cb))
        wtile = f.lin(0, (p.c * p.kh * p.kw * ob, oco))

        def step(ic: str, i: str, j: str) -> None:
            cur = {k: f.let(f"load {vt}, ptr {a}, align 64") for k, a in accs.items()}
            xb = f.gep("float", "%x", f.lin(0, (1, tile_x), (xs_c, ic), (p.dh * wp, i), (p.dw, j)))
            wb = f.gep("float", "%w", f.lin(0, (1, wtile), (p.kh * p.kw * ob, ic), (p.kw * ob, i), (ob, j)))
            rows = []
            for r in range(s.t_oh):
                q = f.gep("float", xb, str(r * p.sh * wp))
                if p.sw == 1:
                    rows.append(f.let(f"load {vt}, ptr {q}, align 4"))
                else:   # every sw-th of a wider load
                    wide = f.let(f"load <{span} x float>, ptr {q}, align 4")
                    rows.append(f.let(f"shufflevector <{span} x float> {wide}, <{span} x float> poison, "
                                      f"<{tw} x i32> <{pick}>"))
            for co in range(ob):
                ws = f.splat("float", tw, f.let(f"load float, ptr {f.gep('float', wb, str(co))}, align 4"))
                for r in range(s.t_oh):
                    cur[co, r] = f.let(f"call {vt} {fma}({vt} {rows[r]}, {vt} {ws}, {vt} {cur[co, r]})")
            for k, a in accs.items():
                f.emit(f"store {vt} {cur[k]}, ptr {a}, align 64")

        _reduce(f, p, s, p.c, step)
        obase = f.lin(0, (p.o * p.oh * p.ow, n), (ob * p.oh * p.ow, oco), (s.t_oh * p.ow, rb), (tw, cb))
        for (co, r), acc in accs.items():
            val = f.let(f"load {vt}, ptr {acc}, align 64")
            off = f.lin(co * p.oh * p.ow + r * p.ow, (1, obase))
            if "bias" in epilogue:
                b = f.let(f"load float, ptr {f.gep('float', '%bias', f.lin(co, (ob, oco)))}, align 4")
                val = f.let(f"fadd {vt} {val}, {f.splat('float', tw, b)}")
            if "residual" in epilogue:
                res = f.let(f"load {vt}, ptr {f.gep('float', '%res', off)}, align 4")
                val = f.let(f"fadd {vt} {val}, {res}")
            if "relu" in epilogue:
                val = relu(f, vt, val)
            f.emit(f"store {vt} {val}, ptr {f.gep('float', '%out', off)}, align 4")
    return f.text()


@register_host
class Conv2dSpatialPack(_Conv2d):
    """AutoTVM's ARM conv2d_nchw_spatial_pack knobs: tile_co, tile_oh, tile_ow, reorder (input channels or kernel taps
    outermost), unroll_kw (its ann_reduce), vectorize (its ann_spatial: 0 the output channels, 1 the output columns
    into the vector lanes)."""

    ops: ClassVar[tuple[str, ...]] = ("conv2d_nchw_spatial_pack.arm",)
    family: ClassVar[str] = "arm"

    def space(self) -> ConfigSpace:
        p = self.p
        return ConfigSpace([_split("tile_co", p.o, 32), _split("tile_oh", p.oh, 8), _split("tile_ow", p.ow, 16),
                            Knob.choice("reorder", (0, 1)), Knob.choice("unroll_kw", (0, 1)),
                            Knob.choice("vectorize", (0, 1))])

    def sched(self, config: Config) -> ConvSched:
        return ConvSched(1, config["tile_co"][1], config["tile_oh"][1], config["tile_ow"][1],
                         bool(config["reorder"]), bool(config["unroll_kw"]), vec_ow=bool(config["vectorize"]))

    def _sched_arrays(self, knobs):
        one = np.ones_like(knobs["tile_co"][0])
        return {"ic_bn": one, "oc_bn": knobs["tile_co"][0], "t_oh": knobs["tile_oh"][0], "t_ow": knobs["tile_ow"][0],
                "unroll_kw": knobs["unroll_kw"][0], "vec_ow": knobs["vectorize"][0]}

    def _ir(self, name: str, s: ConvSched, epilogue: tuple[str, ...]) -> str:
        return (spatial_ow_ir if s.vec_ow else conv_ir)(name, self.p, s, epilogue)

    def default_config(self) -> Config:
        """The ARM template's fallback: one vector of output channels, a 2 x 4 spatial tile where it divides."""
        p, lanes = self.p, self.target.lanes
        co = largest_divisor(p.o, lanes)
        th, tw = largest_divisor(p.oh, 2), largest_divisor(p.ow, 4)
        return {"tile_co": [p.o // co, co], "tile_oh": [p.oh // th, th], "tile_ow": [p.ow // tw, tw],
                "reorder": 0, "unroll_kw": 0, "vectorize": 0}
