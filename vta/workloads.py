"""VTA's test workloads (vta-notes section 6), written once for tests, benches and tuning scripts."""

from __future__ import annotations

# ResNet-18 convolutions: H, W, CI, CO, K, pad, stride
RESNET18 = {
    "C2": (56, 56, 64, 64, 3, 1, 1), "C3": (56, 56, 64, 128, 3, 1, 2), "C4": (56, 56, 64, 128, 1, 0, 2),
    "C5": (28, 28, 128, 128, 3, 1, 1), "C6": (28, 28, 128, 256, 3, 1, 2), "C7": (28, 28, 128, 256, 1, 0, 2),
    "C8": (14, 14, 256, 256, 3, 1, 1), "C9": (14, 14, 256, 512, 3, 1, 2), "C10": (14, 14, 256, 512, 1, 0, 2),
    "C11": (7, 7, 512, 512, 3, 1, 1),
}
# grouped MobileNet (3x3, pad 1): H, W, CI, CO, groups, stride; every group has 16 input and 16 output channels
MOBILENET = {
    "D1": (112, 112, 32, 32, 2, 1), "D2": (112, 112, 64, 64, 4, 2), "D3": (56, 56, 128, 128, 8, 1),
    "D4": (56, 56, 128, 128, 8, 2), "D5": (28, 28, 256, 256, 16, 1), "D6": (28, 28, 256, 256, 16, 2),
    "D7": (14, 14, 512, 512, 32, 1), "D8": (14, 14, 512, 512, 32, 2), "D9": (7, 7, 1024, 1024, 64, 1),
}
# DCGAN conv2d_transpose (4x4, stride 2, pad 1, IOHW kernels): H, W, CI, CO
DCGAN = {"CT1": (4, 4, 1024, 512), "CT2": (8, 8, 512, 256), "CT3": (16, 16, 256, 128)}
