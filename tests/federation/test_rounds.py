"""What every kernel's round shares (fedlangevin.federation.rounds): the thread count of small rounds."""

from __future__ import annotations

import pytest
import torch

from fedlangevin.federation.rounds import SINGLE_THREAD_NUMEL, round_threads


def test_small_rounds_run_single_threaded_and_restore_the_setting():
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        with round_threads(1000):
            assert torch.get_num_threads() == 1
        assert torch.get_num_threads() == 2
        with round_threads(SINGLE_THREAD_NUMEL + 1):
            assert torch.get_num_threads() == 2
        with pytest.raises(RuntimeError):
            with round_threads(10):
                raise RuntimeError("boom")
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)
