"""MXNet frontend: ``from_mxnet(model, shape)`` -> ``(graph, params)`` in the Relay-named graph IR.

This is the one module that imports ``mxnet`` (lazily, through ``import_mxnet``), so the rest of
graph_pack works without it. A Gluon ``HybridBlock`` is traced to a symbol; a symbol's JSON is walked node
by node. The whole symbol is scanned first, so an unsupported model fails with one message that lists
every op (and node) it would need. IR node names are mxnet's node names (``resnetv10_pool0_fwd``), the
names users see in their model; the extra nodes an op expands to (a conv's ``nn.bias_add``) get suffixes.
Variables become ``const`` nodes (named as the mxnet parameter) only where an op reads them.
"""

from __future__ import annotations

import ast
import json
import math
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import numpy as np

from graph_pack import passes
from graph_pack.graph import Graph, GraphBuilder, GraphError
from graph_pack.opdefs import pool_out

Params = dict[str, np.ndarray]

_INSTALL = "pip install 'vta-stack[mxnet]'"


def import_mxnet() -> ModuleType:
    """The mxnet module, or an ImportError that says how to get a working one.

    mxnet 1.9.1 is the last release; it still reads ``np.bool``, an alias numpy 1.24 removed, so the alias
    is restored (only when missing) before the import. No shim helps on numpy 2, whose C ABI it predates.
    """
    major = int(np.__version__.split(".")[0])
    if major >= 2:
        raise ImportError(f"mxnet 1.9 needs numpy<2 (found numpy {np.__version__}); "
                          f"{_INSTALL} installs a compatible numpy")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")   # numpy warns on reading the expired alias
        has_bool = hasattr(np, "bool")
    if not has_bool:
        np.bool = bool  # type: ignore[attr-defined]
    try:
        with warnings.catch_warnings():   # its import trips numpy/distutils deprecations users cannot fix
            warnings.simplefilter("ignore", DeprecationWarning)
            import mxnet
    except (ImportError, OSError) as e:   # OSError: libmxnet.so present but unloadable
        raise ImportError(f"the MXNet frontend needs mxnet 1.9 ({_INSTALL}): {e}") from e
    return mxnet


def from_mxnet(model: Any, shape: dict[str, tuple[int, ...]], dtype: str = "float32",
               arg_params: dict[str, Any] | None = None,
               aux_params: dict[str, Any] | None = None) -> tuple[Graph, Params]:
    """Convert a Gluon ``HybridBlock`` or an mxnet ``Symbol`` (+ params) to ``(graph, params)``.

    ``shape`` maps input variable names (usually ``"data"``) to shapes; each becomes an IR input of
    ``dtype``. A block must be initialised (or have loaded its parameters): they are read from
    ``collect_params()``, after one forward pass on zeros if some were still deferred. A symbol takes its
    weights from ``arg_params``/``aux_params``, as returned by ``mx.model.load_checkpoint``. The result has
    been through ``passes.simplify`` (batch norms folded, dropouts removed), like every frontend's.
    """
    mx = import_mxnet()
    if not shape:
        raise GraphError("from_mxnet needs the shape of every input, e.g. shape={'data': (1, 3, 224, 224)}")
    shape = {str(k): tuple(int(s) for s in v) for k, v in shape.items()}
    if isinstance(model, mx.sym.Symbol):
        sym = model
    elif isinstance(model, mx.gluon.HybridBlock):
        if arg_params is not None or aux_params is not None:
            raise GraphError("a Gluon block brings its own parameters (collect_params()); "
                             "arg_params/aux_params are only for a Symbol")
        out = model(*[mx.sym.var(name) for name in shape])   # positional inputs, in the order of `shape`
        sym = mx.sym.Group(list(out)) if isinstance(out, (list, tuple)) else out
    elif isinstance(model, mx.gluon.Block):
        raise GraphError(f"{type(model).__name__} is a plain gluon Block, whose forward is Python code run per "
                         "call; only a HybridBlock (or a Symbol) can be converted to a graph")
    else:
        raise GraphError(f"from_mxnet expects a gluon HybridBlock or an mx.sym.Symbol, got {type(model).__name__}")
    sym_json = json.loads(sym.tojson())
    _check_supported(sym_json["nodes"])   # before any parameter is read: fail fast, and all at once
    if isinstance(model, mx.sym.Symbol):
        params = {k: _numpy(v) for k, v in {**(arg_params or {}), **(aux_params or {})}.items()}
    else:
        params = _block_params(mx, model, shape, dtype)
    graph, params = _Converter(sym_json, shape, np.dtype(dtype).name, params).run()
    return passes.simplify(graph, params)


