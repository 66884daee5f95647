"""Make the small exported test models of tests/data/onnx: today's network families, reduced in width and
depth (the node patterns matter, not the size), exported as users export them, their weights stripped.

Run with the torch venv (.ci/torch-venv.sh): ``~/.cache/vta-stack/torch-venv/bin/python
tests/data/onnx/make_models.py``. Each family is exported twice: with ``torch.onnx.export``'s default exporter
(``dynamo=True``, the torch.export one, its default opset) as ``<family>.onnx``, and with the TorchScript
exporter at opset 17 (``dynamo=False``) as ``<family>_ts17.onnx``: the two write different node patterns for the
same code. Every float initializer of 16 elements or more is removed and described in the model's
``metadata_props`` (``stripped_initializers``: name, dims, dtype and the mean / std / min / max of the torch
value); the exporter's per-node notes (stack traces) are dropped too, so the files stay a few KB (5-27 KB); tests/onnx_models.py refills them from a seeded generator. The exporter
versions are written beside them in ``models.json``. The weights are torch's seeded default initialisation with
the batch norms' statistics randomised (seed 0), so a refilled model has weights of the same scale.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import onnx
import torch
from onnx import numpy_helper
from torch import nn
from torch.nn import functional as F

HERE = Path(__file__).resolve().parent
STRIP_MIN_ELEMENTS = 16


def conv_bn(cin: int, cout: int, k: int = 3, s: int = 1, groups: int = 1, dilation: int = 1,
            act: type[nn.Module] | None = nn.ReLU) -> nn.Sequential:
    pad = dilation * (k - 1) // 2
    layers = [nn.Conv2d(cin, cout, k, s, pad, dilation=dilation, groups=groups, bias=False), nn.BatchNorm2d(cout)]
    if act is not None:
        layers.append(act())
    return nn.Sequential(*layers)


# ---- the families ------------------------------------------------------------------------------------------

class Bottleneck(nn.Module):
    def __init__(self, cin: int, mid: int, stride: int):
        super().__init__()
        cout = mid * 4
        self.body = nn.Sequential(conv_bn(cin, mid, 1), conv_bn(mid, mid, 3, stride), conv_bn(mid, cout, 1, act=None))
        self.down = conv_bn(cin, cout, 1, stride, act=None) if stride != 1 or cin != cout else nn.Identity()

    def forward(self, x):
        return F.relu(self.body(x) + self.down(x))


class ResNet50(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(conv_bn(3, 16, 7, 2), nn.MaxPool2d(3, 2, 1))
        self.layers = nn.Sequential(Bottleneck(16, 8, 1), Bottleneck(32, 8, 1), Bottleneck(32, 16, 2))
        self.fc = nn.Linear(64, 10)

    def forward(self, x):
        x = self.layers(self.stem(x))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


class InvertedResidual(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int, expand: int, act=nn.ReLU6, se: type | None = None,
                 k: int = 3):
        super().__init__()
        mid = cin * expand
        layers = [conv_bn(cin, mid, 1, act=act)] if expand != 1 else []
        layers.append(conv_bn(mid, mid, k, stride, groups=mid, act=act))
        if se is not None:
            layers.append(se(mid))
        layers.append(conv_bn(mid, cout, 1, act=None))
        self.body = nn.Sequential(*layers)
        self.residual = stride == 1 and cin == cout

    def forward(self, x):
        y = self.body(x)
        return x + y if self.residual else y


class MobileNetV2(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(
            conv_bn(3, 16, 3, 2, act=nn.ReLU6), InvertedResidual(16, 8, 1, 1), InvertedResidual(8, 16, 2, 6),
            InvertedResidual(16, 16, 1, 6), InvertedResidual(16, 32, 2, 6), conv_bn(32, 64, 1, act=nn.ReLU6))
        self.classifier = nn.Sequential(nn.Dropout(0.2), nn.Linear(64, 10))

    def forward(self, x):
        return self.classifier(torch.flatten(F.adaptive_avg_pool2d(self.features(x), 1), 1))


class SqueezeExcite(nn.Module):
    """MobileNetV3's: pool, 1x1 conv, ReLU, 1x1 conv, hardsigmoid, broadcast multiply."""

    def __init__(self, c: int, gate=nn.Hardsigmoid, act=nn.ReLU):
        super().__init__()
        squeezed = max(8, c // 4)
        self.fc1, self.fc2 = nn.Conv2d(c, squeezed, 1), nn.Conv2d(squeezed, c, 1)
        self.act, self.gate = act(), gate()

    def forward(self, x):
        s = F.adaptive_avg_pool2d(x, 1)
        return x * self.gate(self.fc2(self.act(self.fc1(s))))


class MobileNetV3(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(
            conv_bn(3, 16, 3, 2, act=nn.Hardswish), InvertedResidual(16, 16, 2, 1, nn.ReLU, SqueezeExcite),
            InvertedResidual(16, 24, 2, 4, nn.ReLU), InvertedResidual(24, 24, 1, 3, nn.Hardswish, SqueezeExcite, 5),
            conv_bn(24, 96, 1, act=nn.Hardswish))
        self.classifier = nn.Sequential(nn.Linear(96, 64), nn.Hardswish(), nn.Dropout(0.2), nn.Linear(64, 10))

    def forward(self, x):
        return self.classifier(torch.flatten(F.adaptive_avg_pool2d(self.features(x), 1), 1))


class EfficientNetB0(nn.Module):
    def __init__(self):
        super().__init__()

        def se(c):
            return SqueezeExcite(c, nn.Sigmoid, nn.SiLU)

        self.features = nn.Sequential(
            conv_bn(3, 16, 3, 2, act=nn.SiLU), InvertedResidual(16, 8, 1, 1, nn.SiLU, se),
            InvertedResidual(8, 16, 2, 6, nn.SiLU, se), InvertedResidual(16, 16, 1, 6, nn.SiLU, se, 5),
            conv_bn(16, 64, 1, act=nn.SiLU))
        self.classifier = nn.Sequential(nn.Dropout(0.2), nn.Linear(64, 10))

    def forward(self, x):
        return self.classifier(torch.flatten(F.adaptive_avg_pool2d(self.features(x), 1), 1))


def channel_shuffle(x: torch.Tensor, groups: int) -> torch.Tensor:
    n, c, h, w = x.size()
    x = x.view(n, groups, c // groups, h, w)
    x = torch.transpose(x, 1, 2).contiguous()
    return x.view(n, -1, h, w)


class ShuffleUnit(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int):
        super().__init__()
        half = cout // 2
        self.stride = stride
        if stride > 1:
            self.branch1 = nn.Sequential(conv_bn(cin, cin, 3, stride, groups=cin, act=None), conv_bn(cin, half, 1))
        b2_in = cin if stride > 1 else half
        self.branch2 = nn.Sequential(conv_bn(b2_in, half, 1), conv_bn(half, half, 3, stride, groups=half, act=None),
                                     conv_bn(half, half, 1))

    def forward(self, x):
        if self.stride == 1:
            x1, x2 = x.chunk(2, dim=1)
            out = torch.cat((x1, self.branch2(x2)), dim=1)
        else:
            out = torch.cat((self.branch1(x), self.branch2(x)), dim=1)
        return channel_shuffle(out, 2)


class ShuffleNetV2(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(conv_bn(3, 16, 3, 2), nn.MaxPool2d(3, 2, 1))
        self.stages = nn.Sequential(ShuffleUnit(16, 32, 2), ShuffleUnit(32, 32, 1), ShuffleUnit(32, 64, 2))
        self.fc = nn.Linear(64, 10)

    def forward(self, x):
        return self.fc(self.stages(self.stem(x)).mean([2, 3]))


class Fire(nn.Module):
    def __init__(self, cin: int, squeeze: int, expand: int):
        super().__init__()
        self.squeeze = nn.Conv2d(cin, squeeze, 1)
        self.e1, self.e3 = nn.Conv2d(squeeze, expand, 1), nn.Conv2d(squeeze, expand, 3, padding=1)

    def forward(self, x):
        s = F.relu(self.squeeze(x))
        return torch.cat([F.relu(self.e1(s)), F.relu(self.e3(s))], 1)


class SqueezeNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(3, 32, 3, 2), nn.ReLU(), nn.MaxPool2d(3, 2, ceil_mode=True),
                                      Fire(32, 8, 16), Fire(32, 8, 16), nn.MaxPool2d(3, 2, ceil_mode=True),
                                      Fire(32, 16, 32))
        self.classifier = nn.Sequential(nn.Dropout(0.5), nn.Conv2d(64, 10, 1), nn.ReLU(), nn.AdaptiveAvgPool2d(1))

    def forward(self, x):
        return torch.flatten(self.classifier(self.features(x)), 1)


class Inception(nn.Module):
    def __init__(self, cin: int, c1: int, c3r: int, c3: int, c5r: int, c5: int, pp: int):
        super().__init__()
        self.b1 = conv_bn(cin, c1, 1)
        self.b2 = nn.Sequential(conv_bn(cin, c3r, 1), conv_bn(c3r, c3, 3))
        self.b3 = nn.Sequential(conv_bn(cin, c5r, 1), conv_bn(c5r, c5, 3))   # torchvision's "5x5" is a 3x3
        self.b4 = nn.Sequential(nn.MaxPool2d(3, 1, 1, ceil_mode=True), conv_bn(cin, pp, 1))

    def forward(self, x):
        return torch.cat([self.b1(x), self.b2(x), self.b3(x), self.b4(x)], 1)


class GoogLeNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(conv_bn(3, 16, 7, 2), nn.MaxPool2d(3, 2, ceil_mode=True), conv_bn(16, 32, 3))
        self.inc = nn.Sequential(Inception(32, 16, 16, 16, 8, 8, 8), Inception(48, 16, 16, 32, 8, 8, 8),
                                 nn.MaxPool2d(3, 2, ceil_mode=True), Inception(64, 32, 16, 16, 8, 8, 8))
        self.fc = nn.Linear(64, 10)

    def forward(self, x):
        x = self.inc(self.stem(x))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


class DenseLayer(nn.Module):
    def __init__(self, cin: int, growth: int):
        super().__init__()
        self.norm1, self.conv1 = nn.BatchNorm2d(cin), nn.Conv2d(cin, 4 * growth, 1, bias=False)
        self.norm2, self.conv2 = nn.BatchNorm2d(4 * growth), nn.Conv2d(4 * growth, growth, 3, padding=1, bias=False)

    def forward(self, features: list[torch.Tensor]) -> torch.Tensor:
        x = torch.cat(features, 1)
        return self.conv2(F.relu(self.norm2(self.conv1(F.relu(self.norm1(x))))))


class DenseNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(conv_bn(3, 16, 3, 1), nn.MaxPool2d(3, 2, 1))
        self.layers = nn.ModuleList([DenseLayer(16 + 8 * i, 8) for i in range(3)])
        self.trans = nn.Sequential(nn.BatchNorm2d(40), nn.ReLU(), nn.Conv2d(40, 32, 1, bias=False), nn.AvgPool2d(2, 2))
        self.norm = nn.BatchNorm2d(32)
        self.fc = nn.Linear(32, 10)

    def forward(self, x):
        features = [self.stem(x)]
        for layer in self.layers:
            features.append(layer(features))
        x = F.relu(self.norm(self.trans(torch.cat(features, 1))))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


class RegNetBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int, group_width: int = 8):
        super().__init__()
        self.a = conv_bn(cin, cout, 1)
        self.b = conv_bn(cout, cout, 3, stride, groups=cout // group_width)
        self.se = SqueezeExcite(cout, nn.Sigmoid)
        self.c = conv_bn(cout, cout, 1, act=None)
        self.proj = conv_bn(cin, cout, 1, stride, act=None) if stride != 1 or cin != cout else None

    def forward(self, x):
        shortcut = x if self.proj is None else self.proj(x)
        return F.relu(shortcut + self.c(self.se(self.b(self.a(x)))))


class RegNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = conv_bn(3, 16, 3, 2)
        self.blocks = nn.Sequential(RegNetBlock(16, 32, 2), RegNetBlock(32, 32, 1), RegNetBlock(32, 64, 2))
        self.fc = nn.Linear(64, 10)

    def forward(self, x):
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(self.blocks(self.stem(x)), 1), 1))


class DeepLabV3(nn.Module):
    """A dilated backbone, ASPP (dilated branches and an image-pooling branch upsampled back), bilinear Resize."""

    def __init__(self):
        super().__init__()
        self.backbone = nn.Sequential(conv_bn(3, 16, 3, 2), conv_bn(16, 32, 3, 2), conv_bn(32, 32, 3, 1, dilation=2))
        self.aspp = nn.ModuleList([conv_bn(32, 16, 1), conv_bn(32, 16, 3, dilation=2), conv_bn(32, 16, 3, dilation=3)])
        self.pool = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Conv2d(32, 16, 1, bias=False), nn.ReLU())
        self.project = conv_bn(64, 16, 1)
        self.head = nn.Conv2d(16, 5, 1)

    def forward(self, x):
        size = x.shape[-2:]
        f = self.backbone(x)
        branches = [b(f) for b in self.aspp]
        branches.append(F.interpolate(self.pool(f), size=f.shape[-2:], mode="bilinear", align_corners=False))
        y = self.head(self.project(torch.cat(branches, 1)))
        return F.interpolate(y, size=size, mode="bilinear", align_corners=False)


