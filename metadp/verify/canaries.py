"""Auditing a real training run with canaries in one run (issue 20): ``metadp verify run``.

The trainer itself (``metadp.training.run.trainer.train``, a plan run or its flag form) trains on a pool
holding m canaries, each included independently with probability 1/2 (Steinke, Nasr & Jagielski 2023,
arXiv:2305.08846). Two kinds (``kind``):

* ``gradient`` (default; ``metadp.verify.gradient_canaries``): Dirac canaries. A canary is a pool row
  whose contribution, before the trainer's own clip, sum and noise, is replaced through the trainer's
  ``audit.contributions`` hook by a fixed vector along one parameter coordinate: task level, the row is
  a task present only when included; record level, the row is the canary record's host task and its
  contribution is + the vector with the record and - the vector without it (the C-ball the record view
  certifies). Legitimate neighbours under the guarantee (it holds for every contribution function), and
  off the pool's gradient subspace (Nasr et al. 2023, arXiv:2302.07956; Steinke et al. 2023, Sec. 7).
* ``data``: task level, a canary is a whole task (a sinusoid of amplitude ``amplitude``, far above the
  pool's 0.1-5, so its meta-gradient is clipped at C); an excluded canary is absent (its slot is never
  sampled: removal under add/remove). Record level, a canary is one support record (x, y =
  +-``amplitude``) inside one host task of the pool; excluded, the host keeps its own point there.

Scores, after training:

* white box (Nasr et al. 2023, gradient-space auditing): at every step the audit sees the release R_t
  (the noisy sum, recorded as the trainer makes it) and the parameters it was computed at. For each
  canary it has the clipped contribution with the canary in (a_i) and out (b_i; 0 for a task) (the
  canary's meta-gradient at that step for ``data``, the clipped canary vector for ``gradient``), and for
  every other row of the pool its clipped contribution; it subtracts the release's expectation given
  what it knows (each row times its sampling probability; a canary's (a + b) / 2), projects onto
  u_i = (a_i - b_i) / |a_i - b_i| whitened against the noise and the other rows' sampling variance, and
  adds the log-likelihood ratio of "in" against "out" of that projection under the step's sampling law.
  Summed over steps.
* black box (``data``): minus the final model's MAML query loss on the canary's task. Final model
  (``gradient``): the final parameters' move along the canary's direction.

``guess_and_bound`` (``metadp.verify.one_run``) turns the scores into the empirical epsilon lower bound
at confidence 1 - beta, compared with the run's certified epsilon for the view: ``consistent`` when no
test rejects it, ``VIOLATION`` otherwise. At the task level the claim is also tested as a trade-off curve
(``metadp.verify.one_run_fdp.fdp_audit``: Mahloujifar, Melis & Chaudhuri's f-DP recursion on the unit's
certified curve), the two tests sharing the level beta half each; the report also gives the f-DP
(Gaussian) empirical figure, mu and its epsilon, valid only if the run's curve is Gaussian. The record view's report also lists both certified record
bounds metadp gives for the plan (``metadp.verify.canary_bounds.record_bounds``).

Controls (``defect``; planted only here, through the trainer's ``audit`` instrumentation, and each
says in the report that it is a control, whose guarantee is void): ``low-noise`` (the noise 5x below
what the ledger records), ``no-clipping`` (contributions summed unclipped), ``fixed-order`` (Poisson
sampling replaced by a fixed cyclic order of the pool, ``expected batch`` tasks a step, known to the
auditor). Supported: Poisson task sampling (a plan's ``sampling.scheme = "poisson"``) on ``sinusoid``.
"""

from __future__ import annotations

import dataclasses
import math
import tempfile
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple, Union, cast

import numpy as np
import torch

from metadp.plan import Plan
from metadp.report import format_lower, format_upper
from metadp.sampling import Poisson
from metadp.training.algorithms import functional as F
from metadp.training.algorithms import models
from metadp.training.algorithms.contributions import resolve as contribution_of
from metadp.training.run.plan_run import plan_settings
from metadp.training.data.tasks import SinusoidPool
from metadp.training.run.trainer import TrainConfig, stream_seed, train
from metadp.training import algorithms
from metadp.verify.canary_bounds import (certified_curve, certified_view, check_audit_plan, predicted_power,
                                         record_bounds)
