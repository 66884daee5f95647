"""ONNX frontend: ``from_onnx(model, shape)`` -> ``(graph, params)`` in the Relay-named graph IR.

This is the one module that imports ``onnx`` (lazily, so the rest of graph_pack works without it). The
whole model is scanned first, so an unsupported model fails with one message that lists every op it
would need, not one op per attempt. Initializers and ``Constant`` nodes are kept as numpy values and only
become ``const`` nodes where an op reads them as a tensor; shape-like inputs (Reshape's shape, Clip's
bounds, Resize's scales) are read at import time. A node whose inputs are all constant is evaluated at
import time with the reference kernels. IR node names are the ONNX output tensor names, so a user can
select nodes (``find_nodes``, start/stop names) by the names Netron shows.

A model is untrusted input: every check comes before the allocation or the work it guards. The file is
parsed from its bytes (no format guessing), external data must lie inside the model's directory, and no
tensor (declared input, initializer, constant, folded value or any node's output, computed from the shape
rules before anything runs) may exceed ``max_tensor_bytes``; all constants together may not exceed
``max_model_bytes``. Only an input's first (batch) dimension is ever inferred; other dynamic dimensions need
``shape=``. A node over constants that would take more than ``FOLD_MAX_MACS`` multiply-adds (a convolution,
dense or pooling) is not evaluated at import: it stays in the graph and runs with the model.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from graph_pack import passes
from graph_pack.graph import Graph, GraphBuilder, GraphError, TensorType
from graph_pack.opdefs import RESIZE_COORDINATES, pool_out
from graph_pack.reference import run_reference

if TYPE_CHECKING:
    import onnx

Params = dict[str, np.ndarray]


def _onnx():
    """The onnx module, or an ImportError that says how to get it."""
    try:
        import onnx
    except ImportError as e:
        raise ImportError("from_onnx needs the onnx package: pip install 'vta-stack[onnx]'") from e
    except Exception as e:   # e.g. protobuf's VersionError: a later install downgraded protobuf under onnx
        raise ImportError(f"the onnx package is installed but cannot load ({type(e).__name__}: "
                          f"{str(e).splitlines()[0][:200]}): reinstall the extras in one command, e.g. "
                          "pip install -e '.[onnx,pynq]', so that pip picks versions that fit together") from e
    return onnx


# VGG-16's largest weight (fc6) is 392 MiB, and so is ResNet-50's largest activation at batch 128
DEFAULT_MAX_TENSOR_BYTES = 512 << 20
DEFAULT_MAX_MODEL_BYTES = 2 << 30    # the file, its external data, the constants read and folded from them
PROTOBUF_MAX_BYTES = (2 << 30) - 1   # protobuf cannot parse a larger message (put weights in external data)
FOLD_MAX_MACS = 1 << 28              # conv/dense/pooling over constants costlier than this is not folded


def from_onnx(model: onnx.ModelProto | str | os.PathLike[str],
              shape: dict[str, tuple[int, ...]] | None = None, batch: int | None = None, *,
              max_tensor_bytes: int = DEFAULT_MAX_TENSOR_BYTES,
              max_model_bytes: int = DEFAULT_MAX_MODEL_BYTES) -> tuple[Graph, Params]:
    """Convert an ONNX model (a ``ModelProto`` or a path to a .onnx file) to ``(graph, params)``.

    ``shape`` maps input names to shapes; it overrides the declared shape, and is required for an input
    whose dimensions other than the first are dynamic (symbolic, unknown, zero or negative). ``batch``, when
    given, fills a dynamic first (batch) dimension of the inputs ``shape`` does not name; nothing else is
    ever filled in. ``max_tensor_bytes`` bounds every tensor (a declared input, an initializer, a folded
    constant, any node's output) and ``max_model_bytes`` the file and all constants together; both are
    checked before anything is allocated. Every problem is a ``GraphError`` of one line that names the
    file (when given a path), the node and what is wrong. The result has been through ``passes.simplify``
    (batch norms folded, identities removed), like every frontend's.
    """
    onnx = _onnx()
    budget = _Budget(_positive_int(max_tensor_bytes, "max_tensor_bytes"),
                     _positive_int(max_model_bytes, "max_model_bytes"))
    if batch is not None:
        batch = _positive_int(batch, "batch")
    if not isinstance(model, (str, os.PathLike)):
        if not isinstance(model, onnx.ModelProto):
            raise GraphError(f"from_onnx expects an onnx.ModelProto or a path, got {type(model).__name__}")
        return _from_model(onnx, model, shape, batch, budget)
    path = Path(model)
    try:
        return _from_model(onnx, _load(onnx, path, budget), shape, batch, budget)
    except GraphError as e:
        raise GraphError(f"{path}: {e}") from None


def _from_model(onnx, model, shape, batch, budget: _Budget) -> tuple[Graph, Params]:
    if not model.HasField("graph"):
        raise GraphError("the model has no graph (not an ONNX model, or an empty or truncated file)")
    _check_text(model)
    if not model.graph.output:
        raise GraphError("the model's graph has no outputs (not an ONNX model, or an empty or truncated file)")
    _check_supported(model.graph)
    external = [t.name for t in _all_tensors(model.graph) if t.data_location == onnx.TensorProto.EXTERNAL]
    if external:
        raise GraphError(f"tensor(s) {external[:5]} keep their data in external files that were not loaded; "
                         f"pass the model's path to from_onnx, which reads them from the model's directory")
    conv = _Converter(onnx, model, _shapes(shape), batch=batch, budget=budget)
    graph, params = conv.run()
    return passes.simplify(graph, params)


# ---- limits and loading ------------------------------------------------------------------------------------

def _positive_int(value, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise GraphError(f"{what} must be a positive integer, got {value!r}")
    return int(value)


def _shapes(shape) -> dict[str, tuple[int, ...]]:
    """``shape=`` checked: input name -> a tuple of positive ints."""
    out = {}
    for name, dims in dict(shape or {}).items():
        try:
            dims = tuple(dims)
            ok = all(not isinstance(d, bool) and int(d) == d and d >= 1 for d in dims)
        except (TypeError, ValueError):
            ok = False
        if not ok:
            raise GraphError(f"shape[{name!r}] = {dims!r}: give a sequence of positive integers")
        out[name] = tuple(int(d) for d in dims)
    return out


def _size(nbytes: int) -> str:
    """Bytes for a message: 392.0 MiB, 20.0 GiB."""
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if nbytes >= scale:
            return f"{nbytes / scale:.1f} {unit}"
    return f"{nbytes} bytes"


class _Budget:
    """The two memory limits of one import, and the constant bytes spent so far."""

    def __init__(self, max_tensor_bytes: int, max_model_bytes: int):
        self.max_tensor_bytes = max_tensor_bytes
        self.max_model_bytes = max_model_bytes
        self.spent = 0

    def tensor(self, shape, dtype, what: str) -> int:
        """The bytes of a (shape, dtype) tensor; a GraphError when it is over max_tensor_bytes."""
        shape = tuple(int(s) for s in shape)
        if any(s < 0 for s in shape):
            raise GraphError(f"{what} has a negative dimension: {shape}")
        nbytes = math.prod(shape) * np.dtype(dtype).itemsize
        if nbytes > self.max_tensor_bytes:
            raise GraphError(f"{what} {shape} {np.dtype(dtype).name} would take {_size(nbytes)}, over the "
                             f"{_size(self.max_tensor_bytes)} limit on one tensor (raise it with "
                             f"from_onnx(max_tensor_bytes=...) or vta run --max-tensor-mb)")
        return nbytes

    def spend(self, nbytes: int, what: str) -> None:
        """Count ``nbytes`` more of constants; a GraphError when the total goes over max_model_bytes."""
        if self.spent + nbytes > self.max_model_bytes:
            raise GraphError(f"{what} would bring the model's constants to {_size(self.spent + nbytes)}, over "
                             f"the {_size(self.max_model_bytes)} limit on a model (raise it with "
                             f"from_onnx(max_model_bytes=...) or vta run --max-model-mb)")
        self.spent += nbytes


def _all_tensors(graph):
    """Every TensorProto of a graph: initializers and tensor attributes, subgraphs included."""
    yield from graph.initializer
    for node in graph.node:
        for a in node.attribute:
            if a.HasField("t"):
                yield a.t
            yield from a.tensors
            if a.HasField("g"):
                yield from _all_tensors(a.g)
            for g in a.graphs:
                yield from _all_tensors(g)


def _is_repeated(fd) -> bool:
    """Whether a protobuf field is repeated: protobuf 7 has only ``is_repeated``, protobuf 5 only ``label``."""
    is_repeated = getattr(fd, "is_repeated", None)
    return is_repeated if isinstance(is_repeated, bool) else fd.label == fd.LABEL_REPEATED


def _check_text(message, where: str = "model") -> None:
    """Every string field (tensor, node, attribute, input and output names, ...) must be UTF-8, as ONNX says:
    protobuf hands a field that is not as bytes, which nothing downstream expects. A GraphError naming the
    field otherwise."""
    for fd, value in message.ListFields():
        name = f"{where}.{fd.name}"
        repeated = _is_repeated(fd)
        if fd.type == fd.TYPE_STRING:
            for i, text in enumerate(value if repeated else [value]):
                if not isinstance(text, str):
                    at = f"{name}[{i}]" if repeated else name
                    raise GraphError(f"{at} = {bytes(text)[:80]!r} is not valid UTF-8 (ONNX names and strings are "
                                     f"UTF-8 text)")
        elif fd.type == fd.TYPE_MESSAGE:
            for i, item in enumerate(value if repeated else [value]):
                _check_text(item, f"{name}[{i}]" if repeated else name)


def _load(onnx, path: Path, budget: _Budget):
    """The ModelProto in ``path``, its external data read from the model's directory; every problem with
    the file is a GraphError (the caller prefixes the path)."""
    from google.protobuf.message import DecodeError

    size = path.stat().st_size   # a missing file is the OSError it is
    if size == 0:
        raise GraphError("the file is empty (0 bytes), not an ONNX model")
    if size > PROTOBUF_MAX_BYTES:
        raise GraphError(f"the file is {_size(size)}, over protobuf's 2 GiB limit on one message: not a "
                         f"loadable ONNX model (large weights belong in external data files)")
    budget.spend(size, f"the file ({_size(size)})")
    model = onnx.ModelProto()
    try:
        model.ParseFromString(path.read_bytes())
    except DecodeError as e:
        detail = " ".join(str(e).split()) or "DecodeError"
        raise GraphError(f"not an ONNX model, or a truncated one: protobuf cannot parse it ({detail})") from None
    if model.ir_version < 1 or not model.opset_import:
        raise GraphError("not an ONNX model, or a truncated one: no ir_version or opset_import")
    if not model.HasField("graph"):
        raise GraphError("not an ONNX model, or a truncated one: it has no graph")
    base = path.resolve().parent
    for tensor in _all_tensors(model.graph):
        if tensor.data_location == onnx.TensorProto.EXTERNAL:
            _read_external(onnx, tensor, base, budget)
    return model


def _read_external(onnx, tensor, base: Path, budget: _Budget) -> None:
    """Read ``tensor``'s external data into it, after checking where it points and how much it is."""
    what = f"tensor {tensor.name!r}"
    info = {e.key: e.value for e in tensor.external_data}
    location = info.get("location", "")
    if not location:
        raise GraphError(f"{what} is marked as external data but names no location")
    nbytes = budget.tensor(tensor.dims, _tensor_np_dtype(onnx, tensor, what), what)
    target = (base / location).resolve()
    if not target.is_relative_to(base):
        raise GraphError(f"{what}: external data {location!r} lies outside the model's directory {base}")
    if not target.is_file():
        raise GraphError(f"{what}: external data file {location!r} is missing (looked for {target})")
    try:
        offset, length = int(info.get("offset", 0)), info.get("length")
        length = None if length is None else int(length)
    except ValueError:
        raise GraphError(f"{what}: external data offset/length {info.get('offset')!r}/{info.get('length')!r} "
                         f"are not integers") from None
    file_size = target.stat().st_size
    if length is None:
        length = file_size - offset
    if offset < 0 or length < 0 or offset + length > file_size:
        raise GraphError(f"{what}: external data range offset={offset}, length={length} does not fit in "
                         f"{location!r} ({file_size} bytes)")
    if length != nbytes:
        raise GraphError(f"{what}: external data holds {length} bytes, but its shape {tuple(tensor.dims)} "
                         f"needs {nbytes}")
    budget.spend(length, what)
    with open(target, "rb") as f:
        f.seek(offset)
        tensor.raw_data = f.read(length)
    tensor.data_location = onnx.TensorProto.DEFAULT
    del tensor.external_data[:]


def _tensor_np_dtype(onnx, tensor, what: str) -> np.dtype:
    try:
        return np.dtype(onnx.helper.tensor_dtype_to_np_dtype(tensor.data_type))
    except (KeyError, TypeError, ValueError):
        names = dict(onnx.TensorProto.DataType.items())
        name = next((k for k, v in names.items() if v == tensor.data_type), f"number {tensor.data_type}")
        raise GraphError(f"{what}: element type {name} is not supported (numbers only)") from None


# ---- the converter ------------------------------------------------------------------------------------------

_BAD_CHARS = re.compile(r"[\s\x00-\x1f\x7f]")


def _label(node) -> str:
    """How an error names an ONNX node: its name, else its first output."""
    if node.name:
        return repr(node.name)
    return f"<{node.op_type} producing {node.output[0]!r}>" if node.output else f"<{node.op_type}>"


class _Converter:
    """State of one conversion: ONNX tensor name -> IR node name, or -> constant value not yet in the graph."""

    def __init__(self, onnx, model, shape: dict[str, tuple[int, ...]], whole_model: bool = True,
                 batch: int | None = None, budget: _Budget | None = None):
        self.onnx = onnx
        self.model = model
        self.shape = shape
        self.batch = batch
        self.budget = budget or _Budget(DEFAULT_MAX_TENSOR_BYTES, DEFAULT_MAX_MODEL_BYTES)
        self.opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 1)
        self.b = _CheckedBuilder(self.budget)
        self.values: dict[str, str] = {}          # ONNX tensor -> IR node
        self.consts: dict[str, np.ndarray] = {}   # ONNX tensor -> value (a const node is made on first use)
        self.taken: set[str] = set()              # IR names that ONNX tensors own, or generated ones
        self._ir_names: dict[str, str] = {}
        self.used: set[str] = set()               # ONNX tensors some node or the graph output reads
        if whole_model:
            g = model.graph
            names = [*(i.name for i in g.input), *(t.name for t in g.initializer),
                     *(o for n in g.node for o in n.output if o)]
            clean = [n for n in names if n and not _BAD_CHARS.search(n)]
            self.taken.update(clean)               # clean names first, so a sanitised name cannot take one
            self._ir_names.update((n, n) for n in clean)
            for n in names:
                self._ir_name(n)
            self.used = {i for n in g.node for i in n.input} | {o.name for o in g.output}

    # -- names --

    def _ir_name(self, onnx_name: str) -> str:
        """The IR name of an ONNX tensor: the same name unless it is empty or has whitespace/control chars."""
        if onnx_name not in self._ir_names:
            name = _BAD_CHARS.sub("_", onnx_name) or "tensor"
            self._ir_names[onnx_name] = name if name == onnx_name and name not in self.taken else self._unique(name)
            self.taken.add(self._ir_names[onnx_name])
        return self._ir_names[onnx_name]

    def _unique(self, hint: str) -> str:
        hint = _BAD_CHARS.sub("_", hint) or "tensor"
        name, k = hint, 1
        while name in self.taken or name in self.b.graph.nodes:
            name, k = f"{hint}_{k}", k + 1
        self.taken.add(name)
        return name

    # -- values --

    def is_const(self, name: str) -> bool:
        return name in self.consts

    def type_of(self, name: str) -> TensorType:
        if name in self.consts:
            v = self.consts[name]
            return TensorType(tuple(v.shape), v.dtype.name)
        return self.b.graph[self.values[name]].type

    def x(self, name: str) -> str:
        """The IR node holding ONNX tensor ``name`` (a constant becomes a const node on first use)."""
        if name not in self.values:
            if name not in self.consts:
                raise GraphError(f"tensor {name!r} is read before any node produces it")
            value = self.consts[name]
            self.values[name] = self.b.const(self._ir_name(name), value, dtype=value.dtype.name)
        return self.values[name]

    def const(self, hint: str, value: np.ndarray) -> str:
        """A new const node (for weights the converter derives, e.g. a transposed Gemm weight)."""
        value = np.asarray(value)
        return self.b.const(self._unique(hint), value, dtype=value.dtype.name)

    def op(self, op: str, inputs: list[str], hint: str, **attrs) -> str:
        """An intermediate IR node, named after ``hint`` (a fresh name: ONNX names stay for ONNX tensors)."""
        return self.b.op(op, inputs, name=self._unique(hint), **attrs)

    # -- the model --

    def run(self) -> tuple[Graph, Params]:
        g = self.model.graph
        for t in g.initializer:
            self.consts[t.name] = self._array(t, f"initializer {t.name!r}")
        init = set(self.consts)
        real_inputs = [i for i in g.input if i.name not in init]
        unknown = set(self.shape) - {i.name for i in real_inputs}
        if unknown:
            raise GraphError(f"shape names unknown input(s) {sorted(unknown)}; the model's inputs: "
                             f"{[i.name for i in real_inputs]}")
        for vi in real_inputs:
            shape, dtype = self._input_type(vi)
            self.values[vi.name] = self.b.input(self._ir_name(vi.name), shape, dtype)
        for node in g.node:
            self._convert(node)
        outputs = []
        for o in g.output:
            if o.name not in self.values and o.name not in self.consts:
                raise GraphError(f"graph output {o.name!r} is not produced by any node")
            outputs.append(self._declared_type(o, self.x(o.name)))
        return self.b.finish(outputs)

    def _declared_type(self, vi, node: str) -> str:
        """An output of a quantized type (carried as float32 integers, onnx_quantized) cast back to that type."""
        elem = vi.type.tensor_type.elem_type if vi.type.HasField("tensor_type") else 0
        if not elem or self.b.graph[node].dtype != "float32":
            return node
        declared = self._np_dtype(elem, f"output {vi.name!r}")
        if np.dtype(declared).kind not in "iu":
            return node
        return self.b.op("cast", [node], name=self._unique(f"{node}_{declared}"), dtype=declared)

    def _array(self, tensor, what: str) -> np.ndarray:
        """A TensorProto's value, after checking its declared size against the limits."""
        dtype = _tensor_np_dtype(self.onnx, tensor, what)
        if dtype.kind not in "biuf":
            raise GraphError(f"{what}: dtype {dtype} is not supported (numbers only)")
        nbytes = self.budget.tensor(tensor.dims, dtype, what)
        self.budget.spend(nbytes, what)
        try:
            value = self.onnx.numpy_helper.to_array(tensor)
        except (ValueError, TypeError) as e:
            raise GraphError(f"{what} {tuple(tensor.dims)} {dtype.name}: its data does not match its shape "
                             f"and type ({' '.join(str(e).split())})") from None
        if value.dtype.kind not in "biuf":
            raise GraphError(f"{what}: dtype {value.dtype} is not supported (numbers only)")
        return np.array(value)

    def _np_dtype(self, elem_type: int, where: str) -> str:
        try:
            dt = np.dtype(self.onnx.helper.tensor_dtype_to_np_dtype(elem_type))
        except (KeyError, TypeError, ValueError):
            dt = None
        if dt is None or dt.kind not in "biuf":
            name = self.onnx.TensorProto.DataType.Name(elem_type) if elem_type else "undefined"
            raise GraphError(f"{where}: element type {name} is not supported (numbers only)")
        return dt.name

    def _input_type(self, vi) -> tuple[tuple[int, ...], str]:
        tt = vi.type.tensor_type
        if not vi.type.HasField("tensor_type"):
            raise GraphError(f"input {vi.name!r} is not a tensor")
        dtype = self._np_dtype(tt.elem_type, f"input {vi.name!r}")
        declared = tt.shape.dim if tt.HasField("shape") else None
        fix = f"give its whole shape with shape={{{vi.name!r}: (...)}} (vta run: --shape {vi.name}=D0,D1,...)"
        if vi.name in self.shape:
            shape = self.shape[vi.name]
            if declared is not None and len(declared) != len(shape):
                raise GraphError(f"input {vi.name!r} has rank {len(declared)}, but the shape override "
                                 f"{shape} has rank {len(shape)}")
        elif declared is None:
            raise GraphError(f"input {vi.name!r} has no declared shape; {fix}")
        else:
            shape = []
            for k, d in enumerate(declared):
                if d.HasField("dim_value") and d.dim_value > 0:
                    shape.append(d.dim_value)
                    continue
                if k == 0 and self.batch is not None:   # symbolic, unknown, 0 or -1: exporters' "any batch"
                    shape.append(self.batch)
                    continue
                if d.HasField("dim_param"):
                    what = f"is dynamic (symbolic {d.dim_param!r})"
                elif d.HasField("dim_value"):
                    what = f"is declared as {d.dim_value}"
                else:
                    what = "is dynamic (unknown)"
                hint = "only dimension 0 (the batch) is filled from batch=; " if k else "pass batch= to fill it, or "
                raise GraphError(f"input {vi.name!r}: dimension {k} {what}; {hint}{fix}")
            shape = tuple(shape)
        self.budget.tensor(shape, dtype, f"input {vi.name!r}")
        return shape, dtype

    def _attrs(self, node) -> dict[str, Any]:
        out = {}
        for a in node.attribute:
            v = self.onnx.helper.get_attribute_value(a)
            if isinstance(v, bytes):
                v = v.decode()
            elif isinstance(v, self.onnx.TensorProto):
                v = self._array(v, f"tensor attribute {a.name!r}")
            elif isinstance(v, list):
                v = [x.decode() if isinstance(x, bytes) else x for x in v]
            out[a.name] = v
        return out

    def _convert(self, node) -> None:
        rule = _RULES[node.op_type]
        ins = list(node.input)
        try:
            for i in ins:
                if i and i not in self.values and i not in self.consts:
                    raise GraphError(f"input {i!r} is not produced by an earlier node (is the model sorted?)")
            extra = [o for o in node.output[1:] if o and o in self.used]
            if extra and node.op_type not in MULTI_OUTPUT_OPS:
                raise GraphError(f"only the first output is supported, but {extra} are used")
            attrs = self._attrs(node)
            if node.op_type == "Constant":
                self.consts[node.output[0]] = _constant_value(attrs)
                return
            if ins and all(not i or i in self.consts for i in ins):
                values = self._fold(node, rule, attrs)
                if values is not None:
                    for name, value in zip(node.output, values, strict=False):
                        if name:
                            self.consts[name] = value
                    return
            out = rule(self, node, ins, attrs)
            if isinstance(out, _Alias):   # Identity / Dropout: no node, the output is the input
                self.values[node.output[0]] = self.x(out.onnx_name)
            elif isinstance(out, np.ndarray):   # shape arithmetic known at import (Shape, ConstantOfShape, ...)
                self.consts[node.output[0]] = out
            elif isinstance(out, list):   # one IR node per output (Split)
                for name, value in zip(node.output, out, strict=True):
                    if name:
                        self.values[name] = value
            else:
                self.values[node.output[0]] = out
        except GraphError as e:
            raise GraphError(f"ONNX node {_label(node)} ({node.op_type}): {e}") from None

    def _fold(self, node, rule, attrs) -> list[np.ndarray] | None:
        """Evaluate a node whose inputs are all constant with the reference kernels: its output values (one
        per output); None (not folded) when that would take more than FOLD_MAX_MACS multiply-adds. Every
        tensor the evaluation makes has been checked against the limits (by the builder) before it runs."""
        sub = _Converter(self.onnx, self.model, {}, whole_model=False, budget=self.budget)
        sub.consts = {i: self.consts[i] for i in node.input if i}
        out = rule(sub, node, list(node.input), attrs)
        if isinstance(out, _Alias):
            return [sub.consts[out.onnx_name]]
        if isinstance(out, np.ndarray):   # computed by the rule (its size checked there): counted as folded
            self.budget.spend(out.nbytes, "the folded value")
            return [out]
        outs = out if isinstance(out, list) else [out]
        graph, params = sub.b.finish(outs)
        if sum(_macs(graph, n) for n in graph.ops()) > FOLD_MAX_MACS:
            return None
        for o in outs:
            result = graph[o].type
            self.budget.spend(math.prod(result.shape) * np.dtype(result.dtype).itemsize, "the folded value")
        values = run_reference(graph, params, {})
        return [np.asarray(v) for v in (values if len(outs) > 1 else [values])]

    def out_name(self, node) -> str:
        """The IR name of ``node``'s (first) output: the node that yields it must carry this name."""
        return self._ir_name(node.output[0])

    def emit(self, node, op: str, inputs: list[str], **attrs) -> str:
        """The IR node that yields ``node``'s output, named after it."""
        return self.b.op(op, inputs, name=self.out_name(node), **attrs)


