"""Depthwise conv2d on the CPU (AutoTVM's ``depthwise_conv2d_NCHWc.x86``; its ARM schedule vectorises the same
way): the channels blocked into the vector lanes, so every kernel tap is one vector load of the staged input times
one of the packed weights, on the shared conv2d generator's staging, register tile and store
(host.templates.conv2d).
"""

from __future__ import annotations

from contextlib import ExitStack
from typing import ClassVar

import numpy as np

from host.templates.base import largest_divisor, register_host
from host.templates.conv2d import ConvSched, ConvShape, _Conv2d, _kernel_fn, _split, emit_store
from vta.space import Config, ConfigSpace, Knob


def depthwise_ir(name: str, p: ConvShape, s: ConvSched, epilogue: tuple[str, ...] = ()) -> str:
    """depthwise conv2d(xin, x, w, bias, res, out): the channels blocked by oc_bn into vector lanes, so every tap is
    one vector load of the staged input (N, C/bn, Hp, Wp, bn) times one of the packed weights (C/bn, KH, KW, bn)."""
    bn = s.oc_bn
    f, vt, madd, accs = _kernel_fn(name, p, s, bn)
    hp, wp = p.h + p.pt + p.pb, p.w + p.pl + p.pr
    xs_row, xs_c = wp * bn, hp * wp * bn
    tile = list(accs)
    with ExitStack() as loops:
        n = loops.enter_context(f.loop(p.n))
        cb = loops.enter_context(f.loop(p.c // bn))
        rb = loops.enter_context(f.loop(p.oh // s.t_oh))
        wb = loops.enter_context(f.loop(p.ow // s.t_ow))
        for a in accs.values():
            f.emit(f"store {vt} zeroinitializer, ptr {a}, align 64")
        xtile = f.lin(0, (p.c // bn * xs_c, n), (xs_c, cb), (s.t_oh * p.sh * xs_row, rb), (s.t_ow * p.sw * bn, wb))
        with f.loop(p.kh) as i:
            cur = {k: f.let(f"load {vt}, ptr {a}, align 64") for k, a in accs.items()}
            for jj in range(p.kw) if s.unroll_kw else [None]:
                with ExitStack() as st:
                    j = str(jj) if jj is not None else st.enter_context(f.loop(p.kw))
                    if jj is None:   # a loop over kernel columns: the accumulators round-trip through memory
                        cur = {k: f.let(f"load {vt}, ptr {a}, align 64") for k, a in accs.items()}
                    wv = f.let(f"load {vt}, ptr {f.gep('float', '%w', f.lin(0, (p.kh * p.kw * bn, cb), (p.kw * bn, i), (bn, j)))}, align 4")
                    xb = f.gep("float", "%x", f.lin(0, (1, xtile), (p.dh * xs_row, i), (p.dw * bn, j)))
                    for r, c in tile:
                        q = f.gep("float", xb, str(r * p.sh * xs_row + c * p.sw * bn))
                        xv = f.let(f"load {vt}, ptr {q}, align 4")
                        cur[r, c] = madd(xv, wv, cur[r, c])
                    if jj is None:
                        for k, a in accs.items():
                            f.emit(f"store {vt} {cur[k]}, ptr {a}, align 64")
            if s.unroll_kw:
                for k, a in accs.items():
                    f.emit(f"store {vt} {cur[k]}, ptr {a}, align 64")
        obase = f.lin(0, (p.c * p.oh * p.ow, n), (bn * p.oh * p.ow, cb), (s.t_oh * p.ow, rb), (s.t_ow, wb))
        emit_store(f, p, bn, accs, cb, obase, epilogue)
    return f.text()


@register_host
class DepthwiseConv2dNCHWc(_Conv2d):
    """AutoTVM's x86 depthwise_conv2d_NCHWc knobs: tile_c (channels per vector), tile_oh x tile_ow output positions
    per register tile, unroll_kw. (Its ARM schedule vectorises the same way.)"""

    ops: ClassVar[tuple[str, ...]] = ("depthwise_conv2d_NCHWc.x86",)
    family: ClassVar[str] = "x86"
    depthwise: ClassVar[bool] = True

    def space(self) -> ConfigSpace:
        p = self.p
        return ConfigSpace([_split("tile_c", p.c, 64), _split("tile_oh", p.oh, 4), _split("tile_ow", p.ow, 16),
                            Knob.choice("unroll_kw", (0, 1))])

    def sched(self, config: Config) -> ConvSched:
        return ConvSched(config["tile_c"][1], config["tile_c"][1], config["tile_oh"][1], config["tile_ow"][1], False,
                         bool(config["unroll_kw"]))

    def _sched_arrays(self, knobs):
        return {"ic_bn": np.ones_like(knobs["tile_c"][0]), "oc_bn": knobs["tile_c"][0], "t_oh": knobs["tile_oh"][0],
                "t_ow": knobs["tile_ow"][0], "unroll_kw": knobs["unroll_kw"][0]}

    def default_config(self) -> Config:
        p, lanes = self.p, self.target.lanes
        bn = largest_divisor(p.c, lanes)
        tw = largest_divisor(p.ow, 8)
        return {"tile_c": [p.c // bn, bn], "tile_oh": [p.oh, 1], "tile_ow": [p.ow // tw, tw], "unroll_kw": 0}

    def _ir(self, name: str, s: ConvSched, epilogue: tuple[str, ...]) -> str:
        return depthwise_ir(name, self.p, s, epilogue)

    def pack_kernel(self, w: np.ndarray, s: ConvSched) -> np.ndarray:
        """(C, 1, KH, KW) -> (C/bn, KH, KW, bn)."""
        c, _, kh, kw = w.shape
        return np.ascontiguousarray(w[:, 0].reshape(c // s.oc_bn, s.oc_bn, kh, kw).transpose(0, 2, 3, 1),
                                    dtype=np.float32)
