"""Features of a config for the cost model: knob values and the program's loop and traffic structure.

A tree model learns a template's cost surface from far fewer samples when it sees, besides the raw knob
values, the quantities the cycles actually depend on: how many output tiles and reduction chunks the
program walks (instruction and DMA overheads), how much work one GEMM instruction does, how many bytes
each chunk moves (input re-read once per channel tile, weights once per spatial tile), how full the SRAM
is, whether two virtual threads overlap loads with compute, and a rough analytical cycle estimate from
the simulator's DMA / compute formulas. Everything is computed with numpy from the geometry and the
tiling (nothing is emitted), vectorised over many configs: scoring a whole space takes milliseconds.

The vector has the same length and meaning for every template (conv2d, group_conv2d, conv2d_transpose,
dense and the element-wise ALU ops), and most entries are per-task normalised (fractions, ratios to the
ideal), so records of one task help to rank the configs of another (transfer learning).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from hw_config import HwConfig
from tuning.task import Task
from vta.ops import AluOp, ConvOp
from vta.space import ConfigSpace
from vta.templates import alu as alu_t
from vta.templates import conv as conv_t

INSN_BYTES = 16  # one VTA instruction: what the fetch module reads per instruction

_NAMES = (
    # knob values (log2 of split factors, thread counts)
    "log_b_inner", "log_h_inner", "log_w_inner", "log_ci_inner", "log_co_inner",
    "log_b_outer", "log_h_outer", "log_w_outer", "log_ci_outer", "log_co_outer",
    "oc_nthread", "h_nthread", "threads", "double_buffered",
    # loop structure
    "log_tiles", "log_positions", "log_chunks_per_tile", "log_chunks", "log_uops_per_kernel",
    "log_gemm_iters_per_chunk", "log_ideal_cycles",
    # SRAM use per tile (one thread) and its fraction of the buffers (all threads)
    "log_inp_elems", "log_wgt_elems", "log_acc_elems", "inp_frac", "wgt_frac", "acc_frac", "uop_frac",
    "halo_overhead", "pad_fraction",
    # DRAM traffic
    "input_reread", "weight_reread", "log_dram_bytes", "log_bytes_per_mac", "log_arith_intensity",
    "log_dma_transfers", "log_bytes_per_transfer", "inp_transfers_per_chunk", "store_transfers_per_tile",
    "whole_row_loads", "whole_image_stores",
    # analytical timing estimate (simulator formulas, no dependencies modelled)
    "log_load_cycles_per_chunk", "log_compute_cycles_per_chunk", "compute_over_load",
    "log_insns", "fetch_share", "log_est_cycles", "est_over_ideal",
    # template kind
    "kh_kw", "stride", "is_conv", "is_group", "is_transpose", "is_dense", "is_alu",
)


def feature_names() -> list[str]:
    """Names of the entries of ``config_features`` (same for every template)."""
    return list(_NAMES)


N_FEATURES = len(_NAMES)


@dataclass(frozen=True)
class _TaskInfo:
    kind: str               # "conv" or "alu"
    op: str
    cfg: HwConfig
    geometry: Any
    epilogue: Any           # conv.Epilogue or the ALU's epilogue op tuple
    n_epilogue_kernels: int


def task_info(task: Task) -> _TaskInfo:
    """What the features need from a task (its compiled default op holds the geometry)."""
    op = task.default_op
    if isinstance(op, ConvOp):
        ep = op.epilogue
        n_ep = sum(len(conv_t.alu_immediates(o)) if o[0] not in ("bias", "residual") else 1 for o in ep.ops)
        return _TaskInfo("conv", task.op, task.cfg, op.geometry, ep, n_ep)
    if isinstance(op, AluOp):
        n_ep = len(alu_t.alu_ops(op.geometry, op.epilogue))
        return _TaskInfo("alu", task.op, task.cfg, op.geometry, op.epilogue, n_ep)
    raise TypeError(f"no features for {type(op).__name__}")


def space_genes(space: ConfigSpace, indices: np.ndarray) -> np.ndarray:
    """(N, n_knobs) option indices of space indices (the space's mixed radix, last knob fastest)."""
    idx = np.asarray(indices, dtype=np.int64).copy()
    genes = np.empty((idx.size, len(space.knobs)), dtype=np.int64)
    for k in range(len(space.knobs) - 1, -1, -1):
        n = len(space.knobs[k].options)
        genes[:, k] = idx % n
        idx //= n
    return genes


def gene_indices(space: ConfigSpace, genes: np.ndarray) -> np.ndarray:
    """Space indices of (N, n_knobs) option-index rows (inverse of ``space_genes``)."""
    genes = np.asarray(genes, dtype=np.int64).reshape(-1, len(space.knobs))
    idx = np.zeros(len(genes), dtype=np.int64)
    for k, knob in enumerate(space.knobs):
        idx = idx * len(knob.options) + genes[:, k]
    return idx


def _knob_arrays(space: ConfigSpace, genes: np.ndarray) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """knob name -> (inner or value, outer or 1) as float arrays over the configs."""
    out = {}
    for k, knob in enumerate(space.knobs):
        if knob.is_split:
            outer = np.array([o[0] for o in knob.options], dtype=np.float64)
            inner = np.array([o[1] for o in knob.options], dtype=np.float64)
        else:
            inner = np.array(knob.options, dtype=np.float64)
            outer = np.ones(len(knob.options))
        out[knob.name] = (inner[genes[:, k]], outer[genes[:, k]])
    return out


def _dma(cfg: HwConfig, rows, row_bytes, transfers):
    """The simulator's DMA time: latency per transfer plus, per row, its beats and burst gaps."""
    beats = np.ceil(row_bytes / cfg.BUS_BYTES)
    bursts = np.ceil(beats / cfg.DMA_BURST_BEATS)
    return transfers * (cfg.DRAM_LATENCY + rows * (beats + bursts * cfg.DMA_BURST_GAP))


def _log2(x) -> np.ndarray:
    return np.log2(np.maximum(np.asarray(x, dtype=np.float64), 1e-9))


def features_of_genes(task: Task, genes: np.ndarray, info: _TaskInfo | None = None) -> np.ndarray:
    """(N, N_FEATURES) float32 features of the configs given as option-index rows of ``task.space``."""
    info = info or task_info(task)
    genes = np.asarray(genes, dtype=np.int64).reshape(-1, len(task.space.knobs))
    kv = _knob_arrays(task.space, genes)
    one = np.ones(len(genes))
    f = _conv_features(info, kv, one) if info.kind == "conv" else _alu_features(info, kv, one)
    missing = set(_NAMES) - set(f)
    if missing:  # a programming error, never a user's
        raise AssertionError(f"features not computed: {sorted(missing)}")
    return np.stack([np.broadcast_to(np.asarray(f[n], dtype=np.float64), one.shape) for n in _NAMES],
                    axis=1).astype(np.float32)


def features_of_indices(task: Task, indices, info: _TaskInfo | None = None) -> np.ndarray:
    return features_of_genes(task, space_genes(task.space, np.asarray(indices)), info)


def config_features(task: Task, config: dict) -> np.ndarray:
    """The feature vector of one config (``feature_names()`` names its entries)."""
    return features_of_indices(task, [task.space.index_of(config)])[0]


def _get(kv, name, one):
    return kv.get(name, (one, one))


def _conv_features(info: _TaskInfo, kv, one) -> dict[str, np.ndarray]:
    g: conv_t.ConvGeometry = info.geometry
    c = info.cfg
    (b1, nbt), (h1, nht), (w1, nwt) = (_get(kv, k, one) for k in ("tile_b", "tile_h", "tile_w"))
    (ci1, nci), (co1, nco) = kv["tile_ci"], kv["tile_co"]
    tc, th = kv["oc_nthread"][0], _get(kv, "h_nthread", one)[0]
    # the template's own formulas, evaluated on arrays of tilings (one lane per config)
    t = conv_t.Tiling(b1=b1, h1=h1, w1=w1, ci1=ci1, co1=co1, tc=tc, th=th)
    positions, threads = t.positions, t.threads
    tiles = nbt * nht * nwt * nco
    chunks = tiles * nci
    rows, cols = conv_t.rows_in(g, t, True), conv_t.rows_in(g, t, False)
    if g.transpose:
        uops = g.kw * g.kh * positions / (g.sh * g.sw)  # the zero-skipping keeps about 1 / (sh * sw) of them
        iters = ci1 * uops
    else:
        uops = g.kw * positions
        iters = ci1 * g.kh * uops
    real_rows, real_cols = np.minimum(rows, g.height), np.minimum(cols, g.width)
    ep: conv_t.Epilogue = info.epilogue
    need = conv_t.sram_needs(g, t, ep)
    inp, wgt, acc = need["inp"], need["wgt"], need["acc"]

    # loads of one chunk, as _load_chunk emits them
    dense = g.height == g.width == 1 and g.kh == g.kw == 1
    whole_rows = (real_cols == g.width) & (cols == g.width) & (real_rows == rows)
    inp_transfers = np.where(dense | whole_rows, b1, b1 * ci1)
    inp_rows = np.where(dense, 1, np.where(whole_rows, ci1, real_rows))
    inp_row_elems = np.where(dense, ci1 * b1, np.where(whole_rows, real_rows * real_cols, real_cols))
    inp_row_bytes = inp_row_elems * c.INP_ELEM_BYTES
    inp_bytes = b1 * ci1 * real_rows * real_cols * c.INP_ELEM_BYTES
    padded = b1 * ci1 * (rows * cols - real_rows * real_cols)
    ld_inp = _dma(c, inp_rows, inp_row_bytes, inp_transfers) + padded
    wgt_bytes = wgt * c.WGT_ELEM_BYTES
    wgt_contig = ci1 == g.cib
    ld_wgt = _dma(c, np.where(wgt_contig, 1, co1), np.where(wgt_contig, wgt_bytes, wgt_bytes / co1), 1)
    load_chunk = ld_inp + ld_wgt
    compute_chunk = c.COMPUTE_LATENCY + iters * c.GEMM_II

    # per output tile: reset, epilogue, optional bias / residual loads, stores
    whole_image = (h1 * w1 == g.out_h * g.out_w)
    store_transfers = np.where(whole_image, 1, b1 * co1)
    out_bytes = positions * c.OUT_ELEM_BYTES
    store_rows = np.where(whole_image | (w1 == g.out_w), 1, h1)
    store = _dma(c, store_rows * np.where(whole_image, b1, 1),
                 out_bytes / (store_transfers * store_rows * np.where(whole_image, b1, 1)), store_transfers)
    extra_bytes = ((co1 if ep.bias else 0) + (positions if ep.residual else 0)) * c.ACC_ELEM_BYTES
    extra_transfers = (1 if ep.bias else 0) + (store_transfers if ep.residual else 0)
    # reset, epilogue ALU ops and the bias / residual loads (accumulator loads run on the compute module)
    tile_compute = ((1 + info.n_epilogue_kernels) * c.COMPUTE_LATENCY
                    + positions * (1 + info.n_epilogue_kernels * c.ALU_II)
                    + _dma(c, 1, extra_bytes / np.maximum(extra_transfers, 1), extra_transfers))

    insns = chunks * (inp_transfers + 1 + 1 + 4) + tiles * (1 + info.n_epilogue_kernels + store_transfers
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
    op = info.op
    return {
        "log_b_inner": _log2(b1), "log_h_inner": _log2(h1), "log_w_inner": _log2(w1),
        "log_ci_inner": _log2(ci1), "log_co_inner": _log2(co1),
        "log_b_outer": _log2(nbt), "log_h_outer": _log2(nht), "log_w_outer": _log2(nwt),
        "log_ci_outer": _log2(nci), "log_co_outer": _log2(nco), "oc_nthread": tc, "h_nthread": th,
        "threads": threads, "double_buffered": overlap.astype(np.float64),
        "log_tiles": _log2(tiles), "log_positions": _log2(positions), "log_chunks_per_tile": _log2(nci),
        "log_chunks": _log2(chunks), "log_uops_per_kernel": _log2(uops),
        "log_gemm_iters_per_chunk": _log2(iters),
        "log_ideal_cycles": _log2(ideal) * one,
        "log_inp_elems": _log2(inp), "log_wgt_elems": _log2(wgt), "log_acc_elems": _log2(acc),
        "inp_frac": inp * threads / c.INP_BUFF_DEPTH, "wgt_frac": wgt * threads / c.WGT_BUFF_DEPTH,
        "acc_frac": acc * threads / c.ACC_BUFF_DEPTH, "uop_frac": uops * threads / c.UOP_BUFF_DEPTH,
        "halo_overhead": rows * cols / np.maximum(h1 * w1 * (1 if g.transpose else g.sh * g.sw), 1),
        "pad_fraction": 1 - real_rows * real_cols / (rows * cols),
        "input_reread": total_in / input_tensor, "weight_reread": total_wgt / weight_tensor,
        "log_dram_bytes": _log2(dram), "log_bytes_per_mac": _log2(dram / macs),
        "log_arith_intensity": _log2(iters * c.BATCH * c.BLOCK_IN * c.BLOCK_OUT / (inp_bytes + wgt_bytes)),
        "log_dma_transfers": _log2(transfers), "log_bytes_per_transfer": _log2(dram / transfers),
        "inp_transfers_per_chunk": inp_transfers, "store_transfers_per_tile": store_transfers,
        "whole_row_loads": (dense | whole_rows).astype(np.float64), "whole_image_stores": whole_image * one,
        "log_load_cycles_per_chunk": _log2(load_chunk), "log_compute_cycles_per_chunk": _log2(compute_chunk),
        "compute_over_load": _log2(compute_chunk / load_chunk), "log_insns": _log2(insns),
        "fetch_share": fetch / est, "log_est_cycles": _log2(est), "est_over_ideal": _log2(est / ideal),
        "kh_kw": g.kh * g.kw * one, "stride": g.sh * g.sw * one, "is_conv": float(op == "conv2d") * one,
        "is_group": float(op == "group_conv2d") * one, "is_transpose": float(g.transpose) * one,
        "is_dense": float(op == "dense") * one, "is_alu": 0 * one,
    }


def _alu_features(info: _TaskInfo, kv, one) -> dict[str, np.ndarray]:
    """The ALU template in the conv template's terms: no reduction, operands DMA'd into the accumulator,
    two accumulator halves (always double buffered)."""
    g: alu_t.AluGeometry = info.geometry
    c = info.cfg
    (co1, nco), (h1, nht), (w1, nwt) = kv["tile_co"], kv["tile_h"], kv["tile_w"]
    positions = co1 * h1 * w1
    tiles = g.nb * nco * nht * nwt
    operands = 2 if g.tensor_rhs else 1
    acc = positions * operands
    contiguous = w1 == g.width
    rows = np.where(contiguous, 1, h1)
    row_bytes = np.where(contiguous, h1 * w1, w1) * c.ACC_ELEM_BYTES
    load = _dma(c, rows, row_bytes, co1 * operands)
    compute = info.n_epilogue_kernels * (c.COMPUTE_LATENCY + positions * c.ALU_II)
    store = _dma(c, rows, row_bytes / c.ACC_ELEM_BYTES * c.OUT_ELEM_BYTES, co1)
    est = tiles * np.maximum(load + store, compute)
    insns = tiles * (co1 * (operands + 1) + info.n_epilogue_kernels + 4)
    fetch = insns * -(-INSN_BYTES // c.BUS_BYTES)
    est = np.maximum(est, fetch)
    elems = g.nb * g.cob * g.height * g.width
    ideal = elems * c.ALU_II * info.n_epilogue_kernels
    in_bytes = tiles * positions * operands * c.ACC_ELEM_BYTES
    dram = in_bytes + elems * c.OUT_ELEM_BYTES
    transfers = tiles * co1 * (operands + 1)
    ops_elems = elems * c.BATCH * c.BLOCK_OUT
    z = 0 * one
    return {
        "log_b_inner": z, "log_h_inner": _log2(h1), "log_w_inner": _log2(w1), "log_ci_inner": z,
        "log_co_inner": _log2(co1), "log_b_outer": _log2(g.nb) * one, "log_h_outer": _log2(nht),
        "log_w_outer": _log2(nwt), "log_ci_outer": z, "log_co_outer": _log2(nco), "oc_nthread": one,
        "h_nthread": one, "threads": one, "double_buffered": one,
        "log_tiles": _log2(tiles), "log_positions": _log2(positions), "log_chunks_per_tile": z,
        "log_chunks": _log2(tiles), "log_uops_per_kernel": z, "log_gemm_iters_per_chunk": _log2(positions),
        "log_ideal_cycles": _log2(ideal) * one,
        "log_inp_elems": z, "log_wgt_elems": z, "log_acc_elems": _log2(acc), "inp_frac": z, "wgt_frac": z,
        "acc_frac": acc * alu_t.HALVES / c.ACC_BUFF_DEPTH,
        "uop_frac": info.n_epilogue_kernels / c.UOP_BUFF_DEPTH * one,
        "halo_overhead": one, "pad_fraction": z, "input_reread": one, "weight_reread": z,
        "log_dram_bytes": _log2(dram) * one, "log_bytes_per_mac": _log2(dram / ops_elems) * one,
        "log_arith_intensity": _log2(positions * c.BATCH * c.BLOCK_OUT / (acc * c.ACC_ELEM_BYTES)),
        "log_dma_transfers": _log2(transfers), "log_bytes_per_transfer": _log2(dram / transfers),
        "inp_transfers_per_chunk": co1 * operands, "store_transfers_per_tile": co1,
        "whole_row_loads": contiguous.astype(np.float64),
        "whole_image_stores": (h1 * w1 == g.height * g.width) * one,
        "log_load_cycles_per_chunk": _log2(load), "log_compute_cycles_per_chunk": _log2(compute),
        "compute_over_load": _log2(compute / load), "log_insns": _log2(insns), "fetch_share": fetch / est,
        "log_est_cycles": _log2(est), "est_over_ideal": _log2(est / ideal),
        "kh_kw": one, "stride": one, "is_conv": z, "is_group": z, "is_transpose": z, "is_dense": z,
        "is_alu": one,
    }