@dataclass(frozen=True)
class _Alias:
    """What a rule returns when its output is its input (Identity, inference Dropout)."""
    onnx_name: str


class _CheckedBuilder(GraphBuilder):
    """A GraphBuilder whose every op is checked against max_tensor_bytes as it is made (from its inferred
    type, before any value exists): its output, and the padded or stride-dilated input the reference
    kernels of convolution and pooling build (larger than the output when padding is)."""

    def __init__(self, budget: _Budget):
        super().__init__()
        self.budget = budget

    def op(self, op: str, inputs: list[str], name: str | None = None, **attrs) -> str:
        out = super().op(op, inputs, name=name, **attrs)
        node = self.graph[out]
        self.budget.tensor(node.shape, node.dtype, f"the {op} result {out!r}")
        if op in ("nn.conv2d", "nn.conv2d_transpose", "nn.max_pool2d", "nn.avg_pool2d"):
            x, a = self.graph[inputs[0]], node.attrs
            if len(x.shape) == 4:
                weight = self.graph[inputs[1]].shape if len(inputs) > 1 else ()
                self.budget.tensor(_kernel_input(op, x.shape, a, weight), x.dtype,
                                   f"the padded input of the {op} {out!r}")
        return out


def _kernel_input(op: str, shape, a: dict, weight) -> tuple[int, ...]:
    """An upper bound on the (N, C, H, W) tensor a reference kernel makes from its input: padded (conv;
    pooling with its ceil-mode overrun of less than a stride), or stride-dilated then padded by up to the
    kernel size (transposed convolution, IOHW weight)."""
    n, c, h, w = shape
    (sh, sw), (pt, pl, pb, pr) = a["strides"], a["padding"]
    if op == "nn.conv2d_transpose":
        (kh, kw), (oph, opw) = weight[2:], a["output_padding"]
        return n, c, (h - 1) * sh + 2 * kh + oph, (w - 1) * sw + 2 * kw + opw
    if op in ("nn.max_pool2d", "nn.avg_pool2d"):
        return n, c, h + pt + pb + sh, w + pl + pr + sw
    return n, c, h + pt + pb, w + pl + pr