class YoloNeck(nn.Module):
    """A YOLO-style detector: a strided backbone with LeakyReLU / SiLU, an FPN neck (nearest upsample + concat)
    and 1x1 heads at two scales."""

    def __init__(self):
        super().__init__()
        self.c1 = conv_bn(3, 16, 3, 2, act=nn.SiLU)
        self.c2 = conv_bn(16, 32, 3, 2, act=nn.SiLU)
        self.c3 = conv_bn(32, 64, 3, 2, act=lambda: nn.LeakyReLU(0.1))
        self.lat = conv_bn(64, 32, 1, act=nn.SiLU)
        self.up = nn.Upsample(scale_factor=2, mode="nearest")
        self.fuse = conv_bn(64, 32, 3, act=nn.SiLU)
        self.head_small, self.head_big = nn.Conv2d(32, 18, 1), nn.Conv2d(32, 18, 1)

    def forward(self, x):
        p3 = self.c2(self.c1(x))
        p4 = self.lat(self.c3(p3))
        fused = self.fuse(torch.cat([self.up(p4), p3], 1))
        return self.head_small(fused), self.head_big(p4)


class UNet(nn.Module):
    def __init__(self):
        super().__init__()

        def double(cin, cout):
            return nn.Sequential(conv_bn(cin, cout), conv_bn(cout, cout))

        self.d1, self.d2, self.mid = double(3, 16), double(16, 32), double(32, 64)
        self.up2, self.u2 = nn.ConvTranspose2d(64, 32, 2, 2), double(64, 32)
        self.u1 = double(48, 16)
        self.out = nn.Conv2d(16, 2, 1)

    def forward(self, x):
        x1 = self.d1(x)
        x2 = self.d2(F.max_pool2d(x1, 2))
        m = self.mid(F.max_pool2d(x2, 2))
        y = self.u2(torch.cat([x2, self.up2(m)], 1))
        y = F.interpolate(y, scale_factor=2, mode="bilinear", align_corners=True)
        return self.out(self.u1(torch.cat([x1, y], 1)))


