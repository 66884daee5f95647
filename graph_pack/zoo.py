"""A built-in model zoo needing no framework (like TVM's ``relay.testing``): ResNet v1/v2, MobileNet v1 (VTA's
grouped variant and the true depthwise one), VGG and the DCGAN generator, built straight into the graph IR.

    graph, params = get_model("resnet-18", image_shape=(3, 32, 32))
    start, stop = pack_points("resnet-18")        # ("nn.max_pool2d", "nn.global_avg_pool2d")

The weights are random, but scaled so a later int8 quantization with a fixed activation scale sees sensible
ranges: He-normal convolutions and dense layers, and every batch norm's running mean/variance set to the
statistics of its actual input on a random calibration batch (the network built so far runs when a batch norm
is added), so batch norms output roughly unit-variance channels and nothing explodes or vanishes through 50
layers. The returned graph has been through ``passes.simplify`` (batch norms folded into the convolutions
before them, the others lowered to multiply/add), as an import would leave it; ``get_raw_model`` gives the
graph before that.
"""

from __future__ import annotations

import difflib
import functools
import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from graph_pack.frontend_onnx import DEFAULT_MAX_TENSOR_BYTES  # one bound for imported and built models
from graph_pack.graph import Graph, GraphBuilder, GraphError
from graph_pack.kernels import KERNELS
from graph_pack.passes import simplify
from vta.numerics import conv2d_im2col, conv2d_transpose_scatter

Params = dict[str, np.ndarray]
BN_EPSILON = 1e-5
CLASSIFIER_SHAPE = (3, 224, 224)
DCGAN_SHAPE = (3, 64, 64)
DCGAN_RANDOM_LEN = 100
DCGAN_NGF = 128


# ---- calibration kernels: fast (BLAS) and the same on every machine --------------------------------------
# BLAS sums in whatever order its kernel for this CPU chooses, so float products through it differ in their last
# bits between machines; batch-norm statistics computed from them would make the zoo's weights (and every
# result downstream) machine-dependent. The calibration products therefore run on integers: both operands
# rounded to fixed point with a power-of-two scale, narrow enough that every partial sum is an integer below
# 2^53, which float64 BLAS adds exactly in any order. Statistics need no float32-exact forward pass, only one
# that is the same everywhere.

def _fixed_point(a: np.ndarray, bits: int) -> tuple[np.ndarray, float]:
    """``a`` as integers below 2^(bits-1) in magnitude (held in float64) and their power-of-two scale."""
    a = np.asarray(a, np.float64)
    peak = float(np.max(np.abs(a))) if a.size else 0.0
    if not 0.0 < peak < math.inf:
        return np.zeros_like(a), 1.0
    scale = math.ldexp(1.0, math.frexp(peak)[1] - bits + 1)   # peak < 2^frexp, so |a / scale| < 2^(bits-1)
    return np.rint(a / scale), scale