def _macs(graph: Graph, node) -> int:
    """Multiply-adds (or window reads) of a convolution, dense or pooling node; 0 for the ops whose work is
    proportional to their (already bounded) input and output sizes."""
    out = math.prod(node.shape)
    if node.op == "nn.conv2d":
        return out * math.prod(graph[node.inputs[1]].shape[1:])
    if node.op == "nn.conv2d_transpose":
        i, _, kh, kw = graph[node.inputs[1]].shape
        return out * i * kh * kw
    if node.op == "nn.dense":
        return out * graph[node.inputs[1]].shape[1]
    if node.op in ("nn.max_pool2d", "nn.avg_pool2d"):
        return out * math.prod(node.attrs["pool_size"])
    return 0


# ---- helpers for rules ----------------------------------------------------------------------------------------

def _constant_value(attrs: dict) -> np.ndarray:
    if "value" in attrs:
        return attrs["value"]
    for key, dtype in (("value_float", np.float32), ("value_floats", np.float32),
                       ("value_int", np.int64), ("value_ints", np.int64)):
        if key in attrs:
            return np.asarray(attrs[key], dtype)
    raise GraphError(f"only numeric tensor values are supported; got attribute(s) {sorted(attrs)}")


def _require_const(cx: _Converter, name: str, what: str) -> np.ndarray:
    if not name or not cx.is_const(name):
        raise GraphError(f"{what} must be a constant (an initializer or a Constant node)")
    return cx.consts[name]


