"""Property tests of the validation sweep (fedlangevin/_validation.py).

Random valid configurations of the sampler and of a run (including checkpoints, stores and
streaming statistics) never crash and give traces of the promised shape; random invalid
ones — one argument at a time made invalid — always raise ``ValueError`` naming that
argument, before any work starts. Problems are tiny and runs a few rounds, so that a few
dozen examples take seconds.
"""

from __future__ import annotations

import math
import tempfile
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import fedlangevin as fl
from fedlangevin._validation import check_memory_draws
from fedlangevin.federation.schedules import Sequence as SequenceSchedule

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


# -- valid configurations ---------------------------------------------------------------------
@st.composite
def problems(draw):
    n = draw(st.integers(1, 4))
    spc = draw(st.integers(2, 5))
    problem = fl.problems.GaussianSimulation(
        num_clients=n, samples_per_client=spc, alpha=draw(st.floats(0.0, 5.0)),
        prior_precision=draw(st.sampled_from([0.0, 0.5])), seed=draw(st.integers(0, 3)),
    )
    return problem, n, spc


@st.composite
def valid_setups(draw):
    problem, n, spc = draw(problems())
    chains = draw(st.integers(1, 4))
    local_steps = draw(st.integers(1, 3))
    rounds = draw(st.integers(1, 6))
    stable = 0.5 / problem.smoothness  # eta L < 1: the chains contract, nothing diverges
    step_size = draw(st.one_of(
        st.floats(1e-7, stable),
        st.just("paper"),
        st.lists(st.floats(1e-7, stable), min_size=rounds * local_steps, max_size=rounds * local_steps + 3),
        st.floats(1e-7, stable).map(lambda eta: (lambda k: eta / (1.0 + k) ** 0.5)),
        st.floats(1e-7, stable).map(fl.Constant),
    ))
    participation = draw(st.one_of(
        st.none(), st.just("full"), st.just(fl.Full()),
        st.integers(1, n).map(fl.SchemeI), st.integers(1, n).map(fl.SchemeII),
    ))
    d = problem.dim
    init = draw(st.one_of(
        st.none(),
        st.lists(st.floats(-5, 5), min_size=d, max_size=d),
        st.lists(st.lists(st.floats(-5, 5), min_size=d, max_size=d), min_size=chains, max_size=chains),
    ))
    ctor = dict(
        step_size=step_size, local_steps=local_steps, temperature=draw(st.floats(1e-3, 10.0)),
        correlation=draw(st.floats(0.0, 1.0)), participation=participation, chains=chains,
        batch_size=draw(st.one_of(st.none(), st.integers(1, spc))), init=init,
        dtype=draw(st.sampled_from([torch.float64, torch.float32, "float32", "float64"])),
        noise_dtype=draw(st.sampled_from([torch.float32, torch.float64, None])),
        seed=draw(st.integers(0, 2**64 - 1)),
    )
    keep_samples = draw(st.booleans())
    warmup = draw(st.integers(0, rounds - 1))
    run = dict(
        rounds=rounds, warmup=warmup, thin=draw(st.integers(1, 3)), progress=draw(st.sampled_from([None, False])),
        keep_samples=keep_samples, stats=draw(st.sampled_from([None, True, False])),
        on_divergence=draw(st.sampled_from([None, "raise", "drop"])),
    )
    if run["stats"] is not False and draw(st.booleans()):
        run["target"] = draw(st.sampled_from(["posterior", "explicit"]))
    use_store = keep_samples and draw(st.booleans())
    use_checkpoint = draw(st.booleans())
    every = draw(st.one_of(st.none(), st.integers(1, 3))) if use_checkpoint else None
    return problem, ctor, run, use_store, use_checkpoint, every


