"""Training plans: TOML/dict schema -> validated ``Plan`` -> events -> ``Report``.

The format is documented in ``docs/plan-format.md``. Validation is strict: unknown keys are errors
(with a did-you-mean suggestion), every value is range-checked, and every error is a ``ValueError``
whose message starts with the dotted key it is about (``sampling.rate must be in [0, 1], got 1.5``).
Rendering of the result lives in ``metadp.report``.
"""

from __future__ import annotations

import dataclasses
import math
import tomllib
from importlib import resources
from pathlib import Path
from typing import Any, Mapping, Optional, Tuple, Union, cast

from metadp.core.validation import check_count, check_delta, check_positive
from metadp.core import events as ev
from metadp.accounting.allocation import one_pass_comparison
from metadp.accounting.certify import accountant_names, certify, supporting
from metadp.accounting.registry import ACCOUNTANTS
from metadp.accounting.rdp_accountant import UnsupportedEventError
from metadp.citations import CITATIONS
from metadp.banded_noise import banded_lower
from metadp.plan_noise import NoiseSpec, _check_keys, _choice
from metadp.releases import Release, plan_against, plan_release
from metadp.report import Report, build_report
from metadp.units import unit_views
from metadp.sampling import NOT_IN_PLANS, SCHEMES, Guarantee, Sampling, parse_hierarchy
from metadp.amplification.multistage import Hierarchy

__all__ = ["Plan", "SamplingSpec", "NoiseSpec", "load_plan", "loads_plan", "default_plan", "plan_epsilon", "UNITS"]

UNITS = ("record", "task", "group")
_TOP_KEYS = ("name", "description", "unit", "group_size", "relation", "delta", "steps", "epochs", "accountant",
             "references", "sampling", "noise", "hierarchy", "claim", "record_multiplicity", "release", "against")
_SAMPLING_KEYS = ("scheme", "population", "batch_size", "rate", "episodes", "steps_per_pass", "selected", "groups",
                  "participations", "separation")
_CLAIM_KEYS = ("epsilon", "source")