def _opt(ins: list[str], k: int) -> str:
    """Input ``k`` or '' when it is absent (ONNX marks a skipped optional input with '')."""
    return ins[k] if len(ins) > k else ""


def _allowed(attrs: dict, key: str, default, allowed: tuple) -> Any:
    v = attrs.get(key, default)
    if v not in allowed:
        raise GraphError(f"{key}={v!r} is not supported; allowed: {', '.join(map(repr, allowed))}")
    return v


def _rank(cx: _Converter, name: str, rank: int, what: str) -> tuple[int, ...]:
    shape = cx.type_of(name).shape
    if len(shape) != rank:
        raise GraphError(f"{what} must be {rank}-D, got shape {shape}")
    return shape


def _spatial_pads(attrs: dict, in_hw, kernel, strides, dilations, what: str) -> tuple[int, int, int, int]:
    """IR padding (top, left, bottom, right) from ONNX auto_pad / pads (pads are [h0, w0, h1, w1])."""
    auto = attrs.get("auto_pad", "NOTSET")
    if auto == "NOTSET":
        pads = [int(p) for p in attrs.get("pads", [0, 0, 0, 0])]
        if len(pads) != 4:
            raise GraphError(f"pads must have 4 values for a 2-D {what}, got {pads}")
        if min(pads) < 0:
            raise GraphError(f"negative pads {pads} are not supported")
        return pads[0], pads[1], pads[2], pads[3]
    if auto == "VALID":
        return 0, 0, 0, 0
    if auto not in ("SAME_UPPER", "SAME_LOWER"):
        raise GraphError(f"auto_pad={auto!r} is not supported; allowed: NOTSET, VALID, SAME_UPPER, SAME_LOWER")
    begin, end = [], []
    for size, k, s, d in zip(in_hw, kernel, strides, dilations, strict=True):
        total = max((math.ceil(size / s) - 1) * s + (k - 1) * d + 1 - size, 0)
        small, big = total // 2, total - total // 2
        begin.append(small if auto == "SAME_UPPER" else big)
        end.append(big if auto == "SAME_UPPER" else small)
    return begin[0], begin[1], end[0], end[1]


