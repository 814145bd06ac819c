"""The engine reproduces the pinned sample streams of ``tests/fald/golden.py`` bit for bit."""

import numpy as np
import pytest

from tests.fald import golden

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.mark.parametrize("name", sorted(golden.runs()))
def test_same_seed_gives_the_pinned_samples_bit_for_bit(name):
    if name == "pyro":
        pytest.importorskip("pyro")
    saved = np.load(golden.PATH)
    got = golden.compute([name])
    for key in (name, name + ".theta", name + ".uploads"):
        assert got[key].shape == saved[key].shape, key
        np.testing.assert_array_equal(got[key], saved[key], err_msg=key)