def _table(d: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    value = d.get(key)
    if value is None:
        raise ValueError(f"{key} table is missing (see docs/plan-format.md)")
    if not isinstance(value, Mapping):
        raise ValueError(f"{key} must be a table, got {type(value).__name__}")
    return value


class SamplingSpec:
    """Parses a plan's ``[sampling]`` table into its scheme (``metadp.sampling``: ``Poisson``,
    ``FixedSize``, ``NoSampling``, ``Episodic``, ``Shuffle``), which ``Plan.sampling`` holds."""

    @staticmethod
    def from_dict(d: Mapping[str, Any]) -> Sampling:
        _check_keys(d, _SAMPLING_KEYS, "sampling.")
        if not isinstance(d.get("scheme"), (str, type(None))):
            raise ValueError(f"sampling.scheme must be one of {tuple(SCHEMES)}, got {d.get('scheme')!r}")
        if d.get("scheme") in NOT_IN_PLANS:
            raise ValueError(NOT_IN_PLANS[d["scheme"]])
        return SCHEMES[_choice("sampling.scheme", d.get("scheme"), tuple(SCHEMES))].from_table(d)


@dataclasses.dataclass(frozen=True)
class Plan:
    """A validated training plan. Build with ``Plan.from_dict``, ``load_plan`` or ``default_plan``."""

    name: str
    unit: str
    relation: str
    delta: float
    steps: int
    sampling: Sampling  # the scheme (metadp.sampling), with the hierarchy it draws through
    noise: NoiseSpec
    accountant: str = "all"  # rdp | pld | all (every accountant that handles the plan; tightest reported)
    description: str = ""
    references: Tuple[str, ...] = ()
    claim: Optional[Mapping[str, Any]] = None
    group_size: Optional[int] = None  # unit = group: records (or tasks) protected together
    hierarchy: Optional[Hierarchy] = None  # how episodes (tasks) are drawn from records, top level first
    # unit = task over a fixed population: each record is in at most this many of its tasks (the record level is
    # then reported beside the task level; a training run's pool declares it, ``metadp train --save-plan``)
    record_multiplicity: Optional[int] = None
    # what each sampled task contributes (metadp.releases; None: task_clip, each task's contribution clipped)
    release: Optional[Release] = None
    against: Optional[str] = None  # "server": the record's guarantee against the server (release.form local_noise)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "Plan":
        if not isinstance(d, Mapping):
            raise ValueError(f"a plan must be a table/dict, got {type(d).__name__}")
        _check_keys(d, _TOP_KEYS, "")
        sampling = SamplingSpec.from_dict(_table(d, "sampling"))
        noise = NoiseSpec.from_dict(_table(d, "noise"))
        if "delta" not in d:
            raise ValueError("delta is required (the target delta, in (0, 1))")
        delta = check_delta("delta", d["delta"])
        if "unit" not in d:
            raise ValueError("unit is required: whom the guarantee protects, one of " + ", ".join(UNITS)
                             + " (never implied, DESIGN.md sec. 2)")
        unit = _choice("unit", d["unit"], UNITS)
        group_size = _group_size(d, unit)
        hierarchy = _hierarchy(d, sampling, noise, unit)
        if hierarchy is None and "clipping" in d["noise"]:
            raise ValueError("noise.clipping applies to plans with [[hierarchy]] levels (how a record's appearances "
                             "in episodes move the sum); remove it or add the hierarchy")
        if hierarchy is not None:
            sampling = dataclasses.replace(cast(Any, sampling), hierarchy=hierarchy)  # (a scheme that has one)
        relation = _choice("relation", d.get("relation", sampling.relation), ("add_remove", "substitute"))
        if relation not in sampling.relations:
            raise ValueError(f"relation must be '{sampling.relations[0]}' for sampling.scheme = "
                             f"'{sampling.scheme}'{sampling.relation_note}")
        steps = _steps(d, sampling)
        accountant = _choice("accountant", d.get("accountant", "all"), tuple(ACCOUNTANTS) + ("all",))
        references = d.get("references", ())
        if isinstance(references, str) or not isinstance(references, (list, tuple)):
            raise ValueError(f"references must be a list of citation keys, got {type(references).__name__}")
        references = tuple(references)
        for key in references:
            if not isinstance(key, str):
                raise ValueError(f"references must hold citation keys (strings), got {key!r}")
            if key not in CITATIONS:
                raise ValueError(f"references contains unknown citation key {key!r}")
        multiplicity = _record_multiplicity(d, unit, sampling, noise, hierarchy)
        release = plan_release(d, noise, multiplicity)
        against = plan_against(d, unit, release)
        if release is not None and relation != sampling.relation:
            raise ValueError(f"relation must be '{sampling.relation}' with release.form = '{release.form}' (the "
                             "release's guarantees are derived under the scheme's own relation)")
        claim = d.get("claim")
        if claim is not None and not isinstance(claim, Mapping):
            raise ValueError(f"claim must be a table with keys {', '.join(_CLAIM_KEYS)}, got {claim!r}")
        if claim is not None:
            _check_keys(claim, _CLAIM_KEYS, "claim.")
            if "epsilon" in claim:
                check_positive("claim.epsilon", claim["epsilon"])
        name = d.get("name", "unnamed plan")
        if not isinstance(name, str):
            raise ValueError(f"name must be a string, got {name!r}")
        plan = cls(name=name, unit=unit, relation=relation, delta=delta, steps=steps, sampling=sampling,
                   noise=noise, accountant=accountant, description=str(d.get("description", "")),
                   references=references, claim=dict(claim) if claim else None, group_size=group_size,
                   hierarchy=hierarchy, record_multiplicity=multiplicity, release=release, against=against)
        plan._check_supported()
        return plan

    def _check_supported(self) -> None:
        """Rejects, at load time, a mechanism/sampling combination the accountant cannot analyse."""
        primary = unit_views(self)[0]
        if not primary.events:  # no guarantee (its report says why): nothing for an accountant to support
            return
        ok, refused = supporting(primary.events, primary.relation, self.accountant)
        if not ok:
            raise ValueError(f"the {self.accountant} accountant(s) cannot certify this plan (noise.mechanism = "
                             f"'{self.noise.mechanism}', sampling.scheme = '{self.sampling.scheme}'): "
                             f"{'; '.join(f'{name}: {why}' for name, why in refused)}")

    def step_event(self) -> ev.Event:
        """The event of one training step for one task/record (as sampled; no group or episodic view)."""
        return self.sampling.step_event(self.noise.event())

    def units(self) -> Tuple[Guarantee, ...]:
        """Every meaningful unit's view of this plan, its own unit first (``metadp.units``)."""
        return unit_views(self)

    def event(self) -> ev.Event:
        """The event of the whole plan for its own unit: its guarantee's event composed over its charges
        (``steps`` steps, or the passes of shuffled sampling; a group's event for ``unit = 'group'``).

        Raises:
            ValueError: where the plan's bound is the worst of several events (the record level of episodic
                sampling: ``plan_epsilon`` takes the worst) or there is none.
        """
        g = self.units()[0]
        if g.event is None or g.alternatives:
            raise ValueError(f"the {g.unit}-level bound of this plan (sampling.scheme = '{self.sampling.scheme}') is "
                             "the worst of several events, not one event: use plan_epsilon")
        return ev.SelfComposed(g.event, cast(int, g.steps))  # (a plan's views count their charges)


MAX_GROUP_SIZE = 10**5  # the largest group_size a plan may declare (_group_size)


def _group_size(d: Mapping[str, Any], unit: str) -> Optional[int]:
    if unit == "group":
        if "group_size" not in d:
            raise ValueError("group_size is required for unit = 'group' (the number of units protected together)")
        size = check_count("group_size", d["group_size"], minimum=2, maximum=ev.MAX_COUNT)
        if size > MAX_GROUP_SIZE:  # the sampled schemes' group bounds hold a term per group member (k + 1 of them)
            raise ValueError(f"group_size must be at most {MAX_GROUP_SIZE:,}, got {size:,}: the group bounds of sampled "
                             "plans sum over how many of the group's units a step samples (a term for each of 0..k), "
                             "and a group this large is better declared as a unit of its own (unit = 'task', or a "
                             "coarser unit in [hierarchy])")
        return size
    if "group_size" in d:
        raise ValueError("group_size applies only to unit = 'group'")
    return None


def _record_multiplicity(d: Mapping[str, Any], unit: str, sampling: Sampling, noise: NoiseSpec,
                         hierarchy: Optional[Hierarchy]) -> Optional[int]:
    """``record_multiplicity``: in how many tasks of a fixed population one record is at most (unit = task or
    record, clipped sums, no [[hierarchy]], which draws fresh episodes instead)."""
    if "record_multiplicity" not in d:
        return None
    k = check_count("record_multiplicity", d["record_multiplicity"], minimum=1, maximum=ev.MAX_COUNT)
    if unit not in ("task", "record"):
        raise ValueError("record_multiplicity applies to unit = 'task' or 'record' (records shared between the tasks "
                         "of the population; both levels are reported)")
    if hierarchy is not None:
        raise ValueError("record_multiplicity describes a fixed pool of tasks; with [[hierarchy]] levels every task "
                         "is a fresh episode and the levels give the record level: give one of them")
    if noise.mechanism == "laplace":
        raise ValueError("record_multiplicity needs noise.mechanism = 'gaussian' (a clipped sum with Gaussian noise)")
    if getattr(sampling, "population", None) is None:
        raise ValueError("record_multiplicity needs sampling.population (the fixed pool of tasks)")
    return k


def _hierarchy(d: Mapping[str, Any], sampling: Sampling, noise: NoiseSpec, unit: str) -> Optional[Hierarchy]:
    if "hierarchy" not in d:
        if sampling.hierarchy_use == "episodes":
            raise ValueError(f"sampling.scheme = '{sampling.scheme}' needs the [[hierarchy]] levels (how an episode "
                             "is drawn)")
        return None
    if sampling.hierarchy_use is None:
        raise ValueError("[[hierarchy]] applies to sampling.scheme = 'episodic', or to 'poisson'/'fixed' task "
                         "sampling (how each task is drawn from records)")
    if sampling.hierarchy_use == "tasks" and unit != "task":
        raise ValueError("[[hierarchy]] with task sampling describes how tasks are built from records: it needs "
                         "unit = 'task' (the record-level guarantee is then reported beside it)")
    if unit == "group":
        raise ValueError("unit = 'group' is not available with episodic sampling")
    if noise.mechanism != "gaussian":
        raise ValueError("episodic accounting needs noise.mechanism = 'gaussian'")
    return parse_hierarchy(d["hierarchy"])


def _steps(d: Mapping[str, Any], sampling: Sampling) -> int:
    if "steps" in d and "epochs" in d:
        raise ValueError("steps and epochs are mutually exclusive: give one")
    if "epochs" in d:
        return sampling.steps_for_epochs(d["epochs"])
    if "steps" in d:
        return check_count("steps", d["steps"], maximum=ev.MAX_COUNT)
    raise ValueError("steps (or epochs) is required")


def load_plan(source: Union[str, Path]) -> Plan:
    """Loads a plan from a TOML file.

    Args:
        source: the file's path (a ``Path`` or a string). For backward compatibility, a string that
            contains a newline is read as TOML text (no file name has one); prefer ``loads_plan`` for
            text. Any other string is a path, even one containing '=' (``metadp plan "a=b.toml"``).

    Raises:
        ValueError: naming the file, if it is missing, not a file, unreadable or not UTF-8 text, and
            as ``loads_plan`` for its content.
    """
    if isinstance(source, str) and "\n" in source:
        return loads_plan(source)
    if not isinstance(source, (str, Path)):
        raise ValueError(f"plan file must be a path (str or pathlib.Path), got {type(source).__name__}")
    path = Path(source)
    if not path.exists():
        raise ValueError(f"plan file {str(path)!r} does not exist")
    if not path.is_file():
        raise ValueError(f"plan file {str(path)!r} is not a file (a TOML plan file is expected)")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise ValueError(f"plan file {str(path)!r} is not UTF-8 text (a TOML plan file is expected)") from None
    except OSError as err:
        raise ValueError(f"plan file {str(path)!r} cannot be read: {err.strerror or err}") from None
    return loads_plan(text, origin=str(path))


def loads_plan(text: str, *, origin: str = "<text>") -> Plan:
    """Parses a plan from TOML text (``origin`` names it in error messages)."""
    if not isinstance(text, str):
        raise ValueError(f"plan text must be a str, got {type(text).__name__}")
    if not text.strip():
        raise ValueError(f"plan {origin} is empty")
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        raise ValueError(f"plan {origin} is not valid TOML: {err}") from None
    except RecursionError:  # tomllib recurses per nested array or table: a plan nests two levels
        raise ValueError(f"plan {origin} nests arrays or tables too deeply to read (thousands of levels; a plan "
                         "nests two)") from None
    return Plan.from_dict(data)


def default_plan() -> Plan:
    """Task-level DP-MAML on Omniglot (dp-maml.txt Sec. 6): 400,000 tasks, lot 1,600, z = 1, 250 steps."""
    text = resources.files("metadp").joinpath("data/default_plan.toml").read_text(encoding="utf-8")
    return loads_plan(text, origin="<built-in default plan>")


def plan_epsilon(plan: Plan, accountant: Optional[str] = None, *, max_seconds: Optional[float] = None,
                 charges: Optional[Mapping[str, int]] = None) -> Report:
    """Certified (epsilon, delta) of ``plan`` with its assumptions, citations and warnings.

    Args:
        plan: the plan.
        accountant: ``"rdp"``, ``"pld"`` or ``"all"`` (every accountant that handles the plan; the
            report's epsilon is the tightest upper bound and lists the others); default: the plan's.
        max_seconds: the PLD accountant's refinement time budget (``PldAccountant.max_seconds``);
            None: its default. ``math.inf`` refines to the tolerance or the point budget only, so the
            number does not depend on the machine's speed (``metadp calibrate`` reports with it).
        charges: a run's charges by view key (``Guarantee.key``) where they replace the plan's count: the
            visits of the worst record that a training run made (at most the plan's a-priori count).
    """
    if not isinstance(plan, Plan):
        raise ValueError(f"plan must be a metadp Plan, got {type(plan).__name__}")
    name = accountant or plan.accountant
    names = accountant_names(name)
    views = unit_views(plan)
    if charges:
        views = tuple(dataclasses.replace(v, steps=charges[v.key]) if v.key in charges else v for v in views)
    primary, others = views[0], views[1:]
    found = certify(primary.events or (ev.NonPrivate(),), plan.delta, steps=cast(int, primary.steps),  # (a plan's)
                    relation=primary.relation, accountant=names, max_seconds=max_seconds)
    best = found.tightest
    if not primary.events:  # no guarantee: epsilon infinite, and the report says why
        best = dataclasses.replace(best, notes=tuple(best.notes) + (f"no {primary.key}-level guarantee: "
                                                                    f"{primary.reason}",))
    own_lower = None
    if plan.record_multiplicity is None and primary.events:  # the sampler's own bound is for the plain unit's event
        own_lower = plan.sampling.epsilon_lower(plan.unit, plan.relation, plan.noise.event(), plan.steps, plan.delta)
    if plan.noise.correlation == "banded":  # where the event's lower end is not the mechanism's (banded_lower)
        lowered = banded_lower(plan)
        if lowered is not None:
            attained, note = lowered
            lows = [0.0] if attained is None else [
                c.epsilon_lower for c in certify((attained[0],), plan.delta, steps=attained[1], relation=plan.relation,
                                                 accountant=names, max_seconds=max_seconds).certificates
                if c.epsilon_lower is not None]  # the best lower end any accountant gives (RDP gives none)
            best = dataclasses.replace(best, epsilon_lower=min(max(lows), best.epsilon) if lows else None,
                                       notes=tuple(best.notes) + ((note,) if note else ()))
            own_lower = None
    loose = plan.sampling.loose_event  # the accountant's lower ends are for a looser event than the sampler's
    if loose and own_lower is None and best.epsilon_lower is not None:
        best = dataclasses.replace(best, epsilon_lower=None, notes=tuple(best.notes) + (
            f"no certified lower bound: the accountant bounds the {plan.sampling.scheme} sampler by a looser event, "
            "whose lower end the sampler need not reach; the scheme's own lower bound is for the plan's unit over "
            "whole passes (no record_multiplicity, no group, a population of whole batches)",))
    if own_lower is not None:
        # the one-pass schemes: a lower bound on the sampler's own epsilon; an accountant's lower end is one for
        # the (looser) event it was given, not for the sampler, so it is replaced
        best = dataclasses.replace(best, epsilon_lower=own_lower, notes=tuple(best.notes) + one_pass_comparison(
            plan.sampling, plan.relation, plan.noise.event(), plan.steps, plan.delta, min(own_lower, best.epsilon),
            best.epsilon))
    other_units, unbounded = [], []
    for view in others:
        if not view.events:  # this unit has no bound implemented: the report says so, never omits it silently
            unbounded.append(f"{view.unit}-level: no guarantee is certified ({view.reason})")
            continue
        try:
            other = certify(view.events, plan.delta, steps=cast(int, view.steps), relation=view.relation,
                            accountant=names, max_seconds=max_seconds).tightest
        except UnsupportedEventError:
            continue
        other_units.append(view.certified(other.epsilon, None if loose else other.epsilon_lower, other.accountant,
                                          other.notes).other_unit())
    alternatives = found.certificates if name == "all" else ()
    if loose:  # each accountant's lower end is for the looser event too
        alternatives = tuple(dataclasses.replace(c, epsilon_lower=None) for c in alternatives)
    return build_report(plan, best, alternatives=alternatives, view=primary,
                        other_units=other_units, unbounded=unbounded)


def check_plan_certifies(plan: Plan) -> None:
    """Refuses (ValueError), before a run loads data or trains a step, a plan whose guarantee is degenerate:
    one step of its unit's event already has no finite epsilon at the plan's delta (RDP, which bounds every
    noise level; the PLD accountant refuses noise below 1e-50), so no run of it could report one."""
    view = unit_views(plan)[0]
    try:
        epsilon = certify(view.events, plan.delta, relation=view.relation, accountant="rdp").epsilon
    except UnsupportedEventError:
        return  # no RDP bound for this event: the plan's own accountant decides, and the report says what it finds
    if not math.isfinite(epsilon):
        noise = plan.noise.multiplier if plan.noise.multiplier is not None else plan.noise.scale
        raise ValueError(f"the plan certifies no finite epsilon: one step at noise {noise:g} already has epsilon = "
                         f"infinity at delta {plan.delta:g}, so a run would spend its data for no guarantee; raise "
                         "[noise] in the plan (metadp calibrate solves it for a target), or train a non-private "
                         "algorithm (maml, reptile) if no guarantee is wanted")
