"""One engine for conv2d, grouped conv2d, dense and conv2d_transpose on packed tensors.

Tiling follows VTA's ``conv2d_packed`` schedule: output tiles of ``tile_co[1]`` channel blocks x
``tile_h[1]`` rows x ``tile_w[1]`` columns (x ``tile_b[1]`` batch blocks), visited in the order
(batch, row tiles, channel tiles, column tiles), each reduced over input-channel chunks of
``tile_ci[1]`` blocks. ``oc_nthread``/``h_nthread`` = 2 make virtual threads: the channel (row) tiles
alternate between threads, every thread has its own copy of each SRAM buffer, and the threads'
loads and GEMMs interleave chunk by chunk, so one thread's DMA overlaps the other's compute.

Inside a chunk one GEMM instruction runs: its two loops walk the input-channel blocks and the kernel
rows, its micro-ops walk (kernel column, batch, out channel, row, column) with the output position
innermost, so back-to-back micro-ops never write the same accumulator row when a tile has >= 3
positions. conv2d_transpose loads the compact input and emits micro-ops only where the stride's
inserted zeros would not be (VTA's ``conv2d_transpose_gemm`` skip).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hw_config import HwConfig
from vta.runtime import COMPUTE, LOAD, STORE, CommandQueue, ScheduleError, UopKernel
from vta.space import Config, ConfigSpace, Knob

LOOP_MAX = (1 << 14) - 1
PAD_MAX = 15


@dataclass(frozen=True)
class ConvGeometry:
    """A convolution in packed units (blocks of BATCH rows and BLOCK channels)."""

    nb: int          # batch blocks
    cib: int         # input channel blocks per group
    cob: int         # output channel blocks (all groups)
    groups: int
    height: int
    width: int
    kh: int
    kw: int
    sh: int
    sw: int
    ph: int
    pw: int
    transpose: bool = False

    @property
    def out_h(self) -> int:
        if self.transpose:
            return (self.height - 1) * self.sh - 2 * self.ph + self.kh
        return (self.height + 2 * self.ph - self.kh) // self.sh + 1

    @property
    def out_w(self) -> int:
        if self.transpose:
            return (self.width - 1) * self.sw - 2 * self.pw + self.kw
        return (self.width + 2 * self.pw - self.kw) // self.sw + 1

    @property
    def cob_per_group(self) -> int:
        return self.cob // self.groups

    @property
    def cib_total(self) -> int:
        return self.cib * self.groups

    def macs(self, cfg: HwConfig) -> int:
        """Useful multiply-accumulates (zero-skipping for transposed convolutions)."""
        per_pos = self.cib * cfg.BLOCK_IN * self.kh * self.kw
        if self.transpose:
            per_pos = self.cib * cfg.BLOCK_IN * self.kh * self.kw / (self.sh * self.sw)
        return int(self.nb * cfg.BATCH * self.cob * cfg.BLOCK_OUT * self.out_h * self.out_w * per_pos)


@dataclass(frozen=True)
class Tiling:
    b1: int
    h1: int
    w1: int
    ci1: int
    co1: int
    tc: int  # threads over channel tiles
    th: int  # threads over row tiles

    @property
    def threads(self) -> int:
        return self.tc * self.th

    @property
    def positions(self) -> int:
        return self.b1 * self.co1 * self.h1 * self.w1


def conv_space(g: ConvGeometry, dense: bool = False) -> ConfigSpace:
    knobs = [Knob.split("tile_b", g.nb)]
    if not dense:
        knobs += [Knob.split("tile_h", g.out_h), Knob.split("tile_w", g.out_w)]
    knobs += [Knob.split("tile_ci", g.cib), Knob.split("tile_co", g.cob), Knob.choice("oc_nthread", (1, 2))]
    if not dense:
        knobs.append(Knob.choice("h_nthread", (1, 2)))
    return ConfigSpace(knobs)


def tiling_of(config: dict) -> Tiling:
    return Tiling(b1=config["tile_b"][1], h1=config.get("tile_h", (1, 1))[1], w1=config.get("tile_w", (1, 1))[1],
                  ci1=config["tile_ci"][1], co1=config["tile_co"][1], tc=config["oc_nthread"],
                  th=config.get("h_nthread", 1))


# ------------------------------------------------------------------------------------------------------------
# windows and micro-ops

def rows_in(g: ConvGeometry, t: Tiling, along_h: bool) -> int:
    """Input rows (or columns) one output tile reads, as laid out in SRAM."""
    out_tile, stride, k = (t.h1, g.sh, g.kh) if along_h else (t.w1, g.sw, g.kw)
    if g.transpose:  # compact input rows that the dilated window touches, at most
        return (out_tile + k - 2) // stride + 1
    return (out_tile - 1) * stride + k


def _window(g: ConvGeometry, t: Tiling, o0: int, along_h: bool) -> tuple[int, int, int, int]:
    """(first input row in DRAM, rows to load, zero rows before, zero rows after) for output rows from o0."""
    size, stride, k, pad, extent = (g.height, g.sh, g.kh, g.ph, t.h1) if along_h else \
        (g.width, g.sw, g.kw, g.pw, t.w1)
    span = rows_in(g, t, along_h)
    if g.transpose:
        lead = k - 1 - pad  # zero rows in front of the dilated input
        first = max(0, -(-(o0 - lead) // stride))
        last = min(size - 1, (o0 + extent + k - 2 - lead) // stride)
        rows = max(0, last - first + 1)
        return first, rows, 0, span - rows
    first = o0 * stride - pad
    before, after = max(0, -first), max(0, first + span - size)
    return first + before, span - before - after, before, after


def _gemm_uops(g: ConvGeometry, t: Tiling, inp_base: int, wgt_base: int, acc_base: int, o0: tuple[int, int]):
    """Micro-ops of one thread's GEMM for the output tile at rows/cols ``o0``, and its two loops."""
    rows, cols = rows_in(g, t, True), rows_in(g, t, False)
    kw, b, co, h, w = np.meshgrid(np.arange(g.kw), np.arange(t.b1), np.arange(t.co1), np.arange(t.h1),
                                  np.arange(t.w1), indexing="ij")
    kw, b, co, h, w = (a.reshape(-1) for a in (kw, b, co, h, w))
    dst = acc_base + ((b * t.co1 + co) * t.h1 + h) * t.w1 + w
    if not g.transpose:
        src = inp_base + b * t.ci1 * rows * cols + (h * g.sh) * cols + w * g.sw + kw
        wgt = wgt_base + co * t.ci1 * g.kh * g.kw + kw
        loops = ((t.ci1, 0, rows * cols, g.kh * g.kw), (g.kh, 0, cols, g.kw))
        return np.stack([dst, src, wgt], axis=1), loops
    # transposed: one micro-op per (kh, kw, position) whose dilated input is a real element
    first_r = _window(g, t, o0[0], True)[0]
    first_c = _window(g, t, o0[1], False)[0]
    uops = []
    for kh in range(g.kh):
        r = o0[0] + h + kh - (g.kh - 1 - g.ph)
        c = o0[1] + w + kw - (g.kw - 1 - g.pw)
        ok = (r >= 0) & (r % g.sh == 0) & (r // g.sh < g.height) & (c >= 0) & (c % g.sw == 0) & \
             (c // g.sw < g.width)
        src = inp_base + b * t.ci1 * rows * cols + (r // g.sh - first_r) * cols + (c // g.sw - first_c)
        wgt = wgt_base + (co * t.ci1 * g.kh + kh) * g.kw + kw
        uops.append(np.stack([dst[ok], src[ok], wgt[ok]], axis=1))
    uops = np.concatenate(uops) if uops else np.zeros((0, 3), dtype=np.int64)
    return uops, ((t.ci1, 0, rows * cols, g.kh * g.kw),)


def _window_padding(g: ConvGeometry, t: Tiling, along_h: bool) -> int:
    """The most zero rows (or columns) any loaded window of the tiling inserts on one side."""
    total, step = (g.out_h, t.h1) if along_h else (g.out_w, t.w1)
    worst = 0
    for o0 in range(0, total, step):
        _, rows, before, after = _window(g, t, o0, along_h)
        if rows > 0:   # a window of padding only is never loaded
            worst = max(worst, before, after)
    return worst


def _hazard(dst: np.ndarray, repeats: bool) -> str | None:
    """Why back-to-back micro-ops would write one accumulator row (VTA's pipeline hazard), or None."""
    seq = np.concatenate([dst, dst[:2]]) if repeats else dst
    for gap in (1, 2):
        same = np.nonzero(seq[gap:] == seq[:-gap])[0]
        if len(same):
            return (f"micro-ops {int(same[0]) % len(dst)} and {(int(same[0]) + gap) % len(dst)} are {gap} apart and "
                    f"both write accumulator row {int(seq[same[0]])} (VTA's GEMM pipeline hazard): use a tile "
                    f"with at least 3 output positions")
    return None


# ------------------------------------------------------------------------------------------------------------
# validity

@dataclass(frozen=True)
class Epilogue:
    """What the output tile needs besides the GEMM: a bias vector and/or a residual tile in the acc SRAM."""

    ops: tuple[tuple, ...] = ()

    @property
    def bias(self) -> bool:
        return any(op[0] == "bias" for op in self.ops)

    @property
    def residual(self) -> bool:
        return any(op[0] == "residual" for op in self.ops)


def sram_needs(g: ConvGeometry, t: Tiling, ep: Epilogue) -> dict[str, int]:
    """Elements each buffer needs for one thread."""
    return {"inp": t.b1 * t.ci1 * rows_in(g, t, True) * rows_in(g, t, False),
            "wgt": t.co1 * t.ci1 * g.kh * g.kw,
            "acc": t.positions + (t.co1 if ep.bias else 0) + (t.positions if ep.residual else 0)}


def check_config(cfg: HwConfig, g: ConvGeometry, t: Tiling, ep: Epilogue) -> str | None:
    """Why this tiling cannot run on this hardware, or None when it can (checked before emitting)."""
    return _check_arithmetic(cfg, g, t, ep) or (_check_transposed_tiles(g, t) if g.transpose else None)


def _check_arithmetic(cfg: HwConfig, g: ConvGeometry, t: Tiling, ep: Epilogue) -> str | None:
    """The checks that need only arithmetic on the tiling (cheap)."""
    n_co_tiles, n_h_tiles = g.cob // t.co1, g.out_h // t.h1
    if n_co_tiles % t.tc:
        return f"oc_nthread={t.tc} needs an even number of channel tiles, tile_co gives {n_co_tiles}"
    if n_h_tiles % t.th:
        return f"h_nthread={t.th} needs an even number of row tiles, tile_h gives {n_h_tiles}"
    if g.groups > 1 and g.cob_per_group % t.co1:
        return (f"tile_co inner={t.co1} must divide the {g.cob_per_group} output channel blocks of one group, "
                f"so a tile never spans two groups")
    depth = {"inp": cfg.INP_BUFF_DEPTH, "wgt": cfg.WGT_BUFF_DEPTH, "acc": cfg.ACC_BUFF_DEPTH}
    for buf, need in sram_needs(g, t, ep).items():
        if need * t.threads > depth[buf]:
            return (f"SRAM capacity: {t.threads} thread(s) x {need} {buf} elements = {need * t.threads} > the "
                    f"{buf} buffer's {depth[buf]}")
    n_uops = g.kw * t.positions * (g.kh if g.transpose else 1)
    if n_uops > cfg.UOP_BUFF_DEPTH:
        return f"micro-op buffer: the GEMM needs {n_uops} micro-ops > {cfg.UOP_BUFF_DEPTH}"
    if max(t.b1 * t.co1 * t.h1, t.w1, t.ci1) > LOOP_MAX:
        return f"loop limit: a loop extent exceeds {LOOP_MAX} (14-bit iteration fields)"
    rows, cols = rows_in(g, t, True), rows_in(g, t, False)
    # the GEMM's largest loop factors (_gemm_uops): one input window per channel block, one kernel per block
    if rows * cols >= 1 << cfg.LOG_INP_BUFF_DEPTH or g.kh * g.kw >= 1 << cfg.LOG_WGT_BUFF_DEPTH:
        return "field width: a GEMM loop factor does not fit its instruction field"
    if not g.transpose and max(g.ph, g.pw) > PAD_MAX:   # a load pads only its own window: check each window
        worst = max(_window_padding(g, t, True), _window_padding(g, t, False))
        if worst > PAD_MAX:
            return f"padding: an input window needs {worst} zero rows, more than the {PAD_MAX} a DMA load can insert"
    if not g.transpose:
        repeats = g.kh * g.kw * t.ci1 > 1
        if repeats and t.positions < 3:
            return (f"a tile of {t.positions} output position(s) would make back-to-back GEMM micro-ops write "
                    f"the same accumulator row (VTA's pipeline hazard): use a tile with at least 3 positions")
    return None


def _check_transposed_tiles(g: ConvGeometry, t: Tiling) -> str | None:
    """A transposed convolution's micro-ops depend on each tile's offset: build them and look (slower)."""
    for oh0 in range(0, g.out_h, t.h1):
        for ow0 in range(0, g.out_w, t.w1):
            uops, _ = _gemm_uops(g, t, 0, 0, 0, (oh0, ow0))
            if len(uops) == 0:
                return f"output tile at ({oh0}, {ow0}) receives no input (stride leaves it empty)"
            reason = _hazard(uops[:, 0], repeats=t.ci1 > 1)
            if reason:
                return reason
    return None


# ------------------------------------------------------------------------------------------------------------
# emission

@dataclass
class ConvBuffers:
    data: object
    kernel: object
    out: object
    bias: object | None = None
    residual: object | None = None


def _epilogue_kernels(ep: Epilogue, t: Tiling, acc: int, bias: int, res: int) -> list[UopKernel]:
    hw = t.h1 * t.w1
    whole = ((t.b1 * t.co1 * t.h1, t.w1, 0, 0), (t.w1, 1, 0, 0))
    kernels = []
    for op in ep.ops:
        name = op[0]
        if name == "bias":  # micro-ops over batch blocks; loops over channel blocks and positions
            uops = [[acc + b * t.co1 * hw, bias, 0] for b in range(t.b1)]
            kernels.append(UopKernel("alu", uops, loops=((t.co1, hw, 1, 0), (hw, 1, 0, 0)), alu_op="ADD"))
        elif name == "residual":
            loops = ((t.b1 * t.co1 * t.h1, t.w1, t.w1, 0), (t.w1, 1, 1, 0))
            kernels.append(UopKernel("alu", [[acc, res, 0]], loops=loops, alu_op="ADD"))
        else:
            for alu_op, imm in alu_immediates(op):
                kernels.append(UopKernel("alu", [[acc, 0, 0]], loops=whole, alu_op=alu_op, use_imm=True, imm=imm))
    return kernels


IMM_MIN, IMM_MAX = -(1 << 15), (1 << 15) - 1


def alu_immediates(op: tuple) -> list[tuple[str, int]]:
    """ALU instructions (opcode, immediate) for one epilogue operation with a constant."""
    name, *args = op
    table = {"shr": lambda n: [("SHR", n)], "shl": lambda n: [("SHR", -n)], "relu": lambda: [("MAX", 0)],
             "clip": lambda lo, hi: [("MIN", hi), ("MAX", lo)], "min": lambda v: [("MIN", v)],
             "max": lambda v: [("MAX", v)], "add": lambda v: [("ADD", v)], "mul": lambda v: [("MUL", v)]}
    if name not in table:
        raise ScheduleError(f"unknown epilogue op {name!r}; allowed: bias, residual, {', '.join(table)}")
    try:
        out = table[name](*args)
    except TypeError:
        raise ScheduleError(f"epilogue op {op!r} has the wrong number of arguments") from None
    if name in ("shr", "shl") and not (isinstance(args[0], (int, np.integer)) and 0 <= args[0] <= 31):
        raise ScheduleError(f"epilogue op {op!r}: the shift count must be an integer in [0, 31]")
    for alu_op, imm in out:
        if not isinstance(imm, (int, np.integer)) or not IMM_MIN <= imm <= IMM_MAX:
            raise ScheduleError(f"epilogue op {op!r}: immediate {imm!r} must be an integer in "
                                f"[{IMM_MIN}, {IMM_MAX}] (16-bit ALU immediate)")
    return out


def emit_conv(q: CommandQueue, g: ConvGeometry, t: Tiling, ep: Epilogue, bufs: ConvBuffers) -> None:
    """Emit the whole convolution into ``q`` (the config must have passed ``check_config``)."""
    need = sram_needs(g, t, ep)
    rows, cols = rows_in(g, t, True), rows_in(g, t, False)
    oh, ow = g.out_h, g.out_w
    threads = [(th, tc) for th in range(t.th) for tc in range(t.tc)]
    inp_base = [k * need["inp"] for k in range(t.threads)]
    wgt_base = [k * need["wgt"] for k in range(t.threads)]
    acc_base = [k * need["acc"] for k in range(t.threads)]
    bias_base = [a + t.positions for a in acc_base]
    res_base = [a + t.positions + (t.co1 if ep.bias else 0) for a in acc_base]
    reset = [UopKernel("gemm", [[acc_base[k], 0, 0]], loops=((t.b1 * t.co1 * t.h1, t.w1, 0, 0), (t.w1, 1, 0, 0)),
                       reset=True) for k in range(t.threads)]
    epilogue = [_epilogue_kernels(ep, t, acc_base[k], bias_base[k], res_base[k]) for k in range(t.threads)]
    gemm_cache: dict[tuple, UopKernel] = {}

    def gemm_kernel(k: int, o0: tuple[int, int]) -> UopKernel:
        key = (k, o0) if g.transpose else (k,)
        if key not in gemm_cache:
            uops, loops = _gemm_uops(g, t, inp_base[k], wgt_base[k], acc_base[k], o0)
            gemm_cache[key] = UopKernel("gemm", uops, loops=loops)
        return gemm_cache[key]

    for k in range(t.threads):  # credits: each thread's input buffers start free
        q.dep_push(COMPUTE, LOAD)
    first_group = True
    n_co_tiles, n_h_tiles, n_w_tiles = g.cob // t.co1, oh // t.h1, ow // t.w1
    for bo in range(g.nb // t.b1):
        for i0 in range(n_h_tiles // t.th):
            for c0 in range(n_co_tiles // t.tc):
                for j0 in range(n_w_tiles):
                    tiles = [(bo, (i0 * t.th + th) * t.h1, (c0 * t.tc + tc) * t.co1, j0 * t.w1) for th, tc in threads]
                    for k, _ in enumerate(tiles):
                        if not first_group:
                            q.dep_pop(STORE, COMPUTE)  # this thread's accumulators were stored
                        q.push_kernel(reset[k])
                    for chunk in range(g.cib // t.ci1):
                        for k, tile in enumerate(tiles):
                            q.dep_pop(COMPUTE, LOAD)
                            has_input = _load_chunk(q, g, t, bufs, tile, chunk, inp_base[k], wgt_base[k], rows, cols)
                            q.dep_push(LOAD, COMPUTE)
                            q.dep_pop(LOAD, COMPUTE)
                            if has_input:  # a window of padding only adds nothing to the reset accumulators
                                q.push_kernel(gemm_kernel(k, (tile[1], tile[3])))
                            q.dep_push(COMPUTE, LOAD)
                    for k, tile in enumerate(tiles):
                        _load_epilogue_operands(q, g, t, ep, bufs, tile, bias_base[k], res_base[k])
                        for kernel in epilogue[k]:
                            q.push_kernel(kernel)
                        q.dep_push(COMPUTE, STORE)
                        q.dep_pop(COMPUTE, STORE)
                        _store_tile(q, g, t, bufs, tile, acc_base[k])
                        q.dep_push(STORE, COMPUTE)
                    first_group = False
                    q.checkpoint()


def _load_chunk(q, g: ConvGeometry, t: Tiling, bufs: ConvBuffers, tile, chunk: int, inp: int, wgt: int,
                rows: int, cols: int) -> bool:
    """Load one chunk's input window and weights; False when the window holds only padding (nothing loaded)."""
    bo, oh0, co0, ow0 = tile
    group = co0 // g.cob_per_group
    r0, nr, pt, pb = _window(g, t, oh0, True)
    c0, nc, pl, pr = _window(g, t, ow0, False)
    if nr <= 0 or nc <= 0:
        return False
    first_block = group * g.cib + chunk * t.ci1

    def offset(b: int, cblock: int) -> int:
        return (((bo * t.b1 + b) * g.cib_total + cblock) * g.height + r0) * g.width + c0

    if g.height == g.width == rows == cols == 1:  # dense: one load, a row of channel blocks per batch block
        q.load_2d(bufs.data, offset(0, first_block), t.ci1, t.b1, g.cib_total, inp, "INP")
        _load_weights(q, g, t, bufs, co0, chunk, wgt)
        return True
    whole_rows = nc == cols == g.width and nr == rows
    for b in range(t.b1):
        if whole_rows:  # each channel block's window is one contiguous run: one load per batch block
            q.load_2d(bufs.data, offset(b, first_block), nr * nc, t.ci1, g.height * g.width,
                      inp + b * t.ci1 * rows * cols, "INP")
            continue
        for ci in range(t.ci1):
            q.load_2d(bufs.data, offset(b, first_block + ci), nc, nr, g.width, inp + (b * t.ci1 + ci) * rows * cols,
                      "INP", pad=(pt, pb, pl, pr))
    _load_weights(q, g, t, bufs, co0, chunk, wgt)
    return True


def _load_weights(q, g: ConvGeometry, t: Tiling, bufs: ConvBuffers, co0: int, chunk: int, wgt: int) -> None:
    # weights of the tile's channel blocks for this chunk: one 2D load, a row per output channel block
    per_k = g.kh * g.kw
    q.load_2d(bufs.kernel, (co0 * g.cib + chunk * t.ci1) * per_k, t.ci1 * per_k, t.co1, g.cib * per_k, wgt, "WGT")


def _load_epilogue_operands(q, g: ConvGeometry, t: Tiling, ep: Epilogue, bufs: ConvBuffers, tile, bias: int,
                            res: int) -> None:
    co0 = tile[2]
    if ep.bias:
        q.load_2d(bufs.bias, co0, t.co1, 1, t.co1, bias, "ACC")
    if ep.residual:
        for sram, offset, x, y, stride in _output_runs(g, t, tile):
            q.load_2d(bufs.residual, offset, x, y, stride, res + sram, "ACC")


def _output_runs(g: ConvGeometry, t: Tiling, tile) -> list[tuple[int, int, int, int, int]]:
    """The output tile as few 2D transfers as its shape allows: (sram offset, dram offset, x, y, x_stride)."""
    bo, oh0, co0, ow0 = tile
    hw, out_hw = t.h1 * t.w1, g.out_h * g.out_w

    def dram(b: int, co: int) -> int:
        return (((bo * t.b1 + b) * g.cob + co0 + co) * g.out_h + oh0) * g.out_w + ow0

    if hw == out_hw:  # whole images: a row per batch block holds all its channel blocks
        return [(0, dram(0, 0), t.co1 * hw, t.b1, g.cob * out_hw)]
    runs = []
    for b in range(t.b1):
        for co in range(t.co1):
            sram = (b * t.co1 + co) * hw
            if t.w1 == g.out_w:  # whole rows: one contiguous run
                runs.append((sram, dram(b, co), hw, 1, hw))
            else:
                runs.append((sram, dram(b, co), t.w1, t.h1, g.out_w))
    return runs


def _store_tile(q, g: ConvGeometry, t: Tiling, bufs: ConvBuffers, tile, acc: int) -> None:
    for sram, offset, x, y, stride in _output_runs(g, t, tile):
        q.store_2d(acc + sram, bufs.out, offset, x, y, stride)


def default_config(cfg: HwConfig, g: ConvGeometry, ep: Epilogue, space: ConfigSpace) -> Config:
    """A heuristic config that fits: double buffered if possible, then the largest tiles (fewest DMAs)."""
    def preference(config: Config) -> tuple:
        t = tiling_of(config)
        return (t.threads == 2, t.positions * t.ci1 * g.kh * g.kw, t.ci1, t.w1, -t.b1)

    cheap_ok = [c for c in space if _check_arithmetic(cfg, g, tiling_of(c), ep) is None]
    for config in sorted(cheap_ok, key=preference, reverse=True):  # the slow checks only until one passes
        if check_config(cfg, g, tiling_of(config), ep) is None:
            return config
    raise ScheduleError("no config of this template fits the hardware for this workload")