def _exact_product(fn: Callable[[np.ndarray, np.ndarray], np.ndarray], x: np.ndarray, w: np.ndarray,
                   terms: int) -> np.ndarray:
    """``fn(x, w)`` (a bilinear map summing at most ``terms`` products per output) on fixed-point operands
    whose products and sums are exact in float64, rescaled to float32."""
    bits = min(25, (55 - math.ceil(math.log2(max(terms, 2)))) // 2)   # 2^(2 bits - 2) x terms <= 2^53
    (xq, sx), (wq, sw) = _fixed_point(x, bits), _fixed_point(w, bits)
    return (fn(xq, wq) * (sx * sw)).astype(np.float32)


def _calibration_conv(a: dict, x: np.ndarray, w: np.ndarray) -> np.ndarray:
    return _exact_product(lambda xq, wq: conv2d_im2col(xq, wq, a["strides"], a["padding"], a["dilation"],
                                                       a["groups"]), x, w, int(np.prod(w.shape[1:])))


def _calibration_conv_transpose(a: dict, x: np.ndarray, w: np.ndarray) -> np.ndarray:
    (sh, sw), (kh, kw) = a["strides"], w.shape[2:]
    taps = -(-kh // sh) * -(-kw // sw)   # kernel taps scatter-added into one output pixel, at most
    return _exact_product(lambda xq, wq: conv2d_transpose_scatter(xq, wq, a["strides"], a["padding"],
                                                                  a["output_padding"]), x, w, w.shape[0] * taps)


_CALIBRATION_KERNELS = {
    "nn.conv2d": _calibration_conv,
    "nn.conv2d_transpose": _calibration_conv_transpose,
    "nn.dense": lambda a, x, w: _exact_product(lambda xq, wq: xq @ wq.T, x, w, w.shape[1]),
}


def _normals(rng: np.random.Generator, shape: tuple[int, ...], chunk: int = 1 << 22) -> np.ndarray:
    """Standard normals as float32, drawn as float64 (numpy's float32 draws changed in 1.22, and a Pynq image has
    1.21: float64 draws are the same on every numpy since 1.17), a chunk at a time so a large weight never holds
    a float64 copy whole; the numbers do not depend on ``chunk``."""
    out = np.empty(shape, np.float32)
    flat = out.reshape(-1)
    for i in range(0, flat.size, chunk):
        flat[i:i + chunk] = rng.standard_normal(min(chunk, flat.size - i))
    return out


class _Net:
    """A GraphBuilder that can run what it has built so far on a random calibration batch, so a batch norm
    can take the real per-channel statistics of its input as its running mean and variance. Ops run lazily
    (a network without batch norms runs none) with fast BLAS kernels made exact (``_exact_product``)."""

    def __init__(self, rng: np.random.Generator):
        self.builder = GraphBuilder()
        self.rng = rng
        self.values: dict[str, np.ndarray] = {}
        self._evaluated = 0   # graph nodes (in order) already run on the calibration batch

    def channels(self, x: str) -> int:
        return self.builder.graph[x].shape[1]

    def input(self, name: str, shape: tuple[int, ...], calibration: np.ndarray) -> str:
        self.values[name] = calibration.astype(np.float32)
        return self.builder.input(name, shape)

    def const(self, name: str, value: np.ndarray) -> str:
        return self.builder.const(name, np.asarray(value, np.float32))

    def op(self, op: str, inputs: list[str], name: str, **attrs) -> str:
        return self.builder.op(op, inputs, name=name, **attrs)

    def value(self, x: str) -> np.ndarray:
        """``x`` on the calibration batch (running every op added since the last call)."""
        nodes = list(self.builder.graph)
        params = self.builder.params
        for node in nodes[self._evaluated:]:
            if node.op not in ("input", "const"):
                args = [params[i] if i in params else self.values[i] for i in node.inputs]
                kernel = _CALIBRATION_KERNELS.get(node.op, KERNELS[node.op])
                self.values[node.name] = kernel(node.attrs, *args)
        self._evaluated = len(nodes)
        return self.values[x]

    def checkpoint(self, x: str) -> str:
        """Only ``x`` is read from here on (a block boundary): free the other calibration values."""
        self.values = {x: self.value(x)}
        return x

    # ---- layers --------------------------------------------------------------------------------------------

    def he_normal(self, shape: tuple[int, ...], fan_in: float) -> np.ndarray:
        """Kaiming-normal: keeps the second moment of activations through conv + relu."""
        return _normals(self.rng, shape) * np.float32(math.sqrt(2.0 / fan_in))

    def bias(self, x: str, name: str) -> str:
        b = self.const(f"{name}.bias", self.rng.normal(0.0, 0.01, self.channels(x)))
        return self.op("nn.bias_add", [x, b], f"{name}.bias_add", axis=1)

    def conv(self, x: str, name: str, channels: int, kernel: int, stride: int = 1, padding: int = 0,
             groups: int = 1, bias: bool = False) -> str:
        per_group = self.channels(x) // groups
        shape = (channels, per_group, kernel, kernel)
        w = self.const(f"{name}.weight", self.he_normal(shape, per_group * kernel ** 2))
        y = self.op("nn.conv2d", [x, w], name, strides=stride, padding=padding, groups=groups)
        return self.bias(y, name) if bias else y

    def deconv(self, x: str, name: str, channels: int, kernel: int = 4, stride: int = 2,
               padding: int = 1) -> str:
        cin = self.channels(x)
        fan_in = cin * kernel ** 2 / stride ** 2   # an output pixel sees (kernel / stride)^2 taps per channel
        w = self.const(f"{name}.weight", self.he_normal((cin, channels, kernel, kernel), fan_in))
        return self.op("nn.conv2d_transpose", [x, w], name, strides=stride, padding=padding)

    def dense(self, x: str, name: str, units: int, bias: bool = True) -> str:
        k = self.channels(x)
        w = self.const(f"{name}.weight", self.he_normal((units, k), k))
        y = self.op("nn.dense", [x, w], name)
        return self.bias(y, name) if bias else y

    def bn(self, x: str, name: str, scale: bool = True, center: bool = True) -> str:
        """Batch norm whose running statistics are those of ``x`` on the calibration batch."""
        v = self.value(x).astype(np.float64)
        axes = tuple(i for i in range(v.ndim) if i != 1)
        c = v.shape[1]
        gamma = self.rng.uniform(0.5, 1.5, c) if scale else np.ones(c)
        beta = self.rng.uniform(-0.2, 0.2, c) if center else np.zeros(c)
        var = np.maximum(v.var(axis=axes), 1e-4)  # a constant channel must not get a huge scale
        named = (("gamma", gamma), ("beta", beta), ("running_mean", v.mean(axis=axes)), ("running_var", var))
        stats = [self.const(f"{name}.{p}", a) for p, a in named]
        return self.op("nn.batch_norm", [x, *stats], name, epsilon=BN_EPSILON)

    def relu(self, x: str, name: str) -> str:
        return self.op("nn.relu", [x], name)

    def conv_bn_relu(self, x: str, name: str, channels: int, kernel: int, stride: int = 1, padding: int = 0,
                     groups: int = 1, relu: bool = True, suffix: str = "") -> str:
        """conv{suffix} -> bn{suffix} (-> relu{suffix}) under prefix ``name``, the unit most CNNs repeat."""
        y = self.conv(x, f"{name}.conv{suffix}", channels, kernel, stride, padding, groups)
        y = self.bn(y, f"{name}.bn{suffix}")
        return self.relu(y, f"{name}.relu{suffix}") if relu else y


def _classifier(net: _Net, x: str, num_classes: int) -> str:
    x = net.op("nn.global_avg_pool2d", [x], "pool")
    x = net.op("nn.batch_flatten", [x], "flatten")
    return net.op("nn.softmax", [net.dense(x, "fc", num_classes)], "softmax")


# ---- ResNet (Gluon resnet*_v1 / resnet*_v2) ----------------------------------------------------------------

_RESNET_UNITS = {18: ("basic", (2, 2, 2, 2)), 34: ("basic", (3, 4, 6, 3)), 50: ("bottleneck", (3, 4, 6, 3))}
_RESNET_CHANNELS = {"basic": (64, 64, 128, 256, 512), "bottleneck": (64, 256, 512, 1024, 2048)}


def _basic_v1(net: _Net, x: str, p: str, c: int, stride: int, down: bool) -> str:
    y = net.conv_bn_relu(x, p, c, 3, stride, 1, suffix="1")
    y = net.conv_bn_relu(y, p, c, 3, 1, 1, relu=False, suffix="2")
    sc = net.conv_bn_relu(x, f"{p}.downsample", c, 1, stride, relu=False) if down else x
    return net.relu(net.op("add", [y, sc], f"{p}.add"), f"{p}.relu2")


def _bottleneck_v1(net: _Net, x: str, p: str, c: int, stride: int, down: bool) -> str:
    y = net.conv_bn_relu(x, p, c // 4, 1, stride, suffix="1")  # Gluon v1 strides the first 1x1
    y = net.conv_bn_relu(y, p, c // 4, 3, 1, 1, suffix="2")
    y = net.conv_bn_relu(y, p, c, 1, relu=False, suffix="3")
    sc = net.conv_bn_relu(x, f"{p}.downsample", c, 1, stride, relu=False) if down else x
    return net.relu(net.op("add", [y, sc], f"{p}.add"), f"{p}.relu3")


def _basic_v2(net: _Net, x: str, p: str, c: int, stride: int, down: bool) -> str:
    y = net.relu(net.bn(x, f"{p}.bn1"), f"{p}.relu1")
    sc = net.conv(y, f"{p}.downsample.conv", c, 1, stride) if down else x
    y = net.conv(y, f"{p}.conv1", c, 3, stride, 1)
    y = net.relu(net.bn(y, f"{p}.bn2"), f"{p}.relu2")
    y = net.conv(y, f"{p}.conv2", c, 3, 1, 1)
    return net.op("add", [y, sc], f"{p}.add")


def _bottleneck_v2(net: _Net, x: str, p: str, c: int, stride: int, down: bool) -> str:
    y = net.relu(net.bn(x, f"{p}.bn1"), f"{p}.relu1")
    sc = net.conv(y, f"{p}.downsample.conv", c, 1, stride) if down else x
    y = net.conv(y, f"{p}.conv1", c // 4, 1)
    y = net.relu(net.bn(y, f"{p}.bn2"), f"{p}.relu2")
    y = net.conv(y, f"{p}.conv2", c // 4, 3, stride, 1)  # Gluon v2 strides the 3x3
    y = net.relu(net.bn(y, f"{p}.bn3"), f"{p}.relu3")
    y = net.conv(y, f"{p}.conv3", c, 1)
    return net.op("add", [y, sc], f"{p}.add")


_RESNET_BLOCKS = {(1, "basic"): _basic_v1, (1, "bottleneck"): _bottleneck_v1,
                  (2, "basic"): _basic_v2, (2, "bottleneck"): _bottleneck_v2}


def _resnet(net: _Net, x: str, num_classes: int, depth: int, version: int) -> str:
    """ResNet v1 (post-activation) or v2 (pre-activation: BN-relu before each conv, so the batch norms
    reading a residual add have no conv to fold into)."""
    kind, units = _RESNET_UNITS[depth]
    channels = _RESNET_CHANNELS[kind]
    block = _RESNET_BLOCKS[version, kind]
    if version == 2:
        x = net.bn(x, "data_bn", scale=False, center=False)
    x = net.conv_bn_relu(x, "stem", channels[0], 7, 2, 3)
    x = net.op("nn.max_pool2d", [x], "stem.pool", pool_size=3, strides=2, padding=1)
    for stage, n in enumerate(units):
        c = channels[stage + 1]
        for i in range(n):
            stride = 2 if stage > 0 and i == 0 else 1
            down = i == 0 and (stride != 1 or net.channels(x) != c)
            x = net.checkpoint(block(net, x, f"layer{stage + 1}.{i}", c, stride, down))
    if version == 2:
        x = net.relu(net.bn(x, "post.bn"), "post.relu")
    return _classifier(net, x, num_classes)


# ---- MobileNet v1 ------------------------------------------------------------------------------------------

# (pointwise output channels, stride of the depthwise conv) for each separable block after the 32-channel stem
_MOBILENET_PLAN = ((64, 1), (128, 2), (128, 1), (256, 2), (256, 1), (512, 2), *((512, 1),) * 5,
                   (1024, 2), (1024, 1))


def _mobilenet(net: _Net, x: str, num_classes: int, group_size: int) -> str:
    """MobileNet v1 (width 1.0); each 3x3 'depthwise' conv has groups = channels // group_size (VTA's
    variant uses 16 channels per group, whole channel blocks; group_size 1 is the true depthwise conv)."""
    x = net.conv_bn_relu(x, "stem", 32, 3, 2, 1)
    for k, (out_c, stride) in enumerate(_MOBILENET_PLAN, 1):
        c = net.channels(x)
        x = net.conv_bn_relu(x, f"block{k}", c, 3, stride, 1, groups=c // group_size, suffix="_dw")
        x = net.checkpoint(net.conv_bn_relu(x, f"block{k}", out_c, 1, suffix="_pw"))
    return _classifier(net, x, num_classes)


# ---- VGG ---------------------------------------------------------------------------------------------------

_VGG_UNITS = {11: (1, 1, 2, 2, 2), 13: (2, 2, 2, 2, 2), 16: (2, 2, 3, 3, 3), 19: (2, 2, 4, 4, 4)}
_VGG_FILTERS = (64, 128, 256, 512, 512)


def _vgg(net: _Net, x: str, num_classes: int, depth: int) -> str:
    """relay.testing.vgg without batch norm: 3x3 conv + bias + relu stacks, 2x2 max pools, three dense."""
    for i, (n, c) in enumerate(zip(_VGG_UNITS[depth], _VGG_FILTERS, strict=True), 1):
        for j in range(1, n + 1):
            x = net.relu(net.conv(x, f"block{i}.conv{j}", c, 3, 1, 1, bias=True), f"block{i}.relu{j}")
        x = net.op("nn.max_pool2d", [x], f"block{i}.pool", pool_size=2, strides=2)
    x = net.op("nn.batch_flatten", [x], "flatten")
    for fc in ("fc6", "fc7"):
        x = net.relu(net.dense(x, fc, 4096), f"{fc}.relu")
    return net.op("nn.softmax", [net.dense(x, "fc8", num_classes)], "softmax")


# ---- DCGAN generator ---------------------------------------------------------------------------------------

def _dcgan_layers(image_shape: tuple[int, int, int]) -> int:
    """How many stride-2 transposed convs take 4x4 to the image (4 for 64x64)."""
    _, h, w = image_shape
    n = round(math.log2(h / 4)) if h >= 8 else 0
    if h != w or n < 1 or 4 * 2 ** n != h:
        raise ValueError(f"dcgan: image_shape must be (C, S, S) with S = 4 * 2^k, k >= 1 (e.g. (3, 64, 64)), "
                         f"got {image_shape}")
    return n


def _dcgan(net: _Net, x: str, image_shape: tuple[int, int, int]) -> str:
    """relay.testing.dcgan's generator: project and reshape to 4x4, then 4x4/stride-2/pad-1 transposed
    convs halving the channels (1024 -> 512 -> 256 -> 128 for 64x64) with BN + relu, a last one to the
    image, tanh."""
    n = _dcgan_layers(image_shape)
    base = DCGAN_NGF * 2 ** (n - 1)
    x = net.dense(x, "fc", 4 * 4 * base, bias=False)
    x = net.op("reshape", [x], "fc.reshape", newshape=(-1, base, 4, 4))
    x = net.relu(net.bn(x, "fc.bn"), "fc.relu")
    for k in range(1, n):
        x = net.deconv(x, f"g{k}.deconv", net.channels(x) // 2)
        x = net.relu(net.bn(x, f"g{k}.bn"), f"g{k}.relu")
    x = net.deconv(x, "out.deconv", image_shape[0])
    return net.op("tanh", [x], "out.tanh")


# ---- the registry ------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class _Spec:
    build: Callable[..., str]          # (net, data, num_classes or image_shape) -> output node
    pack: tuple[str, str]              # (start_name, stop_name) for graph_pack
    generator: bool = False            # dcgan: input (batch, random_len), image_shape is the output


_RESNET_PACK = ("nn.max_pool2d", "nn.global_avg_pool2d")
_MOBILENET_PACK = ("stem.relu", "nn.global_avg_pool2d")

_MODELS: dict[str, _Spec] = {
    **{f"resnet-{d}{suffix}": _Spec(functools.partial(_resnet, depth=d, version=v), _RESNET_PACK)
       for v, suffix in ((1, ""), (2, "-v2")) for d in _RESNET_UNITS},
    "mobilenet": _Spec(functools.partial(_mobilenet, group_size=16), _MOBILENET_PACK),
    "mobilenet-depthwise": _Spec(functools.partial(_mobilenet, group_size=1), _MOBILENET_PACK),
    **{f"vgg-{d}": _Spec(functools.partial(_vgg, depth=d), ("block1.relu1", "flatten")) for d in _VGG_UNITS},
    "dcgan": _Spec(_dcgan, ("fc.relu", "out.deconv"), generator=True),
}

_ALIASES = {
    **{f"resnet{d}_v1": f"resnet-{d}" for d in _RESNET_UNITS},
    **{f"resnet-{d}-v1": f"resnet-{d}" for d in _RESNET_UNITS},
    **{f"resnet{d}_v2": f"resnet-{d}-v2" for d in _RESNET_UNITS},
    **{f"vgg{d}": f"vgg-{d}" for d in _VGG_UNITS},
}


def list_models() -> list[str]:
    """The canonical model names (get_model also accepts Gluon-style aliases such as resnet18_v1)."""
    return list(_MODELS)


def _resolve(name: str) -> str:
    key = name.lower()
    key = _ALIASES.get(key, key)
    if key not in _MODELS:
        raise ValueError(f"unknown model {name!r}; available: {', '.join(_MODELS)} "
                         f"(aliases: {', '.join(_ALIASES)})")
    return key


def pack_points(name: str) -> tuple[str, str]:
    """Suggested (start_name, stop_name) for graph_pack, each an op name (its first occurrence) or a node
    name. As in VTA, the packed region is the nodes after start up to the one before stop (both run on the
    CPU): every accelerator-suitable layer lies inside, the first conv (3 input channels) before start."""
    return _MODELS[_resolve(name)].pack


def _calibration_batch(spec: _Spec, image_shape: tuple[int, int, int]) -> int:
    """Images enough for per-channel statistics at the deepest (1/32 resolution) batch norms: about 64
    positions there, and never fewer than 4 images (the spread between images matters most)."""
    if spec.generator:
        return 16
    return max(4, min(64, -(-65536 // (image_shape[1] * image_shape[2]))))


def get_raw_model(name: str, batch_size: int = 1, image_shape: tuple[int, int, int] | None = None,
                  num_classes: int = 1000, dtype: str = "float32", seed: int = 0) -> tuple[Graph, Params]:
    """The network as built, before ``passes.simplify`` (batch norms still present): for checking passes."""
    spec = _MODELS[_resolve(name)]
    if np.dtype(dtype) != np.float32:
        raise ValueError(f"dtype {dtype!r} is not supported; the zoo builds float32 models (quantize later)")
    if batch_size < 1 or num_classes < 1:
        raise ValueError(f"batch_size and num_classes must be >= 1, got {batch_size} and {num_classes}")
    shape = tuple(int(s) for s in (image_shape or (DCGAN_SHAPE if spec.generator else CLASSIFIER_SHAPE)))
    if len(shape) != 3 or min(shape) < 1:
        raise ValueError(f"image_shape must be (channels, height, width), got {image_shape}")
    net = _Net(np.random.default_rng(seed))
    sample = (DCGAN_RANDOM_LEN,) if spec.generator else shape
    calibration = np.random.default_rng([seed, 1]).standard_normal((_calibration_batch(spec, shape), *sample))
    data = net.input("data", (batch_size, *sample), calibration)
    out = spec.build(net, data, shape) if spec.generator else spec.build(net, data, num_classes)
    return net.builder.finish([out])


def _override(params: Params, weights: dict[str, np.ndarray]) -> Params:
    params = dict(params)
    for name, value in weights.items():
        if name not in params:
            near = difflib.get_close_matches(name, list(params), n=5)
            hint = f"; did you mean {', '.join(near)}?" if near else f" (it has {len(params)} parameters)"
            raise GraphError(f"weights: the model has no parameter {name!r}{hint}")
        value = np.asarray(value)
        expected = params[name].shape
        if value.shape != expected:
            raise GraphError(f"weights: parameter {name!r} expects shape {expected}, got {value.shape}")
        params[name] = value.astype(params[name].dtype)
    return params


# Largest tensor per image pixel (bytes of the widest float32 activation per H x W, or of a weight that grows
# with the image, e.g. dcgan's projection): conservative estimates of each family's peak, so an absurd
# image_shape is refused before anything is built.
_PEAK_PER_PIXEL = {"vgg": (64 * 4, 8192), "dcgan": (32 * 4, 8192)}
_PEAK_DEFAULT = (16 * 4, 0)
CALIBRATION_IMAGES = 4   # batch-norm statistics are set from a forward pass over at least this many images


class TooLarge(GraphError):
    """A zoo model whose largest tensor would pass ``max_tensor_bytes``."""


def peak_tensor_bytes(name: str, batch_size: int, image_shape: tuple[int, int, int] | None) -> int:
    """An upper estimate of the largest tensor building ``name`` makes (its calibration pass included)."""
    family = next((f for f in _PEAK_PER_PIXEL if name.lower().startswith(f)), None)
    per_image, weight = _PEAK_PER_PIXEL.get(family, _PEAK_DEFAULT)
    _, h, w = image_shape or ((3, 64, 64) if family == "dcgan" else (3, 224, 224))
    return max(per_image * max(batch_size, CALIBRATION_IMAGES), weight) * h * w


def get_model(name: str, batch_size: int = 1, image_shape: tuple[int, int, int] | None = None,
              num_classes: int = 1000, dtype: str = "float32", seed: int = 0,
              weights: dict[str, np.ndarray] | None = None,
              max_tensor_bytes: int = DEFAULT_MAX_TENSOR_BYTES) -> tuple[Graph, Params]:
    """``(graph, params)`` of a zoo model with input "data" (NCHW, or (batch, 100) for dcgan), batch norms
    folded as at import. Deterministic for a seed. ``image_shape`` (C, H, W) is the classifiers' input
    (default (3, 224, 224)) and dcgan's output (default (3, 64, 64)). ``weights`` replaces named parameters
    of the returned params (names after folding, e.g. "fc.weight", "layer1.0.conv1.weight_bn");
    ``num_classes`` does not apply to dcgan. A model whose largest tensor would pass ``max_tensor_bytes``
    is refused (``TooLarge``) before anything is built."""
    peak = peak_tensor_bytes(name, batch_size, image_shape)
    if peak > max_tensor_bytes:
        raise TooLarge(f"{name}'s largest tensor would take about {peak / 2 ** 20:,.0f} MiB, over the "
                       f"{max_tensor_bytes / 2 ** 20:g} MiB limit (max_tensor_bytes)")
    graph, params = simplify(*get_raw_model(name, batch_size, image_shape, num_classes, dtype, seed))
    return graph, _override(params, weights or {})
