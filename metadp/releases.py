"""What each sampled task contributes to a step's release, and the guarantees that follow: who each form
protects, against whom, and the event the accountant composes for it (a plan's ``[release]`` table;
every training algorithm is one form, ``metadp.training.algorithms``).

Forms (``Release.form``):

* ``task_clip``: each task's contribution (its meta-gradient) is clipped to C and the sum carries
  Gaussian noise z C (DP-MAML Alg. 1, DP-AGR). The default: a plan without ``[release]``.
* ``example_clip``: a DP inner loop (S steps, multiplier z_in) and per-example clipped query gradients
  (m_q a task) summed, noise z C on the sum (sample-level DP-MAML, dp-maml.txt Alg. 2).
* ``local_noise``: as ``example_clip`` inside each task, whose noisy update the server then clips per
  task and noises as ``task_clip`` does (DP-AGRLR, dp-fedmeta.txt Alg. 2-3); the record also has a
  guarantee against the server, which sees each update (``against = "server"``).
* ``inner_dp``: full-batch DP-SGD inside each task (S steps, z_in) and no central noise (task-global
  DP-Reptile): a record guarantee against the meta-learner, none for the task.

A *view* is one guarantee of a run: a unit (a task or client, or one record), a neighbouring relation,
an adversary, and the event charged per step, per pass or per visit. The trainer keeps one
hash-chained ledger per view, stops when the view the user chose (``--unit``) reaches its budget, and
reports every view at the end (DESIGN.md sec. 4: "a record's report and a task's report are both
produced wherever both are meaningful"). Pure accounting: no torch. Each algorithm's views are built
from these pieces by :func:`release_views`; a training algorithm names its form (``metadp.training.algorithms``).

How each event is derived (C: clipping threshold, z: noise multiplier of the released sum):

* **task / client, central noise** (DP-MAML Alg. 1, DP-AGR, DP-AGRLR's server): a task's clipped
  contribution moves the noisy sum by at most C (add/remove). Poisson sampling at rate q:
  ``PoissonSampled(q, Gaussian(z))`` per step (Mironov, Talwar & Zhang 2019); fixed-size batches:
  ``FixedSizeSampled`` under substitution only (Balle, Barthe & Gaboardi 2018); one pass (each task in
  one uniformly random step of a pass): ``RandomAllocation(steps_per_pass, Gaussian(z))`` per pass, as a
  ``balls_in_bins`` plan charges it (DESIGN.md 3.9(a); the RDP and PLD bounds of
  ``amplification.allocation_bounds`` and ``accounting.allocation_pld``, the smaller).
  Sample-level DP-MAML: a task's per-example-clipped query sum moves by at most m_q C, so
  ``Gaussian(z / m_q)`` in the same forms.
* **record, central noise**: a record sits in k of the pool's tasks (k = the largest multiplicity of
  any record). In a step, J ~ Bin(k, q) of them are sampled. Removing the record changes the content
  of those tasks, which stay in the pool: the two outputs are mixtures over the sampled set S of
  N(a_S + sum_{i in S} g_i) and N(a_S + sum_{i in S} g'_i), whose common part a_S depends on S, so
  the add/remove pair "mixture vs N(0)" does not apply. Revealing which of the record's tasks were
  sampled (the accountant may grant itself this: the true output is a marginal) leaves a Gaussian
  whose shift is at most J s noise standard deviations, s the shift of one appearance:
  ``EpisodicSampled(k, q, 1, Gaussian(1 / s), shift=1)`` (``metadp.mechanisms.episodic``, J revealed).
  This is valid but loose: task sampling then amplifies delta, not epsilon. Per-task clipping: the task
  exists either way, so s = 2 / z (DESIGN.md 3.7); there, with Poisson sampling and the record in one
  task (k = 1), both contributions lie in the C-ball around the not-sampled output 0, and the record
  view is the pool-substitution pair ``PoolSubstitution(q, Gaussian(z))`` (``metadp.mechanisms.pooled``,
  proved there; task sampling now amplifies epsilon too): at q = 0.0032, z = 1, 1,000 steps, delta = 1e-5
  the record has <= 1.871 where the revealed pair gave 37.55 and the add/remove task view 0.5327
  (``_central_record(plan, 2 / z, 1)`` keeps the revealed one for comparison). k > 1 keeps the revealed
  pair, and so does sample-level DP-MAML (per-example clipping: no C-ball around the not-sampled
  output). Sample-level DP-MAML (Alg. 2), with S inner steps (inner multiplier z_in) and m_q query
  examples per task: a query appearance moves the outer sum by C (1 / z); a support appearance costs
  the S inner Gaussians (sqrt(S) / z_in) and, with **second-order** meta-gradients only, also moves each
  of the task's m_q clipped query gradients by up to 2 C (the inner update's Jacobian holds the
  record's Hessian without noise; ``metadp.training.algorithms.private_steps``). With K_s support and K_q
  query appearances (K_s + K_q = J) the squared shift K_s a + (b K_s + K_q)^2 / z^2 is at most
  J^2 s^2 with s^2 = max(S / z_in^2, 1 / z^2) (first order) or S / z_in^2 + (2 m_q / z)^2 (second).
  One pass: the k appearances may share a step, ``Gaussian(1 / (k s))`` per pass.
* **record, local noise, against the party that sees each task's update** (DP-AGRLR against the
  server; task-global DP-Reptile against the meta-learner, dp-meta-learning-task-global.txt Sec. 2.4):
  that party knows which tasks it talked to, so sampling gives no amplification; each visit of a
  task containing the record costs ``Gaussian(1 / s)`` with s^2 = S / z_in^2 (DP-Reptile, full-batch
  DP-SGD), max(S, 1) / z_0^2 (DP-AGRLR first order) or (S + 4 m_q^2) / z_0^2 (second order), composed
  over the record's realised visits (the largest over records: sampling does not depend on the data).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Dict, Mapping, Optional, Tuple

from metadp.core import events as ev
from metadp.core.validation import check_count, check_positive
from metadp.plan_noise import NoiseSpec
from metadp.sampling import Guarantee, Sampling
from metadp.sampling.guarantee import EVERYONE


__all__ = ["Release", "FORMS", "release_views", "noise_keys", "plan_release", "plan_against", "REFS"]

FORMS = ("task_clip", "example_clip", "local_noise", "inner_dp")
"""The forms a release takes (module docstring); ``task_clip`` is a plan's default."""

