"""``quantize``: a float graph becomes an integer graph with power-of-two scales (VTA's realize scheme).

Every quantized tensor is an integer array ``q`` standing for ``q * 2**exp``. Weights are int8 with a
per-layer exponent from their largest magnitude (per output channel where ``per_channel`` says: the int32
result is then brought to one exponent by a per-channel rounding shift); activations that are stored are int8 with an exponent
from ``global_scale`` (VTA's default mode: int8 covers about +-global_scale) or from calibration on sample
batches (per-tensor max or percentile). A convolution accumulates in int32 at ``exp_in + exp_w``; its bias
is added in int32 at that exponent, and requantization to the next int8 activation is ``add 2**(k-1)``
(round half up) then ``right_shift k`` then ``clip(-127, 127)`` then ``cast int8`` - the chain VTA fuses into
the convolution. Residual adds bring their operands to the coarser exponent first, so the chain reads
conv -> bias -> round/shift -> add(residual) -> relu -> clip -> cast and fuses whole into one accelerator op.

Ops the accelerator cannot compute in integers (softmax, average pools, skipped layers, dense by default)
stay float; ``qnn.quantize`` / ``qnn.dequantize`` mark the crossings. Tensors that are not float in the float
graph (a transformer's int64 token ids, a boolean attention mask, the integer arithmetic on them) are not
activations: they and the ops that read them pass through untouched (an op reading one is computed as in the
float graph, its float inputs dequantized where needed).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from graph_pack.graph import Graph, GraphBuilder
from graph_pack.power2 import INT8_MAX, power2_exponent
from graph_pack.quantize_model import strip_fake_quant, weight_exponents
from graph_pack.reference import evaluate
from host import jit
from hw_config.isa_rules import IMM_MAX, IMM_MIN
from vta.templates.epilogue import CHANNEL_SHIFT_MAX

MODES = ("global_scale", "max", "percentile", "model")
DEFAULT_MODE = "percentile"   # with sample batches; VTA's "global_scale" without (quantize's calibrate_mode=None)
PER_CHANNEL = ("auto", "all", "none")
CONVS = ("nn.conv2d", "nn.conv2d_transpose")
SHAPE_OPS = ("nn.max_pool2d", "nn.upsampling", "reshape", "nn.batch_flatten", "transpose")


@dataclass(frozen=True)
class QValue:
    kind: str          # "f" float, "i8" stored int8, "i32" int32 accumulator chain, "raw" not float in the
                       # float graph (ids, masks): passed through as it is
    node: str          # node in the quantized graph holding the value
    exp: int = 0       # value = node * 2**exp (integers)


def _kind_of(dtype: str) -> str:
    """A float graph's value of ``dtype`` as the quantizer starts it: an activation ("f") or passed through ("raw")."""
    return "f" if dtype == "float32" else "raw"


def _int_const(value: np.ndarray, exp: int, dtype: str) -> np.ndarray:
    info = np.iinfo(dtype)
    q = np.floor(np.asarray(value, np.float64) / 2.0 ** exp + 0.5)
    return np.clip(q, -info.max, info.max).astype(dtype)


