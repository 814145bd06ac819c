"""The extension contracts (fedlangevin/federation/contracts.py): every built-in implementation conforms,
the conformance check names what a class lacks, and a drift correction and a preconditioner
defined here (not in the package) run through the runner end to end, checkpoint, interruption and
resume included."""

from __future__ import annotations

import math

import pytest
import torch

import fedlangevin as fl
from fedlangevin.compression import QuantizedUpdateUpload
from fedlangevin.federation import contracts as C
from fedlangevin.corrections.drift import as_correction
from fedlangevin.federation.extensions import FactorPreconditioner, InProcessGroup, LocalTransport
from fedlangevin.federation.preconditioning import DiagonalPreconditioner
from fedlangevin.problems import CurvatureSimulation, LogisticRegression

from tests.stops import dies_in_round

F64 = torch.float64


def _problem():
    return CurvatureSimulation(num_clients=4, alpha=100.0, curvature_spread=1.5, samples_per_client=5)


# -- classes of a user's own ------------------------------------------------------------------------
class ScaledIdentity:
    """M = s I, A = sqrt(s) I: the smallest preconditioner a user could write."""

    def __init__(self, scale: float, dim: int) -> None:
        self.scale, self.dim = float(scale), dim

    def drift(self, grad):
        return grad * self.scale

    def noise(self, xi):
        return xi * math.sqrt(self.scale)

    def matrix(self):
        return self.scale * torch.eye(self.dim, dtype=F64)

    def __repr__(self) -> str:
        return f"ScaledIdentity({self.scale:g})"


class MemoryCorrection:
    """Settings of a correction that pulls each client towards the average of the clients' last local
    displacements: term_rc = strength (m_rc - sum_c p_c m_rc), m the clients' beta - theta of the last
    round. Its state (the memories and a round counter) changes every round."""

    releases = "each client's local displacement of the last round"

    def __init__(self, strength: float = 0.5) -> None:
        self.strength = strength
        self.active = True

    def build(self, problem, *, dtype, device, upload=None):
        return BuiltMemory(self.strength, problem.weights.to(device=device, dtype=dtype))

    def record(self) -> dict:
        return {"kind": "test-memory", "strength": self.strength}

    def per_round_floats(self, num_clients: int, dim: int):
        return 0.0, float(dim)

    def __repr__(self) -> str:
        return f"MemoryCorrection({self.strength:g})"


class BuiltMemory:
    def __init__(self, strength, weights) -> None:
        self.strength, self.weights = strength, weights

    def init(self, theta, mode=None):
        r, d = theta.shape
        n = self.weights.numel()
        return {"memory": torch.zeros(r, n, d, dtype=theta.dtype, device=theta.device),
                "rounds": torch.zeros((), dtype=torch.int64)}

    def term(self, state, beta):
        m = state["memory"]
        return self.strength * (m - (self.weights[None, :, None] * m).sum(1, keepdim=True))

    def update(self, state, theta, new_theta, beta, weights, generator):
        return {"memory": beta - theta[:, None, :], "rounds": state["rounds"] + 1}

    def keep(self, state, rows):
        return {"memory": state["memory"][rows], "rounds": state["rounds"]}


# -- conformance ----------------------------------------------------------------------------------
def test_every_built_in_extension_conforms_to_its_contract():
    problem = _problem()
    built_ins = [
        (FactorPreconditioner(torch.eye(2, dtype=F64)), C.PRECONDITIONER),
        (DiagonalPreconditioner([1.0, 2.0]), C.PRECONDITIONER),
        (LocalTransport(), C.TRANSPORT),
        (InProcessGroup([[0, 1], [2, 3]]).transports[1], C.TRANSPORT),
        (QuantizedUpdateUpload(8), C.UPLOAD_CODEC),
        (problem, C.PROBLEM),
        (LogisticRegression([(torch.randn(10, 3, dtype=F64), torch.arange(10) % 2)] * 2), C.PROBLEM),
    ]
    for name in ("control_variates", "conducive", "qlsd++"):
        setting = as_correction(name)
        built_ins.append((setting, C.CORRECTION_SETTINGS))
        built_ins.append((setting.build(problem, dtype=F64, device="cpu", upload=QuantizedUpdateUpload(8)),
                          C.DRIFT_CORRECTION))
    built_ins += [(ScaledIdentity(2.0, 2), C.PRECONDITIONER), (MemoryCorrection(), C.CORRECTION_SETTINGS),
                  (BuiltMemory(0.5, problem.weights), C.DRIFT_CORRECTION)]
    for obj, contract in built_ins:
        assert C.conformance(obj, contract) == [], (obj, contract.name)
        assert C.check_conforms(obj, contract) is obj


