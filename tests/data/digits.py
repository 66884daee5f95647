"""The held-out split the shipped digits model is trained and checked on (scikit-learn's 8x8 digits, offline).

The training script and the tests both take the data from here, so the accuracy the tests check is
measured on images the model never saw.
"""

from __future__ import annotations

import numpy as np


def load_split() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``(x_train, y_train, x_test, y_test)``: x float32 (N, 1, 8, 8) in [0, 1], y int64 labels 0-9.

    A fixed stratified 80/20 split of ``sklearn.datasets.load_digits()`` (1797 images, bundled with
    scikit-learn, so nothing is downloaded).
    """
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    digits = load_digits()
    x = (digits.images.astype(np.float32) / np.float32(16.0)).reshape(-1, 1, 8, 8)
    y = digits.target.astype(np.int64)
    x_train, x_test, y_train, y_test = train_test_split(x, y, test_size=0.2, random_state=0, stratify=y)
    return x_train, y_train, x_test, y_test