class _Quantizer:
    def __init__(self, graph: Graph, params: dict, act_exp: dict[str, int], default_exp: int,
                 skip_conv_layers: set[int], skip_dense_layer: bool, per_channel: str = "none",
                 skip_batch_matmul: bool | None = None, model_weights: bool = False):
        self.g, self.params = graph, params
        self.model_weights = model_weights   # keep a weight's own integers where its float values are exactly them
        self.weight_kinds: dict[str, str] = {}   # weight -> "tensor" / "channel" (the model's integers) / "ours"
        self.per_channel = per_channel
        self.act_exp, self.default_exp = act_exp, default_exp
        self.skip_conv, self.skip_dense = skip_conv_layers, skip_dense_layer
        self.skip_batch_matmul = skip_dense_layer if skip_batch_matmul is None else skip_batch_matmul
        self.side: set[str] = set()   # float values computed from ids / masks and constants alone
        self.users = graph.consumers()
        self.position = {name: i for i, name in enumerate(graph.nodes)}
        self.b = GraphBuilder(Graph(), {})
        self.val: dict[str, QValue] = {}
        self.memo: dict[tuple, QValue] = {}
        self.conv_index = 0
        self.folded: dict[str, QValue] = {}   # a bias add folded into a per-channel requantization -> its value

    # ---- helpers that emit integer nodes ----
    def const(self, name: str, value) -> str:
        return self.b.const(self.b.unique(name), value)

    def op(self, op: str, inputs: list[str], name: str, **attrs) -> str:
        return self.b.op(op, inputs, name=self.b.unique(name), **attrs)

    def exp_of(self, fname: str) -> int:
        return self.act_exp.get(fname, self.default_exp)

    def rescale(self, node: str, e_from: int, e_to: int, where: str) -> str:
        """int32 ``node`` at 2**e_from -> 2**e_to: round-half-up right shift, or an exact left shift."""
        k = e_to - e_from
        if k > 0:
            r = self.op("add", [node, self.const(f"{where}.round", np.int32(1 << (k - 1)))], f"{where}.round_add")
            return self.op("right_shift", [r, self.const(f"{where}.shift", np.int32(k))], f"{where}.shr")
        if k < 0:
            return self.op("left_shift", [node, self.const(f"{where}.shift", np.int32(-k))], f"{where}.shl")
        return node

    def i8_exp(self, fname: str) -> int:
        """The exponent ``to_i8(fname)`` gives, without emitting its nodes: a constant's own scale is its largest
        value's (calibration runs no constant), an activation's the calibrated one."""
        return power2_exponent(float(np.abs(self.params[fname]).max())) if self.is_const(fname) else \
            self.exp_of(fname)

    def to_i8(self, fname: str, exp: int | None = None) -> QValue:
        v = self.val[fname]
        exp = self.i8_exp(fname) if exp is None else exp
        key = ("i8", fname, exp)
        if key in self.memo:
            return self.memo[key]
        if v.kind == "i8" and v.exp == exp:
            out = v
        elif self.is_const(fname):   # quantized once, at build (e.g. a ViT's class token concatenated)
            out = QValue("i8", self.const(f"{fname}.q", _int_const(self.params[fname], exp, "int8")), exp)
        elif v.kind == "f":
            out = QValue("i8", self.op("qnn.quantize", [v.node], f"{fname}.quantize", scale=2.0 ** exp), exp)
        else:
            x = v if v.kind == "i32" else self.cast32(v)
            x = self.rescale(x.node, x.exp, exp, f"{fname}.requant")
            x = self.op("clip", [x], f"{fname}.clip", a_min=-INT8_MAX, a_max=INT8_MAX)
            out = QValue("i8", self.op("cast", [x], f"{fname}.cast", dtype="int8"), exp)
        self.memo[key] = out
        return out

    def to_i32(self, fname: str) -> QValue:
        """The value as int32. An accumulator chain read by several ops is stored as int8 first, because
        the accelerator writes int8 only."""
        v = self.val[fname]
        if v.kind == "i32" and len(self.users[fname]) > 1:
            v = self.to_i8(fname)
        if v.kind == "f":
            v = self.to_i8(fname)
        return v if v.kind == "i32" else self.cast32(v)

    def cast32(self, v: QValue) -> QValue:
        key = ("i32", v.node)
        if key not in self.memo:
            self.memo[key] = QValue("i32", self.op("cast", [v.node], f"{v.node}.i32", dtype="int32"), v.exp)
        return self.memo[key]

    def to_f(self, fname: str) -> QValue:
        v = self.val[fname]
        if v.kind in ("f", "raw"):
            return v
        key = ("f", fname)
        if key not in self.memo:
            q = self.to_i8(fname)
            self.memo[key] = QValue("f", self.op("qnn.dequantize", [q.node], f"{fname}.dequantize",
                                                 scale=2.0 ** q.exp))
        return self.memo[key]

    def is_const(self, name: str) -> bool:
        return self.g[name].op == "const"

    # ---- translation ----
    def run(self) -> tuple[Graph, dict]:
        for node in self.g:
            if node.op == "input":
                self.val[node.name] = QValue(_kind_of(node.dtype), self.b.input(node.name, node.shape, node.dtype))
            elif node.op == "const":
                self.val[node.name] = QValue("f", node.name)  # emitted on use, float or quantized
            else:
                self.val[node.name] = self.translate(node)
        outputs = [self.to_f(o).node for o in self.g.outputs]
        graph, params = self.b.finish(outputs)
        if self.model_weights:
            graph.meta["model_weights"] = dict(self.weight_kinds)
        return graph, params

    def float_op(self, node) -> QValue:
        """``node`` as in the float graph: float (dequantized) inputs, its constants as they are; its result is
        float, or "raw" where the float graph's is not float (a comparison, an index computation)."""
        inputs = []
        for i in node.inputs:
            if self.is_const(i):
                inputs.append(self.float_const(i))
            else:
                inputs.append(self.to_f(i).node)
        return QValue(_kind_of(node.dtype), self.op(node.op, inputs, node.name, **node.attrs))

    def float_const(self, name: str) -> str:
        if name not in self.b.graph.nodes:
            self.b.const(name, self.params[name])
        return name

    def translate(self, node) -> QValue:
        op, ins = node.op, node.inputs
        if node.name in self.folded:
            return self.folded[node.name]
        if node.dtype != "float32" or any(self.g[i].dtype != "float32" for i in ins):
            if node.dtype == "float32":
                self.side.add(node.name)
            return self.float_op(node)   # ids, masks and what reads them: not activations, passed through
        data = [i for i in ins if not self.is_const(i)]
        if data and all(i in self.side for i in data):
            self.side.add(node.name)
        all_float = all(self.val[i].kind == "f" for i in data)
        if op in CONVS or op == "nn.dense":
            return self.weighted(node)
        if op == "nn.batch_matmul" and len(data) == 2 and not self.skip_batch_matmul:
            return self.matmul(node)
        if op == "add" and any(self.mask_like(i, node) for i in data):
            return self.float_op(node)
        if op == "nn.bias_add" and self.val[ins[0]].kind != "f" and self.is_const(ins[1]):
            x = self.to_i32(ins[0])
            bias = self.const(f"{node.name}.bias_q", _int_const(self.params[ins[1]], x.exp, "int32"))
            return QValue("i32", self.op("nn.bias_add", [x.node, bias], node.name, **node.attrs), x.exp)
        if all_float:
            return self.float_op(node)
        if op == "nn.relu":
            v = self.val[ins[0]]
            x = self.to_i32(ins[0]) if v.kind == "i32" else self.to_i8(ins[0])
            return QValue(x.kind, self.op("nn.relu", [x.node], node.name), x.exp)
        if op == "clip":
            v = self.val[ins[0]]
            x = self.to_i32(ins[0]) if v.kind == "i32" else self.to_i8(ins[0])
            lo, hi = (b if math.isinf(b) else math.floor(b / 2.0 ** x.exp + 0.5)   # an open side stays open
                      for b in (node.attrs["a_min"], node.attrs["a_max"]))
            if x.kind == "i32" and not (IMM_MIN <= lo <= hi <= IMM_MAX) and self.exp_of(node.name) > x.exp:
                return self.clip_after_requant(node, x, lo, hi)
            return QValue(x.kind, self.op("clip", [x.node], node.name, a_min=lo, a_max=hi), x.exp)
        if op in ("add", "multiply") and len(data) == 2:
            return self.binary(node)
        if op in ("add", "multiply") and len(data) == 1:
            return self.with_const(node, data[0], next(i for i in ins if self.is_const(i)))
        if op in SHAPE_OPS or (op == "nn.pad" and node.attrs["pad_value"] == 0):
            x = self.to_i8(ins[0])
            return QValue("i8", self.op(op, [x.node], node.name, **node.attrs), x.exp)
        if op == "concatenate":
            exp = max(self.i8_exp(i) for i in ins)   # no requantization to an input's own scale left unused
            parts = [self.to_i8(i, exp).node for i in ins]
            return QValue("i8", self.op(op, parts, node.name, **node.attrs), exp)
        return self.float_op(node)

    def clip_after_requant(self, node, x: QValue, lo: float, hi: float) -> QValue:
        """A clip of an accumulator whose bounds do not fit the ALU's 16-bit immediates (a ReLU6 at the
        accumulator's fine scale): requantized first to the clip's own int8 scale, then clipped at the bounds
        requantized alike. The requantization (a round-half-up right shift) is monotone, so this equals the clip
        followed by the requantization bit for bit, and the chain stays fusable into the accelerator's epilogue."""
        exp = self.exp_of(node.name)
        k = exp - x.exp
        lo, hi = (b if math.isinf(b) else (int(b) + (1 << (k - 1))) >> k for b in (lo, hi))
        y = self.rescale(x.node, x.exp, exp, f"{node.name}.requant")
        return QValue("i32", self.op("clip", [y], node.name, a_min=lo, a_max=hi), exp)

    def weighted(self, node) -> QValue:
        x_name, w_name = node.inputs
        if node.op in CONVS:
            index = self.conv_index
            self.conv_index += 1
            skip = index in self.skip_conv
        else:
            skip = self.skip_dense
        if skip or not self.is_const(w_name):
            return self.float_op(node)
        w = self.params[w_name]
        ew = power2_exponent(float(np.abs(w).max()))
        per_channel = self._per_channel_exponents(node, w, ew)
        if self.model_weights:
            per_channel = self._model_integers(node, w_name, ew, per_channel)
        wq = self.const(f"{w_name}.q", _int_const(w, ew if per_channel is None else
                                                  per_channel.reshape((-1,) + (1,) * (w.ndim - 1)), "int8"))
        x = self.to_i8(x_name)
        y = self.op(node.op, [x.node, wq], node.name, **{**node.attrs, "out_dtype": "int32"})
        if per_channel is not None:   # channel c at 2**(x.exp + e_c): to the common 2**(x.exp + ew), rounding half up
            bias_add, bias = self._sole_bias(node)
            shifts = ew - per_channel
            folded = None if bias_add is None else self._channel_bias(self.params[bias], x.exp, ew, per_channel,
                                                                      self.weight_kinds.get(w_name) == "channel")
            if folded is not None and np.abs(folded).max(initial=0) >= 1 << 30:
                folded = None   # the bias at the finer scales would not fit int32: added after the shift instead
            y = self._align_channels(y, node, shifts, folded)
            if folded is not None:
                self.folded[bias_add] = QValue("i32", y, x.exp + ew)
        return QValue("i32", y, x.exp + ew)

    def _model_integers(self, node, w_name: str, ew: int, per_channel: np.ndarray | None) -> np.ndarray | None:
        """The per-channel exponents that keep ``w_name``'s own integers (a QDQ model's weight whose scales are
        powers of two, per tensor or per channel), else ``per_channel`` as chosen; records which held. Not kept:
        a conv2d_transpose's per-channel integers (its template has no per-channel shift) and a weight with a
        channel finer than the shifts reach (``within_channel_shifts`` re-rounds it)."""
        exact = weight_exponents(self.params[w_name])
        if exact is None or exact[0] == "channel" and (node.op == "nn.conv2d_transpose" or
                                                       (exact[1] < ew - CHANNEL_SHIFT_MAX).any()):
            self.weight_kinds[w_name] = "ours"
            return per_channel
        self.weight_kinds[w_name] = exact[0]
        if exact[0] == "tensor" or (exact[1] == ew).all():
            return per_channel   # ew keeps the integers; per-channel exponents of exact values stay exact
        return exact[1]

    @staticmethod
    def _channel_bias(bias: np.ndarray, x_exp: int, ew: int, exps: np.ndarray, fine: bool) -> np.ndarray:
        """The bias added before the per-channel shift, channel c at 2**(x_exp + exps[c]): rounded at the common
        2**(x_exp + ew) and shifted left (so the sum shifts to ((y + half) >> shifts) + bias, the layer's exact
        meaning at our scales), or, ``fine``, rounded at each channel's own scale (a QDQ model whose scales are
        powers of two: its own int32 bias, exactly, added before the rounding shift as onnxruntime adds it)."""
        if fine:
            return _int_const(bias.reshape(-1), x_exp + exps, "int32").astype(np.int64)
        return _int_const(bias, x_exp + ew, "int32").astype(np.int64).reshape(-1) << (ew - exps)

    def _sole_bias(self, node) -> tuple[str | None, str | None]:
        """(the bias add that alone reads ``node``, its constant) or (None, None)."""
        users = self.users[node.name]
        if len(users) != 1:
            return None, None
        user = self.g[users[0]]
        if len(user.inputs) != 2 or user.inputs[0] != node.name or not self.is_const(user.inputs[1]):
            return None, None
        channels = node.shape[1]
        shape = self.g[user.inputs[1]].shape
        if user.op == "nn.bias_add" and shape == (channels,) or \
                user.op == "add" and shape in ((channels, 1, 1), (1, channels, 1, 1)):
            return user.name, user.inputs[1]
        return None, None

    def matmul(self, node) -> QValue:
        """A product of two activations (attention's Q K^T, probabilities x V): both int8 at their own scales, the
        int32 result at the sum of their exponents, as a dense layer's."""
        a, b = (self.to_i8(i) for i in node.inputs)
        y = self.op(node.op, [a.node, b.node], node.name, **{**node.attrs, "out_dtype": "int32"})
        return QValue("i32", y, a.exp + b.exp)

    def mask_like(self, name: str, node) -> bool:
        """Whether ``name``, an operand of the add ``node``, is an additive mask: computed from ids / masks alone
        and broadcast over the other operand. Its entries (-inf, or -1e9 where a mask blocks) have no int8 scale
        next to the values it is added to, so the add stays float."""
        return name in self.side and int(np.prod(self.g[name].shape)) < int(np.prod(node.shape))

    def _per_channel_exponents(self, node, w: np.ndarray, ew: int) -> np.ndarray | None:
        """Each output channel's weight exponent where per-channel scales apply to ``node`` (None: one per tensor).
        A channel of zeros takes the tensor's."""
        if self.per_channel == "none" or node.op == "nn.conv2d_transpose":
            return None
        if self.per_channel == "auto" and not self._depthwise(node, w):
            return None
        peaks = np.abs(w).reshape(w.shape[0], -1).max(axis=1)
        exps = within_channel_shifts(np.array([power2_exponent(float(m)) if m > 0 else ew for m in peaks], np.int64),
                                     ew)
        return None if (exps == ew).all() else exps

    def _depthwise(self, node, w: np.ndarray) -> bool:
        """A depthwise convolution: one input channel per group (the accelerator's grouped template needs whole
        channel blocks per group, so these run on the host whatever their scales)."""
        return node.op == "nn.conv2d" and node.attrs.get("groups", 1) > 1 and w.shape[1] == 1

    def _align_channels(self, y: str, node, shifts: np.ndarray, bias: np.ndarray | None = None) -> str:
        """``y`` (int32, channel c at a finer exponent by ``shifts[c]``) right-shifted per channel, rounding half up,
        to one exponent (the accelerator's epilogue runs it: a per-channel add, then a per-channel shift).
        ``bias`` (the layer's bias at each channel's exponent, ``_channel_bias``) is added with the rounding term,
        so the layer keeps one per-channel add; at our scales it is a multiple of 2**shifts[c], so (y + half + bias)
        >> shifts equals ((y + half) >> shifts) + bias[c] exactly."""
        shape = (-1,) + (1,) * (len(node.shape) - 2)
        half = np.where(shifts > 0, np.left_shift(1, np.maximum(shifts - 1, 0)), 0).astype(np.int64)
        half = (half + (0 if bias is None else bias)).astype(np.int32).reshape(shape)
        r = self.op("add", [y, self.const(f"{node.name}.channel_round", half)], f"{node.name}.channel_round_add")
        return self.op("right_shift", [r, self.const(f"{node.name}.channel_shift",
                                                     shifts.astype(np.int32).reshape(shape))],
                       f"{node.name}.channel_shr")

    def binary(self, node) -> QValue:
        a, b = node.inputs
        if node.op == "multiply":
            xa, xb = self.to_i32(a), self.to_i32(b)
            return QValue("i32", self.op("multiply", [xa.node, xb.node], node.name), xa.exp + xb.exp)
        # the accelerator can keep one int32 chain going; the other operand is read from memory (int8)
        va, vb = self.val[a], self.val[b]
        chain, other = (a, b) if va.kind == "i32" and (vb.kind != "i32" or self._later(a, b)) else (b, a)
        chain_v = self.to_i32(chain)  # the chain itself when only this add reads it
        other_v = self.to_i8(other)
        exp = max(chain_v.exp, other_v.exp)
        x = self.rescale(chain_v.node, chain_v.exp, exp, f"{node.name}.lhs")
        y = self.rescale(self.cast32(other_v).node, other_v.exp, exp, f"{node.name}.rhs")
        ordered = [x, y] if chain == a else [y, x]
        return QValue("i32", self.op("add", ordered, node.name), exp)

    def _later(self, a: str, b: str) -> bool:
        return self.position[a] > self.position[b]

    def with_const(self, node, data: str, const: str) -> QValue:
        x = self.to_i32(data)
        c = self.params[const]
        if node.op == "add":
            cq = self.const(f"{const}.q", _int_const(c, x.exp, "int32"))
            return QValue("i32", self.op("add", [x.node, cq], node.name), x.exp)
        if c.size == 1 and float(c.reshape(-1)[0]) > 0 and math.log2(float(c.reshape(-1)[0])).is_integer():
            # a power of two (attention's 1/sqrt(head size) for sizes 4, 16, 64 ...): exactly a change of scale
            return QValue("i32", x.node, x.exp + int(math.log2(float(c.reshape(-1)[0]))))
        ec = power2_exponent(float(np.abs(c).max()))
        cq = self.const(f"{const}.q", _int_const(c, ec, "int8").astype(np.int32))
        return QValue("i32", self.op("multiply", [x.node, cq], node.name), x.exp + ec)