def _numpy(v: Any) -> np.ndarray:
    return v.asnumpy() if hasattr(v, "asnumpy") else np.asarray(v)


def _block_params(mx: ModuleType, block: Any, shape: dict[str, tuple[int, ...]], dtype: str) -> Params:
    """Parameter values by symbol variable name (Gluon's ``Parameter.name``)."""
    deferred = mx.gluon.parameter.DeferredInitializationError

    def read() -> Params:
        return {p.name: p.data().asnumpy() for p in block.collect_params().values()}
    try:
        return read()
    except deferred:
        # initialize() without a forward pass leaves shapes such as in_channels unknown: one pass settles them
        block(*[mx.nd.zeros(s, dtype=dtype) for s in shape.values()])
        return read()
    except RuntimeError as e:
        raise GraphError(f"the block has uninitialised parameters ({e}); call block.initialize() or "
                         "block.load_parameters(...) before from_mxnet") from None


# ---- attribute parsing --------------------------------------------------------------------------------------

class _Attrs:
    """An mxnet node's attributes, stored as strings in the JSON ('(3, 3)', 'True', '1e-05', 'relu')."""

    def __init__(self, raw: dict[str, str]):
        self.raw = raw

    def get(self, key: str, default: Any = None) -> Any:
        if key not in self.raw:
            return default
        s = self.raw[key]
        try:
            v = ast.literal_eval(s)
        except (ValueError, SyntaxError):
            return s
        return default if v is None else v

    def str(self, key: str, default: str) -> str:
        return str(self.get(key, default))

    def bool(self, key: str, default: bool) -> bool:
        v = self.get(key, default)
        return v.lower() in ("true", "1") if isinstance(v, str) else bool(v)

    def float(self, key: str, default: float) -> float:
        return float(self.get(key, default))

    def int(self, key: str, default: int) -> int:
        return int(self.get(key, default))

    def ints(self, key: str, default: tuple[int, ...] = ()) -> tuple[int, ...]:
        v = self.get(key, default)
        return tuple(int(x) for x in v) if isinstance(v, (tuple, list)) else (int(v),)

    def pair(self, key: str, fill: int, ndim: int = 2) -> tuple[int, ...]:
        """A per-spatial-axis tuple; empty (mxnet's default) means ``fill`` on every axis."""
        v = self.ints(key)
        return (fill,) * ndim if not v else v * ndim if len(v) == 1 else v


def _raw_attrs(node: dict) -> dict[str, str]:
    return node.get("attrs") or node.get("attr") or node.get("param") or {}   # key names of mxnet < 1.0


# ---- op table -----------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class _Op:
    convert: Callable[[_Converter, str, _Attrs, list], str]
    check: Callable[[_Attrs], str | None] = lambda a: None   # why this instance is unsupported, or None


_OPS: dict[str, _Op] = {}


def _op(*names: str, check: Callable[[_Attrs], str | None] | None = None):
    def deco(fn):
        for n in names:
            _OPS[n] = _Op(fn, check or (lambda a: None))
        return fn
    return deco


def _check_layout(a: _Attrs) -> str | None:
    layout = a.get("layout")
    return None if layout in (None, "NCHW") else f"layout={layout!r} (only NCHW)"


def _check_conv(a: _Attrs) -> str | None:
    if len(a.ints("kernel")) != 2:
        return f"kernel={a.ints('kernel')} (only 2-D convolutions)"
    return _check_layout(a)


def _check_deconv(a: _Attrs) -> str | None:
    if a.int("num_group", 1) != 1:
        return f"num_group={a.int('num_group', 1)} (only 1)"
    if any(d != 1 for d in a.pair("dilate", 1)):
        return f"dilate={a.pair('dilate', 1)} (only 1)"
    return _check_conv(a)


