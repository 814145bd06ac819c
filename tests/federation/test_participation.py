"""Device participation (App. C.1, Lemma C.1)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

import fedlangevin as fl
from fedlangevin.federation import participation
from fedlangevin.federation.participation import synchronize
from fedlangevin.problems import QuadraticProblem
from tests.targets import fald_moments, scheme_ii_enumerated_moments, weight_moments

R = 200_000


def _beta(n, d=2, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, d, generator=g, dtype=torch.float64) * 3


def _check_unbiased(rule, p, beta, seed):
    g = torch.Generator().manual_seed(seed)
    w = rule.weights(p, R, g)
    out = synchronize(beta.expand(R, -1, -1), w).numpy()
    target = (p @ beta).numpy()
    se = out.std(0, ddof=1) / np.sqrt(R)
    return np.abs((out.mean(0) - target) / se)


def test_scheme_one_is_unbiased_for_unequal_weights():
    """E[theta] = sum_c p_c beta^c (Lemma C.1); 5 standard errors of the Monte Carlo mean."""
    p = torch.tensor([0.4, 0.3, 0.2, 0.1], dtype=torch.float64)
    assert _check_unbiased(fl.SchemeI(3), p, _beta(4), 0).max() < 5


def test_scheme_two_is_unbiased_for_balanced_weights():
    p = torch.full((5,), 0.2, dtype=torch.float64)
    assert _check_unbiased(fl.SchemeII(2), p, _beta(5), 1).max() < 5


def test_scheme_two_is_biased_for_unequal_weights():
    """Why the balanced-data assumption matters: the plain mean targets the unweighted mean."""
    p = torch.tensor([0.4, 0.3, 0.2, 0.1], dtype=torch.float64)
    assert _check_unbiased(fl.SchemeII(2, allow_unbalanced=True), p, _beta(4), 2).max() > 20


@pytest.mark.parametrize("s", [2, 3])
def test_scheme_two_is_unbiased_on_nearly_balanced_weights(s):
    """Unequal p_c with (N - 1)(max p - min p) = 0.9 <= 1: the drawn clients' weights 1/S + (N - 1)/(S - 1)
    (e_c - mean of the drawn e) sum to 1 in every round, are >= 0, and E[w_c] = p_c: exactly over all
    C(N, S) subsets (rounding), and E[theta] = sum_c p_c beta^c over R drawn rounds within 5 Monte Carlo
    standard errors (a false failure has probability 5.7e-7 per coordinate)."""
    rule = fl.SchemeII(s)
    rule.validate(P_UNEQUAL)
    w = rule.weights(P_UNEQUAL, 1000, torch.Generator().manual_seed(0))
    torch.testing.assert_close(w.sum(1), torch.ones(1000, dtype=torch.float64), rtol=0, atol=1e-15)
    assert bool((w >= 0).all()) and bool(((w > 0).sum(1) == s).all())
    ew, eww = scheme_ii_enumerated_moments(P_UNEQUAL.numpy(), s, corrected=True)
    np.testing.assert_allclose(ew, P_UNEQUAL.numpy(), rtol=0, atol=1e-15)
    np.testing.assert_allclose(np.diag(eww), rule.mean_square_weights(P_UNEQUAL).numpy(), rtol=1e-12, atol=0)
    assert _check_unbiased(rule, P_UNEQUAL, _beta(4), 3).max() < 5


def test_scheme_two_on_balanced_weights_draws_as_before():
    """Balanced clients keep the paper's plain mean, the same draws bit for bit (1/S on the clients of
    the same argsort of the same uniform keys)."""
    p = torch.full((5,), 0.2, dtype=torch.float64)
    w = fl.SchemeII(2).weights(p, 50, torch.Generator().manual_seed(4))
    keys = torch.rand(50, 5, generator=torch.Generator().manual_seed(4))
    expected = torch.zeros(50, 5, dtype=torch.float64).scatter_(1, keys.argsort(dim=1)[:, :2], 0.5)
    assert torch.equal(w, expected)


def test_scheme_two_weights_pick_exactly_s_distinct_clients():
    p = torch.full((6,), 1 / 6, dtype=torch.float64)
    w = fl.SchemeII(4).weights(p, 1000, torch.Generator().manual_seed(0))
    assert ((w > 0).sum(1) == 4).all()
    torch.testing.assert_close(w.sum(1), torch.ones(1000, dtype=torch.float64))


def test_scheme_one_weights_are_counts_over_s():
    p = torch.tensor([0.7, 0.2, 0.1], dtype=torch.float64)
    w = fl.SchemeI(5).weights(p, 1000, torch.Generator().manual_seed(0))
    torch.testing.assert_close((w * 5).round(), w * 5)
    torch.testing.assert_close(w.sum(1), torch.ones(1000, dtype=torch.float64))


def test_scheme_two_with_all_clients_equals_full_participation():
    problem = fl.problems.GaussianSimulation(num_clients=8, alpha=2.0, samples_per_client=5, seed=1)
    kw = dict(step_size=2e-4, local_steps=3, chains=16, seed=4)
    a = fl.FALD(problem, participation=fl.Full(), **kw).run(10).samples
    b = fl.FALD(problem, participation=fl.SchemeII(8), **kw).run(10).samples
    torch.testing.assert_close(a, b, rtol=1e-13, atol=1e-13)


def test_partial_participation_adds_the_predicted_bias():
    """With the paper's noise (``noise="paper"``) the stationary bias grows as S falls (Thm C.3):
    the plain mean of S clients carries private noise of variance 2 eta tau (1 - rho^2) N / S >
    2 eta tau, whatever eta.

    The exact moment recursion (independent of the engine) gives the W2 of each rule's law
    after 60 rounds (started at the posterior mean) to the posterior; it must increase from full to S = 40 to S = 30, and the engine's
    fitted W2 over the last rounds (R = 2000 chains) must agree with the recursion to within
    the finite-R floor plus 25% (W2 of a mixture fit is noisier than of a Gaussian).
    """
    from diagnostics import gaussian_w2, w2_floor

    problem = fl.problems.GaussianSimulation(num_clients=50, alpha=1.0, samples_per_client=20, seed=0)
    mean, cov = (t.numpy() for t in problem.posterior(1.0))
    eta, k, rounds = 2e-5, 10, 60
    h, b, p = problem.hessians.numpy(), problem.shifts.numpy(), problem.weights.numpy()
    exact = {}
    for name, scheme, s in [("full", "full", None), ("II-40", "II", 40), ("II-30", "II", 30), ("I-30", "I", 30)]:
        m, c = fald_moments(h, b, p, mean, [[eta] * k] * rounds, 1.0, 0.0, scheme, s, noise="paper")[-1]
        exact[name] = gaussian_w2(m, c, mean, cov)
    assert exact["full"] < exact["II-40"] < exact["II-30"]
    assert exact["II-30"] < exact["I-30"]  # C_S = (N - S)/(N - 1) < 1: scheme II is tighter
    floor = w2_floor(mean, cov, 2000, repeats=200).q95
    for name, rule in [("full", fl.Full()), ("II-30", fl.SchemeII(30, noise="paper"))]:
        trace = fl.FALD(problem, step_size=eta, local_steps=k, participation=rule, chains=2000,
                        init=torch.tensor(mean), seed=3).run(rounds)
        measured = trace.w2()[-1]
        assert abs(measured - exact[name]) < floor + 0.25 * exact[name], (name, measured, exact[name])


def test_scheme_two_rejects_too_many_clients_and_unbalanced_weights():
    problem = QuadraticProblem(np.eye(2), np.zeros((3, 2)), [0.5, 0.25, 0.25])
    with pytest.raises(ValueError, match="num_sampled"):
        fl.FALD(problem, step_size=0.1, participation=fl.SchemeII(4))
    with pytest.raises(ValueError, match=r"SchemeII\(2\) on unequal client weights: .*\(N - 1\)\(max p_c - min p_c\) "
                                         r"<= 1; here it is 1.4. Use SchemeI\(2\)"):
        fl.FALD(QuadraticProblem(np.eye(2), np.zeros((3, 2)), [0.8, 0.1, 0.1]), step_size=0.1,
                participation=fl.SchemeII(2))
    with pytest.warns(UserWarning, match="balanced"):
        fl.FALD(problem, step_size=0.1, participation=fl.SchemeII(2, allow_unbalanced=True))


def test_every_rule_exposes_its_scheme_and_s_as_read_only_settings():
    rules = [(fl.Full(), "full", None), (fl.SchemeI(3), "I", 3), (fl.SchemeII(2), "II", 2)]
    for rule, scheme, s in rules:
        assert rule.scheme == scheme and rule.num_sampled == s
        for name in ("scheme", "num_sampled"):
            with pytest.raises(AttributeError):
                setattr(rule, name, "changed")
    assert {r.scheme for r, _, _ in rules} == {"full", "I", "II"}


@pytest.mark.parametrize("rule", [fl.SchemeI, fl.SchemeII])
@pytest.mark.parametrize("s", [10**30, 10**400, participation.MAX_NUM_SAMPLED + 1])
def test_num_sampled_beyond_the_bound_is_refused_naming_it(rule, s):
    """SchemeI(10**30) used to hang in its block loop and SchemeI(10**400) overflowed 1 / S: S is
    bounded (Scheme I's weights with S beyond it are p_c to within 1/sqrt(S) ~ 2.4e-4)."""
    with pytest.raises(ValueError, match=rf"num_sampled must be an integer in \[1, {participation.MAX_NUM_SAMPLED}\]"):
        rule(s)
    assert rule(participation.MAX_NUM_SAMPLED).num_sampled == participation.MAX_NUM_SAMPLED


# -- the injected noise under partial participation (noise="calibrated" / "paper") ---------------

P_UNEQUAL = torch.tensor([0.4, 0.3, 0.2, 0.1], dtype=torch.float64)


def _draws_of_w_squared(rule, p, draws=R, seed=1):
    w = rule.weights(p, draws, torch.Generator().manual_seed(seed))
    return (w * w).numpy()


@pytest.mark.parametrize("rule,p", [(fl.SchemeI(3), P_UNEQUAL), (fl.SchemeI(1), P_UNEQUAL), (fl.SchemeI(9), P_UNEQUAL),
                                    (fl.SchemeII(2), torch.full((4,), 0.25, dtype=torch.float64)),
                                    (fl.SchemeII(2, allow_unbalanced=True), P_UNEQUAL), (fl.SchemeII(2), P_UNEQUAL),
                                    (fl.SchemeII(3), P_UNEQUAL)])
def test_calibrated_noise_gives_each_client_full_participations_noise_share(rule, p):
    """Client c's private noise of variance 2 eta tau (1 - rho^2) / q_c enters the average as
    E[w_c^2] / q_c times 2 eta tau (1 - rho^2): with q_c = E[w_c^2] / p_c that is p_c, client by
    client, full participation's p_c^2 / p_c, so the private noise sums to 1 - rho^2 times 2 eta tau
    (no inflation). The closed form E[w_c^2] agrees with R = 200,000 drawn rounds within 5 Monte
    Carlo standard errors (sd(w_c^2) / sqrt(R): a false failure has probability 5.7e-7 per client)."""
    q = rule.noise_weights(p)
    second = rule.mean_square_weights(p)
    torch.testing.assert_close(second / q, p, rtol=1e-14, atol=0)
    assert float((second / q).sum()) == pytest.approx(1.0, rel=1e-14)
    w2 = _draws_of_w_squared(rule, p)
    z = (w2.mean(0) - second.numpy()) / (w2.std(0, ddof=1) / np.sqrt(R))
    assert np.abs(z).max() < 5.0, z


@pytest.mark.parametrize("rule", [fl.SchemeI(3), fl.SchemeII(2, allow_unbalanced=True)])
def test_the_papers_noise_is_inflated_by_the_predicted_factor(rule):
    """noise="paper" (eq. 10, q = p): the private noise of the average is E[sum_c w_c^2 / p_c] times
    2 eta tau (1 - rho^2): N/S + 1 - 1/S for scheme I, sum_c 1 / (S N p_c) for scheme II's plain mean
    (N/S on balanced clients), against 1 for full participation."""
    paper = dataclasses.replace(rule, noise="paper")
    p = P_UNEQUAL
    assert paper.noise_weights(p) is p and fl.Full().noise_weights(p) is p
    n, s = p.numel(), rule.num_sampled
    f = float((paper.mean_square_weights(p) / p).sum())
    assert f == pytest.approx(n / s + 1 - 1 / s if rule.scheme == "I" else float((1 / (s * n * p)).sum()), rel=1e-14)


def test_the_noise_rule_is_a_named_setting_checked_by_name():
    assert fl.SchemeI(3).noise == fl.SchemeII(2).noise == "calibrated"
    assert fl.Full().noise == "paper"  # full participation's noise is eq. 10's under either rule
    for bad in ("Paper", None, 1):
        with pytest.raises(ValueError, match="noise must be one of 'calibrated', 'paper'"):
            fl.SchemeI(3, noise=bad)
        with pytest.raises(ValueError, match="noise must be one of 'calibrated', 'paper'"):
            fl.SchemeII(2, noise=bad)
    assert fl.SchemeI(3, noise="paper") != fl.SchemeI(3) and "noise='paper'" in repr(fl.SchemeI(3, noise="paper"))


class _EveryOther(participation.Participation):
    """A rule of one's own: chain r averages clients {0, 1} on even draws of a coin, {2, 3} on odd
    ones (plain mean), E[w_c^2] = 1/8 for every client; no closed form given."""

    scheme = "I"
    num_sampled = 2

    def __init__(self, noise="calibrated", skip_last=False):
        self.noise, self.skip_last = noise, skip_last

    def weights(self, p, chains, generator):
        coin = torch.rand(chains, generator=generator, device=p.device) < (1.0 if self.skip_last else 0.5)
        w = torch.zeros(chains, p.numel(), dtype=p.dtype, device=p.device)
        w[coin, :2] = 0.5
        w[~coin, 2:] = 0.5
        return w


def test_a_rule_of_your_own_is_calibrated_from_its_drawn_weights():
    """Without a closed form, E[w_c^2] is estimated from MONTE_CARLO_DRAWS = 2^16 rounds of the rule's
    weights (fixed seed): here 1/8 per client, within 5 standard errors (sd(w^2) = 1/8 for a client
    drawn half the time: se = (1/8) / 2^8). A client it never draws cannot be calibrated: refused by
    name, with the way out; noise="paper" keeps eq. 10's weights."""
    p = torch.full((4,), 0.25, dtype=torch.float64)
    rule = _EveryOther()
    second = rule.mean_square_weights(p)
    assert torch.equal(second, rule.mean_square_weights(p))  # the same estimate every call
    assert (second - 0.125).abs().max() < 5 * 0.125 / 2**8
    torch.testing.assert_close(rule.noise_weights(p), second / p)
    assert _EveryOther(noise="paper").noise_weights(p) is p
    with pytest.raises(ValueError, match="never drawn.*noise='paper'"):
        _EveryOther(skip_last=True).noise_weights(p)
    problem = QuadraticProblem(np.eye(2), np.zeros((4, 2)), p.numpy())
    fl.FALD(problem, step_size=0.1, participation=rule, chains=2, seed=0).run(2)  # runs with the estimate


def test_the_calibration_changes_only_the_private_noise():
    """With rho = 1 (no private noise: every client draws the shared vector) the two rules give the
    same draws bit for bit; with rho < 1 they differ (the private scale 1 / sqrt(q_c) against
    1 / sqrt(p_c)). Full participation's draws are the golden streams' (tests/fald/test_golden.py)."""
    problem = fl.problems.GaussianSimulation(num_clients=6, alpha=1.0, samples_per_client=5, seed=1)
    kw = dict(step_size=1e-4, local_steps=3, chains=8, seed=2)
    for rule in (fl.SchemeI(3), fl.SchemeII(2)):
        paper = dataclasses.replace(rule, noise="paper")
        same = [fl.FALD(problem, participation=r, correlation=1.0, **kw).run(5, progress=False).samples
                for r in (rule, paper)]
        assert torch.equal(same[0], same[1])
        apart = [fl.FALD(problem, participation=r, correlation=0.5, **kw).run(5, progress=False).samples
                 for r in (rule, paper)]
        assert not torch.equal(apart[0], apart[1])


def _near_balanced(n, seed):
    """Client weights with (N - 1)(max p - min p) = 0.9 (scheme II's nearly balanced weights)."""
    u = torch.rand(n, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    u = (u - u.min()) / (u.max() - u.min())  # spread exactly 1 before the centring
    return 1.0 / n + 0.9 / (n - 1) * (u - u.mean())


COVARIANCE_CASES = [
    (fl.Full(), P_UNEQUAL),
    (fl.SchemeI(3), P_UNEQUAL),
    (fl.SchemeI(20), _near_balanced(12, 0)),
    (fl.SchemeII(2), torch.full((5,), 0.2, dtype=torch.float64)),
    (fl.SchemeII(2, allow_unbalanced=True), P_UNEQUAL),
    (fl.SchemeII(3), P_UNEQUAL),
    (fl.SchemeII(8), _near_balanced(40, 1)),  # C(40, 8) = 7.7e7 subsets: only the closed form reaches it
]


@pytest.mark.parametrize("rule, p", COVARIANCE_CASES, ids=lambda x: repr(x) if isinstance(x, participation.Participation) else "")
def test_the_covariance_of_the_weights_matches_their_draws(rule, p):
    """covariance_weights(p) against the sample covariance of R rounds drawn by the rule's own weights()
    (fixed seed): every entry within 5 Monte Carlo standard errors, se_ab = sd((w_a - m_a)(w_b - m_b)) /
    sqrt(R) (a false failure has probability 5.7e-7 per entry); entries with no spread (full
    participation, w = p) agree to rounding. The rows sum to 0 (the weights sum to 1)."""
    cov = rule.covariance_weights(p)
    assert cov.dtype == torch.float64 and cov.shape == (p.numel(), p.numel())
    torch.testing.assert_close(cov.sum(1), torch.zeros(p.numel(), dtype=torch.float64), rtol=0, atol=1e-15)
    w = rule.weights(p, R, torch.Generator().manual_seed(5))
    w = w.expand(R, -1) if w.dim() == 1 else w
    dev = w - w.mean(0)
    sample, square = dev.T @ dev / R, (dev * dev).T @ (dev * dev) / R  # means of the products and their squares
    se = ((square - sample * sample).clamp(min=0) / R).sqrt()
    assert bool(((sample - cov).abs() <= 5 * se + 1e-15).all()), ((sample - cov).abs() / se).max()


def test_the_weight_moments_are_the_closed_forms_of_before():
    """E[w] and E[w w^T] are the test targets' closed forms bit for bit (full participation, scheme I,
    scheme II's plain mean), and on nearly balanced clients scheme II's corrected weights' moments
    enumerated over every S-subset (rounding); covariance_weights is E[w w^T] - E[w] E[w]^T."""
    p, balanced = P_UNEQUAL.numpy(), np.full(5, 0.2)
    for rule, pp, scheme in ((fl.Full(), p, "full"), (fl.SchemeI(3), p, "I"), (fl.SchemeI(1), p, "I"),
                             (fl.SchemeII(2), balanced, "II"), (fl.SchemeII(5), balanced, "II"),
                             (fl.SchemeII(3, allow_unbalanced=True), p, "II")):
        ew, eww = rule.weight_moments(torch.from_numpy(pp))
        want = weight_moments(pp, scheme, rule.num_sampled)
        np.testing.assert_array_equal(ew.numpy(), want[0])
        np.testing.assert_array_equal(eww.numpy(), want[1])
        np.testing.assert_array_equal(rule.covariance_weights(torch.from_numpy(pp)).numpy(),
                                      want[1] - np.outer(want[0], want[0]))
    for n, s in ((4, 2), (4, 3), (4, 4), (7, 3), (9, 5)):
        pp = _near_balanced(n, n + s)
        rule = fl.SchemeII(s)
        ew, eww = rule.weight_moments(pp)
        want = scheme_ii_enumerated_moments(pp.numpy(), s, corrected=True)
        np.testing.assert_allclose(ew.numpy(), want[0], rtol=1e-13, atol=0)
        np.testing.assert_allclose(eww.numpy(), want[1], rtol=1e-13, atol=0)
        torch.testing.assert_close(eww.diagonal(), rule.mean_square_weights(pp), rtol=1e-13, atol=0)


def test_a_rule_of_your_own_has_no_closed_form_covariance():
    """A rule of one's own that gives no weight_moments is refused by name (not read as the scheme it
    names: _EveryOther says scheme "I" but draws other weights); S > N under scheme II is refused."""
    with pytest.raises(NotImplementedError, match="_EveryOther.*weight_moments"):
        _EveryOther().covariance_weights(P_UNEQUAL)
    with pytest.raises(ValueError, match="num_sampled"):
        fl.SchemeII(5).covariance_weights(P_UNEQUAL)
