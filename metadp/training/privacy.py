"""Who each training algorithm protects, against whom, and the event the accountant composes for it.

A *view* is one guarantee of a run: a unit (a task or client, or one record), a neighbouring relation,
an adversary, and the event charged per step, per pass or per visit. The trainer keeps one
hash-chained ledger per view, stops when the view the user chose (``--unit``) reaches its budget, and
reports every view at the end (DESIGN.md sec. 4: "a record's report and a task's report are both
produced wherever both are meaningful"). Pure accounting: no torch.

How each event is derived (C: clipping threshold, z: noise multiplier of the released sum):

* **task / client, central noise** (DP-MAML Alg. 1, DP-AGR, DP-AGRLR's server): a task's clipped
  contribution moves the noisy sum by at most C (add/remove). Poisson sampling at rate q:
  ``PoissonSampled(q, Gaussian(z))`` per step (Mironov, Talwar & Zhang 2019); fixed-size batches:
  ``FixedSizeSampled`` under substitution only (Balle, Barthe & Gaboardi 2018); one pass (each task in
  exactly one step of a pass): ``Gaussian(z)`` per pass, the single-Gaussian bound with no
  amplification (DESIGN.md 3.9(a): random allocation amplifies, but that bound is not applied here).
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
  This is valid but loose: task sampling then amplifies delta, not epsilon (a record in one task at
  q = 0.0032, z = 1, 1,000 steps: 13.55 where the add/remove task view gives 0.5327). A tight bound for
  records in persistent tasks (a substitution-type pair, Balle, Barthe & Gaboardi 2018, Thm. 2
  "advanced joint convexity", composed) is not implemented. Per-task clipping: the task exists either way, so s = 2 / z
  (DESIGN.md 3.7). Sample-level DP-MAML (Alg. 2), with S inner steps (inner multiplier z_in) and m_q
  query examples per task: a query appearance moves the outer sum by C (1 / z); a support appearance
  costs the S inner Gaussians (sqrt(S) / z_in) and, with **second-order** meta-gradients only, also
  moves each of the task's m_q clipped query gradients by up to 2 C (the inner update's Jacobian holds
  the record's Hessian without noise; ``metadp.training.private_steps``). With K_s support and K_q
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
from typing import Optional, Tuple

from metadp.core import events as ev
from metadp.sampling import Guarantee, of_run

__all__ = ["View", "SamplingPlan", "ALGORITHMS", "PRIVATE_ALGORITHMS", "views", "default_unit"]

ALGORITHMS = ("maml", "reptile", "dp-maml", "dp-maml-sample", "dp-reptile", "dp-agr", "dp-agrlr")
PRIVATE_ALGORITHMS = ALGORITHMS[2:]
CENTRAL_TASK_CLIP = ("dp-maml", "dp-agr", "dp-agrlr")  # per-task clip + central noise on the sum

_REFS = {
    "poisson": "subsampled Gaussian, Poisson sampling (Mironov, Talwar & Zhang 2019, arXiv:1908.10530)",
    "fixed": "subsampled Gaussian, fixed-size batches, substitution (Balle, Barthe & Gaboardi 2018, arXiv:1807.01647)",
    "one-pass": "one pass, each unit in exactly one step: single Gaussian per pass, no amplification (DESIGN.md 3.9a)",
    "episodic": "Gaussian with the record's sampled appearances revealed, J ~ Bin(k, q) (valid, loose: task sampling "
                "amplifies delta only; metadp.mechanisms.episodic)",
    "local": "Gaussian mechanism per visit, composed over the record's realised visits (no amplification "
             "against a party that knows whom it talked to)",
}


@dataclasses.dataclass(frozen=True)
class SamplingPlan:
    """How tasks are drawn each step: ``scheme`` "poisson" (rate), "fixed" (batch) or "one-pass"
    (``steps_per_pass`` steps, each task in exactly one)."""

    scheme: str
    pool: int
    rate: float = 0.0
    batch: int = 0
    steps_per_pass: int = 1


View = Guarantee
"""One guarantee of a run (module docstring; ``metadp.sampling.Guarantee``): key, unit, adversary, relation,
charge ("step", "pass" or "visit"), event (None: no guarantee, ``reason`` says why), basis, reason."""


def default_unit(algorithm: str) -> str:
    """The unit whose budget stops a run unless ``--unit`` says otherwise."""
    return "record" if algorithm in ("dp-maml-sample", "dp-reptile") else "task"


def _central(plan: SamplingPlan, z: float) -> Tuple[str, str, ev.Event, str]:
    """(relation, charge, event, basis) of one task's clipped contribution under noise multiplier z, as the
    run's sampling scheme gives them (``metadp.sampling``)."""
    scheme = of_run(plan)
    return scheme.relation, scheme.charge, scheme.charge_event(ev.Gaussian(z)), scheme.basis