def within_channel_shifts(exps: np.ndarray, ew: int) -> np.ndarray:
    """Per-channel weight exponents no finer than ``CHANNEL_SHIFT_MAX`` below the common one ``ew``, so each channel's
    alignment shift is one the accelerator's channel_shr epilogue computes alike on every VTA (0..15). A channel whose
    weights are below 2**-15 of the largest channel's is quantized at 2**(ew - 15) instead (pre-scaled): its rounding
    error, at most half of that step per weight, stays below one unit of the common output scale for reductions of up
    to 2**16 / 127 = 516 int8 products, so the layer loses nothing its int8 output can show."""
    return np.maximum(exps, ew - CHANNEL_SHIFT_MAX)


def default_skip_conv(named_region: bool) -> list[int]:
    """The convolutions ``vta run`` / ``vta tune`` keep in float when ``--skip-conv`` is not given. With a region
    named by --start / --stop, VTA's convention: the first (the stem, whose 3 input channels the accelerator pads to
    a whole block). With regions found automatically, none: the stem offloads too, because in the exported families
    it is 20-70 % of the MACs, which the acceptance counts, and their similarity to onnxruntime is the same either
    way (docs/networks.md). Its padding makes the GEMM core execute BLOCK / C_in times its multiply-adds (16 / 3 =
    5.3x for an RGB stem on 16-wide blocks; ``vta run --explain`` prints the executed MACs beside the model's), so
    where the host is fast the stem may be quicker there: ``--skip-conv 0`` keeps it in float."""
    return [0] if named_region else []