def test_the_check_names_every_missing_member_and_a_wrong_signature():
    class Half:  # no noise, no matrix
        def drift(self, grad):
            return grad

    findings = C.conformance(Half(), C.PRECONDITIONER)
    assert findings == ["missing noise(xi) -> A xi", "missing matrix: M (d, d)"]
    with pytest.raises(ValueError, match=r"preconditioner: Half does not implement the preconditioner contract.*"
                                         r"missing noise\(xi\).*missing matrix"):
        fl.FALD(_problem(), step_size=1e-3, adapt=False, preconditioner=Half())

    class OldUpdate(BuiltMemory):  # the four-argument update an earlier docs page showed
        def update(self, state, theta, beta, weights):
            return state

    class OldSettings(MemoryCorrection):
        def build(self, problem, *, dtype, device, upload=None):
            return OldUpdate(self.strength, problem.weights)

    with pytest.raises(ValueError, match=r"correction: OldUpdate .* update cannot be called as "
                                         r"update\(state, theta, new_theta, beta, weights, generator\)"):
        fl.FALD(_problem(), step_size=1e-3, correction=OldSettings())
    with pytest.raises(ValueError, match=r"transport: .* missing reduce\(partial\)"):
        fl.FALD(_problem(), step_size=1e-3, transport=type("NoReduce", (), {"clients": None})())
    with pytest.raises(ValueError, match=r"upload: .* cannot be called as codec\(beta, theta, generator\)"):
        fl.FALD(_problem(), step_size=1e-3, adapt=False, upload=lambda beta: beta)

    class Exactless:
        clients, exact = [0, 1], False

        def reduce(self, partial):
            return partial

    assert C.conformance(Exactless(), C.TRANSPORT) == [
        "a transport with exact = False must have private_stream(generator)"]


def test_a_preconditioner_whose_matrix_has_the_wrong_size_is_refused_before_any_work():
    with pytest.raises(ValueError, match=r"preconditioner: ScaledIdentity\(2\) is for d = 3; the problem has d = 2 "
                                         r"\(its M has shape \(3, 3\)"):
        fl.FALD(_problem(), step_size=1e-3, adapt=False, preconditioner=ScaledIdentity(2.0, 3))
    with pytest.raises(ValueError, match=r"preconditioner: .* is for d = 3; the problem has d = 2"):
        fl.fald.build(_problem(), preconditioner=FactorPreconditioner(torch.eye(3, dtype=F64)))
    with pytest.raises(ValueError, match=r"preconditioner must be None, IdentityPreconditioner\(\), .* or an object "
                                         r"implementing the preconditioner contract"):
        fl.fald.build(_problem(), preconditioner="x")


def test_contract_tables_list_every_member():
    for contract in C.CONTRACTS.values():
        table = contract.table()
        assert all(f"`{m.signature}`" in table for m in contract.members)


# -- a user's preconditioner through the runner ---------------------------------------------------
def _interrupted_then_resumed(tmp_path, make, resume_kwargs, rounds=30, stop=17, every=5):
    """One run of ``rounds`` against the same run interrupted in round ``stop`` (a checkpoint every
    ``every`` rounds) and resumed from its checkpoint by a fresh sampler: (whole, resumed) traces."""
    whole = make().run(rounds)
    sampler = make()
    sampler._kernel = sampler._kernel._replace(step=dies_in_round(sampler._kernel.step, stop))
    with pytest.raises(KeyboardInterrupt):
        sampler.run(rounds, checkpoint=tmp_path / "run.ckpt", checkpoint_every=every)
    resumed = fl.FALD.resume(tmp_path / "run.ckpt", **resume_kwargs)
    assert resumed.state.round == (stop - 1) // every * every
    return whole, resumed, resumed.run()


