"""Training plans: TOML/dict schema -> validated ``Plan`` -> events -> ``Report``.

The format is documented in ``docs/plan-format.md``. Validation is strict: unknown keys are errors
(with a did-you-mean suggestion), every value is range-checked, and every error is a ``ValueError``
whose message starts with the dotted key it is about (``sampling.rate must be in [0, 1], got 1.5``).
Rendering of the result lives in ``metadp.report``.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import tomllib
from importlib import resources
from pathlib import Path
from typing import Any, Mapping, Optional, Tuple, Union

from metadp._validation import check_count, check_delta, check_positive, check_probability
from metadp.accounting import events as ev
from metadp.accounting.calibration import ACCOUNTANTS
from metadp.accounting.rdp_accountant import UnsupportedEventError
from metadp.citations import CITATIONS
from metadp.report import Report, build_report

__all__ = ["Plan", "SamplingSpec", "NoiseSpec", "load_plan", "default_plan", "plan_epsilon", "UNITS"]

UNITS = ("record", "task")
SCHEMES = ("poisson", "fixed", "none")
MECHANISMS = ("gaussian", "laplace")
_TOP_KEYS = ("name", "description", "unit", "relation", "delta", "steps", "epochs", "accountant",
             "references", "sampling", "noise", "claim")
_SAMPLING_KEYS = ("scheme", "population", "batch_size", "rate")
_NOISE_KEYS = ("mechanism", "multiplier", "scale")
_CLAIM_KEYS = ("epsilon", "source")
_PLANNED_KEYS = {
    "group_size": "group privacy arrives with the amplification module (DESIGN.md sec. 3.8)",
    "hierarchy": "episodic multistage sampling arrives with the amplification module (DESIGN.md sec. 3.6)",
}


def _check_keys(table: Mapping, allowed: Tuple[str, ...], prefix: str) -> None:
    for key in table:
        if key not in allowed:
            close = difflib.get_close_matches(str(key), allowed, n=1)
            hint = f"; did you mean '{close[0]}'?" if close else f"; allowed keys: {', '.join(allowed)}"
            raise ValueError(f"{prefix}{key} is not a known plan key{hint}")


def _choice(name: str, value, allowed: Tuple[str, ...]) -> str:
    if value not in allowed:
        close = difflib.get_close_matches(str(value), allowed, n=1)
        hint = f"; did you mean '{close[0]}'?" if close else ""
        raise ValueError(f"{name} must be one of {', '.join(allowed)}, got {value!r}{hint}")
    return value


def _table(d: Mapping, key: str) -> Mapping:
    value = d.get(key)
    if value is None:
        raise ValueError(f"{key} table is missing (see docs/plan-format.md)")
    if not isinstance(value, Mapping):
        raise ValueError(f"{key} must be a table, got {type(value).__name__}")
    return value


@dataclasses.dataclass(frozen=True)
class SamplingSpec:
    """How units are chosen for each step."""

    scheme: str  # poisson | fixed | none
    population: Optional[int] = None  # units available for sampling
    batch_size: Optional[int] = None  # expected (poisson) or exact (fixed) units per step
    rate: Optional[float] = None  # poisson: inclusion probability (derived from batch_size if absent)

    @classmethod
    def from_dict(cls, d: Mapping) -> "SamplingSpec":
        _check_keys(d, _SAMPLING_KEYS, "sampling.")
        scheme = _choice("sampling.scheme", d.get("scheme"), SCHEMES)
        population = d.get("population")
        batch = d.get("batch_size")
        rate = d.get("rate")
        if population is not None:
            population = check_count("sampling.population", population, minimum=1)
        if batch is not None:
            batch = check_count("sampling.batch_size", batch, minimum=0)
            if population is not None and batch > population:
                raise ValueError(f"sampling.batch_size must be <= sampling.population ({population}), got {batch}")
        if rate is not None:
            rate = check_probability("sampling.rate", rate)
        if scheme == "none":
            if rate is not None or batch is not None:
                raise ValueError("sampling.rate and sampling.batch_size do not apply to sampling.scheme = 'none'")
            return cls(scheme, population, None, 1.0)
        if scheme == "fixed":
            if rate is not None:
                raise ValueError("sampling.rate does not apply to sampling.scheme = 'fixed': give batch_size and population")
            if batch is None or population is None:
                raise ValueError("sampling.batch_size and sampling.population are required for sampling.scheme = 'fixed'")
            return cls(scheme, population, batch, batch / population)
        if rate is not None and batch is not None:
            raise ValueError("sampling.rate and sampling.batch_size are mutually exclusive: give one")
        if rate is None:
            if batch is None or population is None:
                raise ValueError("sampling.rate, or sampling.batch_size with sampling.population, is required for 'poisson'")
            rate = batch / population
        return cls(scheme, population, batch, rate)


@dataclasses.dataclass(frozen=True)
class NoiseSpec:
    """The mechanism applied to each step's (clipped) sum."""

    mechanism: str  # gaussian | laplace
    multiplier: Optional[float] = None  # gaussian: sigma / clip norm
    scale: Optional[float] = None  # laplace: b / L1 sensitivity

    @classmethod
    def from_dict(cls, d: Mapping) -> "NoiseSpec":
        _check_keys(d, _NOISE_KEYS, "noise.")
        mechanism = _choice("noise.mechanism", d.get("mechanism", "gaussian"), MECHANISMS)
        if mechanism == "gaussian":
            if "scale" in d:
                raise ValueError("noise.scale applies to the laplace mechanism; use noise.multiplier for gaussian")
            if "multiplier" not in d:
                raise ValueError("noise.multiplier is required for the gaussian mechanism")
            return cls(mechanism, multiplier=check_positive("noise.multiplier", d["multiplier"]))
        if "multiplier" in d:
            raise ValueError("noise.multiplier applies to the gaussian mechanism; use noise.scale for laplace")
        if "scale" not in d:
            raise ValueError("noise.scale is required for the laplace mechanism")
        return cls(mechanism, scale=check_positive("noise.scale", d["scale"]))

    def event(self) -> ev.Event:
        if self.mechanism == "gaussian":
            return ev.Gaussian(self.multiplier)
        return ev.Laplace(self.scale)


