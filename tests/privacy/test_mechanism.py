"""RecordLevel / ClientLevel: frozen records validated once, the sensitivity derived from the clip."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

import fedlangevin as fl
from fedlangevin.privacy import ClientLevel, RecordLevel
from fedlangevin.privacy.mechanism import check_privacy

RECORDS = [RecordLevel, ClientLevel]


@pytest.mark.parametrize("record, adjacency", [(RecordLevel, "record"), (ClientLevel, "client")])
def test_the_sensitivity_is_twice_the_clip_and_the_adjacency_is_named(record, adjacency):
    r = record(clip=1.5)
    assert r.clip == 1.5 and r.sensitivity == 3.0 and r.adjacency == adjacency
    # adjacency is the class's, not a setting; the budget fields are empty without a budget
    assert [f.name for f in dataclasses.fields(r)] == ["clip", "epsilon", "delta", "quantile", "start_rounds", "spent"]
    assert r.epsilon is None and r.delta is None and r.spent == () and not r.budgeted
    assert r == record(1.5) and hash(r) == hash(record(1.5)) and r != record(2.0)


@pytest.mark.parametrize("record", RECORDS)
def test_records_are_frozen(record):
    r = record(clip=1.0)
    with pytest.raises(dataclasses.FrozenInstanceError):
        r.clip = 2.0


@pytest.mark.parametrize("record", RECORDS)
@pytest.mark.parametrize("value", [np.float32(0.25), np.array(0.25), torch.tensor(0.25), 1, 5e-324])
def test_numpy_torch_and_int_clips_become_floats(record, value):
    r = record(clip=value)
    assert type(r.clip) is float and r.clip == float(value) and r.sensitivity == 2 * float(value)


@pytest.mark.parametrize("record", RECORDS)
@pytest.mark.parametrize("value", [0, 0.0, -1.0, -np.inf, np.inf, np.nan, "a", "1.0", True, False, 1j, [1.0],
                                   1e308, 10**400])
def test_a_bad_clip_is_a_value_error_naming_clip_and_its_range(record, value):
    # 1e308 and 10**400: 2C would overflow (the sensitivity must be a finite float)
    with pytest.raises(ValueError, match=r"^clip must be a (finite )?real number in \(0, 8\.98847e\+307\]"):
        record(clip=value)


@pytest.mark.parametrize("record", RECORDS)
def test_no_clip_needs_a_budget(record):
    with pytest.raises(ValueError, match=r"give clip=C .* or a budget epsilon=\.\.\., delta=\.\.\."):
        record(clip=None)
    assert record(epsilon=1.0, delta=1e-5).budgeted


@pytest.mark.parametrize("value", [None, 1.0, "record", {"clip": 1.0}, RecordLevel])
def test_check_privacy_names_the_argument_and_what_it_accepts(value):
    with pytest.raises(ValueError, match=r"^privacy must be fedlangevin\.privacy\.RecordLevel\(clip=C\) or "):
        check_privacy(value)


def test_both_records_are_exported_by_the_package():
    assert fl.privacy.RecordLevel is RecordLevel and fl.privacy.ClientLevel is ClientLevel
    assert {"RecordLevel", "ClientLevel"} <= set(fl.privacy.__all__)