def _pair_attr(attrs: dict, key: str, default: int) -> tuple[int, int]:
    v = attrs.get(key, [default, default])
    if len(v) != 2:
        raise GraphError(f"{key} must have 2 values for a 2-D op, got {list(v)}")
    return int(v[0]), int(v[1])


def _same_dtype(cx: _Converter, a: str, b: str) -> tuple[str, str]:
    """IR nodes for two operands; a constant operand is cast to the other's dtype (the IR needs them equal)."""
    ta, tb = cx.type_of(a), cx.type_of(b)
    if ta.dtype != tb.dtype:
        if cx.is_const(b) and not cx.is_const(a):
            return cx.x(a), cx.const(f"{b}_{ta.dtype}", cx.consts[b].astype(ta.dtype))
        if cx.is_const(a) and not cx.is_const(b):
            return cx.const(f"{a}_{tb.dtype}", cx.consts[a].astype(tb.dtype)), cx.x(b)
        raise GraphError(f"operand dtypes differ ({ta.dtype} vs {tb.dtype})")
    return cx.x(a), cx.x(b)


# ---- the rules: one function per ONNX op, returning the IR node (or ONNX tensor, for aliases) -------------

Rule = Callable[[_Converter, Any, list[str], dict], "str | _Alias"]
_RULES: dict[str, Rule] = {}


def _rule(*op_types: str):
    def deco(fn: Rule) -> Rule:
        for t in op_types:
            _RULES[t] = fn
        return fn
    return deco


def _conv_args(cx: _Converter, x: str, w: str, attrs: dict) -> dict:
    """nn.conv2d's attributes from a Conv-like node's (Conv, QLinearConv, ConvInteger) input, weight, attributes."""
    _, _, h, wd = _rank(cx, x, 4, "the input (only 2-D convolution is supported)")
    _, _, kh, kw = _rank(cx, w, 4, "the weight")
    strides, dilations = _pair_attr(attrs, "strides", 1), _pair_attr(attrs, "dilations", 1)
    padding = _spatial_pads(attrs, (h, wd), (kh, kw), strides, dilations, "Conv")
    return {"strides": strides, "padding": padding, "dilation": dilations, "groups": int(attrs.get("group", 1))}


@_rule("Conv")
def _conv(cx, node, ins, attrs):
    args = _conv_args(cx, ins[0], ins[1], attrs)
    if not _opt(ins, 2):
        return cx.emit(node, "nn.conv2d", [cx.x(ins[0]), cx.x(ins[1])], **args)
    y = cx.op("nn.conv2d", [cx.x(ins[0]), cx.x(ins[1])], f"{cx.out_name(node)}_conv", **args)
    return cx.emit(node, "nn.bias_add", [y, cx.x(ins[2])], axis=1)


@_rule("ConvTranspose")
def _conv_transpose(cx, node, ins, attrs):
    _, _, h, w = _rank(cx, ins[0], 4, "ConvTranspose input (only 2-D is supported)")
    _, _, kh, kw = _rank(cx, ins[1], 4, "ConvTranspose weight")
    if int(attrs.get("group", 1)) != 1:
        raise GraphError(f"group={attrs['group']} is not supported; allowed: 1")
    if _pair_attr(attrs, "dilations", 1) != (1, 1):
        raise GraphError(f"dilations={attrs['dilations']} are not supported; allowed: [1, 1]")
    (sh, sw), (oph, opw) = _pair_attr(attrs, "strides", 1), _pair_attr(attrs, "output_padding", 0)
    auto = attrs.get("auto_pad", "NOTSET")
    if "output_shape" in attrs or auto in ("SAME_UPPER", "SAME_LOWER"):
        if "output_shape" in attrs:
            target = [int(v) for v in attrs["output_shape"]][-2:]
        else:
            target = [h * sh, w * sw]
        begin, end = [], []
        for size, s, k, op, t in zip((h, w), (sh, sw), (kh, kw), (oph, opw), target, strict=True):
            total = s * (size - 1) + op + k - t
            if total < 0:
                raise GraphError(f"output_shape {target} is larger than the full transposed convolution")
            small, big = total // 2, total - total // 2
            begin.append(small if auto == "SAME_UPPER" else big)
            end.append(big if auto == "SAME_UPPER" else small)
        padding = (begin[0], begin[1], end[0], end[1])
    else:
        padding = _spatial_pads(attrs, (h, w), (kh, kw), (sh, sw), (1, 1), "ConvTranspose")
    args = {"strides": (sh, sw), "padding": padding, "output_padding": (oph, opw)}
    if not _opt(ins, 2):
        return cx.emit(node, "nn.conv2d_transpose", [cx.x(ins[0]), cx.x(ins[1])], **args)
    y = cx.op("nn.conv2d_transpose", [cx.x(ins[0]), cx.x(ins[1])], f"{cx.out_name(node)}_conv", **args)
    return cx.emit(node, "nn.bias_add", [y, cx.x(ins[2])], axis=1)


def _scaled(cx: _Converter, name: str, factor: float, hint: str, transpose: bool = False) -> str:
    """``name`` (optionally transposed) times ``factor``: folded into the value when it is a constant."""
    if cx.is_const(name):
        v = cx.consts[name]
        v = v.T if transpose else v
        if factor != 1.0:
            v = (v * factor).astype(v.dtype)
        return cx.x(name) if v is cx.consts[name] else cx.const(hint, np.ascontiguousarray(v))
    y = cx.x(name)
    if transpose:
        y = cx.op("transpose", [y], f"{hint}_transpose", axes=(1, 0))
    if factor != 1.0:
        f = cx.const(f"{hint}_factor", np.asarray(factor, cx.type_of(name).dtype))
        y = cx.op("multiply", [y, f], f"{hint}_scaled")
    return y


@_rule("Gemm")
def _gemm(cx, node, ins, attrs):
    if int(attrs.get("transA", 0)) != 0:
        raise GraphError("transA=1 is not supported; allowed: 0")
    _rank(cx, ins[0], 2, "Gemm input A")
    _rank(cx, ins[1], 2, "Gemm input B")
    alpha, beta = float(attrs.get("alpha", 1.0)), float(attrs.get("beta", 1.0))
    out = cx.out_name(node)
    # nn.dense wants the weight as (N, K): B is (K, N) unless transB
    w = _scaled(cx, ins[1], alpha, f"{out}_weight", transpose=not int(attrs.get("transB", 0)))
    c = _opt(ins, 2)
    if not c or beta == 0.0:
        return cx.emit(node, "nn.dense", [cx.x(ins[0]), w])
    y = cx.op("nn.dense", [cx.x(ins[0]), w], f"{out}_dense")
    n = cx.b.graph[y].shape[1]
    if cx.is_const(c) and cx.consts[c].shape in ((n,), (1, n)):
        value = cx.consts[c]
        if value.shape == (n,) and beta == 1.0:
            b = cx.x(c)
        else:
            b = cx.const(f"{out}_bias", (value.reshape(n) * beta).astype(value.dtype))
        return cx.emit(node, "nn.bias_add", [y, b], axis=1)
    return cx.emit(node, "add", [y, _scaled(cx, c, beta, f"{out}_c")])


