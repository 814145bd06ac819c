"""Shared fixtures. torch is imported lazily: the diagnostics tests also run without it."""

import pytest


@pytest.fixture
def one_torch_thread():
    """Tiny tensors: one torch thread is fastest and immune to busy cores; restored afterwards."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