def test_a_user_preconditioner_gives_the_built_in_ones_samples_and_resumes_bit_for_bit(tmp_path):
    problem = _problem()
    kw = dict(step_size=1e-3, local_steps=3, chains=4, seed=3, adapt=False, participation=fl.SchemeII(2))
    sampler = fl.FALD(problem, preconditioner=ScaledIdentity(4.0, 2), **kw)
    ours = sampler.run(20)
    # M = 4 I written as a factor 2 I: the same drift and noise to the last bit (products with 0 and 2 are exact)
    theirs = fl.FALD(problem, preconditioner=FactorPreconditioner(2.0 * torch.eye(2, dtype=F64)), **kw).run(20)
    assert torch.equal(ours.samples, theirs.samples)
    plain = fl.FALD(problem, **kw).run(20)
    assert not torch.equal(ours.samples, plain.samples)
    assert ours.settings.preconditioner == "ScaledIdentity(4)" and ours.settings.preconditioner_norm == 4.0
    assert sampler.ledger["setup_floats"] == problem.num_clients * 3  # M broadcast: d (d + 1) / 2 per client, the default

    def make():
        return fl.FALD(problem, preconditioner=ScaledIdentity(4.0, 2), **kw)

    whole, resumed, trace = _interrupted_then_resumed(tmp_path, make, {"preconditioner": ScaledIdentity(4.0, 2)})
    assert torch.equal(trace.samples, whole.samples)
    with pytest.raises(ValueError, match=r"preconditioner: the checkpoint ran with a preconditioner of your own "
                                         r"class 'ScaledIdentity'; give it again"):
        fl.FALD.resume(tmp_path / "run.ckpt")
    with pytest.raises(ValueError, match=r"preconditioner: the given ScaledIdentity differs"):
        fl.FALD.resume(tmp_path / "run.ckpt", preconditioner=ScaledIdentity(2.0, 2))


# -- a user's drift correction through the runner -------------------------------------------------
def test_a_user_correction_runs_is_accounted_and_resumes_bit_for_bit(tmp_path):
    problem = _problem()
    kw = dict(step_size=1e-3, local_steps=4, chains=3, seed=8)

    def make(strength=0.5):
        return fl.FALD(problem, correction=MemoryCorrection(strength), **kw)

    sampler = make()
    trace = sampler.run(12)
    assert int(sampler.state.correction["rounds"]) == 12
    assert not torch.equal(trace.samples, fl.FALD(problem, **kw).run(12).samples)  # the term is applied
    assert trace.settings.correction == "MemoryCorrection(0.5)"
    assert trace.settings.correction_releases == MemoryCorrection.releases
    assert trace.communication.floats_down == pytest.approx(12 * (2 * problem.num_clients + 2))
    with pytest.raises(ValueError, match="releases"):  # privacy accounting refuses what the correction releases
        trace.privacy(delta=1e-5, sensitivity=1.0)

    whole, resumed, again = _interrupted_then_resumed(tmp_path, make, {"correction": MemoryCorrection(0.5)})
    assert torch.equal(again.samples, whole.samples)
    assert int(resumed.state.correction["rounds"]) == 30
    with pytest.raises(ValueError, match=r"correction: the checkpoint ran with a drift correction of your own "
                                         r"\('test-memory'\); give it again"):
        fl.FALD.resume(tmp_path / "run.ckpt")
    with pytest.raises(ValueError, match=r"correction: the given correction's record .* differs"):
        fl.FALD.resume(tmp_path / "run.ckpt", correction=MemoryCorrection(0.25))


def test_a_user_correction_record_must_name_its_kind():
    class Nameless(MemoryCorrection):
        def record(self):
            return {"strength": self.strength}

    class Impostor(MemoryCorrection):
        def record(self):
            return {"kind": "control_variates"}

    for bad in (Nameless(), Impostor()):
        with pytest.raises(ValueError, match=r"correction: record\(\) of .* must return a dict whose 'kind'"):
            fl.FALD(_problem(), step_size=1e-3, correction=bad)