@_rule("MatMul")
def _matmul(cx, node, ins, attrs):
    """A constant 2-D right-hand side: a dense layer (the accelerator's template). Two activations (attention's
    scores and context) or a batched constant: ``nn.batch_matmul``, numpy's matmul with broadcast batch axes."""
    shape = cx.type_of(ins[0]).shape
    if len(shape) < 2 or len(cx.type_of(ins[1]).shape) < 2:
        raise GraphError(f"both operands must be at least 2-D, got shapes {shape} and {cx.type_of(ins[1]).shape}")
    if not cx.is_const(ins[1]) or cx.consts[ins[1]].ndim != 2:
        return cx.emit(node, "nn.batch_matmul", list(_same_dtype(cx, ins[0], ins[1])))
    rhs = cx.consts[ins[1]]
    out = cx.out_name(node)
    w = cx.const(f"{ins[1]}_T", np.ascontiguousarray(rhs.T))
    if len(shape) == 2:
        return cx.emit(node, "nn.dense", [cx.x(ins[0]), w])
    x = cx.op("reshape", [cx.x(ins[0])], f"{out}_flat", newshape=(-1, shape[-1]))
    y = cx.op("nn.dense", [x, w], f"{out}_dense")
    return cx.emit(node, "reshape", [y], newshape=(*shape[:-1], rhs.shape[1]))


_BINARY = {"Add": "add", "Sub": "subtract", "Mul": "multiply", "Div": "divide", "Max": "maximum",
           "Min": "minimum"}


@_rule(*_BINARY)
def _binary(cx, node, ins, attrs):
    if len(ins) != 2:
        raise GraphError(f"exactly 2 inputs are supported, got {len(ins)}")
    op = _BINARY[node.op_type]
    if op == "divide" and np.dtype(cx.type_of(ins[0]).dtype).kind != "f":
        if cx.is_const(ins[0]) and cx.is_const(ins[1]):   # exporters' shape arithmetic (C // groups)
            num, den = np.asarray(cx.consts[ins[0]]), np.asarray(cx.consts[ins[1]])
            if not np.all(den):
                raise GraphError("integer division by zero")
            quotient = np.abs(num) // np.abs(den) * np.sign(num) * np.sign(den)   # truncated, as ONNX's Div
            return np.asarray(quotient, num.dtype)
        raise GraphError(f"Div is supported for floats only, got {cx.type_of(ins[0]).dtype}")
    return cx.emit(node, op, list(_same_dtype(cx, ins[0], ins[1])))


_UNARY = {"Relu": "nn.relu", "Sigmoid": "sigmoid", "Tanh": "tanh"}


@_rule(*_UNARY)
def _unary(cx, node, ins, attrs):
    return cx.emit(node, _UNARY[node.op_type], [cx.x(ins[0])])


@_rule("Identity", "Dropout")
def _identity(cx, node, ins, attrs):
    mode = _opt(ins, 2)
    if mode and (not cx.is_const(mode) or bool(cx.consts[mode])):
        raise GraphError("training_mode must be a constant false (inference only)")
    return _Alias(ins[0])


@_rule("Clip")
def _clip(cx, node, ins, attrs):
    dtype = np.dtype(cx.type_of(ins[0]).dtype)
    lo_default, hi_default = (-math.inf, math.inf) if dtype.kind == "f" else (
        float(np.iinfo(dtype).min), float(np.iinfo(dtype).max))
    lo, hi = float(attrs.get("min", lo_default)), float(attrs.get("max", hi_default))
    if _opt(ins, 1):
        lo = float(_require_const(cx, ins[1], "Clip's min").reshape(()))
    if _opt(ins, 2):
        hi = float(_require_const(cx, ins[2], "Clip's max").reshape(()))
    return cx.emit(node, "clip", [cx.x(ins[0])], a_min=lo, a_max=hi)


def _pool_args(cx, node, ins, attrs) -> dict:
    _, _, h, w = _rank(cx, ins[0], 4, f"{node.op_type} input (only 2-D pooling is supported)")
    if "kernel_shape" not in attrs:
        raise GraphError("kernel_shape is required")
    kernel = _pair_attr(attrs, "kernel_shape", 1)
    if _pair_attr(attrs, "dilations", 1) != (1, 1):
        raise GraphError(f"dilations={attrs['dilations']} are not supported; allowed: [1, 1]")
    if int(attrs.get("storage_order", 0)) != 0:
        raise GraphError("storage_order=1 is not supported; allowed: 0")
    strides = _pair_attr(attrs, "strides", 1)
    padding = _spatial_pads(attrs, (h, w), kernel, strides, (1, 1), node.op_type)
    return {"pool_size": kernel, "strides": strides, "padding": padding,
            "ceil_mode": bool(attrs.get("ceil_mode", 0))}


@_rule("MaxPool")
def _max_pool(cx, node, ins, attrs):
    return cx.emit(node, "nn.max_pool2d", [cx.x(ins[0])], **_pool_args(cx, node, ins, attrs))


@_rule("AveragePool")
def _avg_pool(cx, node, ins, attrs):
    args = _pool_args(cx, node, ins, attrs)
    include = bool(attrs.get("count_include_pad", 0))
    if include and args["ceil_mode"]:
        # A ceil-mode window may run past the padding; onnxruntime (like PyTorch) then divides by the part
        # of the window inside the padded input, the IR by kh * kw. Padding explicitly and not counting
        # padding gives exactly onnxruntime's count, as long as the output size stays the same.
        _, _, h, w = cx.type_of(ins[0]).shape
        (kh, kw), (sh, sw), (pt, pl, pb, pr) = args["pool_size"], args["strides"], args["padding"]
        oh, ow = pool_out(h, kh, sh, pt, pb, True), pool_out(w, kw, sw, pl, pr, True)
        if (oh - 1) * sh + kh > h + pt + pb or (ow - 1) * sw + kw > w + pl + pr:
            if (pool_out(h + pt + pb, kh, sh, 0, 0, True), pool_out(w + pl + pr, kw, sw, 0, 0, True)) != (oh, ow):
                raise GraphError("count_include_pad=1 with ceil_mode=1 is not supported when a window starts "
                                 "in the bottom/right padding")
            padded = cx.op("nn.pad", [cx.x(ins[0])], f"{cx.out_name(node)}_pad",
                           pad_width=((0, 0), (0, 0), (pt, pb), (pl, pr)), pad_value=0.0)
            return cx.emit(node, "nn.avg_pool2d", [padded], count_include_pad=False,
                           **{**args, "padding": (0, 0, 0, 0)})
    return cx.emit(node, "nn.avg_pool2d", [cx.x(ins[0])], count_include_pad=include, **args)


@_rule("GlobalAveragePool")
def _global_avg_pool(cx, node, ins, attrs):
    _rank(cx, ins[0], 4, "GlobalAveragePool input (only NCHW is supported)")
    return cx.emit(node, "nn.global_avg_pool2d", [cx.x(ins[0])])


