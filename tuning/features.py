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

import numpy as np

from tuning.task import Task
from vta.space import ConfigSpace
from vta.templates import Template

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


def task_info(task: Task) -> Template:
    """What the features need from a task: its template instance (geometry, epilogue, analytical model)."""
    return task.template


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


def features_of_genes(task: Task, genes: np.ndarray, info: Template | None = None) -> np.ndarray:
    """(N, N_FEATURES) float32 features of the configs given as option-index rows of ``task.space``: the
    template's analytical model (``Template.estimate``) evaluated on arrays of knob values."""
    info = info or task_info(task)
    genes = np.asarray(genes, dtype=np.int64).reshape(-1, len(task.space.knobs))
    one = np.ones(len(genes))
    f = info.estimate(_knob_arrays(task.space, genes))
    if "log_est_cycles" not in f:   # a template that gives only its estimate
        f["log_est_cycles"] = np.log2(np.maximum(np.asarray(f["est_cycles"], dtype=np.float64), 1e-9))
    return np.stack([np.broadcast_to(np.asarray(f.get(n, 0.0), dtype=np.float64), one.shape) for n in _NAMES],
                    axis=1).astype(np.float32)


def features_of_indices(task: Task, indices, info: Template | None = None) -> np.ndarray:
    return features_of_genes(task, space_genes(task.space, np.asarray(indices)), info)


def config_features(task: Task, config: dict) -> np.ndarray:
    """The feature vector of one config (``feature_names()`` names its entries)."""
    return features_of_indices(task, [task.space.index_of(config)])[0]