_INNER = ("example_clip", "local_noise", "inner_dp")  # forms with a DP inner loop (inner_steps, inner_noise)
_QUERY = ("example_clip", "local_noise")  # forms with per-example clipped query gradients (query_per_task)
_KEYS = ("form", "inner_steps", "inner_noise", "query_per_task", "first_order")

REFS = {
    "local": "Gaussian mechanism per visit, composed over the record's realised visits (no amplification "
             "against a party that knows whom it talked to)",
}


@dataclasses.dataclass(frozen=True)
class Release:
    """What each sampled task contributes to one step's release (module docstring; a plan's ``[release]``).

    Attributes:
        form: one of ``FORMS``.
        inner_steps: S, the DP inner loop's steps (forms with one).
        inner_noise: z_in, the inner loop's noise multiplier (forms with one).
        query_per_task: m_q, per-example clipped query gradients a task (``example_clip``, ``local_noise``).
        first_order: first-order meta-gradients (second order: a support record also moves the task's query
            gradients through the un-noised inner Jacobian).
    """

    form: str = "task_clip"
    inner_steps: int = 1
    inner_noise: float = math.inf
    query_per_task: int = 1
    first_order: bool = True

    @classmethod
    def from_table(cls, d: Mapping[str, Any], *, allow_zero_noise: bool = False) -> "Release":
        """A plan's ``[release]`` table, validated (every refusal names its key); ``inner_noise = 0`` only where
        ``allow_zero_noise`` (a plan whose ``noise.clip = 'none'`` says its contributions are not bounded)."""
        if not isinstance(d, Mapping):
            raise ValueError(f"release must be a table, got {d!r}")
        unknown = sorted(set(d) - set(_KEYS))
        if unknown:
            raise ValueError(f"unknown key(s) in release: {', '.join('release.' + k for k in unknown)} (allowed: "
                             f"{', '.join(_KEYS)})")
        form = d.get("form", "task_clip")
        if form not in FORMS:
            raise ValueError(f"release.form must be one of {', '.join(FORMS)}, got {form!r}")
        needs = (("inner_steps", "inner_noise") if form in _INNER else ()) + (("query_per_task",) if form in _QUERY
                                                                            else ())
        for key in _KEYS[1:]:
            if key in d and key not in needs + ("first_order",):
                raise ValueError(f"release.{key} does not apply to release.form = '{form}'")
        missing = [k for k in needs if k not in d]
        if missing:
            raise ValueError(f"release.form = '{form}' needs {', '.join('release.' + k for k in missing)}")
        first_order = d.get("first_order", True)
        if not isinstance(first_order, bool):
            raise ValueError(f"release.first_order must be true or false, got {first_order!r}")
        if "first_order" in d and form not in _QUERY:
            raise ValueError(f"release.first_order does not apply to release.form = '{form}'")
        return cls(form, check_count("release.inner_steps", d.get("inner_steps", 1), minimum=1),
                   _inner_noise(d["inner_noise"], allow_zero_noise) if form in _INNER else math.inf,
                   check_count("release.query_per_task", d.get("query_per_task", 1), minimum=1), first_order)

    def to_table(self) -> Optional[Dict[str, Any]]:
        """The ``[release]`` table that loads back to this release (None for the default, ``task_clip``)."""
        if self.form == "task_clip":
            return None
        out: Dict[str, Any] = {"form": self.form, "inner_steps": self.inner_steps, "inner_noise": self.inner_noise}
        if self.per_example_queries:
            out.update(query_per_task=self.query_per_task, first_order=self.first_order)
        return out

    def describe(self, z: Optional[float]) -> str:
        """What each step releases, in words (a report's first assumption); ``z``: the sum's noise multiplier."""
        inner = f"{self.inner_steps} step(s) of DP-SGD at noise multiplier z_in = {self.inner_noise:g}"
        central = f"Gaussian noise N(0, (zC)^2 I) with z = {z:g}" if z is not None else "no noise"
        order = "first-order" if self.first_order else "second-order"
        return {
            "task_clip": f"each step releases the sum of per-task contributions, each clipped to L2 norm C, plus {central}",
            "example_clip": (f"each sampled task runs {inner}, then its {self.query_per_task} query gradients "
                             f"({order}) are clipped to C each and summed; the step releases the sum plus {central}"),
            "local_noise": (f"each sampled task (client) runs {inner} and sends its noisy update; the server clips each "
                            f"to C and releases the sum plus {central} ({order} meta-gradients)"),
            "inner_dp": (f"each sampled task runs {inner} on all of its data and sends its update; the sum carries no further "
                         "noise (task-global DP: the meta-learner sees each update)"),
        }[self.form]

    @classmethod
    def of(cls, form: str, *, inner_steps: int = 1, inner_noise: float = math.inf, query_per_task: int = 1,
           first_order: bool = True) -> "Release":
        """The release of ``form``, keeping only the settings that apply to it (an algorithm's, from its run)."""
        return cls(form, inner_steps if form in _INNER else 1, inner_noise if form in _INNER else math.inf,
                   query_per_task if form in _QUERY else 1, first_order if form in _QUERY else True)

    @property
    def per_example_queries(self) -> bool:
        """Each task's query gradients are clipped one by one (``query_per_task``, ``first_order`` apply)."""
        return self.form in _QUERY

    @property
    def views_keys(self) -> Tuple[str, ...]:
        """The keys of the views :func:`release_views` gives, in its order."""
        return {"task_clip": ("task", "record"), "example_clip": ("record", "task"),
                "local_noise": ("task", "record", "record-vs-server"), "inner_dp": ("record", "task")}[self.form]


