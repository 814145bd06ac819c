"""The posteriordb posteriors (regressions, eight schools, arK, gp_pois_regr) as Pyro models, for
:class:`~fedlangevin.problems.PyroProblem`.

:mod:`fedlangevin.experiments.posteriordb` writes each posterior's energy by hand (closed-form
regression gradients from sufficient statistics, a :class:`~fedlangevin.problems.CustomProblem`
for eight schools); here the same Stan models are Pyro models, as a user would write them, so
that the validation can also run through ``PyroProblem`` and the benchmark
(``benchmarks/bench_posteriordb.py --speed``) can price autodiff against hand-written gradients
on the same model. ``tests/experiments/test_posteriordb_pyro.py`` checks that the two give the
same gradients.

A Stan parameter without a prior is flat (``ImproperUniform``); a scale with ``lower=0`` and a
Student-t, Cauchy or normal prior is the folded (half) distribution. Constants of the densities
do not matter for the gradients.
"""

from __future__ import annotations

from typing import Callable

import torch

__all__ = ["pyro_model", "pyro_problem"]


def _flat(shape=()):
    import pyro.distributions as dist
    from torch.distributions import constraints

    return dist.ImproperUniform(constraints.real, (), shape)


def _flat_positive():
    import pyro.distributions as dist
    from torch.distributions import constraints

    return dist.ImproperUniform(constraints.positive, (), ())


def _regression(coefficients: list[tuple[str, int, Callable]], scale: Callable) -> Callable:
    """y ~ Normal(X beta, sigma) with beta the concatenation of ``coefficients`` sites
    (name, size, prior factory) and sigma ~ ``scale()``; data (X, y)."""

    def model(data):
        import pyro
        import pyro.distributions as dist

        x, y = data
        parts = []
        for name, size, prior in coefficients:
            value = pyro.sample(name, prior())
            parts.append(value.reshape(-1) if size > 1 else value.reshape(1))
        beta = torch.cat(parts)
        sigma = pyro.sample("sigma", scale())
        with pyro.plate("data", x.shape[0]):
            pyro.sample("y", dist.Normal(x @ beta, sigma), obs=y)

    return model


def _eight_schools(data):
    import pyro
    import pyro.distributions as dist

    idx, y, sigma = data
    j = 8
    theta_trans = pyro.sample("theta_trans", dist.Normal(torch.zeros(j, dtype=y.dtype), 1.0).to_event(1))
    mu = pyro.sample("mu", dist.Normal(y.new_tensor(0.0), 5.0))
    tau = pyro.sample("tau", dist.HalfCauchy(y.new_tensor(5.0)))
    with pyro.plate("data", y.shape[0]):
        effect = theta_trans[idx.long()] * tau + mu
        pyro.sample("y", dist.Normal(effect, sigma), obs=y)


def _gp_pois_regr(x: torch.Tensor) -> Callable:
    """gp_pois_regr as a Pyro model over the public design points ``x`` (N,); data (point
    indices, counts). f = L f_tilde is a ``pyro.deterministic`` site (``PyroProblem.constrain``
    returns it beside rho and alpha)."""

    def model(data):
        import pyro
        import pyro.distributions as dist

        idx, k = data
        n = x.shape[0]
        rho = pyro.sample("rho", dist.Gamma(k.new_tensor(25.0), 4.0))
        alpha = pyro.sample("alpha", dist.HalfNormal(k.new_tensor(2.0)))
        f_tilde = pyro.sample("f_tilde", dist.Normal(torch.zeros(n, dtype=k.dtype), 1.0).to_event(1))
        dist2 = (x[:, None] - x[None, :]) ** 2
        cov = alpha**2 * torch.exp(-dist2 / (2 * rho**2)) + 1e-10 * torch.eye(n, dtype=k.dtype)
        f = pyro.deterministic("f", torch.linalg.cholesky(cov) @ f_tilde)
        with pyro.plate("data", k.shape[0]):
            pyro.sample("k", dist.Poisson(torch.exp(f[idx.long()])), obs=k)

    return model


def pyro_model(name: str, data: dict, k: int) -> Callable:
    """The Pyro model of posterior ``name`` (one of ``posteriordb.POSTERIORS``); ``data`` its
    posteriordb data, ``k`` the number of regression coefficients (columns of the design; arK:
    1 + K, the intercept and the lags; unused for eight schools and gp_pois_regr)."""
    import pyro.distributions as dist

    def t(df, loc, scale):
        return lambda: dist.StudentT(df, torch.tensor(float(loc), dtype=torch.float64), scale)

    def normal(loc, scale, shape=()):
        return lambda: dist.Normal(torch.full(shape, float(loc), dtype=torch.float64), scale).to_event(len(shape))

    if name.startswith("eight_schools"):
        return _eight_schools
    if name == "gp_pois_regr-gp_pois_regr":
        return _gp_pois_regr(torch.as_tensor(data["x"], dtype=torch.float64))
    if name == "arK-arK":  # alpha, beta[1..K] ~ normal(0, 10), sigma ~ cauchy(0, 2.5) on (0, inf)
        return _regression([("alpha", 1, normal(0.0, 10.0)), ("beta", k - 1, normal(0.0, 10.0, (k - 1,)))],
                           lambda: dist.HalfCauchy(torch.tensor(2.5, dtype=torch.float64)))
    if name == "diamonds-diamonds":
        return _regression([("b", k - 1, normal(0.0, 1.0, (k - 1,))), ("Intercept", 1, t(3.0, 8.0, 10.0))],
                           lambda: dist.FoldedDistribution(dist.StudentT(3.0, torch.tensor(0.0, dtype=torch.float64), 10.0)))
    if name == "kidiq-kidscore_momhsiq":
        return _regression([("beta", k, lambda: _flat((k,)))], lambda: dist.HalfCauchy(torch.tensor(2.5, dtype=torch.float64)))
    if name == "kilpisjarvi_mod-kilpisjarvi":
        pa, sa, pb, sb = (float(data[key]) for key in ("pmualpha", "psalpha", "pmubeta", "psbeta"))
        return _regression([("alpha", 1, normal(pa, sa)), ("beta", 1, normal(pb, sb))], _flat_positive)
    if name == "sblri-blr":
        return _regression([("beta", k, normal(0.0, 10.0, (k,)))],
                           lambda: dist.HalfNormal(torch.tensor(10.0, dtype=torch.float64)))
    # earnings, kidiq_with_mom_work, mesquite, nes2000: flat priors
    return _regression([("beta", k, lambda: _flat((k,)))], _flat_positive)


def pyro_problem(post, **kwargs):
    """``post`` (a :class:`~fedlangevin.experiments.posteriordb.Posterior`) as a
    :class:`~fedlangevin.problems.PyroProblem` of its Pyro model over the same clients, with
    theta in the same order and space (log scales). ``kwargs`` go to ``PyroProblem``."""
    from fedlangevin.problems import PyroProblem

    if post.clients is None or post.model is None:
        raise ValueError(f"{post.name}: this Posterior carries no client datasets or Pyro model")
    return PyroProblem(post.model, post.clients, weights=post.problem.weights, **kwargs)