@pytest.mark.filterwarnings("ignore:target. the per-draw W2 needs at least 2 chains")
@SETTINGS
@given(valid_setups())
def test_random_valid_configurations_run_and_resume(setup):
    problem, ctor, run, use_store, use_checkpoint, every = setup
    if run.get("target") == "explicit":
        mean, cov = problem.posterior(ctor["temperature"])
        run["target"] = (mean.numpy(), cov)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        extra = {}
        if use_store:
            extra["store"] = tmp / "store"
        if use_checkpoint:
            extra["checkpoint"] = tmp / "run.ckpt"
            extra["checkpoint_every"] = every
        sampler = fl.FALD(problem, **ctor)
        trace = sampler.run(**run, **extra)
        expected = max(0, (run["rounds"] - run["warmup"]) // run["thin"]) if run["keep_samples"] else 0
        assert trace.samples.shape == (ctor["chains"], expected, problem.dim)
        assert torch.isfinite(trace.samples).all()
        assert len(trace.step_sizes) == run["rounds"] * ctor["local_steps"]
        if run.get("stats") or run.get("target") is not None:
            assert trace.stats is not None and trace.stats.draws == max(0, (run["rounds"] - run["warmup"]) // run["thin"])
        if use_checkpoint:
            kwargs = {} if not callable(ctor["step_size"]) or isinstance(ctor["step_size"], fl.Constant) else {
                "step_size": ctor["step_size"]}
            resumed = fl.FALD.resume(tmp / "run.ckpt", **kwargs)
            assert resumed.state.round == run["rounds"] and resumed.unfinished is None
            if not isinstance(resumed.schedule, SequenceSchedule):  # a list has no values left
                assert resumed.run(1).num_draws == 1


# -- invalid configurations: one argument at a time -----------------------------------------------
def _non_integers():
    return st.one_of(
        st.floats(allow_nan=True, allow_infinity=True).filter(lambda x: not (math.isfinite(x) and x.is_integer())),
        st.text(max_size=4), st.booleans(), st.just(None), st.just([1]),
    )


def _reals_outside(low, high, low_open=False, high_open=False):
    parts = [st.just(float("nan")), st.text(min_size=1, max_size=4), st.booleans(), st.just(None)]
    if low is not None:
        below = st.floats(max_value=low, exclude_max=not low_open, allow_nan=False)
        parts.append(below)
    else:
        parts.append(st.just(float("-inf")))
    if high is not None:
        parts.append(st.floats(min_value=high, exclude_min=not high_open, allow_nan=False))
    else:
        parts.append(st.just(float("inf")))
    return st.one_of(*parts)


@st.composite
def invalid_setups(draw):
    """(problem, constructor kwargs, run kwargs, the argument name the error must mention)."""
    problem, n, spc = draw(problems())
    ctor = dict(step_size=1e-4, chains=2)
    run = dict(rounds=3)
    tmp = Path(tempfile.mkdtemp())
    (tmp / "full").mkdir()
    (tmp / "full" / "x").write_text("x")
    (tmp / "afile").write_text("x")
    d = problem.dim
    which = draw(st.sampled_from([
        "step_size", "step_size_later", "local_steps", "temperature", "correlation", "chains", "batch_size",
        "init", "dtype", "noise_dtype", "seed", "device", "participation", "num_sampled", "problem",
        "rounds", "warmup", "thin", "progress", "keep_samples", "stats", "target", "checkpoint",
        "checkpoint_every", "on_divergence", "store",
    ]))
    name = which
    if which == "step_size":
        ctor["step_size"] = draw(st.one_of(
            st.floats(max_value=0.0, allow_nan=False), st.just(float("nan")), st.just(float("inf")),
            st.text(max_size=5).filter(lambda s: s.lower() not in ("paper", "decay", "thm5.8")),
            st.just([]), st.lists(st.floats(max_value=0.0, allow_nan=False), min_size=1, max_size=3),
            st.just(None), st.just({"eta": 1e-3}), st.just([[1e-3, 1e-3]]), st.just(["a", 1e-3]),
            st.just(np.array(-1e-3)), st.just(torch.tensor(float("nan"))),
        ))
    elif which == "step_size_later":  # valid at first, invalid at some step of the run
        bad_at = draw(st.integers(1, 5))
        bad = draw(st.sampled_from([0.0, -1e-3, float("nan"), float("inf")]))
        ctor["step_size"] = draw(st.sampled_from(["list", "callable"]))
        values = [1e-4] * bad_at + [bad] + [1e-4] * 3
        ctor["step_size"] = values if ctor["step_size"] == "list" else (lambda k: values[min(k, len(values) - 1)])
        run["rounds"] = bad_at + 2
        name = "step_size"
    elif which in ("local_steps", "chains"):
        ctor[which] = draw(st.one_of(st.integers(max_value=0), _non_integers()))
        if which == "chains" and draw(st.booleans()):  # more client states than any memory holds
            ctor[which] = draw(st.integers(2**50, 2**62))
    elif which == "temperature":
        ctor[which] = draw(_reals_outside(0.0, None, low_open=True))
    elif which == "correlation":
        ctor[which] = draw(_reals_outside(0.0, 1.0))
    elif which == "batch_size":
        ctor[which] = draw(st.one_of(st.integers(max_value=0), st.integers(min_value=spc + 1), st.floats(0.1, 0.9),
                                     st.text(min_size=1, max_size=3)))
    elif which == "init":
        ctor[which] = draw(st.one_of(
            st.lists(st.floats(-1, 1), min_size=d + 1, max_size=d + 3),
            st.just([[0.0] * d] * 3),
            st.just([float("nan")] * d), st.just([float("inf")] * d),
            st.just("abc"), st.just({"a": 1}),
        ))
    elif which in ("dtype", "noise_dtype"):
        ctor[which] = draw(st.sampled_from([torch.float16, torch.int32, torch.bfloat16, "half", "int", 3, "float16"]
                                           + ([None] if which == "dtype" else [])))
    elif which == "seed":
        ctor[which] = draw(st.one_of(st.integers(max_value=-1), st.integers(min_value=2**64), _non_integers().filter(
            lambda x: x is not None)))
    elif which == "device":
        ctor[which] = draw(st.sampled_from(["nonsense", "gpu", "tpu", "", 3.5, "cuda:99", [0]]))
    elif which == "participation":
        ctor[which] = draw(st.sampled_from(["some", 3, "schemeI", 2.5]))
    elif which == "num_sampled":
        ctor["participation"] = fl.SchemeII(draw(st.integers(n + 1, n + 5)))
    elif which == "problem":
        return draw(st.sampled_from(["not a problem", None, 3])), ctor, run, "problem"
    elif which == "rounds":
        run["rounds"] = draw(st.one_of(st.integers(max_value=0), _non_integers(),
                                       st.integers(2**50, 2**80)))  # too many draws to keep in memory
    elif which == "warmup":
        run["warmup"] = draw(st.one_of(st.integers(min_value=3), st.integers(max_value=-1), _non_integers().filter(
            lambda x: x is not None)))
    elif which == "thin":
        run["thin"] = draw(st.one_of(st.integers(max_value=0), _non_integers().filter(lambda x: x is not None)))
    elif which in ("progress", "keep_samples", "stats"):
        run[which] = draw(st.one_of(st.integers(), st.text(max_size=3), st.floats(), st.just([True])))
    elif which == "target":
        run["target"] = draw(st.sampled_from([
            "prior", 3, (np.zeros(d + 1), np.eye(d)), (np.zeros(d), np.eye(d + 1)), (np.zeros(d), -np.eye(d)),
            (np.full(d, np.nan), np.eye(d)), (np.zeros(d),), (np.zeros(d), np.triu(np.ones((d, d)))),
        ]))
        if isinstance(run["target"], tuple) and len(run["target"]) == 2 and draw(st.booleans()):
            run["stats"] = True
    elif which == "checkpoint":
        run["checkpoint"] = draw(st.sampled_from([3, 2.5, tmp / "full", tmp / "missing-dir" / "c", "", b"x"]))
    elif which == "checkpoint_every":
        if draw(st.booleans()):
            run["checkpoint"] = tmp / "c"
            run["checkpoint_every"] = draw(st.one_of(st.integers(max_value=0), _non_integers().filter(
                lambda x: x is not None)))
        else:
            run["checkpoint_every"] = draw(st.integers(1, 5))  # without checkpoint=
    elif which == "on_divergence":
        run["on_divergence"] = draw(st.one_of(st.text(max_size=6).filter(lambda s: s not in ("raise", "drop")),
                                              st.integers(), st.booleans()))
    elif which == "store":
        choice = draw(st.sampled_from(["file", "full", "type", "nokeep"]))
        if choice == "nokeep":
            run["store"], run["keep_samples"] = tmp / "new", False
            name = "keep_samples"
        else:
            run["store"] = {"file": tmp / "afile", "full": tmp / "full", "type": 3.5}[choice]
    return problem, ctor, run, name


@SETTINGS
@given(invalid_setups())
def test_random_invalid_arguments_raise_value_error_naming_the_argument(setup):
    problem, ctor, run, name = setup
    sampler = None
    with pytest.raises(ValueError) as info:
        sampler = fl.FALD(problem, **ctor)
        sampler.run(**run)
    assert name in str(info.value), (name, str(info.value))
    if sampler is not None:  # the run failed before any work
        assert sampler.state.round == 0 and sampler.state.step == 0


@st.composite
def invalid_constructions(draw):
    """Other public constructors: (callable, argument name)."""
    which = draw(st.sampled_from([
        "SchemeI", "SchemeII", "allow_unbalanced", "Constant", "PaperDecay", "Polynomial", "num_clients", "alpha",
        "samples_per_client", "cov", "prior_precision", "sim_seed", "weights", "hessians", "shifts",
        "Sequence", "var_names", "open_store",
    ]))
    bad_int = st.one_of(st.integers(max_value=0), _non_integers())
    if which in ("SchemeI", "SchemeII"):
        value = draw(bad_int)
        return (lambda: getattr(fl, which)(value)), "num_sampled"
    if which == "allow_unbalanced":
        value = draw(st.one_of(st.text(max_size=3), st.integers(), st.just(None)))
        return (lambda: fl.SchemeII(2, allow_unbalanced=value)), "allow_unbalanced"
    if which == "Sequence":
        value = draw(st.sampled_from([(), [0.1, -0.1], [[0.1]], ["x"], [float("inf")], "abc", 3]))
        return (lambda: SequenceSchedule(value)), "step_size"
    if which == "var_names":
        value = draw(st.sampled_from([3, "ab", ["a"], ["a", "b", "c"], ["a", 2]]))
        return (lambda: fl.problems.QuadraticProblem(np.eye(2), np.zeros((2, 2)), [0.5, 0.5], var_names=value)), "var_names"
    if which == "open_store":
        value = draw(st.sampled_from([3, None, "", 2.5]))
        return (lambda: fl.open_store(value)), "path"
    if which == "Constant":
        value = draw(_reals_outside(0.0, None, low_open=True))
        return (lambda: fl.Constant(value)), "step_size"
    if which == "PaperDecay":
        if draw(st.booleans()):
            value = draw(_reals_outside(0.0, None, low_open=True))
            return (lambda: fl.PaperDecay(value, 1.0)), "smoothness"
        value = draw(_reals_outside(0.0, None))
        return (lambda: fl.PaperDecay(1.0, value)), "convexity"
    if which == "Polynomial":
        arg = draw(st.sampled_from(["a", "b", "gamma"]))
        value = draw(_reals_outside(0.0, 1.0) if arg == "gamma" else _reals_outside(0.0, None, low_open=True))
        kwargs = {"a": 1e-3, arg: value}
        return (lambda: fl.Polynomial(**kwargs)), arg
    sim = fl.problems.GaussianSimulation
    if which == "num_clients":
        value = draw(bad_int)
        return (lambda: sim(num_clients=value)), "num_clients"
    if which == "alpha":
        value = draw(_reals_outside(0.0, None))
        return (lambda: sim(num_clients=2, alpha=value)), "alpha"
    if which == "samples_per_client":
        value = draw(st.one_of(bad_int, st.just([3]), st.just([3, 0]), st.just([2.5, 3])))
        return (lambda: sim(num_clients=2, samples_per_client=value)), "samples_per_client"
    if which == "cov":
        value = draw(st.sampled_from([[[1.0, 2.0], [2.0, 1.0]], [1.0, 2.0], [[1.0, 0.5], [0.0, 1.0]], [[float("nan")]],
                                      "abc", [[0.0]]]))
        return (lambda: sim(num_clients=2, cov=value)), "cov"
    if which == "prior_precision":
        value = draw(_reals_outside(0.0, None))
        return (lambda: sim(num_clients=2, prior_precision=value)), "prior_precision"
    if which == "sim_seed":
        value = draw(st.one_of(st.integers(max_value=-1), st.integers(min_value=2**64), st.floats(0.1, 0.9)))
        return (lambda: sim(num_clients=2, seed=value)), "seed"
    quad = fl.problems.QuadraticProblem
    if which == "weights":
        value = draw(st.sampled_from([[0.5, 0.6], [1.0, 0.0], [0.5], [[0.5, 0.5]], [float("nan"), 1.0], "ab"]))
        return (lambda: quad(np.eye(2), np.zeros((2, 2)), value)), "weights"
    if which == "hessians":
        value = draw(st.sampled_from([np.eye(3), -np.eye(2), [[1.0, 2.0], [0.0, 1.0]], np.zeros((2, 2)), "ab"]))
        return (lambda: quad(value, np.zeros((2, 2)), [0.5, 0.5])), "hessian"
    value = draw(st.sampled_from([np.zeros(2), np.full((2, 2), np.inf), "ab"]))
    return (lambda: quad(np.eye(2), value, [0.5, 0.5])), "shifts"


@SETTINGS
@given(invalid_constructions())
def test_random_invalid_constructor_arguments_raise_value_error(case):
    build, name = case
    with pytest.raises(ValueError, match=name):
        build()


def test_numbers_given_as_0d_arrays_are_constant_step_sizes_and_schedules_keep_floats():
    problem = fl.problems.GaussianSimulation(num_clients=2, samples_per_client=3, seed=0)
    for eta in (np.array(1e-3), torch.tensor(1e-3), np.float32(1e-3)):
        schedule = fl.FALD(problem, step_size=eta).schedule
        assert isinstance(schedule, fl.Constant) and type(schedule.eta) is float
    assert fl.FALD(problem, step_size=np.array([1e-3, 2e-3])).schedule == SequenceSchedule((1e-3, 2e-3))
    assert type(fl.Polynomial(torch.tensor(1.0)).a) is float
    assert type(fl.PaperDecay(np.float32(2.0), 1).convexity) is float


def test_memory_checks_fail_before_any_allocation():
    problem = fl.problems.GaussianSimulation(num_clients=2, samples_per_client=3, seed=0)
    with pytest.raises(ValueError, match=r"chains: the client states of .* GiB"):
        fl.FALD(problem, step_size=1e-4, chains=2**50)
    sampler = fl.FALD(problem, step_size=1e-4, chains=4, seed=0)
    with pytest.raises(ValueError, match=r"rounds: keeping .* draws .* store=path"):
        sampler.run(2**60)
    assert sampler.state.round == 0
    check_memory_draws(2**20, 4, 2, torch.float64, "cpu")  # 64 MiB: fine
