"""Shared fixtures. torch is imported lazily: the diagnostics tests also run without it."""

import os

import pytest

try:  # hypothesis is in the test extra; the seeded profile makes every property test reproducible
    from hypothesis import settings as _hypothesis_settings

    _hypothesis_settings.register_profile("ci", derandomize=True, print_blob=True)
    _hypothesis_settings.register_profile("explore", derandomize=False)
    _hypothesis_settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
except ImportError:  # pragma: no cover
    pass


@pytest.fixture
def one_torch_thread():
    """Tiny tensors: one torch thread is fastest and immune to busy cores; restored afterwards."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