@dataclasses.dataclass(frozen=True)
class Plan:
    """A validated training plan. Build with ``Plan.from_dict``, ``load_plan`` or ``default_plan``."""

    name: str
    unit: str
    relation: str
    delta: float
    steps: int
    sampling: SamplingSpec
    noise: NoiseSpec
    accountant: str = "all"  # rdp | pld | all (every accountant that handles the plan; tightest reported)
    description: str = ""
    references: Tuple[str, ...] = ()
    claim: Optional[Mapping[str, Any]] = None

    @classmethod
    def from_dict(cls, d: Mapping) -> "Plan":
        if not isinstance(d, Mapping):
            raise ValueError(f"a plan must be a table/dict, got {type(d).__name__}")
        for key in _PLANNED_KEYS:
            if key in d:
                raise ValueError(f"{key} is not available yet: {_PLANNED_KEYS[key]}")
        _check_keys(d, _TOP_KEYS, "")
        sampling = SamplingSpec.from_dict(_table(d, "sampling"))
        noise = NoiseSpec.from_dict(_table(d, "noise"))
        if "delta" not in d:
            raise ValueError("delta is required (the target delta, in (0, 1))")
        delta = check_delta("delta", d["delta"])
        if "unit" not in d:
            raise ValueError("unit is required: whom the guarantee protects, one of " + ", ".join(UNITS)
                             + " (never implied, DESIGN.md sec. 2)")
        if d["unit"] == "group":
            raise ValueError("unit = 'group' is not available yet: " + _PLANNED_KEYS["group_size"])
        unit = _choice("unit", d["unit"], UNITS)
        default_relation = "substitute" if sampling.scheme == "fixed" else "add_remove"
        relation = _choice("relation", d.get("relation", default_relation), ("add_remove", "substitute"))
        if sampling.scheme == "fixed" and relation != "substitute":
            raise ValueError("relation must be 'substitute' for sampling.scheme = 'fixed' (fixed-size sampling "
                             "is analysed under substitution, Balle, Barthe & Gaboardi 2018)")
        if sampling.scheme == "poisson" and relation != "add_remove":
            raise ValueError("relation must be 'add_remove' for sampling.scheme = 'poisson'")
        steps = _steps(d, sampling)
        accountant = _choice("accountant", d.get("accountant", "all"), tuple(ACCOUNTANTS) + ("all",))
        references = tuple(d.get("references", ()))
        for key in references:
            if key not in CITATIONS:
                raise ValueError(f"references contains unknown citation key {key!r}")
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
                   references=references, claim=dict(claim) if claim else None)
        plan._check_supported()
        return plan

    def _check_supported(self) -> None:
        """Rejects, at load time, a mechanism/sampling combination the accountant cannot analyse."""
        names = tuple(ACCOUNTANTS) if self.accountant == "all" else (self.accountant,)
        errors = []
        for name in names:
            try:
                ACCOUNTANTS[name](relation=self.relation).compose(self.step_event())
            except UnsupportedEventError as err:
                errors.append(f"{name}: {err}")
        if len(errors) == len(names):
            raise ValueError(f"noise.mechanism = '{self.noise.mechanism}' with sampling.scheme = "
                             f"'{self.sampling.scheme}' is not supported by the {self.accountant} accountant(s) "
                             f"({'; '.join(errors)})")

    def step_event(self) -> ev.Event:
        """The event of one training step."""
        inner = self.noise.event()
        if self.sampling.scheme == "poisson":
            return ev.PoissonSampled(self.sampling.rate, inner)
        if self.sampling.scheme == "fixed":
            return ev.FixedSizeSampled(self.sampling.batch_size, self.sampling.population, inner)
        return inner

    def event(self) -> ev.Event:
        """The event of the whole plan: ``steps`` compositions of the step event."""
        return ev.SelfComposed(self.step_event(), self.steps)


