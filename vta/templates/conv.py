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
from typing import ClassVar

import numpy as np

from hw_config import HwConfig
from hw_config.isa_rules import INSN_BYTES, LOOP_MAX, PAD_MAX
from simulator.timing import dma_cycles
from vta.numerics import (
    block_diagonal,
    blocks,
    conv2d_int,
    conv2d_transpose_scatter,
    from_block_diagonal,
    pack_bias,
    pack_blocks,
    pad_to,
    padded_shape,
    safe_log2,
    transposed_to_direct,
    unpack_blocks,
)
from vta.runtime import COMPUTE, LOAD, STORE, CommandQueue, Recording, ScheduleError, UopKernel
from vta.space import Config, ConfigSpace, Knob
from vta.templates.base import (
    GraphHead,
    Template,
    as_int,
    as_ints,
    as_pair,
    check_buffer_sizes,
    check_extents,
    checked_array,
    only_known,
    present_inputs,
    register,
)
from vta.templates.epilogue import CHANNEL_SHIFT_MAX, Epilogue, alu_immediates, reference_epilogue


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
    dh: int = 1      # dilation: kernel row kh reads input row oh * sh + kh * dh
    dw: int = 1

    @property
    def span_h(self) -> int:
        """Input rows one output row's kernel window covers (the dilated kernel's height)."""
        return (self.kh - 1) * self.dh + 1

    @property
    def span_w(self) -> int:
        return (self.kw - 1) * self.dw + 1

    @property
    def out_h(self) -> int:
        if self.transpose:
            return (self.height - 1) * self.sh - 2 * self.ph + self.kh
        return (self.height + 2 * self.ph - self.span_h) // self.sh + 1

    @property
    def out_w(self) -> int:
        if self.transpose:
            return (self.width - 1) * self.sw - 2 * self.pw + self.kw
        return (self.width + 2 * self.pw - self.span_w) // self.sw + 1

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
    return (out_tile - 1) * stride + (g.span_h if along_h else g.span_w)


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
    shape = (g.kw, t.b1, t.co1, t.h1, t.w1)
    kw, b, co, h, w = np.ix_(*(np.arange(n) for n in shape))   # open grids: the formulas broadcast to ``shape``
    dst = acc_base + ((b * t.co1 + co) * t.h1 + h) * t.w1 + w
    if not g.transpose:
        columns = np.empty((3, *shape), dtype=np.int64)   # (dst, src, wgt), each written whole
        columns[0] = dst
        columns[1] = inp_base + b * t.ci1 * rows * cols + (h * g.sh) * cols + w * g.sw + kw * g.dw
        columns[2] = wgt_base + co * t.ci1 * g.kh * g.kw + kw
        loops = ((t.ci1, 0, rows * cols, g.kh * g.kw), (g.kh, 0, cols * g.dh, g.kw))
        return columns.reshape(3, -1).T, loops
    kw, b, co, h, w, dst = (np.broadcast_to(a, shape).reshape(-1) for a in (kw, b, co, h, w, dst))
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

def sram_needs(g: ConvGeometry, t: Tiling, ep: Epilogue) -> dict[str, int]:
    """Elements each buffer needs for one thread."""
    return {"inp": t.b1 * t.ci1 * rows_in(g, t, True) * rows_in(g, t, False),
            "wgt": t.co1 * t.ci1 * g.kh * g.kw,
            "acc": t.positions + (t.co1 if ep.bias else 0) + (t.positions if ep.residual else 0)
            + (t.co1 if ep.channel_shift else 0)}


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
    if rows * cols >= 1 << cfg.LOG_INP_BUFF_DEPTH or cols * g.dh >= 1 << cfg.LOG_INP_BUFF_DEPTH \
            or g.kh * g.kw >= 1 << cfg.LOG_WGT_BUFF_DEPTH:
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
    channel_shr: object | None = None