@_rule("ReduceMean")
def _reduce_mean(cx, node, ins, attrs):
    """The mean over H and W of an NCHW tensor, what PyTorch's exporter writes for ``x.mean((2, 3))`` and
    ``adaptive_avg_pool2d(x, 1)``: a global average pool (then a flatten when ``keepdims=0``); over other axes
    (a decomposed LayerNorm's last axis) the host op ``mean``. Axes are an attribute before opset 18 and an
    input from 18 on."""
    rank = len(cx.type_of(ins[0]).shape)
    given = _opt(ins, 1) if cx.opset >= 18 else ""
    if given:
        axes = _axes(_require_const(cx, given, "ReduceMean's axes"), rank, "axes")
    elif "axes" in attrs and cx.opset < 18:
        axes = _axes(attrs["axes"], rank, "axes")
    else:
        axes = [] if int(attrs.get("noop_with_empty_axes", 0)) else list(range(rank))
    if not axes:
        return _Alias(ins[0])
    keep = int(attrs.get("keepdims", 1))
    if rank != 4 or axes != [2, 3]:   # e.g. a decomposed LayerNorm's mean over the last axis
        return cx.emit(node, "mean", [cx.x(ins[0])], axes=tuple(axes), keepdims=bool(keep))
    if keep:
        return cx.emit(node, "nn.global_avg_pool2d", [cx.x(ins[0])])
    pooled = cx.op("nn.global_avg_pool2d", [cx.x(ins[0])], f"{cx.out_name(node)}_pool")
    return cx.emit(node, "nn.batch_flatten", [pooled])


@_rule("Flatten")
def _flatten(cx, node, ins, attrs):
    shape = cx.type_of(ins[0]).shape
    axis = int(attrs.get("axis", 1))
    if not -len(shape) <= axis <= len(shape):
        raise GraphError(f"axis={axis} is out of range for shape {shape}")
    if axis < 0:
        axis += len(shape)
    if axis == 1 and len(shape) >= 2:
        return cx.emit(node, "nn.batch_flatten", [cx.x(ins[0])])
    return cx.emit(node, "reshape", [cx.x(ins[0])],
                   newshape=(math.prod(shape[:axis]), math.prod(shape[axis:])))


@_rule("Reshape")
def _reshape(cx, node, ins, attrs):
    newshape = [int(v) for v in _require_const(cx, ins[1], "Reshape's shape input").reshape(-1)]
    if int(attrs.get("allowzero", 0)) and 0 in newshape:
        raise GraphError("allowzero=1 with a 0 in the shape is not supported; allowed: allowzero=0")
    return cx.emit(node, "reshape", [cx.x(ins[0])], newshape=tuple(newshape))


def _axes(value, rank: int, what: str) -> list[int]:
    axes = [int(a) for a in np.asarray(value).reshape(-1)]
    if any(not -rank <= a < rank for a in axes):
        raise GraphError(f"{what} {axes} are out of range for rank {rank}")
    return sorted(a % rank for a in axes)


@_rule("Squeeze")
def _squeeze(cx, node, ins, attrs):
    shape = cx.type_of(ins[0]).shape
    if _opt(ins, 1):
        axes = _axes(_require_const(cx, ins[1], "Squeeze's axes"), len(shape), "axes")
    elif "axes" in attrs:
        axes = _axes(attrs["axes"], len(shape), "axes")
    else:
        axes = [k for k, s in enumerate(shape) if s == 1]
    if any(shape[a] != 1 for a in axes):
        raise GraphError(f"cannot squeeze axes {axes} of shape {shape}: they must have size 1")
    return cx.emit(node, "reshape", [cx.x(ins[0])],
                   newshape=tuple(s for k, s in enumerate(shape) if k not in axes))


@_rule("Unsqueeze")
def _unsqueeze(cx, node, ins, attrs):
    shape = list(cx.type_of(ins[0]).shape)
    raw = _require_const(cx, ins[1], "Unsqueeze's axes") if _opt(ins, 1) else attrs.get("axes")
    if raw is None:
        raise GraphError("axes are required")
    for a in _axes(raw, len(shape) + len(np.asarray(raw).reshape(-1)), "axes"):
        shape.insert(a, 1)
    return cx.emit(node, "reshape", [cx.x(ins[0])], newshape=tuple(shape))


@_rule("Softmax")
def _softmax(cx, node, ins, attrs):
    shape = cx.type_of(ins[0]).shape
    axis = int(attrs.get("axis", -1 if cx.opset >= 13 else 1))
    if not -len(shape) <= axis < len(shape):
        raise GraphError(f"axis={axis} is out of range for shape {shape}")
    axis %= len(shape)
    if cx.opset >= 13 or axis == len(shape) - 1:
        return cx.emit(node, "nn.softmax", [cx.x(ins[0])], axis=axis)
    # before opset 13 Softmax normalises over all of the dimensions from axis on, as one flattened axis
    out = cx.out_name(node)
    x = cx.op("reshape", [cx.x(ins[0])], f"{out}_2d", newshape=(math.prod(shape[:axis]), -1))
    y = cx.op("nn.softmax", [x], f"{out}_softmax", axis=1)
    return cx.emit(node, "reshape", [y], newshape=shape)


@_rule("Concat")
def _concat(cx, node, ins, attrs):
    if "axis" not in attrs:
        raise GraphError("axis is required")
    return cx.emit(node, "concatenate", [cx.x(i) for i in ins if i], axis=int(attrs["axis"]))


@_rule("Pad")
def _pad(cx, node, ins, attrs):
    _allowed(attrs, "mode", "constant", ("constant",))
    rank = len(cx.type_of(ins[0]).shape)
    if _opt(ins, 1):
        pads = [int(v) for v in _require_const(cx, ins[1], "Pad's pads input").reshape(-1)]
        value = _opt(ins, 2)
        fill = float(_require_const(cx, value, "Pad's constant_value").reshape(())) if value else 0.0
    else:
        pads, fill = [int(v) for v in attrs.get("pads", [])], float(attrs.get("value", 0.0))
    axes = list(range(rank))
    if _opt(ins, 3):
        axes = [int(a) % rank for a in _require_const(cx, ins[3], "Pad's axes input").reshape(-1)]
    if len(pads) != 2 * len(axes):
        raise GraphError(f"pads {pads} must have 2 values per padded axis ({len(axes)} axes)")
    if min(pads, default=0) < 0:
        raise GraphError(f"negative pads {pads} (cropping) are not supported")
    width = [[0, 0] for _ in range(rank)]
    for k, a in enumerate(axes):
        width[a] = [pads[k], pads[k + len(axes)]]
    return cx.emit(node, "nn.pad", [cx.x(ins[0])], pad_width=width, pad_value=fill)


@_rule("BatchNormalization")
def _batch_norm(cx, node, ins, attrs):
    if int(attrs.get("training_mode", 0)):
        raise GraphError("training_mode=1 is not supported; allowed: 0 (inference)")
    if int(attrs.get("spatial", 1)) != 1:
        raise GraphError("spatial=0 is not supported; allowed: 1")
    stats = []
    for i, what in zip(ins[1:5], ("scale", "B", "input_mean", "input_var"), strict=True):
        _require_const(cx, i, f"BatchNormalization's {what}")
        stats.append(cx.x(i))
    return cx.emit(node, "nn.batch_norm", [cx.x(ins[0]), *stats], epsilon=float(attrs.get("epsilon", 1e-5)),
                   axis=1)


