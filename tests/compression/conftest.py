"""Shared data of the compression tests."""

from __future__ import annotations

import pytest
import torch

from fedlangevin.compression.models import gaussian_mixture, split_by_class


@pytest.fixture(scope="module")
def data():
    """8 class-split clients of a 4-class, 5-feature Gaussian mixture (40 points per class),
    and a 50-per-class test set from the same means."""
    g = torch.Generator().manual_seed(0)
    X, y, means = gaussian_mixture(40, num_classes=4, dim=5, separation=2.5, generator=g)
    Xt, yt, _ = gaussian_mixture(50, num_classes=4, dim=5, means=means, generator=g)
    return split_by_class(X, y, 8, generator=g), (Xt, yt)