def _epilogue_kernels(ep: Epilogue, t: Tiling, acc: int, bias: int, res: int, shift: int) -> list[UopKernel]:
    hw = t.h1 * t.w1
    whole = ((t.b1 * t.co1 * t.h1, t.w1, 0, 0), (t.w1, 1, 0, 0))
    kernels = []
    for op in ep.ops:
        name = op[0]
        if name == "bias":  # micro-ops over batch blocks; loops over channel blocks and positions
            uops = [[acc + b * t.co1 * hw, bias, 0] for b in range(t.b1)]
            kernels.append(UopKernel("alu", uops, loops=((t.co1, hw, 1, 0), (hw, 1, 0, 0)), alu_op="ADD"))
        elif name == "channel_shr":   # as the bias, with the staged shift amounts as SHR's second operand
            uops = [[acc + b * t.co1 * hw, shift, 0] for b in range(t.b1)]
            kernels.append(UopKernel("alu", uops, loops=((t.co1, hw, 1, 0), (hw, 1, 0, 0)), alu_op="SHR"))
        elif name == "residual":
            loops = ((t.b1 * t.co1 * t.h1, t.w1, t.w1, 0), (t.w1, 1, 1, 0))
            kernels.append(UopKernel("alu", [[acc, res, 0]], loops=loops, alu_op="ADD"))
        else:
            for alu_op, imm in alu_immediates(op):
                kernels.append(UopKernel("alu", [[acc, 0, 0]], loops=whole, alu_op=alu_op, use_imm=True, imm=imm))
    return kernels


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
    shift_base = [r + (t.positions if ep.residual else 0) for r in res_base]
    reset = [UopKernel("gemm", [[acc_base[k], 0, 0]], loops=((t.b1 * t.co1 * t.h1, t.w1, 0, 0), (t.w1, 1, 0, 0)),
                       reset=True) for k in range(t.threads)]
    epilogue = [_epilogue_kernels(ep, t, acc_base[k], bias_base[k], res_base[k], shift_base[k])
                for k in range(t.threads)]
    out_runs = _output_runs(g, t)
    gemm_cache: dict[tuple, UopKernel] = {}
    # a GEMM's micro-ops from SRAM base 0, per tile offset (transposed) or for all tiles; threads add their bases
    gemm_uops: dict[tuple[int, int] | None, tuple[np.ndarray, tuple]] = {}

    def gemm_kernel(k: int, o0: tuple[int, int]) -> UopKernel:
        key = (k, o0) if g.transpose else (k,)
        if key not in gemm_cache:
            at = o0 if g.transpose else None
            if at not in gemm_uops:
                gemm_uops[at] = _gemm_uops(g, t, 0, 0, 0, o0)
            uops, loops = gemm_uops[at]
            gemm_cache[key] = UopKernel("gemm", uops + (acc_base[k], inp_base[k], wgt_base[k]), loops=loops)
        return gemm_cache[key]

    for k in range(t.threads):  # credits: each thread's input buffers start free
        q.dep_push(COMPUTE, LOAD)
    # Groups of tiles alike (same windows, same queue state) emit the same instructions but for DRAM offsets:
    # the first is recorded, the others replayed with shifted offsets (tests/test_replay.py: bit-identical).
    # A group's key is two small integers: its class by loop axis (``_group_classes``) and the interned queue
    # state; after a replay the state is the recording's end state, so it is not recomputed. The first group
    # (no store to wait for) is never recorded: no other group emits like it.
    buffers = [bufs.data, bufs.kernel, bufs.bias, bufs.residual, bufs.out, bufs.channel_shr]
    n_co_tiles, n_h_tiles, n_w_tiles = g.cob // t.co1, oh // t.h1, ow // t.w1
    rows_of = {o0: _window(g, t, o0, True) for o0 in range(0, n_h_tiles * t.h1, t.h1)}
    cols_of = {o0: _window(g, t, o0, False) for o0 in range(0, n_w_tiles * t.w1, t.w1)}
    ids: dict[tuple, int] = {}

    def intern(value: tuple) -> int:
        return ids.setdefault(value, len(ids))

    # the groups in emission order (batch, row, channel, column group), as index arrays
    group_shape = (g.nb // t.b1, n_h_tiles // t.th, n_co_tiles // t.tc, n_w_tiles)
    bo, i0, c0, j0 = (a.reshape(-1) for a in np.indices(group_shape))
    group_anchors = np.stack(_anchors(g, t, (bo, i0 * t.th * t.h1, c0 * t.tc * t.co1, j0 * t.w1)), axis=1)
    row_class, col_class, co_class = (np.array(c) for c in _group_classes(g, t, rows_of, cols_of, intern))
    radix = len(ids)   # every class id is below it
    group_class = ((row_class[i0] * radix + co_class[c0]) * radix + col_class[j0]).tolist()
    # (class, state) -> the recording, the state id it ends in, the group it was recorded at, its length
    recordings: dict[tuple[int, int], tuple[Recording, int, int, int]] = {}
    state = None   # the interned q.state(), None when unknown
    # recordings to replay back to back (one queue element) for the groups from run_start on, where each was made
    run: list[Recording] = []
    run_origins: list[int] = []
    run_start = run_insns = room = 0

    def replay_run() -> None:
        nonlocal run_insns
        if run:
            stop = run_start + len(run)
            q.replay_run(run, group_anchors[run_start:stop] - group_anchors[run_origins])
            run.clear()
            run_origins.clear()
            run_insns = 0

    def emit_group(index: int) -> None:
        """Emit group ``index`` instruction by instruction."""
        b, i, c, j = (int(a[index]) for a in (bo, i0, c0, j0))
        tiles = [(b, (i * t.th + th) * t.h1, (c * t.tc + tc) * t.co1, j * t.w1) for th, tc in threads]
        windows = [rows_of[tile[1]] + cols_of[tile[3]] for tile in tiles]
        for k, _ in enumerate(tiles):
            if index:
                q.dep_pop(STORE, COMPUTE)  # this thread's accumulators were stored
            q.push_kernel(reset[k])
        loads = [_chunk_loads(g, t, bufs, tile, inp_base[k], wgt_base[k], rows, cols, windows[k])
                 for k, tile in enumerate(tiles)]
        for chunk in range(g.cib // t.ci1):
            for k, tile in enumerate(tiles):
                q.dep_pop(COMPUTE, LOAD)
                for buf, offset, step, x, y, stride, sram, mem, pad in loads[k]:
                    q.load_2d(buf, offset + chunk * step, x, y, stride, sram, mem, pad)
                q.dep_push(LOAD, COMPUTE)
                q.dep_pop(LOAD, COMPUTE)
                if loads[k]:  # a window of padding only adds nothing to the reset accumulators
                    q.push_kernel(gemm_kernel(k, (tile[1], tile[3])))
                q.dep_push(COMPUTE, LOAD)
        for k, tile in enumerate(tiles):
            out = _output_offset(g, t, tile)
            _load_epilogue_operands(q, t, ep, bufs, tile[2], out_runs, out, bias_base[k], res_base[k],
                                    shift_base[k])
            for kernel in epilogue[k]:
                q.push_kernel(kernel)
            q.dep_push(COMPUTE, STORE)
            q.dep_pop(COMPUTE, STORE)
            _store_tile(q, bufs, out_runs, out, acc_base[k])
            q.dep_push(STORE, COMPUTE)

    if g.transpose:   # micro-ops depend on each tile's offset: every group is emitted one by one
        for index in range(len(group_class)):
            emit_group(index)
            q.checkpoint()
        return
    emit_group(0)
    q.checkpoint()
    for index in range(1, len(group_class)):
        if state is None:
            state = intern(("state", q.state()))
        key = (group_class[index], state)
        known = recordings.get(key)
        if known is not None:
            rec, state, origin, n_insns = known
            if not run:
                run_start, room = index, q.room()
            run.append(rec)
            run_origins.append(origin)
            run_insns += n_insns
            if run_insns >= room:   # q.near_full(run_insns)
                replay_run()
                q.checkpoint()
                state = None
            continue
        replay_run()
        mark = q.mark()
        emit_group(index)
        state = None
        rec = q.recording(mark, buffers)
        if rec is not None:
            rec.anchors = tuple(group_anchors[index].tolist())
            state = intern(("state", q.state()))
            recordings[key] = (rec, state, index, len(rec.insns))
        if q.checkpoint():
            state = None
    replay_run()


def _group_classes(g: ConvGeometry, t: Tiling, rows_of: dict, cols_of: dict, intern) -> tuple[list, list, list]:
    """What, besides DRAM offsets, the queue state and whether it is the first, decides a tile group's
    instructions, by loop axis, as interned ids: per row-group index each thread row's window shape and padding,
    per column tile its window's, per channel-group index each thread's channel group relative to the first's."""
    rows = [intern(("rows", *(rows_of[(i0 * t.th + th) * t.h1][1:4] for th in range(t.th))))
            for i0 in range(g.out_h // t.h1 // t.th)]
    cols = [intern(("cols", *cols_of[j0 * t.w1][1:4])) for j0 in range(g.out_w // t.w1)]
    per_group = g.cob_per_group
    cos = [intern(("co", *(((c0 * t.tc + tc) * t.co1) // per_group - (c0 * t.tc * t.co1) // per_group
                           for tc in range(t.tc))))
           for c0 in range(g.cob // t.co1 // t.tc)]
    return rows, cols, cos


def _anchors(g: ConvGeometry, t: Tiling, tile) -> tuple[int, ...]:
    """DRAM element offsets that move with the tile group, one per buffer of ``emit_conv``'s ``buffers`` (data,
    kernel, bias, residual, out): within one group class (``_group_classes``) every load or store of a buffer
    sits at its anchor plus a constant, because window starts are the unclipped o0 * stride - pad then."""
    bo, oh0, co0, ow0 = tile
    group = co0 // g.cob_per_group
    data = (((bo * t.b1) * g.cib_total + group * g.cib) * g.height + oh0 * g.sh - g.ph) * g.width + ow0 * g.sw - g.pw
    out = _output_offset(g, t, tile)
    return data, co0 * g.cib * g.kh * g.kw, co0, out, out, co0


def _chunk_loads(g: ConvGeometry, t: Tiling, bufs: ConvBuffers, tile, inp: int, wgt: int, rows: int, cols: int,
                 window: tuple[int, ...]) -> list[tuple]:
    """The loads of one input-channel chunk of the tile: its input window (``_window`` along rows, then columns)
    and its weights, as ``load_2d`` arguments (buffer, DRAM offset of chunk 0, the offset's step per chunk, x,
    y, x_stride, SRAM, memory, pad); none when the window holds only padding."""
    bo, _, co0, _ = tile
    r0, nr, pt, pb, c0, nc, pl, pr = window
    if nr <= 0 or nc <= 0:
        return []
    first_block = (co0 // g.cob_per_group) * g.cib   # the tile's group's first input channel block
    step = t.ci1 * g.height * g.width   # a chunk further: ci1 channel blocks on
    no_pad = (0, 0, 0, 0)

    def offset(b: int, cblock: int) -> int:
        return (((bo * t.b1 + b) * g.cib_total + cblock) * g.height + r0) * g.width + c0

    # weights of the tile's channel blocks: one 2D load, a row per output channel block
    per_k = g.kh * g.kw
    weights = (bufs.kernel, co0 * g.cib * per_k, t.ci1 * per_k, t.ci1 * per_k, t.co1, g.cib * per_k, wgt, "WGT",
               no_pad)
    if g.height == g.width == rows == cols == 1:  # dense: one load, a row of channel blocks per batch block
        return [(bufs.data, offset(0, first_block), step, t.ci1, t.b1, g.cib_total, inp, "INP", no_pad), weights]
    loads = []
    for b in range(t.b1):
        if nc == cols == g.width and nr == rows:  # each channel block's window is one contiguous run
            loads.append((bufs.data, offset(b, first_block), step, nr * nc, t.ci1, g.height * g.width,
                          inp + b * t.ci1 * rows * cols, "INP", no_pad))
            continue
        for ci in range(t.ci1):
            loads.append((bufs.data, offset(b, first_block + ci), step, nc, nr, g.width,
                          inp + (b * t.ci1 + ci) * rows * cols, "INP", (pt, pb, pl, pr)))
    return [*loads, weights]


def _load_epilogue_operands(q, t: Tiling, ep: Epilogue, bufs: ConvBuffers, co0: int, out_runs: list[tuple],
                            out: int, bias: int, res: int, shift: int) -> None:
    if ep.bias:
        q.load_2d(bufs.bias, co0, t.co1, 1, t.co1, bias, "ACC")
    if ep.channel_shift:
        q.load_2d(bufs.channel_shr, co0, t.co1, 1, t.co1, shift, "ACC")
    if ep.residual:
        for sram, offset, x, y, stride in out_runs:
            q.load_2d(bufs.residual, out + offset, x, y, stride, res + sram, "ACC")


def _output_offset(g: ConvGeometry, t: Tiling, tile) -> int:
    """The DRAM element offset of the tile's first output element (batch block, channel block, row, column)."""
    bo, oh0, co0, ow0 = tile
    return (((bo * t.b1) * g.cob + co0) * g.out_h + oh0) * g.out_w + ow0


def _output_runs(g: ConvGeometry, t: Tiling) -> list[tuple[int, int, int, int, int]]:
    """An output tile as few 2D transfers as its shape allows: (sram offset, dram offset from the tile's
    ``_output_offset``, x, y, x_stride); the same for every tile."""
    hw, out_hw = t.h1 * t.w1, g.out_h * g.out_w
    if hw == out_hw:  # whole images: a row per batch block holds all its channel blocks
        return [(0, 0, t.co1 * hw, t.b1, g.cob * out_hw)]
    runs = []
    for b in range(t.b1):
        for co in range(t.co1):
            sram, dram = (b * t.co1 + co) * hw, (b * g.cob + co) * out_hw
            if t.w1 == g.out_w:  # whole rows: one contiguous run
                runs.append((sram, dram, hw, 1, hw))
            else:
                runs.append((sram, dram, t.w1, t.h1, g.out_w))
    return runs


def _store_tile(q, bufs: ConvBuffers, out_runs: list[tuple], out: int, acc: int) -> None:
    for sram, offset, x, y, stride in out_runs:
        q.store_2d(acc + sram, bufs.out, out + offset, x, y, stride)


def default_config(cfg: HwConfig, g: ConvGeometry, ep: Epilogue, space: ConfigSpace) -> Config:
    """A heuristic config that fits: double buffered if possible, then the largest tiles (fewest DMAs); among
    equals, the first in the space. The preference is computed on the whole space's knob columns at once and the
    configs are checked in its order until one fits (a task's thousands of configs are not each checked)."""
    def inner(name: str) -> np.ndarray:
        return space.column(name)[:, 1] if name in {k.name for k in space.knobs} else np.ones(len(space), np.int64)

    t = Tiling(b1=inner("tile_b"), h1=inner("tile_h"), w1=inner("tile_w"), ci1=inner("tile_ci"),
               co1=inner("tile_co"), tc=space.column("oc_nthread"),
               th=space.column("h_nthread") if "h_nthread" in {k.name for k in space.knobs} else 1)
    # preference, highest first: two threads, then the most work a chunk, the most channels, the widest rows and
    # the fewest batch rows; lexsort is stable (its last key first), so equal configs keep the space's order
    order = np.lexsort((t.b1, -t.w1, -t.ci1, -(t.positions * t.ci1 * g.kh * g.kw), t.threads != 2))
    for i in order.tolist():
        config = space[i]
        if check_config(cfg, g, tiling_of(config), ep) is None:
            return config
    raise ScheduleError("no config of this template fits the hardware for this workload")


# ------------------------------------------------------------------------------------------------------------
# analytical model

def _get(kv, name, one):
    return kv.get(name, (one, one))


def _estimate(tmpl: ConvTemplate, kv: dict) -> dict[str, np.ndarray]:
    """The template's analytical model over configs: loop and traffic structure and an estimate of the cycles
    from the simulator's DMA / compute formulas (no dependencies modelled); the tuner's features."""
    g, c = tmpl.geometry, tmpl.cfg
    one = np.ones(len(next(iter(kv.values()))[0]))
    (b1, nbt), (h1, nht), (w1, nwt) = (_get(kv, k, one) for k in ("tile_b", "tile_h", "tile_w"))
    (ci1, nci), (co1, nco) = kv["tile_ci"], kv["tile_co"]
    tc, th = kv["oc_nthread"][0], _get(kv, "h_nthread", one)[0]
    # the template's own formulas, evaluated on arrays of tilings (one lane per config)
    t = Tiling(b1=b1, h1=h1, w1=w1, ci1=ci1, co1=co1, tc=tc, th=th)
    positions, threads = t.positions, t.threads
    tiles = nbt * nht * nwt * nco
    chunks = tiles * nci
    rows, cols = rows_in(g, t, True), rows_in(g, t, False)
    if g.transpose:
        uops = g.kw * g.kh * positions / (g.sh * g.sw)  # the zero-skipping keeps about 1 / (sh * sw) of them
        iters = ci1 * uops
    else:
        uops = g.kw * positions
        iters = ci1 * g.kh * uops
    real_rows, real_cols = np.minimum(rows, g.height), np.minimum(cols, g.width)
    ep = tmpl.epilogue
    n_ep = ep.alu_instructions
    need = sram_needs(g, t, ep)
    inp, wgt, acc = need["inp"], need["wgt"], need["acc"]

    # loads of one chunk, as _chunk_loads gives them
    dense = g.height == g.width == 1 and g.kh == g.kw == 1
    whole_rows = (real_cols == g.width) & (cols == g.width) & (real_rows == rows)
    # dense: one 2D load of b1 rows (batch rows) of ci1 channel blocks each
    inp_transfers = np.where(dense, 1, np.where(whole_rows, b1, b1 * ci1))
    inp_rows = np.where(dense, b1, np.where(whole_rows, ci1, real_rows))
    inp_row_elems = np.where(dense, ci1, np.where(whole_rows, real_rows * real_cols, real_cols))
    inp_row_bytes = inp_row_elems * c.INP_ELEM_BYTES
    inp_bytes = b1 * ci1 * real_rows * real_cols * c.INP_ELEM_BYTES
    padded = b1 * ci1 * (rows * cols - real_rows * real_cols)
    ld_inp = dma_cycles(c, inp_rows, inp_row_bytes, inp_transfers) + padded
    wgt_bytes = wgt * c.WGT_ELEM_BYTES
    wgt_contig = ci1 == g.cib
    ld_wgt = dma_cycles(c, np.where(wgt_contig, 1, co1), np.where(wgt_contig, wgt_bytes, wgt_bytes / co1), 1)
    load_chunk = ld_inp + ld_wgt
    compute_chunk = c.COMPUTE_LATENCY + iters * c.GEMM_II

    # per output tile: reset, epilogue, optional bias / residual loads, stores
    whole_image = (h1 * w1 == g.out_h * g.out_w)
    store_transfers = np.where(whole_image, 1, b1 * co1)
    out_bytes = positions * c.OUT_ELEM_BYTES
    store_rows = np.where(whole_image | (w1 == g.out_w), 1, h1)
    store = dma_cycles(c, store_rows * np.where(whole_image, b1, 1),
                 out_bytes / (store_transfers * store_rows * np.where(whole_image, b1, 1)), store_transfers)
    extra_bytes = ((co1 if ep.bias else 0) + (co1 if ep.channel_shift else 0)
                   + (positions if ep.residual else 0)) * c.ACC_ELEM_BYTES
    extra_transfers = (1 if ep.bias else 0) + (1 if ep.channel_shift else 0) + (store_transfers if ep.residual else 0)
    # reset, epilogue ALU ops and the bias / residual loads (accumulator loads run on the compute module)
    tile_compute = ((1 + n_ep) * c.COMPUTE_LATENCY
                    + positions * (1 + n_ep * c.ALU_II)
                    + dma_cycles(c, 1, extra_bytes / np.maximum(extra_transfers, 1), extra_transfers))

    insns = chunks * (inp_transfers + 1 + 1 + 4) + tiles * (1 + n_ep + store_transfers
                                                            + extra_transfers + 4)
    fetch = insns * -(-INSN_BYTES // c.BUS_BYTES)
    overlap = threads > 1
    # one thread: a chunk's load waits for the previous GEMM; only the next tile's first load hides behind
    # the epilogue and the store. Several threads (a group of tiles at a time): loads and GEMMs overlap
    # in the chunk loop, but during the group's epilogues the loads can only prefetch one chunk a thread.
    serial = tiles * ((nci - 1) * (load_chunk + compute_chunk) + compute_chunk
                      + np.maximum(load_chunk, tile_compute + store))
    group_epilogue = threads * tile_compute
    prefetched = np.minimum(threads * load_chunk, group_epilogue)
    group = group_epilogue + threads * np.maximum(nci * compute_chunk,
                                                  nci * load_chunk - prefetched / threads)
    piped = np.maximum(tiles / threads * group, tiles * store) + load_chunk + store
    est = np.maximum(np.where(overlap, piped, serial), fetch)
    macs_blocks = g.nb * g.cob * g.out_h * g.out_w * g.cib * g.kh * g.kw / (g.sh * g.sw if g.transpose else 1)
    ideal = macs_blocks * c.GEMM_II
    total_in = chunks * inp_bytes
    total_wgt = chunks * wgt_bytes
    dram = total_in + total_wgt + tiles * (out_bytes + extra_bytes)
    transfers = chunks * (inp_transfers + 1) + tiles * (store_transfers + extra_transfers)
    macs = macs_blocks * c.BATCH * c.BLOCK_IN * c.BLOCK_OUT
    input_tensor = g.nb * g.cib_total * g.height * g.width * c.INP_ELEM_BYTES
    weight_tensor = g.cob * g.cib * g.kh * g.kw * c.WGT_ELEM_BYTES
    op = tmpl.op
    return {
        "log_b_inner": safe_log2(b1), "log_h_inner": safe_log2(h1), "log_w_inner": safe_log2(w1),
        "log_ci_inner": safe_log2(ci1), "log_co_inner": safe_log2(co1),
        "log_b_outer": safe_log2(nbt), "log_h_outer": safe_log2(nht), "log_w_outer": safe_log2(nwt),
        "log_ci_outer": safe_log2(nci), "log_co_outer": safe_log2(nco), "oc_nthread": tc, "h_nthread": th,
        "threads": threads, "double_buffered": overlap.astype(np.float64),
        "log_tiles": safe_log2(tiles), "log_positions": safe_log2(positions), "log_chunks_per_tile": safe_log2(nci),
        "log_chunks": safe_log2(chunks), "log_uops_per_kernel": safe_log2(uops),
        "log_gemm_iters_per_chunk": safe_log2(iters),
        "log_ideal_cycles": safe_log2(ideal) * one,
        "log_inp_elems": safe_log2(inp), "log_wgt_elems": safe_log2(wgt), "log_acc_elems": safe_log2(acc),
        "inp_frac": inp * threads / c.INP_BUFF_DEPTH, "wgt_frac": wgt * threads / c.WGT_BUFF_DEPTH,
        "acc_frac": acc * threads / c.ACC_BUFF_DEPTH, "uop_frac": uops * threads / c.UOP_BUFF_DEPTH,
        "halo_overhead": rows * cols / np.maximum(h1 * w1 * (1 if g.transpose else g.sh * g.sw), 1),
        "pad_fraction": 1 - real_rows * real_cols / (rows * cols),
        "input_reread": total_in / input_tensor, "weight_reread": total_wgt / weight_tensor,
        "log_dram_bytes": safe_log2(dram), "log_bytes_per_mac": safe_log2(dram / macs),
        "log_arith_intensity": safe_log2(iters * c.BATCH * c.BLOCK_IN * c.BLOCK_OUT / (inp_bytes + wgt_bytes)),
        "log_dma_transfers": safe_log2(transfers), "log_bytes_per_transfer": safe_log2(dram / transfers),
        "inp_transfers_per_chunk": inp_transfers, "store_transfers_per_tile": store_transfers,
        "whole_row_loads": (dense | whole_rows).astype(np.float64), "whole_image_stores": whole_image * one,
        "log_load_cycles_per_chunk": safe_log2(load_chunk), "log_compute_cycles_per_chunk": safe_log2(compute_chunk),
        "compute_over_load": safe_log2(compute_chunk / load_chunk), "log_insns": safe_log2(insns),
        "fetch_share": fetch / est, "log_est_cycles": safe_log2(est), "est_over_ideal": safe_log2(est / ideal),
        "kh_kw": g.kh * g.kw * one, "stride": g.sh * g.sw * one, "is_conv": float(op == "conv2d") * one,
        "is_group": float(op == "group_conv2d") * one, "is_transpose": float(g.transpose) * one,
        "is_dense": float(op == "dense") * one, "is_alu": 0 * one, "est_cycles": est,
    }



def check_channel_shifts(value: np.ndarray) -> None:
    """Refuse per-channel shift amounts outside 0..CHANNEL_SHIFT_MAX (what every VTA ALU shifts alike)."""
    v = np.asarray(value)
    if v.size and (v.min() < 0 or v.max() > CHANNEL_SHIFT_MAX):
        raise ScheduleError(f"channel_shr: per-channel shift amounts must lie in 0..{CHANNEL_SHIFT_MAX} (VTA's "
                            f"ALUs read a tensor shift's low bits differently beyond), got {int(v.min())}..{int(v.max())}")


def block_groups(op: str, cfg: HwConfig, ci: int, co: int, groups: int) -> int:
    """The groups the GEMM core runs for ``groups`` operator groups: the same when each group's channels are whole
    blocks (VTA's group_conv2d); else BLOCK-wide groups, each holding BLOCK / (channels per group) operator groups
    with a block-diagonal kernel (a depthwise convolution: one channel per group, BLOCK x the useful MACs, all exact
    since the other products are zeros). Refuses groups that neither form covers."""
    cin_g, cout_g = ci // groups, co // groups
    if groups == 1 or not (cin_g % cfg.BLOCK_IN or cout_g % cfg.BLOCK_OUT):
        return groups
    per_block_out = cout_g * cfg.BLOCK_IN // cin_g if cfg.BLOCK_IN % cin_g == 0 else 0
    wide = blocks(ci, cfg.BLOCK_IN)
    if not per_block_out or per_block_out % cfg.BLOCK_OUT or wide * per_block_out != blocks(co, cfg.BLOCK_OUT) * \
            cfg.BLOCK_OUT or ci % cin_g:
        raise ValueError(f"{op}: with groups={groups} each group's channels ({cin_g} in, {cout_g} out) must be "
                         f"multiples of BLOCK={cfg.BLOCK_IN} (VTA groups whole {cfg.BLOCK_IN}-channel blocks), or "
                         f"divide BLOCK with the groups of one block giving whole output blocks (block-diagonal)")
    return wide


# ------------------------------------------------------------------------------------------------------------
# the template

@register
class ConvTemplate(Template):
    """conv2d / group_conv2d / conv2d_transpose / dense with a fused epilogue, on the GEMM core."""

    ops = ("conv2d", "group_conv2d", "conv2d_transpose", "dense")
    inputs = ("data", "kernel", "bias", "residual", "channel_shr")
    Buffers = ConvBuffers
    graph_ops = ("nn.conv2d", "nn.conv2d_transpose", "nn.dense")
    kind = "conv"
    fusable_operands = ("bias", "residual", "channel_shr")
    input_dtypes: ClassVar[dict[str, str]] = {"data": "int8", "kernel": "int8", "bias": "int32", "residual": "int32",
                                              "channel_shr": "int32"}

    def __init__(self, op: str, cfg: HwConfig, epilogue: Epilogue, geometry: ConvGeometry,
                 shapes: dict[str, tuple[int, ...]], groups: int | None = None):
        super().__init__(op, cfg, epilogue)
        self.geometry, self.shapes = geometry, shapes
        # the operator's groups; the geometry's are BLOCK-wide groups when the operator's are narrower
        self.groups = geometry.groups if groups is None else groups

    @property
    def narrow_groups(self) -> bool:
        """Groups narrower than a channel block, run as BLOCK-wide groups with a block-diagonal kernel."""
        return self.groups != self.geometry.groups

    @property
    def model_macs(self) -> int:
        """The operator's own multiply-adds (no channel padding, no block-diagonal zeros); ``macs`` counts what
        the GEMM core executes."""
        s = self.shapes
        kernel = s["kernel"]
        if self.op == "dense":
            return s["out"][0] * s["out"][1] * kernel[1]
        if self.op == "conv2d_transpose":
            return int(np.prod(s["data"])) * int(np.prod(kernel[1:]))
        return int(np.prod(s["out"])) * int(np.prod(kernel[1:]))

    # ---- workload ----
    @classmethod
    def parse(cls, op: str, cfg: HwConfig, epilogue: tuple, workload: dict) -> ConvTemplate:
        only_known(op, workload, {"data_shape", "kernel_shape", "strides", "padding", "groups", "dilation"},
                   ("data_shape", "kernel_shape"))
        data_shape = as_ints("data_shape", workload["data_shape"])
        kernel_shape = as_ints("kernel_shape", workload["kernel_shape"])
        if op == "dense":
            extra = {"strides", "padding", "groups", "dilation"} & set(workload)
            if extra:
                raise ValueError(f"dense: {sorted(extra)} do not apply to dense")
            if len(data_shape) != 2 or len(kernel_shape) != 2 or data_shape[1] != kernel_shape[1]:
                raise ValueError(f"dense: data_shape (N, K) and kernel_shape (M, K) must agree on K, got "
                                 f"{data_shape} and {kernel_shape}")
            data4, kernel4 = (*data_shape, 1, 1), (*kernel_shape, 1, 1)
            strides, padding, groups, dilation = (1, 1), (0, 0), 1, (1, 1)
        else:
            data4, kernel4 = data_shape, kernel_shape
            strides = as_pair("strides", workload.get("strides", 1))
            padding = as_pair("padding", workload.get("padding", 0))
            groups = as_int("groups", workload.get("groups", 1))
            dilation = as_pair("dilation", workload.get("dilation", 1))
        if len(data4) != 4 or len(kernel4) != 4 or min(*data4, *kernel4) <= 0:
            raise ValueError(f"{op}: data_shape and kernel_shape need 4 positive dims, got {data_shape}, {kernel_shape}")
        n, ci, h, w = data4
        transpose = op == "conv2d_transpose"
        dense = op == "dense"
        check_extents(op, "data_shape", data_shape, ("N", "K") if dense else ("N", "C", "H", "W"))
        check_extents(op, "kernel_shape", kernel_shape, ("M", "K") if dense else
                      ("CI", "CO", "KH", "KW") if transpose else ("CO", "CI", "KH", "KW"))
        check_extents(op, "strides", strides, ("H", "W"))
        check_extents(op, "padding", padding, ("H", "W"))
        if transpose:
            ci_k, co, kh, kw = kernel4
            if groups != 1:
                raise ValueError("conv2d_transpose: groups must be 1")
        else:
            co, ci_k, kh, kw = kernel4
        if ci_k * (1 if transpose else groups) != ci:
            raise ValueError(f"{op}: kernel_shape {kernel_shape} does not match {ci} input channels with groups={groups}")
        if groups < 1 or ci % groups or co % groups:
            raise ValueError(f"{op}: groups={groups} must divide both {ci} input and {co} output channels")
        wide_groups = block_groups(op, cfg, ci, co, groups)
        if min(strides) < 1 or min(padding) < 0:
            raise ValueError(f"{op}: strides must be >= 1 and padding >= 0, got {strides}, {padding}")
        if min(dilation) < 1:
            raise ValueError(f"{op}: dilation must be >= 1, got {dilation}")
        if transpose and dilation != (1, 1):
            raise ValueError(f"conv2d_transpose: dilation must be 1, got {dilation}")
        check_extents(op, "dilation", dilation, ("H", "W"))
        geometry = ConvGeometry(
            nb=blocks(n, cfg.BATCH), cib=blocks(ci // wide_groups, cfg.BLOCK_IN), cob=blocks(co, cfg.BLOCK_OUT),
            groups=wide_groups, height=h, width=w, kh=kh, kw=kw, sh=strides[0], sw=strides[1], ph=padding[0],
            pw=padding[1], transpose=transpose, dh=dilation[0], dw=dilation[1])
        if geometry.out_h <= 0 or geometry.out_w <= 0:
            raise ValueError(f"{op}: the output would be empty ({geometry.out_h} x {geometry.out_w})")
        out_shape = (n, co) if op == "dense" else (n, co, geometry.out_h, geometry.out_w)
        shapes = {"data": data_shape, "kernel": kernel_shape, "out": out_shape}
        template = cls(op, cfg, Epilogue(epilogue), geometry, shapes, groups)
        check_buffer_sizes(template)
        return template

    # the epilogue tuning measures with: like a network's (bias / residual, then shift, clip, int8 store)
    def task_workload(self) -> dict:
        g, s = self.geometry, self.shapes
        wl = {"op": self.op, "data_shape": s["data"], "kernel_shape": s["kernel"], "bias": self.epilogue.bias,
              "residual": self.epilogue.residual}
        if self.op != "dense":
            wl.update(strides=(g.sh, g.sw), padding=(g.ph, g.pw))
        if self.epilogue.channel_shift:   # only when present: the keys of every earlier task stay as they were
            wl["channel_shr"] = True
        if self.op in ("conv2d", "group_conv2d"):
            wl["groups"] = self.groups
            if (g.dh, g.dw) != (1, 1):   # only when dilated: the keys of every earlier task stay as they were
                wl["dilation"] = (g.dh, g.dw)
        return wl

    @classmethod
    def task_program(cls, workload: dict) -> tuple[dict, tuple]:
        ops: list[tuple] = [("bias",)] if workload.get("bias") else []
        if workload.get("channel_shr"):
            ops.append(("channel_shr",))
        if workload.get("residual"):
            ops.append(("residual",))
        args = {k: tuple(v) if isinstance(v, list) else v for k, v in workload.items()
                if k in ("data_shape", "kernel_shape", "strides", "padding", "groups", "dilation")}
        return args, (*ops, ("shr", 8), ("clip", -127, 127))

    @classmethod
    def from_graph(cls, head, inputs, kinds, cfg: HwConfig) -> GraphHead | str | None:
        data, weight = inputs
        if kinds[1] == "tensor":
            return "its weight is not a constant"
        if (data.dtype, weight.dtype, head.dtype) != ("int8", "int8", "int32"):
            return f"needs int8 x int8 -> int32, got {data.dtype} x {weight.dtype} -> {head.dtype} (quantize first)"
        operands = {"data": data.name, "kernel": weight.name}
        if head.op == "nn.dense":
            op, workload = "dense", {"data_shape": data.shape, "kernel_shape": weight.shape}
        else:
            a = head.attrs
            pt, pl, pb, pr = a["padding"]
            if (pt, pl) != (pb, pr):
                return f"asymmetric padding {a['padding']} (the template pads symmetrically)"
            workload = {"data_shape": data.shape, "kernel_shape": weight.shape, "strides": a["strides"],
                        "padding": (pt, pl)}
            if tuple(a.get("dilation", (1, 1))) != (1, 1):
                workload["dilation"] = tuple(a["dilation"])
            if head.op == "nn.conv2d_transpose":
                if a["output_padding"] != (0, 0):
                    return f"output_padding {a['output_padding']} (the template supports (0, 0))"
                op = "conv2d_transpose"
            else:
                op = "group_conv2d" if a["groups"] > 1 else "conv2d"
                workload["groups"] = a["groups"]
        try:
            cls.parse(op, cfg, (), workload)   # the workload's own rules (e.g. groups of whole channel blocks)
        except (ValueError, ScheduleError) as e:
            return str(e)
        kernel_blocks = (cfg.BLOCK_IN, cfg.BLOCK_OUT) if op == "conv2d_transpose" else (cfg.BLOCK_OUT, cfg.BLOCK_IN)
        data_shape = padded_shape(data.shape, cfg.BATCH, cfg.BLOCK_IN)
        kernel_shape = padded_shape(weight.shape, *kernel_blocks)
        groups = workload.get("groups", 1)
        if groups > 1 and block_groups(op, cfg, data.shape[1], weight.shape[0], groups) != groups:
            # narrow groups: the padded channels become groups of their own (zero weights)
            cin_g, cout_g = weight.shape[1], weight.shape[0] // groups
            workload["groups"] = data_shape[1] // cin_g
            kernel_shape = (workload["groups"] * cout_g, *weight.shape[1:])
        workload.update(data_shape=data_shape, kernel_shape=kernel_shape)
        return GraphHead(op, workload, operands)

    # ---- schedule ----
    def space(self) -> ConfigSpace:
        return conv_space(self.geometry, dense=self.op == "dense")

    def check(self, config: Config) -> str | None:
        return check_config(self.cfg, self.geometry, tiling_of(config), self.epilogue)

    def default_config(self) -> Config:
        return default_config(self.cfg, self.geometry, self.epilogue, self.space())

    @property
    def macs(self) -> int:
        return self.geometry.macs(self.cfg)

    @property
    def flop(self) -> int:
        return 2 * self.macs

    def estimate(self, kv: dict) -> dict:
        return _estimate(self, kv)

    # ---- program and data ----
    def buffer_bytes(self) -> dict[str, int]:
        g, c = self.geometry, self.cfg
        b, bi, bo = c.BATCH, c.BLOCK_IN, c.BLOCK_OUT
        out = g.nb * g.cob * g.out_h * g.out_w * b * bo
        return {"data": g.nb * g.cib_total * g.height * g.width * b * bi, "kernel": g.cob * g.cib * g.kh * g.kw * bo * bi,
                "out": out, "bias": g.cob * b * bo * 4 if self.epilogue.bias else 0,
                "residual": out * 4 if self.epilogue.residual else 0,
                "channel_shr": g.cob * b * bo * 4 if self.epilogue.channel_shift else 0}

    def emit(self, queue: CommandQueue, config: Config, buffers: ConvBuffers) -> None:
        emit_conv(queue, self.geometry, tiling_of(config), self.epilogue, buffers)

    def check_inputs(self, inputs: dict) -> dict:
        s = self.shapes
        present = present_inputs(self, inputs, {"bias": "an epilogue with ('bias',)",
                                                "residual": "an epilogue with ('residual',)",
                                                "channel_shr": "an epilogue with ('channel_shr',)"})
        out = {"data": checked_array("data", present["data"], s["data"], ("int8",)),
               "kernel": checked_array("kernel", present["kernel"], s["kernel"], ("int8",))}
        if "bias" in present:
            out["bias"] = checked_array("bias", present["bias"], (s["out"][1],), ("int32",))
        if "channel_shr" in present:
            out["channel_shr"] = checked_array("channel_shr", present["channel_shr"], (s["out"][1],), ("int32",))
            check_channel_shifts(out["channel_shr"])
        if "residual" in present:
            out["residual"] = checked_array("residual", present["residual"], s["out"], ("int8", "int32"))
        return out

    def _nchw(self, a: np.ndarray) -> np.ndarray:
        return a.reshape(*a.shape, 1, 1) if self.op == "dense" else a

    def pack(self, name: str, value: np.ndarray) -> np.ndarray:
        c = self.cfg
        if name == "data":
            return pack_blocks(self._nchw(value), c.BATCH, c.BLOCK_IN)
        if name == "kernel":
            w = self._nchw(value)
            if self.narrow_groups:   # padded to the workload's output channels, then BLOCK-wide groups
                w = block_diagonal(pad_to(w, self.shapes["kernel"]), self.groups, c.BLOCK_IN)
            return pack_blocks(transposed_to_direct(w) if self.geometry.transpose else w, c.BLOCK_OUT, c.BLOCK_IN)
        if name in ("bias", "channel_shr"):
            if name == "channel_shr":
                check_channel_shifts(value)
            return pack_bias(value, self.geometry.cob, c.BATCH, c.BLOCK_OUT)
        return pack_blocks(self._nchw(value).astype(np.int32), c.BATCH, c.BLOCK_OUT)

    def unpack(self, name: str, raw: np.ndarray) -> np.ndarray:
        g, c, s = self.geometry, self.cfg, self.shapes
        if name in ("bias", "channel_shr"):
            return np.ascontiguousarray(raw.view(np.int32).reshape(g.cob, c.BATCH, c.BLOCK_OUT)[:, 0].reshape(-1)
                                        [:s["out"][1]])
        if name == "kernel":
            packed = raw.view(np.int8).reshape(g.cob, g.cib, g.kh, g.kw, c.BLOCK_OUT, c.BLOCK_IN)
            if self.narrow_groups:
                wide = unpack_blocks(packed, s["kernel"][0], c.BLOCK_IN)
                return from_block_diagonal(wide, self.groups, s["kernel"][1])
            direct = unpack_blocks(packed, *(s["kernel"][1::-1] if g.transpose else s["kernel"][:2]))
            natural = np.ascontiguousarray(direct[:, :, ::-1, ::-1].transpose(1, 0, 2, 3)) if g.transpose else direct
            return natural.reshape(s["kernel"])
        if name == "data":
            packed = raw.view(np.int8).reshape(g.nb, g.cib_total, g.height, g.width, c.BATCH, c.BLOCK_IN)
            return unpack_blocks(packed, *s["data"][:2]).reshape(s["data"])
        packed = raw.view(np.int32).reshape(g.nb, g.cob, g.out_h, g.out_w, c.BATCH, c.BLOCK_OUT)   # residual
        return unpack_blocks(packed, *s["out"][:2]).reshape(s["out"])

    def unpack_output(self, raw: np.ndarray) -> np.ndarray:
        g, c = self.geometry, self.cfg
        n, co = self.shapes["out"][:2]
        packed = raw.view(np.int8).reshape(g.nb, g.cob, g.out_h, g.out_w, c.BATCH, c.BLOCK_OUT)
        out = unpack_blocks(packed, n, co)
        return out.reshape(out.shape[:2]) if self.op == "dense" else out

    def reference(self, data, kernel, bias=None, residual=None, channel_shr=None) -> np.ndarray:
        g = self.geometry
        x, w = self._nchw(data), self._nchw(kernel)
        if g.transpose:   # int8 products summed in float64 are exact
            acc = conv2d_transpose_scatter(x, w, (g.sh, g.sw), (g.ph, g.pw, g.ph, g.pw), dtype=np.float64)
            acc = acc.astype(np.int64)
        else:
            acc = conv2d_int(x, w, (g.sh, g.sw), (g.ph, g.pw, g.ph, g.pw), (g.dh, g.dw), groups=self.groups)
        res = None if residual is None else self._nchw(residual)
        out = reference_epilogue(acc, self.epilogue.ops, bias, res, channel_shr)
        return out.reshape(out.shape[:2]) if self.op == "dense" else out

    def random_inputs(self, rng: np.random.Generator) -> dict:
        """int8 data / weights in [-128, 128), int32 bias and residual in +-2^14 (VTA's test ranges)."""
        s = self.shapes
        out = {"data": rng.integers(-128, 128, s["data"], dtype=np.int8),
               "kernel": rng.integers(-128, 128, s["kernel"], dtype=np.int8)}
        if self.epilogue.bias:
            out["bias"] = rng.integers(-(1 << 14), 1 << 14, s["out"][1]).astype(np.int32)
        if self.epilogue.residual:
            out["residual"] = rng.integers(-(1 << 14), 1 << 14, s["out"]).astype(np.int32)
        if self.epilogue.channel_shift:
            out["channel_shr"] = rng.integers(0, CHANNEL_SHIFT_MAX + 1, s["out"][1]).astype(np.int32)
        return out