def noise_keys(form: str, key: str) -> Tuple[str, ...]:
    """The plan keys whose noise sets the budget of view ``key`` of a release of ``form``: ``noise.multiplier``
    (the released sum's z), ``release.inner_noise`` (z_in, for a view charged on the inner loop alone), or both
    (sample-level DP-MAML's record: dp-maml.txt Alg. 2 uses one z for both)."""
    if key == "record-vs-server" or (form == "inner_dp" and key == "record"):
        return ("release.inner_noise",)
    if form == "example_clip" and key == "record":
        return ("noise.multiplier", "release.inner_noise")
    return ("noise.multiplier",)


def plan_release(d: Mapping[str, Any], noise: NoiseSpec, multiplicity: Optional[int]) -> Optional[Release]:
    """A plan's ``[release]``, checked against its ``noise`` (``metadp.plan.NoiseSpec``) and
    ``record_multiplicity``: None for the default, each task's contribution clipped (task_clip)."""
    if "release" not in d:
        if noise.mechanism == "none" and multiplicity is None:
            raise ValueError("noise.mechanism = 'none' describes a fixed pool of tasks (give record_multiplicity) "
                             "whose releases carry no central noise: a baseline, or release.form = 'inner_dp'")
        return None
    release = Release.from_table(d["release"], allow_zero_noise=noise.clip == "none")
    if multiplicity is None:
        raise ValueError("[release] describes the tasks of a fixed pool: give record_multiplicity (each record is in at "
                         "most that many tasks)")
    if release.form == "inner_dp" and noise.mechanism != "none":
        raise ValueError("release.form = 'inner_dp' adds its noise inside each task and none to the sum: it needs "
                         "noise.mechanism = 'none'")
    if noise.count_noise is not None and release.form not in ("task_clip", "local_noise"):
        raise ValueError(f"noise.count_noise (quantile clipping of each task's contribution) does not apply to "
                         f"release.form = '{release.form}', which clips each example's gradient")
    return None if release.form == "task_clip" else release


