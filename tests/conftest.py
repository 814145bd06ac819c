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


def pytest_configure(config):
    """Under pytest-xdist (`-n N`), each worker gets an equal share of the cores for torch's
    intra-op threads (set before torch is imported; the CLI subprocesses inherit it), so that
    N workers do not oversubscribe the machine. An explicit OMP_NUM_THREADS wins."""
    workers = os.environ.get("PYTEST_XDIST_WORKER_COUNT")
    if workers is not None and "OMP_NUM_THREADS" not in os.environ:
        os.environ["OMP_NUM_THREADS"] = str(max(1, (os.cpu_count() or 1) // int(workers)))


@pytest.fixture
def one_torch_thread():
    """Tiny tensors: one torch thread is fastest and immune to busy cores; restored afterwards."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture
def deadline():
    """Bounds a test that could block (opening a FIFO waits for a writer): after 20 s SIGALRM
    raises TimeoutError in the test instead of hanging the suite. POSIX only; restored afterwards."""
    import signal

    if not hasattr(signal, "setitimer"):  # pragma: no cover - not on POSIX
        pytest.skip("needs signal.setitimer")

    def expired(signum, frame):
        raise TimeoutError("the test blocked for 20 s (a FIFO opened for reading?)")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.setitimer(signal.ITIMER_REAL, 20.0)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
