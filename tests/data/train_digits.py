"""Train the small digits CNN the tests ship as ``tests/data/digits_cnn.onnx``.

torch is not a dependency of the project or of its tests; only this script needs it:

    pip install torch==2.13.0        # the CPU wheel; never an unpinned torch (that pulls GBs of CUDA)
    python tests/data/train_digits.py

The network is made of ops the accelerator can offload (conv + batch norm + ReLU, a dense layer):
Conv(1->16, 3x3, pad 1) + BN + ReLU, Conv(16->32, 3x3, stride 2, pad 1) + BN + ReLU,
Conv(32->32, 3x3, pad 1) + BN + ReLU, Flatten, Linear(32*4*4 -> 10). It trains on scikit-learn's 8x8
digits (the split in ``digits.py``) with Adam, fixed seeds and random one-pixel shifts of each batch (the
augmentation buys about one point of test accuracy) in a few seconds of CPU, and is exported with the
TorchScript exporter at opset 17, batch norms kept as BatchNormalization nodes (so the import exercises
folding them), the batch dimension dynamic ("batch"), input "input", output "logits". The file is
re-saved with IR version 10, which onnxruntime loads (newer onnx writes a newer IR version by default).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import onnx
import torch
from digits import load_split
from torch import nn

HERE = Path(__file__).resolve().parent
OUT = HERE / "digits_cnn.onnx"
SEED, EPOCHS, BATCH, LR, SHIFT = 0, 40, 64, 3e-3, 1


def make_model() -> nn.Module:
    def block(cin: int, cout: int, stride: int) -> list[nn.Module]:
        return [nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU()]

    return nn.Sequential(*block(1, 16, 1), *block(16, 32, 2), *block(32, 32, 1), nn.Flatten(),
                         nn.Linear(32 * 4 * 4, 10))


def accuracy(model: nn.Module, x: np.ndarray, y: np.ndarray) -> float:
    model.eval()
    with torch.no_grad():
        return float((model(torch.from_numpy(x)).argmax(1).numpy() == y).mean())


def train() -> nn.Module:
    torch.manual_seed(SEED)
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)
    x_train, y_train, x_test, y_test = load_split()
    model = make_model()
    opt = torch.optim.Adam(model.parameters(), lr=LR)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, EPOCHS)
    gen = torch.Generator().manual_seed(SEED)
    xt, yt = torch.from_numpy(x_train), torch.from_numpy(y_train)
    for epoch in range(EPOCHS):
        model.train()
        for idx in torch.randperm(len(xt), generator=gen).split(BATCH):
            dy, dx = torch.randint(0, 2 * SHIFT + 1, (2,), generator=gen).tolist()
            xb = nn.functional.pad(xt[idx], (SHIFT,) * 4)[:, :, dy:dy + 8, dx:dx + 8]
            opt.zero_grad()
            nn.functional.cross_entropy(model(xb), yt[idx]).backward()
            opt.step()
        sched.step()
        if epoch % 10 == 9 or epoch == EPOCHS - 1:
            print(f"epoch {epoch + 1}: train {accuracy(model, x_train, y_train):.4f}, "
                  f"test {accuracy(model, x_test, y_test):.4f}")
    return model.eval()


def export(model: nn.Module, path: Path) -> None:
    dummy = torch.zeros(1, 1, 8, 8)
    torch.onnx.export(model, (dummy,), str(path), input_names=["input"], output_names=["logits"],
                      dynamic_axes={"input": {0: "batch"}, "logits": {0: "batch"}}, opset_version=17,
                      dynamo=False, training=torch.onnx.TrainingMode.PRESERVE, do_constant_folding=False)
    m = onnx.load(str(path))
    m.ir_version = 10
    for vi in (m.graph.input[0], m.graph.output[0]):
        dim = vi.type.tensor_type.shape.dim[0]
        dim.Clear()
        dim.dim_param = "batch"
    m.producer_name, m.producer_version = "tests/data/train_digits.py", f"torch {torch.__version__}"
    onnx.checker.check_model(m)
    onnx.save(m, str(path))


def main() -> int:
    model = train()
    export(model, OUT)
    import onnxruntime as ort

    _, _, x_test, y_test = load_split()
    sess = ort.InferenceSession(str(OUT), providers=["CPUExecutionProvider"])
    logits = sess.run(None, {"input": x_test})[0]
    acc = float((logits.argmax(1) == y_test).mean())
    print(f"wrote {OUT.relative_to(HERE.parents[1])} ({OUT.stat().st_size} bytes); "
          f"onnxruntime test accuracy {acc:.4f}")
    return 0 if acc >= 0.97 else 1


if __name__ == "__main__":
    sys.exit(main())
