"""Who each training algorithm protects, against whom, and the event the accountant composes for it.

A *view* is one guarantee of a run: a unit (a task or client, or one record), a neighbouring relation,
an adversary, and the event charged per step, per pass or per visit. The trainer keeps one
hash-chained ledger per view, stops when the view the user chose (``--unit``) reaches its budget, and
reports every view at the end (DESIGN.md sec. 4: "a record's report and a task's report are both
produced wherever both are meaningful"). Pure accounting: no torch. Each algorithm's views are built
from these pieces by its family in ``metadp.training.algorithms`` (``Algorithm.views``).

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

from typing import Optional, Tuple

from metadp.core import events as ev
from metadp.sampling import Sampling

__all__ = ["REFS"]

REFS = {
    "local": "Gaussian mechanism per visit, composed over the record's realised visits (no amplification "
             "against a party that knows whom it talked to)",
}


def _central(scheme: Sampling, z: float) -> Tuple[str, str, ev.Event, str]:
    """(relation, charge, event, basis) of one task's clipped contribution under noise multiplier z, as the
    run's sampling scheme gives them (``metadp.sampling``)."""
    return scheme.relation, scheme.charge, scheme.charge_event(ev.Gaussian(z)), scheme.charge_basis


def _central_record(scheme: Sampling, s: float, k: int) -> Tuple[str, Optional[ev.Event], str, str]:
    """(charge, event, basis, reason) for a record in k tasks, s noise stds per appearance, as the run's
    sampling scheme gives them (``metadp.sampling``: ``pooled_record``)."""
    return scheme.pooled_record(s, k)


def _central_task_record(scheme: Sampling, noise: float, k: int) -> Tuple[str, Optional[ev.Event], str, str]:
    """As ``_central_record`` for a per-task clipped contribution under noise multiplier ``noise`` (s = 2 / z):
    Poisson sampling and k = 1 give the pool-substitution pair (``metadp.mechanisms.pooled``)."""
    return scheme.pooled_task_record(noise, k)
