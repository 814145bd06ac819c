"""The record of an FA-LD checkpoint (what :class:`fedlangevin.FALD` writes) and the checks of
its entries, shared by ``FALD.resume`` and :func:`fedlangevin.fald.checkpoint_info`.

Record versions: 1 (settings without the participation scheme, a separate communication
total), 2 (the full settings record; communication derived from the ledger). Both resume.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from fedlangevin.runner.io.encoding import CheckpointError, Entries, decode

__all__ = ["RECORD_KIND", "RECORD_VERSION", "RUNNER_KIND", "RUNNER_VERSION", "check_fald_record", "check_runner_record"]

RECORD_KIND = "fedlangevin.FALD"
RECORD_VERSION = 2
#: the record of a kernel of your own run by fedlangevin.runner.base.Runner: the runner's
#: entries (as FA-LD's, without participation, preconditioner, adaptation, correction), the kernel
#: state's further fields (``state``: name -> tensor with a chain axis, or None) and ``kernel``,
#: the kernel's ``record()`` (None without one)
#: the largest round or step count a checkpoint may hold (the runner keeps them in int64 arrays)
MAX_COUNT = 2**62

RUNNER_KIND = "fedlangevin.Runner"
RUNNER_VERSION = 1

#: the settings a resumed sampler is built from, and their checks (name -> (check, arguments))
_SETTINGS = {
    "local_steps": ("int", dict(low=1)), "temperature": ("real", dict(low=0.0, low_open=True)),
    "correlation": ("real", dict(low=0.0, high=1.0)), "chains": ("int", dict(low=1)),
    "num_clients": ("int", dict(low=1)), "dim": ("int", dict(low=1)), "seed": ("int", dict(low=0, high=2**64 - 1)),
    "device": ("str", {}), "dtype": ("str", dict(choices=("float32", "float64"))),
    "noise_dtype": ("str", dict(choices=("float32", "float64"))),
}
_RUN_INTS = {"rounds": 1, "done": 0, "warmup": 0, "thin": 1, "start_round": 0, "start_step": 0}


def check_fald_record(record: dict, used: Path) -> dict:
    """Check that ``record`` (read from ``used``) is an FA-LD checkpoint record of a known version
    (1 or 2) with valid entries; returns its decoded settings. A ``CheckpointError`` naming the
    file and the entry otherwise. What is checked: ``round`` and ``step`` (integers in [0, MAX_COUNT]), ``theta`` (chains x d, finite,
    floating point) and ``active`` (one integer per chain), the random stream, the settings
    (present, of their types and ranges), the problem's description, the stored schedule and
    participation entries, the ledger and the unfinished run's plan and draws. The objects
    themselves are rebuilt (and checked) by :func:`fedlangevin.runner.io.checkpoint.decode`."""
    e, settings = _check_common(record, used, RECORD_KIND, RECORD_VERSION, "an FA-LD sampler",
                                ("participation", "participation_repr"))
    if record["participation"] is not None:
        e.dict("participation", record["participation"])
    e.str("participation_repr", record["participation_repr"])
    for name in ("preconditioner", "adaptation", "correction", "local_bias"):
        if record.get(name) is not None:
            e.dict(name, record[name])
    if "adapted" in record:
        e.bool("adapted", record["adapted"])
    return settings


def check_runner_record(record: dict, used: Path) -> dict:
    """As :func:`check_fald_record`, for the record of a kernel of your own
    (:class:`~fedlangevin.runner.base.Runner`): the runner's entries, and ``state`` (a
    dictionary of the state's further fields: tensors whose first axis is the active chains, or
    None) and ``kernel`` (the kernel's ``record()``: a dictionary or None)."""
    e, settings = _check_common(record, used, RUNNER_KIND, RUNNER_VERSION, "a Runner", ("state", "kernel"))
    chains = record["theta"].shape[0]
    for name, value in e.dict("state", record["state"]).items():
        if value is not None and not (hasattr(value, "shape") and value.dim() >= 1 and value.shape[0] == chains):
            e.fail(f"state[{name!r}] must be a tensor with one row per active chain ({chains}) or None")
    if record["kernel"] is not None:
        e.dict("kernel", record["kernel"])
    return settings


def _check_common(record: dict, used: Path, kind: str, latest: int, what: str, keys: tuple) -> tuple[Entries, dict]:
    """The entries every runner's record holds; (the checks, the decoded settings)."""
    if record.get("kind") != kind:
        raise CheckpointError(f"{str(used)!r} is not a checkpoint of {what}")
    version = record.get("version")
    if isinstance(version, int) and not isinstance(version, bool) and version > latest:
        raise CheckpointError(f"{str(used)!r} was written by a newer fedlangevin (record version {version})")
    e = Entries(used)
    keys = ("version", "round", "step", "settings", "schedule", "schedule_repr", "schedule_probe", "problem", "theta",
            "active", "generator", "ledger", "run") + keys
    e.dict("the record", record, keys)
    e.int("version", record["version"], 1, latest)
    e.int("round", record["round"], 0, MAX_COUNT)
    e.int("step", record["step"], 0, MAX_COUNT)
    settings = decode(e.dict("settings", record["settings"]))
    e.dict("settings", settings, tuple(_SETTINGS))
    for name, (kind, args) in _SETTINGS.items():
        getattr(e, kind)(f"settings[{name!r}]", settings[name], **args)
    if settings.get("batch_size") is not None:
        e.int("settings['batch_size']", settings["batch_size"], 1)
    if "streams" in settings:
        e.str("settings['streams']", settings["streams"])
    if "adapt" in settings:
        e.bool("settings['adapt']", settings["adapt"])
    theta = e.tensor("theta", record["theta"], 2, "float")
    bad = (~torch.isfinite(theta).all(dim=1)).nonzero().flatten().tolist() if theta.numel() else []
    if bad:  # a diverged round is never checkpointed: these were written by hand
        e.fail(f"theta holds non-finite values (chain row {bad[0]}); a run checkpoints only finite parameters")
    active = e.tensor("active", record["active"], 1, "int")
    if active.numel() != theta.shape[0] or theta.shape[1] != settings["dim"]:
        e.fail(f"theta has shape {tuple(theta.shape)}; with {active.numel()} active chains and d = {settings['dim']} "
               f"it must be ({active.numel()}, {settings['dim']})")
    e.tensor("generator", record["generator"], 1, "uint8")
    _check_chains(e, active, settings["chains"])
    _check_ledger(e, decode(record["ledger"]), record["step"], record["round"])
    _check_privacy(e, settings)
    problem = e.dict("problem", record["problem"], ("file", "digest", "class", "num_clients", "dim", "weights"))
    if problem["file"] is not None:
        name = e.str("problem['file']", problem["file"])
        if Path(name).name != name or name in ("", ".", ".."):
            e.fail(f"problem['file'] must be a file name beside the checkpoint; got {name!r:.60}")
    e.str("problem['digest']", problem["digest"])
    e.str("problem['class']", problem["class"])
    e.int("problem['num_clients']", problem["num_clients"], 1)
    e.int("problem['dim']", problem["dim"], 1)
    e.tensor("problem['weights']", problem["weights"], 1, "float")
    if record["schedule"] is not None:
        e.dict("schedule", record["schedule"])
    e.str("schedule_repr", record["schedule_repr"])
    for pair in e.list("schedule_probe", record["schedule_probe"]):
        if not (isinstance(pair, list) and len(pair) == 2):
            e.fail(f"schedule_probe must hold [step, step size] pairs; got {pair!r:.60}")
        e.int("schedule_probe step", pair[0])
        e.real("schedule_probe step size", pair[1])
    if record["run"] is not None:
        _check_run(e, record["run"])
        _check_run_chains(e, record["run"], active, settings["chains"])
    return e, settings


#: the ledger's counters every record holds (those added later start at 0 when a file lacks them)
_LEDGER_CORE = ("steps", "rounds", "eta_sum", "eta_max", "uploads")
_LEDGER_INTS = ("steps", "rounds", "map_rounds", "correction_rounds")


def _check_ledger(e: Entries, ledger: Any, step: int, round: int) -> None:
    """The ledger, the record of what the sampler released (privacy accounting reads the whole
    history from it): its counters present, numbers >= 0, and agreeing with the state's step and
    round counters, which advance with them; a record that drops or rewinds it is refused."""
    e.dict("ledger", ledger, _LEDGER_CORE)
    for name, value in ledger.items():
        if name in _LEDGER_INTS:
            e.int(f"ledger[{name!r}]", value, 0)
        else:
            e.real(f"ledger[{name!r}]", value, low=0.0)
    if (ledger["steps"], ledger["rounds"]) != (step, round):
        e.fail(f"the ledger counts {ledger['steps']} local steps and {ledger['rounds']} rounds, but the state is at "
               f"step {step}, round {round}: they advance together, so one of them was altered")
    if ledger["rounds"] > ledger["steps"] or (ledger["steps"] > 0 and not ledger["eta_max"] > 0):
        e.fail(f"the ledger's {ledger['steps']} local steps, {ledger['rounds']} rounds and largest step size "
               f"{ledger['eta_max']:g} contradict each other (every round runs at least one step, of a step size > 0)")
    if ledger["eta_sum"] > ledger["steps"] * ledger["eta_max"] * (1 + 1e-9):
        e.fail(f"the ledger's step-size sum {ledger['eta_sum']:g} exceeds its {ledger['steps']} local steps x its "
               f"largest step size {ledger['eta_max']:g}")


def _check_chains(e: Entries, active: Any, chains: int) -> None:
    """The active chains: distinct indices among the settings' ``chains`` (theta has one row each)."""
    ids = active.tolist()
    if len(set(ids)) != len(ids) or any(not 0 <= c < chains for c in ids):
        e.fail(f"active must hold distinct chain indices in [0, {chains}) (settings['chains'] = {chains}); "
               f"got {ids!r:.80}")


def _check_run_chains(e: Entries, run: dict, active: Any, chains: int) -> None:
    """The unfinished run's chains: distinct indices among ``chains``, ``alive`` positions among them
    naming the active chains, the dropped ones among them."""
    ids, alive = run["chain_ids"].tolist(), run["alive"].tolist()
    if len(set(ids)) != len(ids) or any(not 0 <= c < chains for c in ids):
        e.fail(f"run['chain_ids'] must hold distinct chain indices in [0, {chains}); got {ids!r:.80}")
    if len(set(alive)) != len(alive) or any(not 0 <= a < len(ids) for a in alive):
        e.fail(f"run['alive'] must hold distinct positions in [0, {len(ids)}); got {alive!r:.80}")
    if not run["finished"] and [ids[a] for a in alive] != active.tolist():
        e.fail(f"run['alive'] names the chains {[ids[a] for a in alive]!r:.80}, not the active ones "
               f"{active.tolist()!r:.80}")
    if any(c not in ids for c, _, _ in run["dropped"]):
        e.fail(f"run['dropped'] names chains the run did not start with ({ids!r:.80})")


#: the mechanisms a private run's settings name
_MECHANISMS = {"record": "RecordLevel", "client": "ClientLevel"}


def _check_privacy(e: Entries, settings: dict) -> None:
    """A private run's three settings agree: ``privacy`` (the mechanism's repr), ``adjacency`` and
    ``clip`` (what a resume rebuilds the mechanism from), or none of them says private. A record
    with part of its privacy settings removed or changed is refused, never resumed unclipped."""
    privacy, adjacency, clip = settings.get("privacy", "none"), settings.get("adjacency", ""), settings.get("clip")
    if adjacency == "" and clip is None and privacy == "none":
        return
    if adjacency not in _MECHANISMS:
        e.fail(f"settings['adjacency'] must be 'record', 'client' or '' (not private); got {adjacency!r:.40} "
               f"(with privacy {privacy!r:.60}, clip {clip!r:.20})")
    clip = e.real("settings['clip']", clip, low=0.0, low_open=True)
    if privacy != f"{_MECHANISMS[adjacency]}(clip={clip!r})":
        e.fail(f"settings['privacy'] = {privacy!r:.60} contradicts adjacency {adjacency!r} and clip {clip!r}: the "
               "record of the run's mechanism was altered")


def _check_run(e: Entries, run: Any) -> None:
    """The unfinished run's plan, progress and draws (:meth:`fedlangevin.runner.runs.Run.describe`)."""
    keys = (*_RUN_INTS, "keep_samples", "on_divergence", "checkpoint_every", "chain_ids", "alive", "dropped",
            "uploads", "draws", "stats", "target", "finished")
    e.dict("run", run, keys)
    for name, low in _RUN_INTS.items():
        e.int(f"run[{name!r}]", run[name], low)
    if run["done"] > run["rounds"]:
        e.fail(f"run['done'] = {run['done']} is more than run['rounds'] = {run['rounds']}")
    e.bool("run['keep_samples']", run["keep_samples"])
    e.bool("run['finished']", run["finished"])
    e.str("run['on_divergence']", run["on_divergence"])
    if run["checkpoint_every"] is not None:
        e.int("run['checkpoint_every']", run["checkpoint_every"], 1)
    e.tensor("run['chain_ids']", run["chain_ids"], 1, "int")
    e.tensor("run['alive']", run["alive"], 1, "int")
    for entry in e.list("run['dropped']", run["dropped"]):
        if not (isinstance(entry, list) and len(entry) == 3 and all(isinstance(v, int) for v in entry)):
            e.fail(f"run['dropped'] must hold [chain, round, step] triples of integers; got {entry!r:.60}")
    e.real("run['uploads']", run["uploads"], low=0.0)
    if "setup_floats" in run:
        e.real("run['setup_floats']", run["setup_floats"], low=0.0)
    draws = e.dict("run['draws']", run["draws"], ("kind",))
    kind = e.str("run['draws']['kind']", draws["kind"], ("memory", "disk", "none"))
    if kind == "memory":
        e.dict("run['draws']", draws, ("samples", "rounds"))
        samples = e.tensor("run['draws']['samples']", draws["samples"], 3, "float")
        rounds = e.tensor("run['draws']['rounds']", draws["rounds"], 1, "int")
        if samples.shape[1] != rounds.numel():
            e.fail(f"run['draws'] holds {samples.shape[1]} draws but {rounds.numel()} draw rounds")
    elif kind == "disk":
        e.dict("run['draws']", draws, ("path", "relative", "draws", "crc32"))
        e.str("run['draws']['path']", draws["path"])
        if draws["relative"] is not None:
            e.str("run['draws']['relative']", draws["relative"])
        e.int("run['draws']['draws']", draws["draws"])
        crc = e.dict("run['draws']['crc32']", draws["crc32"], ("samples", "draw_rounds"))
        for key in ("samples", "draw_rounds"):
            e.int(f"run['draws']['crc32'][{key!r}]", crc[key], 0, 2**32 - 1)
    if run["stats"] is not None:
        e.dict("run['stats']", run["stats"])
    if run["target"] is not None:
        target = e.list("run['target']", run["target"])
        if len(target) != 2:
            e.fail(f"run['target'] must be [mean, covariance]; got {len(target)} entries")
        e.tensor("run['target'] mean", target[0], 1, "float")
        e.tensor("run['target'] covariance", target[1], 2, "float")