def calibrate(graph: Graph, params: dict, dataset: Iterable[dict[str, np.ndarray]], mode: str,
              percentile: float = 99.99) -> dict[str, int]:
    """Per-node int8 exponents from running the float graph on sample batches (max or percentile of |x|)."""
    stats: dict[str, float] = {}

    def observe(name: str, value: np.ndarray) -> None:
        if value.dtype.kind != "f":
            return
        a = np.abs(value)
        m = float(a.max()) if mode == "max" else float(np.percentile(a, percentile))
        stats[name] = max(stats.get(name, 0.0), m)

    def compiled(node):   # host.jit's kernel where it covers the op: the same bits, several times faster
        return jit.get_kernel(node.op, node.attrs, [graph[i].shape for i in node.inputs],
                              [graph[i].dtype for i in node.inputs]) if jit.available() else None

    batches = 0
    for inputs in dataset:
        evaluate(graph, params, inputs, observe=observe, kernel_for=compiled)
        batches += 1
    if batches == 0:
        raise ValueError(f"calibrate_mode={mode!r} needs at least one sample batch in dataset=")
    return {name: power2_exponent(m) for name, m in stats.items() if m > 0}


def quantize(graph: Graph, params: dict[str, np.ndarray], *, global_scale: float = 8.0,
             skip_conv_layers: Sequence[int] = (0,), skip_dense_layer: bool = True,
             calibrate_mode: str | None = None, dataset: Iterable[dict[str, np.ndarray]] | None = None,
             percentile: float = 99.99, per_channel: str = "auto",
             skip_batch_matmul: bool | None = None) -> tuple[Graph, dict[str, np.ndarray]]:
    """Quantize a float graph to int8/int32 with power-of-two scales (see the module docstring).

    ``calibrate_mode``: "percentile" or "max" (per-tensor ranges from running ``dataset``, an iterable of input
    dicts: the percentile of |x|, ``percentile``, or its maximum) or "global_scale" (VTA's default: every
    activation's int8 range is +-``global_scale``, rounded up to a power of two) or "model" (a QDQ model's own
    quantization, graph_pack/quantize_model.py: each QuantizeLinear / DequantizeLinear pair's scale rounded up to
    the power of two that keeps its range, the weights' own integers where their scales are powers of two; tensors
    the model leaves unquantized calibrated as "percentile" on ``dataset`` when given; the result's
    ``meta["model_scales"]`` and ``meta["model_weights"]`` say what was taken). None (the default): "percentile"
    when ``dataset`` is given, "global_scale" otherwise. ``per_channel``: where weights get one power-of-two
    scale per output channel: "auto" (depthwise convolutions, where each output channel reads its own input channel,
    so a per-tensor scale set by the largest channel loses the small ones), "all" (every conv2d / dense: their requantization is then
    per channel, which the accelerator's epilogue cannot fuse, so they run on the host) or "none" (VTA's per-tensor
    scales). ``skip_conv_layers`` lists conv indices (in graph order) kept in float on the CPU;
    ``skip_dense_layer`` keeps dense layers in float (VTA's default); ``skip_batch_matmul`` keeps the products of
    two activations (``nn.batch_matmul``: attention's) in float, and follows ``skip_dense_layer`` when None (the
    default), so "dense" means every matrix product.
    """
    if calibrate_mode is None:
        calibrate_mode = DEFAULT_MODE if dataset is not None else "global_scale"
    if calibrate_mode not in MODES:
        raise ValueError(f"calibrate_mode={calibrate_mode!r}; allowed: {', '.join(MODES)}")
    if per_channel not in PER_CHANNEL:
        raise ValueError(f"per_channel={per_channel!r}; allowed: {', '.join(PER_CHANNEL)}")
    if not global_scale > 0:
        raise ValueError(f"global_scale must be positive, got {global_scale}")
    default_exp = power2_exponent(float(global_scale), INT8_MAX + 1)
    act_exp: dict[str, int] = {}
    scales = {}
    if calibrate_mode == "model":
        graph, params, scales = strip_fake_quant(graph, params)
        if not scales:
            raise ValueError("calibrate_mode='model' needs a model that carries its quantization (QuantizeLinear / "
                             "DequantizeLinear pairs); this one carries none: use percentile, max or global_scale")
        if dataset is not None:   # the tensors the model leaves unquantized: calibrated as percentile would
            act_exp = calibrate(graph, params, dataset, DEFAULT_MODE, percentile)
        act_exp.update({name: s.exp for name, s in scales.items()})
    elif calibrate_mode != "global_scale":
        if dataset is None:
            raise ValueError(f"calibrate_mode={calibrate_mode!r} needs dataset=[{{input name: array}}, ...]")
        if not 0 < percentile <= 100:
            raise ValueError(f"percentile must be in (0, 100], got {percentile}")
        act_exp = calibrate(graph, params, dataset, calibrate_mode, percentile)
    n_convs = sum(1 for n in graph.ops() if n.op in CONVS)
    bad = [i for i in skip_conv_layers if not 0 <= int(i) < max(n_convs, 1)]
    if bad:
        raise ValueError(f"skip_conv_layers {bad} out of range: the graph has {n_convs} convolution(s)")
    q = _Quantizer(graph, params, act_exp, default_exp, {int(i) for i in skip_conv_layers}, skip_dense_layer,
                   per_channel, skip_batch_matmul, model_weights=calibrate_mode == "model")
    qgraph, qparams = q.run()
    if scales:
        qgraph.meta["model_scales"] = scales
    return qgraph, qparams
