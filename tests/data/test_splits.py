"""Federated splits: iid, label skew, Dirichlet, stratified holdout."""

from __future__ import annotations

import pytest
import torch

from fedlangevin.data import (
    apply_partition,
    class_counts,
    dirichlet_partition,
    iid_partition,
    label_skew_partition,
    make_partition,
    split_by_class,
    split_dirichlet,
    split_iid,
    split_label_skew,
    stratified_holdout,
)


def _labels(n_per_class=30, classes=10):
    return torch.arange(classes).repeat_interleave(n_per_class)


def _is_partition(parts, n):
    allidx = torch.cat(parts)
    return allidx.numel() == n and torch.equal(allidx.sort().values, torch.arange(n))


def test_iid_partition_is_a_balanced_random_partition():
    parts = iid_partition(103, 10, 0)
    assert _is_partition(parts, 103)
    sizes = [len(p) for p in parts]
    assert max(sizes) - min(sizes) <= 1
    assert [p.tolist() for p in iid_partition(103, 10, 0)] == [p.tolist() for p in parts]
    assert [p.tolist() for p in iid_partition(103, 10, 1)] != [p.tolist() for p in parts]


@pytest.mark.parametrize("clients,s", [(10, 1), (10, 2), (7, 2), (20, 3), (5, 10), (3, 4)])
def test_label_skew_gives_every_client_exactly_s_classes(clients, s):
    y = _labels()
    parts = label_skew_partition(y, clients, s, torch.Generator().manual_seed(0))
    assert len(parts) == clients and _is_partition(parts, len(y))
    counts = class_counts(y, parts)
    assert ((counts > 0).sum(1) == s).all()
    holders = (counts > 0).sum(0)  # every class is held, as evenly as possible
    assert holders.min() >= 1 and holders.max() - holders.min() <= 1
    for c in range(10):  # a class is shared equally among its holders (sizes differ by <= 1)
        held = counts[:, c][counts[:, c] > 0]
        assert held.max() - held.min() <= 1


def test_label_skew_errors():
    y = _labels()
    with pytest.raises(ValueError, match="classes_per_client"):
        label_skew_partition(y, 10, 11)
    with pytest.raises(ValueError, match="every class"):
        label_skew_partition(y, 4, 2)
    with pytest.raises(ValueError, match="class 0 has 2 points"):
        label_skew_partition(torch.tensor([0, 0] + [1] * 20), 5, 2)


def _lfl_split_by_class(X, y, num_devices, generator):
    """The original LFL split (kept verbatim as the reference that fixes its random stream)."""
    classes = torch.unique(y)
    per = num_devices // len(classes)
    out = []
    for c in classes:
        idx = torch.nonzero(y == c).squeeze(1)
        idx = idx[torch.randperm(len(idx), generator=generator)]
        for chunk in torch.tensor_split(idx, per):
            out.append((X[chunk], y[chunk]))
    order = torch.randperm(len(out), generator=generator).tolist()
    return [out[i] for i in order]


def test_split_by_class_keeps_the_lfl_random_stream():
    """Compression's seeded experiments rely on the exact split; one class per client."""
    y = torch.randint(0, 5, (211,), generator=torch.Generator().manual_seed(0))
    X = torch.randn(211, 3)
    for m in (5, 10, 20):
        got = split_by_class(X, y, m, torch.Generator().manual_seed(m))
        ref = _lfl_split_by_class(X, y, m, torch.Generator().manual_seed(m))
        assert all(torch.equal(a[0], b[0]) and torch.equal(a[1], b[1]) for a, b in zip(got, ref))
        assert all(len(torch.unique(yc)) == 1 for _, yc in got)
    with pytest.raises(ValueError, match="multiple"):
        split_by_class(X, y, 7)


def test_split_iid_pairs_match_the_partition():
    X, y = torch.randn(50, 2), torch.arange(50) % 3
    pairs = split_iid(X, y, 4, torch.Generator().manual_seed(2))
    parts = iid_partition(50, 4, torch.Generator().manual_seed(2))
    for (xc, yc), p in zip(pairs, parts):
        assert torch.equal(xc, X[p]) and torch.equal(yc, y[p])


def test_dirichlet_partition_covers_and_respects_min_size():
    y = _labels(50)
    parts = dirichlet_partition(y, 10, 0.3, 0, min_size=5)
    assert _is_partition(parts, len(y))
    assert min(len(p) for p in parts) >= 5
    again = dirichlet_partition(y, 10, 0.3, 0, min_size=5)
    assert all(torch.equal(a, b) for a, b in zip(parts, again))


def test_dirichlet_alpha_controls_skew():
    """Large alpha: each client's class mix is close to the global one; small alpha: clients
    are dominated by few classes. Measured by the mean total-variation distance between a
    client's class distribution and the global (uniform) one."""
    y = _labels(200)

    def skew(alpha):
        counts = class_counts(y, dirichlet_partition(y, 10, alpha, 1)).double()
        mix = counts / counts.sum(1, keepdim=True)
        return float(0.5 * (mix - 0.1).abs().sum(1).mean())

    assert skew(1000.0) < 0.05
    assert skew(0.1) > 0.5


def test_dirichlet_errors():
    y = _labels(3)
    with pytest.raises(ValueError, match="alpha"):
        dirichlet_partition(y, 3, 0.0)
    with pytest.raises(ValueError, match="larger alpha"):
        dirichlet_partition(y, 10, 0.01, 0, min_size=3, max_tries=5)


def test_make_partition_dispatch_and_pairs():
    y = _labels(10)
    X = torch.randn(len(y), 2)
    assert _is_partition(make_partition("iid", y, 4, 0), len(y))
    assert ((class_counts(y, make_partition("label_skew", y, 10, 0, classes_per_client=2)) > 0).sum(1) == 2).all()
    assert _is_partition(make_partition("dirichlet", y, 4, 0, alpha=1.0), len(y))
    with pytest.raises(ValueError, match="split must be one of"):
        make_partition("shards", y, 4)
    assert sum(len(yc) for _, yc in split_label_skew(X, y, 5, 2, 0)) == len(y)
    assert sum(len(yc) for _, yc in split_dirichlet(X, y, 5, 1.0, 0)) == len(y)
    with pytest.raises(ValueError, match="same number of rows"):
        apply_partition(X[:-1], y, [torch.arange(3)])


def test_stratified_holdout():
    y = torch.cat([torch.zeros(40, dtype=torch.long), torch.ones(60, dtype=torch.long), torch.full((20,), 2)])
    kept, held = stratified_holdout(y, 0.25, 0)
    assert torch.equal(torch.cat([kept, held]).sort().values, torch.arange(120))
    assert torch.bincount(y[held]).tolist() == [10, 15, 5]
    with pytest.raises(ValueError, match="fraction"):
        stratified_holdout(y, 1.0)
    with pytest.raises(ValueError, match="y must"):
        stratified_holdout(torch.tensor([0.5, 1.0]), 0.5)


@pytest.mark.parametrize("parts, match", [
    ([torch.arange(6), torch.tensor([], dtype=torch.long)], r"parts\[1\] is empty"),
    ([list(range(6)), []], r"parts\[1\] is empty"),  # an empty list was 'dtype torch.float32'
    ([], "at least one part"),
])
def test_apply_partition_refuses_a_client_without_data(parts, match):
    """issue 31: an empty part gave a client with no data, silently."""
    with pytest.raises(ValueError, match=match):
        apply_partition(torch.randn(6, 2), torch.tensor([0, 1, 0, 1, 0, 1]), parts)
