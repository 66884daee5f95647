"""Calibration inputs a user brings (``vta run --calibrate FILE.npz``) and how the quantized network compares with
the float one on them (``quantization_report``: cosine similarity, top-1 / top-5 agreement).

A calibration file is an ``.npz`` archive with one array per model input, named as the input: either the input's
own shape (one batch) or that shape with a leading count of batches, ``(K, *shape)``. Float arrays are converted
to the input's dtype; every value must be finite.
"""

from __future__ import annotations

import zipfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from graph_pack.graph import Graph
from graph_pack.reference import evaluate

MAX_BATCHES = 4096


def load_calibration(path: str | Path, graph: Graph) -> list[dict[str, np.ndarray]]:
    """The batches of ``path`` (an .npz of the graph's inputs by name), each a dict input name -> array; a
    ValueError naming what is wrong (the file, an input name, a shape, a dtype, a value) otherwise."""
    where = f"--calibrate {path}"
    try:
        archive = np.load(path, allow_pickle=False)
    except FileNotFoundError:
        raise ValueError(f"{where}: no such file (give a .npz archive of the model's inputs by name, as numpy.savez "
                         "writes it, or a mode: max, percentile, global_scale)") from None
    except IsADirectoryError:
        raise ValueError(f"{where}: a directory, not a .npz archive") from None
    except (ValueError, OSError, EOFError, zipfile.BadZipFile):
        raise ValueError(f"{where}: not a .npz archive (numpy.savez of the model's inputs by name)") from None
    if not hasattr(archive, "files"):   # numpy.load gave one array: a .npy file
        raise ValueError(f"{where}: a single .npy array, not a .npz archive: save it with numpy.savez(FILE, "
                         f"{graph.inputs[0]}=array)")
    with archive:
        names = list(archive.files)
        unknown = [n for n in names if n not in graph.inputs]
        if unknown:
            raise ValueError(f"{where}: array {unknown[0]!r} is not an input of the model; its inputs: "
                             f"{', '.join(graph.inputs)}")
        missing = [n for n in graph.inputs if n not in names]
        if missing:
            raise ValueError(f"{where}: no array for the model's input {missing[0]!r} (it holds "
                             f"{', '.join(names) or 'nothing'})")
        try:
            arrays = {n: archive[n] for n in graph.inputs}
        except (ValueError, OSError, zipfile.BadZipFile) as e:
            raise ValueError(f"{where}: an array cannot be read ({e})") from None
    counts = {}
    for name, a in arrays.items():
        shape, dtype = graph[name].shape, np.dtype(graph[name].dtype)
        if a.shape == shape:
            arrays[name] = a[None]
        elif a.shape[1:] != shape or not 1 <= a.shape[0] <= MAX_BATCHES:
            raise ValueError(f"{where}: array {name!r} has shape {a.shape}; the input is {shape}: give {shape} (one "
                             f"batch) or (K, {', '.join(map(str, shape))}) with 1 <= K <= {MAX_BATCHES}")
        if a.dtype != dtype and not (a.dtype.kind in "fiu" and dtype.kind == "f"):
            raise ValueError(f"{where}: array {name!r} is {a.dtype}; the input is {dtype}")
        if a.dtype.kind == "f" and not np.isfinite(a).all():
            raise ValueError(f"{where}: array {name!r} holds NaN or infinite values")
        arrays[name] = arrays[name].astype(dtype, copy=False)
        counts[name] = arrays[name].shape[0]
    if len(set(counts.values())) > 1:
        raise ValueError(f"{where}: the inputs hold different numbers of batches: "
                         + ", ".join(f"{n} {k}" for n, k in counts.items()))
    k = next(iter(counts.values()))
    return [{n: arrays[n][i] for n in graph.inputs} for i in range(k)]


@dataclass(frozen=True)
class QuantizationReport:
    """The quantized network against the float one on the same batches: the cosine similarity of their first outputs
    (all batches together; the worst batch's too), and, for a classifier's (N, classes) output, top-1 agreement
    (the same class first) and top-5 agreement (the float network's first class among the quantized network's top
    five), over ``samples`` rows."""

    mode: str
    batches: int
    samples: int
    cosine: float
    worst_cosine: float
    top1: float | None
    top5: float | None

    def format(self) -> str:
        text = (f"quantization ({self.mode}) against the float network on {self.batches} calibration batch(es): "
                f"cosine similarity {self.cosine:.5f} (worst batch {self.worst_cosine:.5f})")
        if self.top1 is not None:
            text += (f", top-1 agreement {100 * self.top1:.1f} %, top-5 agreement {100 * self.top5:.1f} % "
                     f"({self.samples} sample(s))")
        return text


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    """Cosine similarity of two arrays as flat float64 vectors (1.0 for two zero arrays)."""
    a, b = np.ravel(a).astype(np.float64), np.ravel(b).astype(np.float64)
    na, nb = np.linalg.norm(a), np.linalg.norm(b)
    if na == 0 or nb == 0:
        return 1.0 if na == nb else 0.0
    return float(a @ b / (na * nb))


def quantization_report(graph: Graph, params: dict, qgraph: Graph, qparams: dict,
                        dataset: Iterable[dict[str, np.ndarray]], mode: str = "") -> QuantizationReport:
    """Run the float ``graph`` and the quantized ``qgraph`` (numpy references) on every batch of ``dataset`` and
    compare their first outputs (see QuantizationReport)."""
    floats, quants = [], []
    for inputs in dataset:
        floats.append(evaluate(graph, params, inputs)[graph.outputs[0]])
        quants.append(evaluate(qgraph, qparams, inputs)[qgraph.outputs[0]])
    if not floats:
        raise ValueError("quantization_report needs at least one batch in dataset")
    f, q = np.concatenate([a.reshape(len(a), -1) for a in floats]), np.concatenate([a.reshape(len(a), -1)
                                                                                     for a in quants])
    top1 = top5 = None
    if floats[0].ndim == 2 and floats[0].shape[1] > 1:
        order = np.argsort(-q, axis=1, kind="stable")[:, :5]
        first = np.argmax(f, axis=1)
        top1 = float(np.mean(order[:, 0] == first))
        top5 = float(np.mean((order == first[:, None]).any(axis=1)))
    return QuantizationReport(mode, len(floats), len(f), cosine(f, q),
                              min(cosine(a, b) for a, b in zip(floats, quants)), top1, top5)