def plan_against(d: Mapping[str, Any], unit: str, release: Optional[Release]) -> Optional[str]:
    """``against = "server"``: the record's guarantee against the server that sees each task's noisy update."""
    if "against" not in d:
        return None
    if d["against"] != "server":
        raise ValueError(f"against must be 'server' (the party that sees each client's update), got {d['against']!r}")
    if release is None or release.form != "local_noise" or unit != "record":
        raise ValueError("against = 'server' applies to unit = 'record' with release.form = 'local_noise' (each client "
                         "noises its own update, which the server sees)")
    return "server"


def _inner_noise(value: object, allow_zero: bool) -> float:
    if allow_zero and value == 0 and not isinstance(value, bool):
        return 0.0
    return check_positive("release.inner_noise", value)


def release_views(release: Release, scheme: Sampling, noise: float, k: int,
                  party: str = "task") -> Tuple[Guarantee, ...]:
    """The guarantees of a run whose steps release ``release`` under ``scheme`` (z = ``noise`` on the sum)
    with each record in at most ``k`` tasks, in ``release.views_keys`` order (module docstring)."""
    form, S, m, z_in = release.form, release.inner_steps, release.query_per_task, release.inner_noise
    if form == "task_clip":
        return central_views(scheme, noise, k, party)
    if form == "local_noise":
        s2 = (max(S, 1) if release.first_order else S + 4 * m * m) / z_in**2
        server = Guarantee("record-vs-server", "record", "the server, which sees every client's noisy update and "
                           "knows which clients it sampled", "add_remove", "visit", ev.Gaussian(1.0 / math.sqrt(s2)),
                           REFS["local"], f"each visit of a client holding the record; in at most {k} client(s)")
        return central_views(scheme, noise, k, party) + (server,)
    if form == "inner_dp":
        return (Guarantee("record", "record", "the meta-learner, which sees each task's update (task-global DP, "
                          "dp-meta-learning-task-global.txt Sec. 2.4), and anyone after it", "add_remove", "visit",
                          ev.Gaussian(z_in / math.sqrt(S)), REFS["local"],
                          f"full-batch DP-SGD inside each task, {S} step(s) a visit; in at most {k} task(s)"),
                Guarantee("task", "task", EVERYONE, "add_remove", "step", None, "",
                          "no task-level guarantee: each task's update reaches the meta-learner without task-level "
                          "noise"))
    relation, charge, event, basis = _central(scheme, noise / m)
    if release.first_order:
        s = math.sqrt(max(S / z_in**2, 1.0 / noise**2))
    else:
        s = math.sqrt(S / z_in**2 + (2.0 * m / noise) ** 2)
    charge_r, event_r, basis_r, reason = _central_record(scheme, s, k)
    order = "first-order" if release.first_order else ("second-order: a support record also moves its task's query "
                                                       "gradients through the un-noised inner Jacobian")
    return (Guarantee("record", "record", EVERYONE, "add_remove", charge_r, event_r, basis_r,
                      reason or f"one record added or removed; in at most {k} task(s); {order}"),
            Guarantee("task", "task", EVERYONE, relation, charge, event, basis,
                      f"one task added or removed: its {m} per-example-clipped query gradients move the sum by up to "
                      f"{m}C"))


def central_views(scheme: Sampling, noise: float, k: int, party: str) -> Tuple[Guarantee, Guarantee]:
    """Task (or client) and record views of a clipped per-task contribution with central noise z."""
    relation, charge, event, basis = _central(scheme, noise)
    task = Guarantee("task", "task", EVERYONE, relation, charge, event, basis, f"one {party} (all of its data) added "
                     "or removed")
    charge, pooled, basis, reason = scheme.pooled_task_record(noise, k)
    record = Guarantee("record", "record", EVERYONE, "add_remove", charge, pooled, basis,
                       reason or f"one record added or removed; it is in at most {k} task(s) of the pool, each of "
                                 "which moves the clipped sum by up to 2C")
    return task, record


def _central(scheme: Sampling, z: float) -> Tuple[str, str, ev.Event, str]:
    """(relation, charge, event, basis) of one task's clipped contribution under noise multiplier z, as the
    run's sampling scheme gives them (``metadp.sampling``)."""
    return scheme.relation, scheme.charge, scheme.charge_event(ev.Gaussian(z)), scheme.charge_basis


def _central_record(scheme: Sampling, s: float, k: int) -> Tuple[str, Optional[ev.Event], str, str]:
    """(charge, event, basis, reason) for a record in k tasks, s noise stds per appearance, as the run's
    sampling scheme gives them (``metadp.sampling``: ``pooled_record``)."""
    return scheme.pooled_record(s, k)
