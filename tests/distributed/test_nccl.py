"""FA-LD over NCCL, one GPU per rank, against one process on the first GPU (skips without CUDA)."""

from __future__ import annotations

import pytest
import torch

from fedlangevin.distributed import launch
from tests.distributed import _cases as C

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (NCCL)")


def test_nccl_ranks_equal_one_process():
    world_size = min(2, torch.cuda.device_count())
    got = launch(C.nccl_case, world_size, backend="nccl", timeout=120, limit=300)[0]
    for name, draws in got.items():
        want = torch.as_tensor(C.sampler(name, device="cuda:0").run(C.ROUNDS).samples).cpu()
        # summation order only (tests/distributed/test_distributed.py); float64 on the GPU
        torch.testing.assert_close(draws, want, rtol=1e-12, atol=1e-12, msg=lambda m: f"{name}: {m}")