from metadp.verify.gradient_canaries import DiracCanaries
from metadp.verify.one_run import GuessResult, guess_and_bound, mixture_llr
from metadp.verify.one_run_fdp import fdp_audit

__all__ = ["DEFECTS", "KINDS", "CanaryAudit", "run_canary_audit", "NOISE_FACTOR", "Canaries", "canary_pool",
           "AuditSampler", "sinusoid_mse"]

NOISE_FACTOR = 5.0
DEFECTS = {
    "low-noise": f"the noise is {NOISE_FACTOR:g}x below what the ledger records",
    "no-clipping": "per-task contributions are summed without clipping",
    "fixed-order": "Poisson sampling replaced by a fixed cyclic order of the pool (known to the auditor)",
}
VIEWS = ("task", "record")
KINDS = ("gradient", "data")
CITATION = ("Steinke, Nasr & Jagielski 2023, Privacy Auditing with One (1) Training Run, arXiv:2305.08846 (main "
            "theorem and Algorithm 2); white-box gradient scores after Nasr et al. 2023, arXiv:2302.07956")


def sinusoid_mse(out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """The sinusoid tasks' loss: mean squared error."""
    return ((out - y) ** 2).mean()


class _Pool:
    """The audit's task pool: the sinusoid tasks of ``SinusoidPool`` with the canary rows rewritten."""

    def __init__(self, x: torch.Tensor, y: torch.Tensor, k_support: int):
        self._x, self._y, self.k_support = x, y, k_support
        self.size = x.shape[0]
        self.device = x.device

    # SinusoidPool's methods, on these tensors (they read only what _Pool has)
    batch: Callable[..., Any] = SinusoidPool.batch
    joint_batch: Callable[..., Any] = SinusoidPool.joint_batch
    record_ids: Callable[..., Any] = SinusoidPool.record_ids
    record_multiplicity: Callable[..., Any] = SinusoidPool.record_multiplicity

    @property
    def query_per_task(self) -> int:
        return self._x.shape[1] - self.k_support


@dataclasses.dataclass
class Canaries:
    """The pool as trained (``pool``), with every canary in (``pool_in``) and out (``pool_out``), and the
    canary rows (the pool's last m) and which are included. Gradient canaries keep their rows' data (their
    contributions are replaced in the run: ``metadp.verify.gradient_canaries``)."""

    pool: _Pool
    pool_in: _Pool
    pool_out: _Pool
    rows: torch.Tensor
    included: np.ndarray
    view: str
    kind: str


def canary_pool(population: int, m: int, view: str, amplitude: float, seed: int, kind: str) -> Canaries:
    """A sinusoid pool of ``population`` tasks whose last ``m`` rows are canaries of ``kind`` at ``view``
    (module docstring), each included with probability 1/2 (the draw seeded by ``seed``)."""
    base = SinusoidPool(population, 10, 10, seed=seed)
    x, y = base._x.clone(), base._y.clone()
    g = torch.Generator().manual_seed(stream_seed(seed, "canaries"))
    rows = torch.arange(population - m, population)
    included = (torch.rand(m, generator=g, dtype=torch.float64) < 0.5).numpy()
    x_in, y_in = x.clone(), y.clone()
    if kind == "gradient":
        pool = _Pool(x, y, 10)
        return Canaries(pool, pool, pool, rows, included, view, kind)
    if view == "task":  # a whole task: a sinusoid of large amplitude (its meta-gradient is clipped at C)
        phase = math.pi * torch.rand(m, 1, 1, generator=g, dtype=torch.float64)
        xs = -5.0 + 10.0 * torch.rand(m, x.shape[1], 1, generator=g, dtype=torch.float64)
        x_in[rows], y_in[rows] = xs.float(), (amplitude * torch.sin(xs - phase)).float()
        x_out, y_out = x_in, y_in  # an excluded canary task is never sampled (``AuditSampler``)
    else:  # one support record of a host task: (x, +-amplitude)
        xc = -5.0 + 10.0 * torch.rand(m, generator=g, dtype=torch.float64)
        sign = torch.where(torch.rand(m, generator=g) < 0.5, -1.0, 1.0)
        x_in[rows, 0, 0], y_in[rows, 0, 0] = xc.float(), (amplitude * sign).float()
        x_out, y_out = x, y
    keep = torch.as_tensor(included)
    x_run, y_run = x_out.clone(), y_out.clone()
    x_run[rows[keep]], y_run[rows[keep]] = x_in[rows[keep]], y_in[rows[keep]]
    return Canaries(_Pool(x_run, y_run, 10), _Pool(x_in, y_in, 10), _Pool(x_out, y_out, 10), rows, included, view,
                     kind)


class AuditSampler:
    """The run's Poisson sampler, with excluded canary tasks left out (task level), or (control
    ``fixed-order``) a fixed cyclic order of ``batch`` rows a step. ``probabilities`` is the sampling law
    of this step's rows as the auditor knows it."""

    def __init__(self, inner: Any, absent: torch.Tensor, batch: Optional[int]):
        self.inner, self.absent, self.batch, self._step = inner, absent, batch, 0
        n = absent.numel()
        self.probabilities = torch.full((n,), float(inner.rate), dtype=torch.float64)

    def sample(self) -> torch.Tensor:
        if self.batch is None:
            mask: torch.Tensor = self.inner.sample()
        else:
            n = self.absent.numel()
            rows = (self._step * self.batch + torch.arange(self.batch)) % n
            mask = torch.zeros(n, dtype=torch.bool)
            mask[rows] = True
            self.probabilities = mask.to(torch.float64)
        self._step += 1
        self.last = mask & ~self.absent  # this step's draw (tests check releases against it)
        return self.last

    def state_dict(self) -> Dict[str, Any]:
        return dict(self.inner.state_dict(), audit_step=self._step)

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        self._step = state.get("audit_step", 0)
        self.inner.load_state_dict(state)


class CanaryAudit:
    """The trainer's ``audit`` instrumentation (``train(..., audit=...)``): leaves out excluded canary
    tasks, puts gradient canaries' vectors in their rows' contributions, plants ``defect`` (a control, or
    None), and scores the canaries on every release (module docstring)."""

    def __init__(self, canaries: Canaries, model: torch.nn.Module, loss_fn: Callable[..., torch.Tensor],
                 config: TrainConfig, defect: Optional[str], seed: int):
        if defect is not None and defect not in DEFECTS:
            raise ValueError(f"defect must be one of {sorted(DEFECTS)} or None, got {defect!r}")
        self.k, self.model, self.loss_fn, self.c, self.defect = canaries, model, loss_fn, config, defect
        m = canaries.rows.numel()
        self.scores = np.zeros(m)
        self.steps = 0
        self.sampler: Optional[AuditSampler] = None
        self.start = {n: p.detach().clone() for n, p in F.param_dict(model).items()}  # the model before training
        self.names = list(self.start)
        self.dirac: Optional[DiracCanaries] = None
        self._pair: Optional[Tuple[np.ndarray, np.ndarray]] = None
        if canaries.kind == "gradient":
            self.dirac = DiracCanaries(self.start, canaries.rows, canaries.pool.size, config.clip,
                                       torch.Generator().manual_seed(stream_seed(seed, "gradient-canaries")))
            included = torch.as_tensor(canaries.included)
            # task: an excluded canary task is absent (never sampled); record: minus the vector without the record
            self.dirac.set_run(torch.where(included, 1.0, 0.0 if canaries.view == "task" else -1.0))

    # -- the trainer's hooks ---------------------------------------------------------------------
    def attach(self, run: Any) -> None:
        if not hasattr(run.sampler, "rate") or not hasattr(run.sampler, "pool_size"):
            raise ValueError("the canary audit runs Poisson task sampling (sampling.scheme = 'poisson')")
        absent = torch.zeros(run.sampler.pool_size, dtype=torch.bool)
        if self.k.view == "task":
            absent[self.k.rows[torch.as_tensor(~self.k.included)]] = True
        batch = max(1, round(run.expected)) if self.defect == "fixed-order" else None
        self.sampler = run.sampler = AuditSampler(run.sampler, absent, batch)
        self.threshold: float = run.policy.threshold

    def contributions(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        return fn if self.dirac is None else self.dirac.wrap(fn)

    def clipping(self, on: bool) -> bool:
        return False if self.defect == "no-clipping" else on

    def release_std(self, std: float) -> float:
        return std / NOISE_FACTOR if self.defect == "low-noise" else std

    def observe(self, step: int, params: Dict[str, torch.Tensor], release: Dict[str, torch.Tensor], std: float) -> None:
        self.steps += 1
        self.scores += self._step_llr(params, release, std)

    # -- scoring ---------------------------------------------------------------------------------
    def _clipped(self, grads: Dict[str, torch.Tensor]) -> np.ndarray:
        """name -> [B, ...] contributions, clipped as the run clips them, flat in the model's order: [B, P]."""
        if self.defect != "no-clipping" and math.isfinite(self.threshold):
            grads, _ = F.clip(grads, self.threshold, self.c.clip_mode)
        return torch.cat([grads[n].reshape(grads[n].shape[0], -1) for n in self.names], dim=1).double().numpy()

    def _flat(self, pool: _Pool, rows: torch.Tensor, params: Dict[str, torch.Tensor]) -> np.ndarray:
        alg = self.c.family
        grads, _ = contribution_of(alg)(alg, self.model, params, pool, rows, self.loss_fn, self.c, None)
        return self._clipped(grads)

    def _canary_pair(self, params: Dict[str, torch.Tensor]) -> Tuple[np.ndarray, np.ndarray]:
        """[m, P] clipped contributions of each canary in (a) and out (b) at ``params``."""
        k = self.k
        if self.dirac is not None:  # fixed vectors: computed once
            if self._pair is None:
                m = k.rows.numel()
                a = self._clipped(self.dirac.vectors(torch.ones(m)))
                b = self._clipped(self.dirac.vectors(-torch.ones(m))) if k.view == "record" else np.zeros_like(a)
                self._pair = a, b
            return self._pair
        a = self._flat(k.pool_in, k.rows, params)
        b = self._flat(k.pool_out, k.rows, params) if k.view == "record" else np.zeros_like(a)
        return a, b

    def _step_llr(self, params: Dict[str, torch.Tensor], release: Dict[str, torch.Tensor], std: float) -> np.ndarray:
        """Each canary's log-likelihood ratio, in against out, of this release (module docstring).

        The statistic is the whitened (Fisher linear discriminant) projection t_i = d_i' S^-1 (R - E + p_i (a_i +
        b_i) / 2), d_i = a_i - b_i, with S = sigma^2 I + sum_r w_r c_r c_r' the covariance of the noise and
        of the other rows' sampling (base rows: w = p (1 - p); canaries: a and b each with weight p / 2),
        applied by Woodbury's identity; standardised by s_i = sqrt(d_i' S^-1 d_i), it is N(0, 1) when the
        canary is not sampled, shifted by a_i' S^-1 d_i / s_i (in) or b_i' S^-1 d_i / s_i (out) when it is."""
        k = self.k
        n = k.pool.size
        canary = torch.zeros(n, dtype=torch.bool)
        canary[k.rows] = True
        base_rows = torch.nonzero(~canary).flatten()
        probs = cast(AuditSampler, self.sampler).probabilities.numpy()  # (attached)
        p_base, p_can = probs[base_rows.numpy()], probs[k.rows.numpy()]
        g = self._flat(k.pool, base_rows, params)  # [N - m, P]
        a, b = self._canary_pair(params)  # [m, P] each
        r = torch.cat([release[n].reshape(-1) for n in self.names]).double().numpy()
        mid = 0.5 * (a + b)
        expected = p_base @ g + p_can @ mid
        rows = [g * np.sqrt(p_base * (1 - p_base))[:, None], a * np.sqrt(0.5 * p_can)[:, None]]
        if k.view == "record":
            rows.append(b * np.sqrt(0.5 * p_can)[:, None])
        G = np.concatenate(rows)  # [R, P]
        var = max(std**2, 1e-12 * float(np.mean(np.sum(G**2, axis=1))) + 1e-300)
        d = a - b
        gram = G @ G.T
        gram[np.diag_indices_from(gram)] += var
        solve = d - (np.linalg.solve(gram, G @ d.T)).T @ G  # [m, P]: var * S^-1 d_i
        w = solve / var  # S^-1 d_i
        s = np.sqrt(np.maximum(np.einsum("ij,ij->i", w, d), 1e-300))
        t = (w @ (r - expected) + p_can * np.einsum("ij,ij->i", w, mid)) / s
        mean_in, mean_out = np.einsum("ij,ij->i", w, a) / s, np.einsum("ij,ij->i", w, b) / s
        return mixture_llr(t, p_can, mean_in, mean_out, np.ones_like(t))

    def final_scores(self, params: Dict[str, torch.Tensor]) -> Dict[str, np.ndarray]:
        """The score of the final model alone: ``black_box`` (data canaries) or the move along each
        gradient canary's direction (``final-model``)."""
        if self.dirac is not None:
            return {"final-model": self.dirac.final_model_scores(self.start, params, self.c.family.update_sign)}
        return {"black-box": self.black_box(params)}

    def black_box(self, params: Dict[str, torch.Tensor]) -> np.ndarray:
        """Minus the final model's MAML query loss on each canary's task (with the canary in)."""
        k, c = self.k, self.c
        _, losses = F.per_task_meta_grads_and_losses(self.model, params, k.pool_in.batch(k.rows), self.loss_fn,
                                                     c.inner_steps, c.inner_lr, c.first_order)
        return -losses.double().numpy()


def _config(plan: Plan, algorithm: str, view: str, *, clip: float, outer_lr: Optional[float], inner_lr: float,
            seed: int, first_order: bool) -> TrainConfig:
    alg = algorithms.get(algorithm)
    settings = plan_settings(plan, alg)
    return TrainConfig(algorithm=algorithm, **settings, inner_steps=1, inner_lr=inner_lr,
                       outer_lr=outer_lr if outer_lr is not None else alg.default_outer_lr, first_order=first_order,
                       clip=clip, seed=seed, checkpoint_every=max(1, plan.steps))


def _verdict(plan: Plan, view: str, steps: int, scores: Dict[str, np.ndarray], included: np.ndarray, beta: float,
             certified: Optional[float]) -> Tuple[Optional[Tuple[np.ndarray, np.ndarray]], float, List[GuessResult],
                                                int, Dict[str, Any], bool]:
    """(curve, share, epsilon tests, their family, f-DP report, flagged): the verdict's two tests of the claim share
    its level ``beta``: the epsilon-only game, and (task level, where the unit's certified trade-off curve is the
    claim) the f-DP recursion on that curve, half each (``one_run_fdp.fdp_audit``)."""
    curve = certified_curve(plan, steps) if view == "task" and certified is not None else None
    share = beta / 2 if curve is not None else beta
    tests, family = guess_and_bound(scores, included, beta=share, delta=plan.delta, claimed_epsilon=certified)
    fdp = fdp_audit(scores, included, beta=share, delta=plan.delta, curve=curve)
    flagged = certified is not None and (any(t.p_value_at_claim < share / family for t in tests)
                                         or (fdp["claim"] is not None and fdp["claim"]["flagged"]))
    return curve, share, tests, family, fdp, flagged


def run_canary_audit(plan: Plan, algorithm: str = "dp-maml", *, canaries: int, view: str = "task",
                     defect: Optional[str] = None, kind: str = "gradient", beta: float = 0.05,
                     amplitude: float = 50.0, clip: float = 1.0, outer_lr: Optional[float] = None, seed: int = 0,
                     out_dir: Union[str, Path, None] = None, first_order: bool = True,
                     sizes: Tuple[int, ...] = (1, 40, 40, 1), power_runs: int = 200) -> Dict[str, Any]:
    """Trains ``plan`` with ``canaries`` canaries (module docstring) and audits the run.

    Task view: the plan run itself (``train(..., plan=plan)``). Record view: the same sampling, noise and
    steps as the trainer's flag form (``plan=None``, ``unit='record'``), whose record view the run
    certifies (a plan without [[hierarchy]] has no record-level bound of its own).

    Returns:
        The audit's report (JSON-ready): the run's certified epsilon for the view (upper bound), every
        scorer's best test, the empirical lower bound at confidence 1 - beta, the verdict, for the record
        view both certified record bounds of the plan (``canary_bounds.record_bounds``), and for a
        control the planted defect and the power the idealised game predicts.

    Raises:
        ValueError: on a plan or settings the audit does not support, before training.
    """
    if view not in VIEWS:
        raise ValueError(f"view must be one of {VIEWS}, got {view!r}")
    if kind not in KINDS:
        raise ValueError(f"--canary-kind must be one of {', '.join(KINDS)}, got {kind!r}")
    if defect is not None and defect not in DEFECTS:
        raise ValueError(f"defect must be one of {sorted(DEFECTS)}, got {defect!r}")
    check_audit_plan(plan, canaries)
    population = cast(int, cast(Poisson, plan.sampling).population)  # (check_audit_plan: Poisson, with one)
    alg = algorithms.get(algorithm)
    if not (alg.private and alg.central_clip):
        raise ValueError(f"the canary audit runs dp-maml or dp-agr (one noisy sum of clipped tasks a step), got "
                         f"{algorithm}")
    k = canary_pool(population, canaries, view, amplitude, seed, kind)
    config = _config(plan, algorithm, view, clip=clip, outer_lr=outer_lr, inner_lr=0.01, seed=seed,
                     first_order=first_order)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(stream_seed(seed, "model"))
        model = models.MLP(tuple(sizes))
    audit = CanaryAudit(k, model, sinusoid_mse, config, defect, seed)
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = Path(out_dir) if out_dir is not None else Path(tmp) / "run"
        if view == "task":
            result = train(model, k.pool, sinusoid_mse, config, run_dir, plan=plan, audit=audit)
        else:
            flags = dataclasses.replace(config, sampler="poisson", unit="record")
            result = train(model, k.pool, sinusoid_mse, flags, run_dir, audit=audit)
    report = result.report
    certified, accountant, entry = certified_view(report, view)
    scores = {"white-box": audit.scores, **audit.final_scores(result.params)}
    curve, share, tests, family, fdp, flagged = _verdict(plan, view, audit.steps, scores, k.included, beta, certified)
    lower = max(t.epsilon_lower for t in tests)
    out: Dict[str, Any] = {
        "audit": "one-run canary audit of a training run", "method": CITATION, "algorithm": algorithm,
        "plan": plan.name, "data": "sinusoid", "view": view, "canaries": canaries, "canary_kind": kind,
        "canaries_included": int(k.included.sum()), "steps": audit.steps, "confidence": 1 - beta,
        "tests": family, "delta": plan.delta,
        "certified": {"epsilon": certified, "epsilon_display": None if certified is None else format_upper(certified),
                      "bound": "upper", "unit": view, "accountant": accountant,
                      "relation": entry.get("relation", "add_remove") if entry else "add_remove"},
        "epsilon_lower": lower, "epsilon_lower_display": format_lower(lower), "bound": "lower",
        "scorers": [t.to_dict() for t in tests], "fdp": fdp, "level_shared": share < beta,
        "verdict": "VIOLATION" if flagged else "consistent",
        "control": None if defect is None else {
            "defect": defect, "what": DEFECTS[defect],
            "note": "a CONTROL: a defect was planted on purpose; this run's certified epsilon does not hold, and the "
                    "audit should flag it"},
    }
    if view == "record":
        out["record_bounds"] = record_bounds(plan, config.noise_multiplier, audit.steps, plan.delta, entry)
    if defect is not None and certified is not None:
        a, b = audit._canary_pair(audit.start)  # at the initial model (unclipped for no-clipping)
        norm = np.linalg.norm(a, axis=1)
        shift_in = float(np.median(norm))
        shift_out = float(np.median(np.einsum("ij,ij->i", a, b) / np.maximum(norm, 1e-300)))  # b along a's direction
        out["control"]["predicted_power"] = predicted_power(
            plan, config.noise_multiplier, config.clip, canaries, defect, certified, beta=share, runs=power_runs,
            seed=seed, shift_in=shift_in, shift_out=shift_out, noise_factor=NOISE_FACTOR, scorers=len(scores),
            curve=curve)
    return out