@_rule("Transpose")
def _transpose(cx, node, ins, attrs):
    rank = len(cx.type_of(ins[0]).shape)
    perm = [int(p) for p in attrs.get("perm", list(range(rank))[::-1])]
    if sorted(perm) != list(range(rank)):
        raise GraphError(f"perm {perm} is not a permutation of the {rank} axes")
    return cx.emit(node, "transpose", [cx.x(ins[0])], axes=tuple(int(p) for p in perm))


@_rule("Cast")
def _cast(cx, node, ins, attrs):
    dtype = cx._np_dtype(int(attrs["to"]), "Cast's to")
    return cx.emit(node, "cast", [cx.x(ins[0])], dtype=dtype)


def _nearest_source(out: int, size: int, scale: float, mode: str, rounding: str) -> np.ndarray | None:
    """The input index ONNX Resize(nearest) reads for each output index, or None for an unknown mode."""
    i = np.arange(out, dtype=np.float64)
    if mode in ("half_pixel", "half_pixel_symmetric"):  # the same for integer scales
        x = (i + 0.5) / scale - 0.5
    elif mode == "pytorch_half_pixel":
        x = (i + 0.5) / scale - 0.5 if out > 1 else np.zeros_like(i)
    elif mode == "asymmetric":
        x = i / scale
    elif mode == "tf_half_pixel_for_nn":
        x = (i + 0.5) / scale
    elif mode == "align_corners":
        x = i * (size - 1) / (out - 1) if out > 1 else np.zeros_like(i)
    else:
        return None
    if rounding == "round_prefer_floor":
        idx = np.where(x - np.floor(x) == 0.5, np.floor(x), np.round(x))
    elif rounding == "round_prefer_ceil":
        idx = np.where(x - np.floor(x) == 0.5, np.ceil(x), np.round(x))
    elif rounding == "floor":
        idx = np.floor(x)
    elif rounding == "ceil":
        idx = np.ceil(x)
    else:
        return None
    return np.clip(idx, 0, size - 1).astype(np.int64)


@_rule("Upsample", "Resize")
def _resize(cx, node, ins, attrs):
    shape = cx.type_of(ins[0]).shape
    if len(shape) != 4:
        raise GraphError(f"only 4-D NCHW input is supported, got shape {shape}")
    linear = _allowed(attrs, "mode", "nearest", ("nearest", "linear")) == "linear"
    sizes = None
    if node.op_type == "Upsample":
        mode, rounding = "asymmetric", "floor"
        scales = attrs.get("scales") if "scales" in attrs else _require_const(cx, _opt(ins, 1), "scales")
    else:
        mode = attrs.get("coordinate_transformation_mode", "half_pixel")
        rounding = attrs.get("nearest_mode", "round_prefer_floor")
        if attrs.get("axes") is not None and sorted(int(a) % 4 for a in attrs["axes"]) != [0, 1, 2, 3]:
            raise GraphError(f"axes={attrs['axes']} is not supported; give scales or sizes for all 4 axes")
        _allowed(attrs, "keep_aspect_ratio_policy", "stretch", ("stretch",))
        scales_in, sizes_in = (_opt(ins, 1), "") if cx.opset < 11 else (_opt(ins, 2), _opt(ins, 3))
        scales = None
        if scales_in and cx.type_of(scales_in).shape != (0,):
            scales = _require_const(cx, scales_in, "Resize's scales")
        elif sizes_in:
            sizes = _require_const(cx, sizes_in, "Resize's sizes").reshape(-1)
            if len(sizes) != 4:
                raise GraphError(f"sizes {sizes.tolist()} must have 4 values (N, C, H, W)")
            scales = sizes.astype(np.float64) / np.asarray(shape, np.float64)
        if scales is None:
            raise GraphError("scales or sizes must be given")
    scales = [float(s) for s in np.asarray(scales).reshape(-1)]
    if linear:
        return _resize_linear(cx, node, ins, attrs, mode, scales, sizes)
    if len(scales) != 4 or scales[0] != 1 or scales[1] != 1 or any(s != int(s) or s < 1 for s in scales[2:]):
        raise GraphError(f"scales {scales} are not supported; allowed: [1, 1, sh, sw] with integer sh, sw >= 1")
    sh, sw = int(scales[2]), int(scales[3])
    n, c, h, w = shape   # the output is checked before the index arrays below are made
    cx.budget.tensor((n, c, h * sh, w * sw), cx.type_of(ins[0]).dtype, "the output")
    for size, s in ((h, sh), (w, sw)):
        src = _nearest_source(size * s, size, float(s), mode, rounding)
        if src is None or not np.array_equal(src, np.arange(size * s) // s):
            raise GraphError(f"coordinate_transformation_mode={mode!r} with nearest_mode={rounding!r} does not "
                             f"repeat each pixel {s} times; allowed: asymmetric or tf_half_pixel_for_nn with "
                             f"floor, half_pixel (or pytorch_half_pixel) with round_prefer_floor/ceil")
    return cx.emit(node, "nn.upsampling", [cx.x(ins[0])], scale_h=sh, scale_w=sw, method="nearest_neighbor")


def _resize_linear(cx, node, ins, attrs, mode: str, scales: list[float], sizes) -> str:
    """Bilinear Resize / Upsample of H and W (segmentation heads, UNet decoders): the host op image.resize2d."""
    shape = cx.type_of(ins[0]).shape
    if len(scales) != 4 or scales[0] != 1 or scales[1] != 1 or min(scales[2:]) <= 0:
        raise GraphError(f"scales {scales} are not supported; allowed: [1, 1, sh, sw] with sh, sw > 0")
    if int(attrs.get("antialias", 0)):
        raise GraphError("antialias=1 is not supported; allowed: 0")
    if mode not in RESIZE_COORDINATES:
        raise GraphError(f"coordinate_transformation_mode={mode!r} is not supported with mode='linear'; allowed: "
                         f"{', '.join(RESIZE_COORDINATES)}")
    if sizes is not None:
        out = (int(sizes[2]), int(sizes[3]))
    else:
        out = (math.floor(shape[2] * scales[2]), math.floor(shape[3] * scales[3]))
    if min(out) < 1:
        raise GraphError(f"the output would be empty ({out[0]} x {out[1]})")
    return cx.emit(node, "image.resize2d", [cx.x(ins[0])], size=out, scales=(scales[2], scales[3]),
                   method="linear", coordinate_transformation_mode=mode)


@_rule("Constant")
def _constant(cx, node, ins, attrs):  # handled in _Converter._convert; listed here so the scan accepts it
    raise AssertionError("unreachable")


MULTI_OUTPUT_OPS = ("Split",)   # their rules return one IR node per output

from graph_pack import onnx_patterns, onnx_quantized  # noqa: F401  (they register their rules)

SUPPORTED_OPS: tuple[str, ...] = tuple(sorted(_RULES))


def _check_supported(graph) -> None:
    """Raise one GraphError listing every unsupported op type in ``graph`` and the nodes that use it."""
    bad: dict[str, list[str]] = {}
    for node in graph.node:
        op = node.op_type if node.domain in ("", "ai.onnx") else f"{node.domain}.{node.op_type}"
        if op not in _RULES:
            bad.setdefault(op, []).append(node.name or (f"<output {node.output[0]!r}>" if node.output else "?"))
    if bad:
        listing = "; ".join(f"{op} (node(s): {', '.join(names)})" for op, names in sorted(bad.items()))
        raise GraphError(f"unsupported ONNX op(s): {listing}. Supported ops: {', '.join(SUPPORTED_OPS)}")