class Attention(nn.Module):
    def __init__(self, dim: int, heads: int, sdpa: bool = False):
        super().__init__()
        self.heads, self.sdpa = heads, sdpa
        self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)

    def forward(self, x, bias=None):
        b, n, c = x.shape
        qkv = self.qkv(x).reshape(b, n, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]
        if self.sdpa:   # what most current code calls (timm, transformers): the exporters' own patterns
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=bias)
            return self.proj(y.transpose(1, 2).reshape(b, n, c))
        scores = (q @ k.transpose(-2, -1)) * (c // self.heads) ** -0.5
        if bias is not None:
            scores = scores + bias
        y = (scores.softmax(dim=-1) @ v).transpose(1, 2).reshape(b, n, c)
        return self.proj(y)


class DecomposedLayerNorm(nn.Module):
    """BERT's original LayerNorm, written out: mean, (x - mean) ** 2, mean, sqrt, divide."""

    def __init__(self, dim: int, eps: float = 1e-12):
        super().__init__()
        self.weight, self.bias = nn.Parameter(torch.ones(dim)), nn.Parameter(torch.zeros(dim))
        self.eps = eps

    def forward(self, x):
        u = x.mean(-1, keepdim=True)
        s = (x - u).pow(2).mean(-1, keepdim=True)
        return self.weight * ((x - u) / torch.sqrt(s + self.eps)) + self.bias


class EncoderLayer(nn.Module):
    def __init__(self, dim: int, heads: int, norm=nn.LayerNorm, sdpa: bool = False):
        super().__init__()
        self.norm1, self.attn, self.norm2 = norm(dim), Attention(dim, heads, sdpa), norm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 2 * dim), nn.GELU(), nn.Linear(2 * dim, dim))

    def forward(self, x, bias=None):
        x = x + self.attn(self.norm1(x), bias)
        return x + self.mlp(self.norm2(x))