def _steps(d: Mapping, sampling: SamplingSpec) -> int:
    if "steps" in d and "epochs" in d:
        raise ValueError("steps and epochs are mutually exclusive: give one")
    if "steps" in d:
        return check_count("steps", d["steps"])
    if "epochs" in d:
        epochs = check_positive("epochs", d["epochs"])
        if sampling.scheme == "none":
            return check_count("epochs", epochs)
        expected = sampling.batch_size if sampling.batch_size is not None else (
            sampling.rate * sampling.population if sampling.population else None)
        if not expected or not sampling.population:
            raise ValueError("epochs needs sampling.population and sampling.batch_size (or rate) to count steps")
        return int(math.ceil(epochs * sampling.population / expected - 1e-9))
    raise ValueError("steps (or epochs) is required")


def load_plan(source: Union[str, Path]) -> Plan:
    """Loads a plan from a TOML file path, or from TOML text if ``source`` contains a newline or '='."""
    if isinstance(source, Path) or ("\n" not in str(source) and "=" not in str(source)):
        path = Path(source)
        if not path.is_file():
            raise ValueError(f"plan file {str(path)!r} does not exist or is not a file")
        text = path.read_text(encoding="utf-8")
        origin = str(path)
    else:
        text, origin = str(source), "<text>"
    if not text.strip():
        raise ValueError(f"plan {origin} is empty")
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        raise ValueError(f"plan {origin} is not valid TOML: {err}") from None
    return Plan.from_dict(data)


def default_plan() -> Plan:
    """Task-level DP-MAML on Omniglot (dp-maml.txt Sec. 6): 400,000 tasks, lot 1,600, z = 1, 250 steps."""
    text = resources.files("metadp").joinpath("data/default_plan.toml").read_text(encoding="utf-8")
    return load_plan(text)


def plan_epsilon(plan: Plan, accountant: Optional[str] = None) -> Report:
    """Certified (epsilon, delta) of ``plan`` with its assumptions, citations and warnings.

    Args:
        plan: the plan.
        accountant: ``"rdp"``, ``"pld"`` or ``"all"`` (every accountant that handles the plan; the
            report's epsilon is the tightest upper bound and lists the others); default: the plan's.
    """
    if not isinstance(plan, Plan):
        raise ValueError(f"plan must be a metadp Plan, got {type(plan).__name__}")
    name = accountant or plan.accountant
    names = tuple(ACCOUNTANTS) if name == "all" else (name,)
    if name != "all" and name not in ACCOUNTANTS:
        raise ValueError(f"accountant must be one of {tuple(ACCOUNTANTS) + ('all',)}, got {name!r}")
    results = []
    for n in names:
        acc = ACCOUNTANTS[n](relation=plan.relation)
        try:
            acc.compose(plan.step_event(), plan.steps)
        except UnsupportedEventError:
            if name != "all":
                raise
            continue
        if n == "pld":
            bounds = acc.get_epsilon_bounds(plan.delta)
            results.append((acc, bounds.epsilon_upper, math.nan, bounds.epsilon_lower, bounds.notes))
        else:
            epsilon, order = acc.get_epsilon_and_order(plan.delta)
            results.append((acc, epsilon, order, None, ()))
    best = min(results, key=lambda r: r[1])
    acc, epsilon, order, lower, notes = best
    return build_report(plan, epsilon, order, acc, epsilon_lower=lower, notes=notes,
                        alternatives=[(r[0].name, r[1], r[3]) for r in results] if name == "all" else ())