def _central_record(plan: SamplingPlan, s: float, k: int) -> Tuple[str, Optional[ev.Event], str, str]:
    """(charge, event, basis, reason) for a record in k tasks, s noise stds per appearance."""
    if plan.scheme == "poisson":
        return "step", ev.EpisodicSampled(k, plan.rate, 1.0, ev.Gaussian(1.0 / s), 1.0), _REFS["episodic"], ""
    if plan.scheme == "one-pass":
        return "pass", ev.Gaussian(1.0 / (k * s)), _REFS["one-pass"], ""
    return "step", None, "", ("no record-level bound is implemented for fixed-size task batches with records "
                              "shared between tasks; use Poisson sampling for a record-level guarantee")


def views(algorithm: str, plan: SamplingPlan, *, noise: float, inner_noise: float = math.inf, inner_steps: int = 1,
          query_per_task: int = 1, record_multiplicity: int = 1, first_order: bool = True,
          private_clipping: bool = True) -> Tuple[View, ...]:
    """The guarantees of one run (module docstring), the first the default budget unit's.

    Args:
        algorithm: one of ``ALGORITHMS``.
        plan: the task sampling.
        noise: z of the central noisy sum (DP-MAML, DP-AGR, DP-AGRLR's server, sample-level's outer).
        inner_noise: z_in of the inner per-example DP-SGD (sample-level DP-MAML, DP-AGRLR's z_0,
            DP-Reptile).
        inner_steps: S, the inner steps.
        query_per_task: m_q, query examples per task.
        record_multiplicity: k, the most tasks of the pool any one record is in.
        first_order: first-order meta-gradients (sample-level DP-MAML and DP-AGRLR: see the docstring).
        private_clipping: False when thresholds come from raw gradient norms: every view loses its
            guarantee.
    """
    if algorithm not in ALGORITHMS:
        raise ValueError(f"algorithm must be one of {ALGORITHMS}, got {algorithm!r}")
    if algorithm not in PRIVATE_ALGORITHMS:
        return ()
    k, S, m = record_multiplicity, inner_steps, query_per_task
    everyone = "anyone who sees the released noisy aggregates and the model"
    out = []
    if algorithm in CENTRAL_TASK_CLIP:
        relation, charge, event, basis = _central(plan, noise)
        who = "client" if algorithm.startswith("dp-agr") else "task"
        out.append(View("task", "task", everyone, relation, charge, event, basis,
                        f"one {who} (all of its data) added or removed"))
        charge, event, basis, reason = _central_record(plan, 2.0 / noise, k)
        out.append(View("record", "record", everyone, "add_remove", charge, event, basis,
                        reason or f"one record added or removed; it is in at most {k} task(s) of the pool, each "
                                   "of which moves the clipped sum by up to 2C"))
    if algorithm == "dp-maml-sample":
        relation, charge, event, basis = _central(plan, noise / m)
        if first_order:
            s = math.sqrt(max(S / inner_noise**2, 1.0 / noise**2))
        else:
            s = math.sqrt(S / inner_noise**2 + (2.0 * m / noise) ** 2)
        charge_r, event_r, basis_r, reason = _central_record(plan, s, k)
        order = "first-order" if first_order else ("second-order: a support record also moves its task's query "
                                                   "gradients through the un-noised inner Jacobian")
        out.append(View("record", "record", everyone, "add_remove", charge_r, event_r, basis_r,
                        reason or f"one record added or removed; in at most {k} task(s); {order}"))
        out.append(View("task", "task", everyone, relation, charge, event, basis,
                        f"one task added or removed: its {m} per-example-clipped query gradients move the sum by "
                        f"up to {m}C"))
    if algorithm == "dp-agrlr":
        s2 = (max(S, 1) if first_order else S + 4 * m * m) / inner_noise**2
        out.append(View("record-vs-server", "record", "the server, which sees every client's noisy update and "
                        "knows which clients it sampled", "add_remove", "visit", ev.Gaussian(1.0 / math.sqrt(s2)),
                        _REFS["local"], f"each visit of a client holding the record; in at most {k} client(s)"))
    if algorithm == "dp-reptile":
        out.append(View("record", "record", "the meta-learner, which sees each task's update (task-global DP, "
                        "dp-meta-learning-task-global.txt Sec. 2.4), and anyone after it", "add_remove", "visit",
                        ev.Gaussian(inner_noise / math.sqrt(S)), _REFS["local"],
                        f"full-batch DP-SGD inside each task, {S} step(s) a visit; in at most {k} task(s)"))
        out.append(View("task", "task", everyone, "add_remove", "step", None, "",
                        "no task-level guarantee: each task's update reaches the meta-learner without task-level "
                        "noise"))
    if not private_clipping:
        out = [dataclasses.replace(v, event=None, reason="NOT PRIVATE: clipping thresholds computed from raw "
                                   "gradient norms (dp-maml.txt Sec. 5.2.1) depend on the data without noise")
               for v in out]
    return tuple(out)