class ViTTiny(nn.Module):
    def __init__(self, dim: int = 32, patch: int = 8, image: int = 32, sdpa: bool = False):
        super().__init__()
        self.patch = nn.Conv2d(3, dim, patch, patch)
        self.cls = nn.Parameter(torch.zeros(1, 1, dim))
        self.pos = nn.Parameter(torch.zeros(1, (image // patch) ** 2 + 1, dim))
        self.layers = nn.ModuleList([EncoderLayer(dim, 2, sdpa=sdpa) for _ in range(2)])
        self.norm, self.head = nn.LayerNorm(dim), nn.Linear(dim, 10)

    def forward(self, x):
        x = self.patch(x).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls.expand(x.shape[0], -1, -1), x], 1) + self.pos
        for layer in self.layers:
            x = layer(x)
        return self.head(self.norm(x)[:, 0])


class BertTiny(nn.Module):
    def __init__(self, vocab: int = 100, dim: int = 32, max_len: int = 32):
        super().__init__()
        self.word, self.position, self.token_type = nn.Embedding(vocab, dim), nn.Embedding(max_len, dim), \
            nn.Embedding(2, dim)
        self.norm = DecomposedLayerNorm(dim)
        self.layers = nn.ModuleList([EncoderLayer(dim, 2, DecomposedLayerNorm) for _ in range(2)])
        self.pooler = nn.Linear(dim, dim)

    def forward(self, input_ids, attention_mask):
        n = input_ids.shape[1]
        positions = torch.arange(n, dtype=torch.long).unsqueeze(0)
        x = self.norm(self.word(input_ids) + self.position(positions) + self.token_type(torch.zeros_like(input_ids)))
        bias = torch.zeros(attention_mask.shape, dtype=x.dtype).masked_fill(attention_mask == 0, -10000.0)
        bias = bias[:, None, None, :]
        for layer in self.layers:
            x = layer(x, bias)
        return torch.tanh(self.pooler(x[:, 0]))


FAMILIES = {
    "resnet50": ResNet50, "mobilenet_v2": MobileNetV2, "mobilenet_v3": MobileNetV3, "efficientnet_b0": EfficientNetB0,
    "shufflenet_v2": ShuffleNetV2, "squeezenet": SqueezeNet, "googlenet": GoogLeNet, "densenet": DenseNet,
    "regnet": RegNet, "deeplabv3": DeepLabV3, "yolo_neck": YoloNeck, "unet": UNet, "vit_tiny": ViTTiny,
    "bert_tiny": BertTiny,
}


# more exports of one family: name -> (family, model options, torch.onnx.export options)
VARIANTS = {
    "vit_tiny_sdpa": ("vit_tiny", {"sdpa": True}, {"dynamo": True}),
    "vit_tiny_sdpa_opset23": ("vit_tiny", {"sdpa": True}, {"dynamo": True, "opset_version": 23}),   # Attention op
}


def example_inputs(family: str) -> tuple[torch.Tensor, ...]:
    if family == "bert_tiny":
        ids = torch.randint(0, 100, (1, 16))
        mask = torch.ones(1, 16, dtype=torch.long)
        mask[0, 12:] = 0
        return ids, mask
    return (torch.randn(1, 3, 32, 32),)


def randomise_batch_norms(model: nn.Module) -> None:
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.uniform_(-0.2, 0.2)
            m.running_var.uniform_(0.5, 1.5)
            m.weight.data.uniform_(0.5, 1.5)
            m.bias.data.uniform_(-0.2, 0.2)
        elif isinstance(m, (nn.LayerNorm, DecomposedLayerNorm)):
            m.weight.data.uniform_(0.5, 1.5)
            m.bias.data.uniform_(-0.2, 0.2)
        elif isinstance(m, (ViTTiny,)):
            m.cls.data.normal_(0, 0.5)
            m.pos.data.normal_(0, 0.5)


def strip(model: onnx.ModelProto) -> onnx.ModelProto:
    """The model without its large float initializers, each described in metadata_props, and without the
    exporter's per-node notes (Python stack traces with this machine's paths; not part of the node pattern)."""
    for node in model.graph.node:
        del node.metadata_props[:]
        node.doc_string = ""
    kept, stripped = [], []
    for t in model.graph.initializer:
        value = numpy_helper.to_array(t)
        if value.dtype.kind == "f" and value.size >= STRIP_MIN_ELEMENTS:
            v = value.astype(np.float64)
            stripped.append({"name": t.name, "dims": list(value.shape), "dtype": value.dtype.name,
                             "mean": float(v.mean()), "std": float(v.std()), "min": float(v.min()),
                             "max": float(v.max())})
        else:
            kept.append(t)
    del model.graph.initializer[:]
    model.graph.initializer.extend(kept)
    entry = model.metadata_props.add()
    entry.key, entry.value = "stripped_initializers", json.dumps(stripped)
    return model


def export(family: str, dynamo: bool, name: str | None = None, options: dict | None = None,
           export_options: dict | None = None) -> Path:
    torch.manual_seed(0)
    model = FAMILIES[family](**(options or {})).eval()
    randomise_batch_norms(model)
    inputs = example_inputs(family)
    name = name or (family if dynamo else f"{family}_ts17")
    path = HERE / f"{name}.onnx"
    names = ["input_ids", "attention_mask"] if family == "bert_tiny" else ["x"]
    with torch.no_grad():
        if export_options:
            torch.onnx.export(model, inputs, str(path), input_names=names, external_data=False, **export_options)
        elif dynamo:
            torch.onnx.export(model, inputs, str(path), dynamo=True, input_names=names, external_data=False)
        else:
            torch.onnx.export(model, inputs, str(path), dynamo=False, opset_version=17, input_names=names)
    onnx.save(strip(onnx.load(str(path))), str(path))
    return path


def main(argv: list[str]) -> None:
    families = argv or list(FAMILIES)
    for family in families:
        for dynamo in (True, False):
            path = export(family, dynamo)
            print(f"{path.name}: {path.stat().st_size} bytes")
    for name, (family, options, export_options) in VARIANTS.items():
        if family in families:
            path = export(family, True, name, options, export_options)
            print(f"{path.name}: {path.stat().st_size} bytes")
    versions = {"torch": torch.__version__, "onnx": onnx.__version__, "python": sys.version.split()[0]}
    try:
        import onnxscript
        versions["onnxscript"] = onnxscript.__version__
    except ImportError:
        pass
    (HERE / "models.json").write_text(json.dumps(
        {"made_by": "tests/data/onnx/make_models.py (run with the torch venv, .ci/torch-venv.sh)",
         "versions": versions, "families": sorted(FAMILIES), "variants": sorted(VARIANTS),
         "exports": {"<family>.onnx": "torch.onnx.export(dynamo=True), its default opset",
                     "<family>_ts17.onnx": "torch.onnx.export(dynamo=False, opset_version=17)",
                     "vit_tiny_sdpa[_opset23].onnx": "ViT-tiny calling scaled_dot_product_attention, default "
                                                     "exporter (at opset 23: ONNX's Attention op)"}},
        indent=1) + "\n")


if __name__ == "__main__":
    main(sys.argv[1:])