@_op("Convolution", check=_check_conv)
def _convolution(cx: _Converter, name: str, a: _Attrs, inputs: list) -> str:
    x, w = cx.value(inputs[0]), cx.value(inputs[1])
    kernel = a.ints("kernel")
    if cx.shape(w)[2:] != kernel:
        raise GraphError(f"{name}: weight {cx.shape(w)} does not match kernel={kernel}")
    y = cx.b.op("nn.conv2d", [x, w], name=cx.name(name), strides=a.pair("stride", 1), padding=a.pair("pad", 0),
                dilation=a.pair("dilate", 1), groups=a.int("num_group", 1))
    return cx.bias(name, y, inputs, a.bool("no_bias", False))


@_op("Deconvolution", check=_check_deconv)
def _deconvolution(cx: _Converter, name: str, a: _Attrs, inputs: list) -> str:
    x, w = cx.value(inputs[0]), cx.value(inputs[1])
    kernel, stride = a.ints("kernel"), a.pair("stride", 1)
    if cx.shape(w)[2:] != kernel:
        raise GraphError(f"{name}: weight {cx.shape(w)} does not match kernel={kernel}")
    pad, adj = a.pair("pad", 0), a.pair("adj", 0)
    target = a.ints("target_shape")
    if any(target):   # mxnet then infers pad and adj from the wanted output size (InferPad)
        total = [s * (h - 1) + k - t for s, h, k, t in zip(stride, cx.shape(x)[2:], kernel, target, strict=True)]
        if min(total) < 0:
            raise GraphError(f"{name}: target_shape={target} is larger than the deconvolution can produce")
        pad, adj = tuple((t + 1) // 2 for t in total), tuple(t % 2 for t in total)
    y = cx.b.op("nn.conv2d_transpose", [x, w], name=cx.name(name), strides=stride, padding=pad,
                output_padding=adj)
    return cx.bias(name, y, inputs, a.bool("no_bias", True))   # mxnet's Deconvolution defaults to no bias


@_op("FullyConnected")
def _fully_connected(cx: _Converter, name: str, a: _Attrs, inputs: list) -> str:
    x, w = cx.value(inputs[0]), cx.value(inputs[1])
    shape = cx.shape(x)
    if len(shape) > 2 and a.bool("flatten", True):
        x = cx.b.op("nn.batch_flatten", [x], name=cx.name(f"{name}_flatten"))
        out_shape = None
    elif len(shape) > 2:   # flatten=False: a dense over the last axis, as a 2-D dense between reshapes
        x = cx.b.op("reshape", [x], name=cx.name(f"{name}_flatten"), newshape=(-1, shape[-1]))
        out_shape = (*shape[:-1], cx.shape(w)[0])
    else:
        out_shape = None
    y = cx.b.op("nn.dense", [x, w], name=cx.name(name))
    y = cx.bias(name, y, inputs, a.bool("no_bias", False))
    if out_shape is not None:
        y = cx.b.op("reshape", [y], name=cx.name(f"{name}_unflatten"), newshape=out_shape)
    return y


@_op("BatchNorm")
def _batch_norm(cx: _Converter, name: str, a: _Attrs, inputs: list) -> str:
    # inference: the moving statistics are used whatever use_global_stats says (mxnet does the same)
    x = cx.value(inputs[0])
    ndim = len(cx.shape(x))
    axis = a.int("axis", 1)
    if not -ndim <= axis < ndim:
        raise GraphError(f"{name}: axis={axis} is out of range for a {ndim}-D input")
    axis %= ndim
    channels = cx.shape(x)[axis]
    if a.bool("fix_gamma", True):   # mxnet's default: gamma is ignored (treated as 1)
        gamma = cx.b.const(cx.name(f"{name}_gamma_fixed"), np.ones(channels, np.float32))
    else:
        gamma = cx.value(inputs[1])
    beta, mean, var = (cx.value(i) for i in inputs[2:5])
    return cx.b.op("nn.batch_norm", [x, gamma, beta, mean, var], name=cx.name(name),
                   epsilon=a.float("eps", 1e-3), axis=axis)


_ACTIVATIONS = {"relu": "nn.relu", "sigmoid": "sigmoid", "tanh": "tanh"}


def _check_activation(a: _Attrs) -> str | None:
    act = a.str("act_type", "")
    return None if act in _ACTIVATIONS else f"act_type={act!r} (only {', '.join(_ACTIVATIONS)})"


@_op("Activation", check=_check_activation)
def _activation(cx: _Converter, name: str, a: _Attrs, inputs: list) -> str:
    return cx.b.op(_ACTIVATIONS[a.str("act_type", "")], [cx.value(inputs[0])], name=cx.name(name))


def _check_leaky(a: _Attrs) -> str | None:
    act, slope = a.str("act_type", "leaky"), a.float("slope", 0.25)
    if act != "leaky":
        return f"act_type={act!r} (only 'leaky' with slope 0, a ReLU)"
    return None if slope == 0 else f"slope={slope:g} (only 0, a ReLU)"


@_op("LeakyReLU", check=_check_leaky)
def _leaky_relu(cx: _Converter, name: str, a: _Attrs, inputs: list) -> str:
    return cx.b.op("nn.relu", [cx.value(inputs[0])], name=cx.name(name))


def _unary(ir_op: str):
    def convert(cx: _Converter, name: str, a: _Attrs, inputs: list) -> str:
        return cx.b.op(ir_op, [cx.value(inputs[0])], name=cx.name(name))
    return convert


_op("relu")(_unary("nn.relu"))
_op("sigmoid")(_unary("sigmoid"))
_op("tanh")(_unary("tanh"))
_op("Flatten", "flatten")(_unary("nn.batch_flatten"))


@_op("_copy", "identity", "BlockGrad", "stop_gradient")
def _identity(cx: _Converter, name: str, a: _Attrs, inputs: list) -> str:
    return cx.value(inputs[0])   # no node: the value is its input's


def _check_dropout(a: _Attrs) -> str | None:
    mode = a.str("mode", "training")
    return None if mode == "training" else f"mode={mode!r} (it drops at inference too; only 'training')"


_op("Dropout", check=_check_dropout)(_unary("nn.dropout"))


def _check_pool(a: _Attrs) -> str | None:
    kind, conv = a.str("pool_type", "max"), a.str("pooling_convention", "valid")
    if kind not in ("max", "avg"):
        return f"pool_type={kind!r} (only max, avg)"
    if a.bool("global_pool", False):
        return _check_layout(a)
    if conv not in ("valid", "full"):
        return f"pooling_convention={conv!r} (only valid, full)"
    if len(a.ints("kernel")) != 2:
        return f"kernel={a.ints('kernel')} (only 2-D pooling)"
    return _check_layout(a)


def _mx_pool_out(size: int, k: int, s: int, p: int, full: bool) -> int:
    """mxnet's output size: 'full' rounds up and, unlike Relay's ceil_mode, never drops a last window
    that starts in the padding."""
    span = size + 2 * p - k
    return 1 + (math.ceil(span / s) if full else span // s)


@_op("Pooling", check=_check_pool)
def _pooling(cx: _Converter, name: str, a: _Attrs, inputs: list) -> str:
    x = cx.value(inputs[0])
    shape = cx.shape(x)
    if len(shape) != 4:
        raise GraphError(f"{name}: Pooling needs a 4-D NCHW input, got {shape}")
    kind = a.str("pool_type", "max")
    if a.bool("global_pool", False):
        if kind == "avg":
            return cx.b.op("nn.global_avg_pool2d", [x], name=cx.name(name))
        # the IR has no global max pool: a max pool whose window is the whole map
        return cx.b.op("nn.max_pool2d", [x], name=cx.name(name), pool_size=shape[2:], strides=(1, 1))
    kernel, stride, pad = a.ints("kernel"), a.pair("stride", 1), a.pair("pad", 0)
    full = a.str("pooling_convention", "valid") == "full"
    hw = shape[2:]
    out = [_mx_pool_out(n, k, s, p, full) for n, k, s, p in zip(hw, kernel, stride, pad, strict=True)]
    if min(out) <= 0:
        raise GraphError(f"{name}: the output of pooling {shape} with kernel={kernel} pad={pad} would be empty")
    # how far the last window reaches past the padded input (only 'full' can)
    over = [max(0, (o - 1) * s + k - n - 2 * p) for o, s, k, n, p in zip(out, stride, kernel, hw, pad, strict=True)]
    relay_out = [pool_out(n, k, s, p, p, True) for n, k, s, p in zip(hw, kernel, stride, pad, strict=True)]
    attrs: dict[str, Any] = {"pool_size": kernel, "strides": stride}
    include_pad = kind == "avg" and a.bool("count_include_pad", True)
    if include_pad and any(over):
        # mxnet divides by the window clipped to the padded input: pad explicitly, then count real elements
        x = cx.b.op("nn.pad", [x], name=cx.name(f"{name}_pad"),
                    pad_width=((0, 0), (0, 0), (pad[0], pad[0]), (pad[1], pad[1])))
        attrs.update(padding=(0, 0, over[0], over[1]), ceil_mode=False, count_include_pad=False)
    elif full and relay_out == out:
        attrs.update(padding=pad, ceil_mode=True)
    else:   # 'valid', or 'full' where ceil_mode would drop a window: floor mode with extra bottom/right padding
        attrs.update(padding=(pad[0], pad[1], pad[0] + over[0], pad[1] + over[1]), ceil_mode=False)
    if kind == "avg":
        attrs.setdefault("count_include_pad", include_pad)
    return cx.b.op("nn.max_pool2d" if kind == "max" else "nn.avg_pool2d", [x], name=cx.name(name), **attrs)


_BINARY = {
    "add": ("elemwise_add", "broadcast_add", "broadcast_plus", "_Plus", "_plus", "_add"),
    "subtract": ("elemwise_sub", "broadcast_sub", "broadcast_minus", "_Minus", "_minus", "_sub"),
    "multiply": ("elemwise_mul", "broadcast_mul", "_Mul", "_mul"),
    "divide": ("elemwise_div", "broadcast_div", "_Div", "_div"),
    "maximum": ("broadcast_maximum", "_Maximum", "_maximum"),
    "minimum": ("broadcast_minimum", "_Minimum", "_minimum"),
}
_SCALAR = {   # op -> (IR op, scalar on the left)
    "_plus_scalar": ("add", False), "_PlusScalar": ("add", False),
    "_minus_scalar": ("subtract", False), "_MinusScalar": ("subtract", False),
    "_rminus_scalar": ("subtract", True), "_RMinusScalar": ("subtract", True),
    "_mul_scalar": ("multiply", False), "_MulScalar": ("multiply", False),
    "_div_scalar": ("divide", False), "_DivScalar": ("divide", False),
    "_rdiv_scalar": ("divide", True), "_RDivScalar": ("divide", True),
    "_maximum_scalar": ("maximum", False), "_MaximumScalar": ("maximum", False),
    "_minimum_scalar": ("minimum", False), "_MinimumScalar": ("minimum", False),
}


def _binary(ir_op: str):
    def convert(cx: _Converter, name: str, a: _Attrs, inputs: list) -> str:
        return cx.b.op(ir_op, [cx.value(inputs[0]), cx.value(inputs[1])], name=cx.name(name))
    return convert


for _ir, _names in _BINARY.items():
    _op(*_names)(_binary(_ir))


def _scalar(ir_op: str, left: bool):
    def convert(cx: _Converter, name: str, a: _Attrs, inputs: list) -> str:
        x = cx.value(inputs[0])
        c = cx.b.const(cx.name(f"{name}_scalar"), np.asarray(a.float("scalar", 0.0)).astype(cx.dtype(x)))
        return cx.b.op(ir_op, [c, x] if left else [x, c], name=cx.name(name))
    return convert


for _mx_name, (_ir, _left) in _SCALAR.items():
    _op(_mx_name)(_scalar(_ir, _left))


@_op("add_n", "ElementWiseSum")
def _add_n(cx: _Converter, name: str, a: _Attrs, inputs: list) -> str:
    acc = cx.value(inputs[0])
    for k, i in enumerate(inputs[1:], 1):
        acc = cx.b.op("add", [acc, cx.value(i)], name=cx.name(name if k == len(inputs) - 1 else f"{name}_{k}"))
    return acc


@_op("Concat", "concat")
def _concat(cx: _Converter, name: str, a: _Attrs, inputs: list) -> str:
    return cx.b.op("concatenate", [cx.value(i) for i in inputs], name=cx.name(name), axis=a.int("dim", 1))


def _check_softmax(a: _Attrs) -> str | None:
    return "use_length=True (only False)" if a.bool("use_length", False) else None


@_op("softmax", check=_check_softmax)
def _softmax(cx: _Converter, name: str, a: _Attrs, inputs: list) -> str:
    x = cx.value(inputs[0])
    t = a.float("temperature", 1.0)
    if t != 1.0:
        c = cx.b.const(cx.name(f"{name}_temperature"), np.asarray(t).astype(cx.dtype(x)))
        x = cx.b.op("divide", [x, c], name=cx.name(f"{name}_scaled"))
    y = cx.b.op("nn.softmax", [x], name=cx.name(name), axis=a.int("axis", -1))
    out_dtype = a.get("dtype")
    if out_dtype not in (None, "None") and np.dtype(out_dtype).name != cx.dtype(y):
        y = cx.b.op("cast", [y], name=cx.name(f"{name}_cast"), dtype=out_dtype)
    return y


@_op("SoftmaxOutput", "Softmax")
def _softmax_output(cx: _Converter, name: str, a: _Attrs, inputs: list) -> str:
    # inputs[1] is the training label: inference never reads it, so it never becomes a node. mxnet 1.9
    # normalises over the last axis (whatever the rank), or over axis 1 with multi_output.
    axis = 1 if a.bool("multi_output", False) else -1
    return cx.b.op("nn.softmax", [cx.value(inputs[0])], name=cx.name(name), axis=axis)


@_op("SoftmaxActivation")
def _softmax_activation(cx: _Converter, name: str, a: _Attrs, inputs: list) -> str:
    axis = 1 if a.str("mode", "instance") == "channel" else -1   # 'instance': the last axis, as mxnet 1.9 does
    return cx.b.op("nn.softmax", [cx.value(inputs[0])], name=cx.name(name), axis=axis)


@_op("clip")
def _clip(cx: _Converter, name: str, a: _Attrs, inputs: list) -> str:
    return cx.b.op("clip", [cx.value(inputs[0])], name=cx.name(name), a_min=a.float("a_min", 0.0),
                   a_max=a.float("a_max", 0.0))


def _check_reshape(a: _Attrs) -> str | None:
    if a.bool("reverse", False):
        return "reverse=True (only False)"
    if any(a.ints("target_shape")) and not a.ints("shape"):
        return "the legacy target_shape attribute (use shape)"
    special = [v for v in a.ints("shape") if v < -1]
    return f"shape={a.ints('shape')} (special values {special}; only 0 and -1)" if special else None


@_op("Reshape", "reshape", check=_check_reshape)
def _reshape(cx: _Converter, name: str, a: _Attrs, inputs: list) -> str:
    return cx.b.op("reshape", [cx.value(inputs[0])], name=cx.name(name), newshape=a.ints("shape"))


def _check_upsampling(a: _Attrs) -> str | None:
    kind = a.str("sample_type", "")
    if kind != "nearest":
        return f"sample_type={kind!r} (only nearest)"
    return None if a.int("num_args", 1) == 1 else f"num_args={a.int('num_args', 1)} (only 1 input)"


@_op("UpSampling", check=_check_upsampling)
def _upsampling(cx: _Converter, name: str, a: _Attrs, inputs: list) -> str:
    s = a.int("scale", 1)
    return cx.b.op("nn.upsampling", [cx.value(inputs[0])], name=cx.name(name), scale_h=s, scale_w=s)


@_op("Cast", "cast")
def _cast(cx: _Converter, name: str, a: _Attrs, inputs: list) -> str:
    return cx.b.op("cast", [cx.value(inputs[0])], name=cx.name(name), dtype=a.str("dtype", "float32"))


@_op("transpose")
def _transpose(cx: _Converter, name: str, a: _Attrs, inputs: list) -> str:
    x = cx.value(inputs[0])
    axes = a.ints("axes") or tuple(reversed(range(len(cx.shape(x)))))   # empty: reverse, as numpy
    return cx.b.op("transpose", [x], name=cx.name(name), axes=axes)


def _check_pad(a: _Attrs) -> str | None:
    mode = a.str("mode", "")
    return None if mode == "constant" else f"mode={mode!r} (only constant)"


@_op("Pad", "pad", check=_check_pad)
def _pad(cx: _Converter, name: str, a: _Attrs, inputs: list) -> str:
    w = a.ints("pad_width")
    return cx.b.op("nn.pad", [cx.value(inputs[0])], name=cx.name(name),
                   pad_width=tuple(zip(w[::2], w[1::2], strict=True)), pad_value=a.float("constant_value", 0.0))


def supported_ops() -> list[str]:
    """The mxnet op names ``from_mxnet`` converts (some only with certain attributes)."""
    return sorted(_OPS)


# ---- the converter ------------------------------------------------------------------------------------------

def _check_supported(nodes: list[dict]) -> None:
    """Raise one GraphError naming every unsupported op (with why, and its nodes) of the whole symbol."""
    bad: dict[str, list[str]] = {}
    for node in nodes:
        op = node["op"]
        if op == "null":
            continue
        spec = _OPS.get(op)
        why = "no converter" if spec is None else spec.check(_Attrs(_raw_attrs(node)))
        if why is not None:
            bad.setdefault(op if spec is None else f"{op} with {why}", []).append(node["name"])
    if bad:
        lines = "\n".join(f"  {op}: {', '.join(names)}" for op, names in bad.items())
        raise GraphError(f"the mxnet model uses {sum(map(len, bad.values()))} node(s) the MXNet frontend "
                         f"cannot convert:\n{lines}\nsupported mxnet ops: {', '.join(supported_ops())}")


class _Converter:
    """State of one conversion: mxnet node index -> IR node name (variables are made on first read)."""

    def __init__(self, sym_json: dict, shape: dict[str, tuple[int, ...]], dtype: str, params: Params):
        self.nodes: list[dict] = sym_json["nodes"]
        self.heads: list = sym_json["heads"]
        self.shapes = shape
        self.input_dtype = dtype
        self.params = params
        self.b = GraphBuilder()
        self.values: dict[int, str] = {}
        self.taken = {n["name"] for n in self.nodes}   # helper nodes must not take a later mxnet node's name

    def run(self) -> tuple[Graph, Params]:
        missing = [n for n in self.shapes if not any(v["op"] == "null" and v["name"] == n for v in self.nodes)]
        if missing:
            names = [v["name"] for v in self.nodes if v["op"] == "null" and v["name"] not in self.params]
            raise GraphError(f"shape names input(s) {missing} the model does not have; its free variables: {names}")
        for idx, node in enumerate(self.nodes):
            if node["op"] != "null":
                self.values[idx] = _OPS[node["op"]].convert(self, node["name"], _Attrs(_raw_attrs(node)),
                                                            node["inputs"])
        return self.b.finish([self.value(h) for h in self.heads])

    def name(self, want: str) -> str:
        """``want`` if no IR node has it yet (mxnet names may repeat), else ``want_1``, ``want_2`` ..."""
        name, k = want, 0
        while name in self.b.graph.nodes or (name != want and name in self.taken):
            k += 1
            name = f"{want}_{k}"
        return name

    def value(self, entry: list) -> str:
        """The IR node holding the value of an mxnet input entry ``[node index, output index, version]``."""
        idx, out = int(entry[0]), int(entry[1])
        node = self.nodes[idx]
        if node["op"] != "null":
            if out != 0:
                raise GraphError(f"a node reads output {out} of {node['name']!r} ({node['op']}); only the first "
                                 "output of an mxnet op is supported")
            return self.values[idx]
        if idx not in self.values:
            name = node["name"]
            if name in self.shapes:
                self.values[idx] = self.b.input(self.name(name), self.shapes[name], self.input_dtype)
            elif name in self.params:
                self.values[idx] = self.b.const(self.name(name), self.params[name])
            else:
                raise GraphError(f"variable {name!r} has no value: give its shape in `shape` if it is an input, "
                                 "or its value in arg_params/aux_params (or the block's parameters)")
        return self.values[idx]

    def shape(self, name: str) -> tuple[int, ...]:
        return self.b.graph[name].shape

    def dtype(self, name: str) -> str:
        return self.b.graph[name].dtype

    def bias(self, name: str, y: str, inputs: list, no_bias: bool) -> str:
        """``y`` plus the op's bias input (its third), if it has one."""
        if no_bias or len(inputs) < 3:
            return y
        return self.b.op("nn.bias_add", [y, self.value(inputs[2])], name=self.name(f"{name}_bias"), axis=1)
