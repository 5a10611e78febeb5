"""The one-run canary audit of sample-level DP-MAML's support records (docs/findings.md, Finding 4; issue 20).

Sample-level DP-MAML (dp-maml.txt Alg. 2; ``metadp.training.algorithms.private_steps``) adapts each sampled task by
one noisy DP-SGD step on its support set, theta_i = phi - lr (sum_j clip(g_j(phi), C_in) + z_in C_in N)
/ n_s, then clips each query example's meta-gradient at C and releases the sum over tasks plus
N(0, (z C)^2). dp-maml.txt accounts a support record by the inner Gaussian alone: the outer sum is
post-processing of theta_i. That holds with **first-order** meta-gradients. With **second-order** ones
the outer gradient is J^T grad L_q(theta_i), J = I - lr / n_s sum_j d clip(g_j) / d phi: every support
record's Hessian reaches the release without noise. metadp charges it (``metadp.releases``).

**The claim audited.** A canary is one support record of its host task (data canaries at record level,
``metadp.verify.canaries``: slot 0 of a host's support set is the canary record when included and the
host's own point otherwise: a substitution, so the inner sum moves by up to 2 C_in). The claim is the
one the first-order argument gives for such a record: each appearance of the host costs the inner
Gaussian with shift 2 sqrt(S) / z_in, which of the host's steps sampled it revealed
(``EpisodicSampled(1, q, 1, Gaussian(z_in / (2 sqrt(S))), 1)``, composed over the steps by PLD). A
first-order run must be consistent with it (it is metadp's own bound for a support record). A
second-order run accounted by it is the **control** ``second-order``: its guarantee is void, and the
audit should flag it. metadp's bound for the second-order run (shift^2 = 4 S / z_in^2 + (2 m_q / z)^2,
the Jacobian moving each of the host's m_q clipped query gradients by up to 2 C) is reported beside it.

**The adversary the claim allows, and the score.** The claim grants the adversary everything the inner
Gaussians release: each sampled task's adapted parameters theta_i (the accounting charges the inner
step as released and the outer sum as its post-processing), and which of the host's steps sampled it.
The audit therefore sees, at every step, the sampled rows, every sampled task's inner noisy sum v (the
trainer's own draw, replayed from its generator: ``SupportAudit.contributions``) and the release R.
Given theta_i, a task's outer contribution is a function of the data alone, so for each sampled host
the audit computes its contribution with the canary in (a) and out (b) *at the released theta_i* (the
inner noise solved from v for each hypothesis: ``_pair``), and every other sampled task's contribution
(the trainer's own). Its per-appearance log-likelihood ratio, in against out, is

* inner: log N(v; sum_in, s_in^2) / N(v; sum_out, s_in^2) = (|N_out|^2 - |N_in|^2) / 2, exact;
* outer: the projection y = <e, d> / |d| of e = R - (the other tasks' contributions) - (every sampled
  host's (a + b) / 2) onto d = a - b, Gaussian with mean +-|d| / 2 and variance (z C)^2 plus the other
  sampled hosts' +-d' / 2 along d: |d| y / variance.

With first-order meta-gradients a = b given theta_i (up to float rounding), so the outer term is 0 and
the score is the inner Gaussian's exact likelihood ratio: the claim's own mechanism. Scores never read
which canaries are included (only the released theta_i, through v). ``guess_and_bound``
(``metadp.verify.one_run``) turns them into the empirical lower bound; the predicted power is the
idealised game of Bin(T, q) appearances, each a Gaussian projection with the median |d| / (z C)
measured at the initial model.

Supported: ``dp-maml-sample`` (any number S of inner steps: each released iterate is replayed), Poisson
task sampling, on ``sinusoid``.
"""

from __future__ import annotations

import math
import tempfile
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple, Union, cast

import numpy as np
import torch

from metadp.accounting.calibration import certified_epsilon
from metadp.core import events as ev
from metadp.core.validation import check_count
from metadp.plan import Plan
from metadp.report import format_lower, format_upper
from metadp.sampling import Poisson
from metadp.training import algorithms
from metadp.training.algorithms import models
from metadp.training.algorithms import functional as F
from metadp.training.algorithms import private_steps as P
from metadp.training.algorithms.contributions import query_sums_given
from metadp.training.run.trainer import TrainConfig, stream_seed, train
from metadp.verify.canaries import CITATION, AuditSampler, Canaries, canary_pool, sinusoid_mse
from metadp.verify.canary_bounds import check_audit_plan
from metadp.verify.one_run import guess_and_bound, simulated_power
from metadp.verify.one_run_fdp import fdp_audit

__all__ = ["DEFECT", "SupportAudit", "support_bounds", "run_support_audit"]

ALGORITHM = "dp-maml-sample"
_Tensors = Dict[str, torch.Tensor]  # name -> tensor: a model's parameters, or one tensor per parameter
DEFECT = "second-order"
WHAT = ("second-order meta-gradients, accounted as dp-maml.txt Alg. 2 accounts them: a support record costs the inner "
        "Gaussians only (its un-noised Hessian in the outer gradient is not charged; docs/findings.md, Finding 4)")


class SupportAudit:
    """The trainer's ``audit`` instrumentation for support-record canaries (module docstring): Poisson
    sampling kept (record level: no canary task is absent), nothing planted in the run itself (the
    control's defect is in its accounting), the inner noise replayed and every release scored."""

    def __init__(self, canaries: Canaries, model: torch.nn.Module, loss_fn: Callable[..., torch.Tensor],
                 config: TrainConfig):
        if not (config.inner_noise > 0 and math.isfinite(config.inner_clip)):
            raise ValueError("the support-record audit needs inner noise (z_in > 0) and a finite inner clip")
        self.k, self.model, self.loss_fn, self.c = canaries, model, loss_fn, config
        m = canaries.rows.numel()
        self.first = canaries.pool.size - m  # canary hosts are the pool's last m rows
        self.scores, self.inner, self.outer = np.zeros(m), np.zeros(m), np.zeros(m)
        self.appearances = np.zeros(m, dtype=np.int64)
        self.shifts: List[float] = []  # |a - b| / (z C) of every appearance
        self.steps = 0
        self.start = {n: p.detach().clone() for n, p in F.param_dict(model).items()}
        self.names = list(self.start)
        self.std_in = config.inner_noise * config.inner_clip
        self._chunks: List[Tuple[torch.Tensor, _Tensors, _Tensors]] = []

    # -- the trainer's hooks ---------------------------------------------------------------------
    def attach(self, run: Any) -> None:
        if not hasattr(run.sampler, "rate") or not hasattr(run.sampler, "pool_size"):
            raise ValueError("the canary audit runs Poisson task sampling (sampling.scheme = 'poisson')")
        absent = torch.zeros(run.sampler.pool_size, dtype=torch.bool)  # record level: every host stays in the pool
        self.sampler = run.sampler = AuditSampler(run.sampler, absent, None)

    def contributions(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        def replayed(alg: Any, model: Any, params: Any, pool: Any, rows: Any, loss_fn: Any, c: Any,
                     noise_gen: Any) -> Any:
            state = noise_gen.get_state()
            out = fn(alg, model, params, pool, rows, loss_fn, c, noise_gen)
            replay = torch.Generator(device=noise_gen.device)
            replay.set_state(state)  # the same draws, in the same order, as ``contributions.query_sums``
            noise = P.draw_inner_noise(params, rows.numel(), c.inner_steps, replay)
            self._chunks.append((rows, noise, out[0]))
            return out

        return replayed

    def clipping(self, on: bool) -> bool:
        return on

    def release_std(self, std: float) -> float:
        return std

    def observe(self, step: int, params: _Tensors, release: _Tensors, std: float) -> None:
        self.steps += 1
        chunks, self._chunks = self._chunks, []
        rows = torch.cat([c[0] for c in chunks])
        noise = {n: torch.cat([c[1][n] for c in chunks]) for n in self.names}
        contribution = self._flat({n: torch.cat([c[2][n] for c in chunks]) for n in self.names})
        self._score(params, rows, noise, contribution, release, std)

    # -- scoring ---------------------------------------------------------------------------------
    def _flat(self, d: _Tensors) -> np.ndarray:
        return torch.cat([d[n].reshape(d[n].shape[0], -1) for n in self.names], dim=1).double().cpu().numpy()

    def _slot0_along_iterates(self, params: _Tensors, rows: torch.Tensor, noise: _Tensors) -> Tuple[_Tensors, ...]:
        """The first support record's clipped gradient, as the run has it, with the canary in and out, at
        each released inner iterate theta^0 = phi, ..., theta^{S-1} of the hosts ``rows`` (the run's own
        inner loop, replayed with its noise): three dicts name -> [B, S, *shape]."""
        k, c = self.k, self.c
        (xa, ya), (xi, yi), (xo, yo) = (pool.batch(rows)[:2] for pool in (k.pool, k.pool_in, k.pool_out))
        divisor = float(xa.shape[1])

        def one(x_s: torch.Tensor, y_s: torch.Tensor, x_in: torch.Tensor, y_in: torch.Tensor, x_out: torch.Tensor,
                y_out: torch.Tensor, nz: _Tensors) -> _Tensors:
            theta = params
            found: List[_Tensors] = []
            x0, y0 = torch.stack([x_s[0], x_in[0], x_out[0]]), torch.stack([y_s[0], y_in[0], y_out[0]])
            for step in range(c.inner_steps):  # the trainer's own inner step, one at a time
                found.append(P.clip_rows(P._per_example(self.model, self.loss_fn, theta, x0, y0), c.inner_clip))
                theta = P.private_inner_adapt(self.model, theta, x_s, y_s, self.loss_fn, 1, c.inner_lr, c.inner_clip,
                                              self.std_in, {n: t[step:step + 1] for n, t in nz.items()}, divisor,
                                              first_order=True)
            return {n: torch.stack([f[n] for f in found], dim=1) for n in self.names}  # name -> [3, S, *shape]

        g = torch.vmap(one, randomness="error")(xa, ya, xi, yi, xo, yo, noise)
        return tuple({n: t[:, j] for n, t in g.items()} for j in range(3))

    def _pair(self, params: _Tensors, rows: torch.Tensor, noise: _Tensors) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(a, b, inner llr) of the hosts ``rows`` at their released inner steps (module docstring): each
        contribution [B, P] with the canary in and out, the inner noise of every step solved from its
        v = sum + s_in N at the released iterate."""
        k, c = self.k, self.c
        actual, g_in, g_out = self._slot0_along_iterates(params, rows, noise)
        n_in = {n: noise[n] + (actual[n] - g_in[n]) / self.std_in for n in self.names}
        n_out = {n: noise[n] + (actual[n] - g_out[n]) / self.std_in for n in self.names}
        alg = c.family
        a, _ = query_sums_given(alg, self.model, params, k.pool_in.batch(rows), self.loss_fn, c, n_in)
        b, _ = query_sums_given(alg, self.model, params, k.pool_out.batch(rows), self.loss_fn, c, n_out)
        square: Callable[[_Tensors], Any] = lambda z: sum(  # noqa: E731
            z[n].double().flatten(start_dim=1).square().sum(1) for n in self.names)
        inner = 0.5 * (square(n_out) - square(n_in))  # summed over the S inner Gaussians
        return self._flat(a), self._flat(b), inner.numpy()

    def _score(self, params: _Tensors, rows: torch.Tensor, noise: _Tensors, contribution: np.ndarray, release: _Tensors,
               std: float) -> None:
        real = int(self.sampler.last.sum())  # the sampled rows come first, then the pads
        rows, contribution = rows[:real], contribution[:real]
        rows = rows.cpu()
        hosts = np.nonzero(rows.numpy() >= self.first)[0]
        if hosts.size == 0:
            return
        r = torch.cat([release[n].reshape(-1) for n in self.names]).double().cpu().numpy()
        others = np.ones(real, dtype=bool)
        others[hosts] = False
        a, b, inner = self._pair(params, rows[hosts], {n: t[hosts] for n, t in noise.items()})
        d = a - b
        e = r - contribution[others].sum(axis=0) - 0.5 * (a + b).sum(axis=0)
        norm = np.linalg.norm(d, axis=1)
        unit = d / np.maximum(norm, 1e-300)[:, None]
        cross = (unit @ d.T) ** 2 / 4.0  # [i, h]: host h's +-d_h / 2 along d_i
        var = std**2 + cross.sum(axis=1) - np.diag(cross)
        outer = norm * (unit @ e) / var
        index = rows[hosts].numpy() - self.first
        self.inner[index] += inner
        self.outer[index] += outer
        self.scores[index] += inner + outer
        self.appearances[index] += 1
        self.shifts.extend((norm / std).tolist())

    def initial_shift(self, std: float, seed: int) -> float:
        """Median |a - b| / (z C) over the canaries at the initial model, one fresh inner draw each."""
        rows = self.k.rows
        gen = torch.Generator().manual_seed(stream_seed(seed, "support-shift"))
        noise = P.draw_inner_noise(self.start, rows.numel(), self.c.inner_steps, gen)
        a, b, _ = self._pair(self.start, rows, noise)
        return float(np.median(np.linalg.norm(a - b, axis=1))) / std


def support_bounds(plan: Plan, steps: int, *, noise: float, inner_noise: float, query_per_task: int,
                   first_order: bool, inner_steps: int = 1) -> List[Dict[str, Any]]:
    """The two bounds for a support record replaced (sensitivity 2 C_in inside, each of the host's m_q
    clipped query gradients moved by up to 2 C by the Jacobian): the first-order argument (inner Gaussian
    only, shift 2 sqrt(S) / z_in) and metadp's second-order charge, each the revealed pair composed over
    ``steps`` by PLD. The first is the claim the audit tests (``certified_by_the_run``): for a first-order
    run it holds; for a second-order run it is the control's defect (``holds_for_this_run`` False)."""
    q = cast(Poisson, plan.sampling).rate  # (check_audit_plan: Poisson)
    inner = 2.0 * math.sqrt(inner_steps) / inner_noise
    second = math.sqrt(inner**2 + (2.0 * query_per_task / noise) ** 2)
    out: List[Dict[str, Any]] = []
    for name, shift, holds in (("inner Gaussian only", inner, first_order),
                               ("second order (metadp)", second, True)):
        event = ev.EpisodicSampled(1, q, 1.0, ev.Gaussian(1.0 / shift), 1.0)
        eps = certified_epsilon(ev.SelfComposed(event, steps), plan.delta, accountant="pld")
        out.append({"bound": name, "epsilon": eps, "epsilon_display": format_upper(eps), "event": repr(event),
                    "description": event.describe(), "steps": steps, "shift": shift, "holds_for_this_run": holds,
                    "accountant": "pld", "certified_by_the_run": name == "inner Gaussian only",
                    "note": ("the claim audited" + ("" if holds else "; it does NOT hold for this run"))
                    if name == "inner Gaussian only" else "valid for either order"})
    return out


def run_support_audit(plan: Plan, *, canaries: int, defect: Optional[str] = None, beta: float = 0.05,
                      inner_lr: float = 1.0, inner_noise: float = 40.0, inner_steps: int = 1, amplitude: float = 1.0,
                      clip: float = 1.0,
                      outer_lr: Optional[float] = None, seed: int = 0, sizes: Tuple[int, ...] = (1, 16, 16, 1),
                      power_runs: int = 200, out_dir: Union[str, Path, None] = None) -> Dict[str, Any]:
    """Trains ``plan``'s sampling, noise and steps with ``dp-maml-sample`` (first order; second order for
    the control ``defect="second-order"``) on a sinusoid pool whose last ``canaries`` tasks each hold a
    support-record canary, and audits the run against the support record's first-order claim (module
    docstring).

    Returns:
        The audit's report, in the schema of ``metadp.verify.canaries.run_canary_audit`` (``record_bounds``:
        ``support_bounds``), with the settings, the per-appearance shifts and the scores' parts.

    Raises:
        ValueError: on a plan or settings the audit does not support, before training.
    """
    _check(plan, canaries, defect, inner_lr, inner_noise)
    inner_steps = check_count("inner_steps", inner_steps, minimum=1)
    first_order = defect is None
    alg = algorithms.get(ALGORITHM)
    config = TrainConfig(algorithm=ALGORITHM, unit="record", sampler="poisson", steps=plan.steps,
                         meta_batch=cast(float, plan.sampling.expected_batch), delta=plan.delta, epsilon=math.inf,
                         noise_multiplier=cast(float, plan.noise.multiplier), inner_noise=inner_noise, inner_clip=1.0,
                         clip=clip,
                         inner_steps=inner_steps, inner_lr=inner_lr, first_order=first_order,
                         outer_lr=outer_lr if outer_lr is not None else alg.default_outer_lr, seed=seed,
                         checkpoint_every=max(1, plan.steps))
    k = canary_pool(cast(int, cast(Poisson, plan.sampling).population), canaries, "record", amplitude, seed, "data")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(stream_seed(seed, "model"))
        model = models.MLP(tuple(sizes))
    audit = SupportAudit(k, model, sinusoid_mse, config)
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = Path(out_dir) if out_dir is not None else Path(tmp) / "run"
        result = train(model, k.pool, sinusoid_mse, config, run_dir, audit=audit)
    report = _report(plan, audit, result.report, beta=beta, sizes=sizes)
    if defect is not None:
        shift = audit.initial_shift(cast(float, plan.noise.multiplier) * clip, seed)
        report["control"] = {
            "defect": defect, "what": WHAT, "initial_shift": shift,
            "predicted_power": predicted_power(plan, audit.steps, canaries, report["certified"]["epsilon"], shift,
                                               beta=beta, runs=power_runs, seed=seed),
            "note": "a CONTROL: this run's accounting omits the Hessian term on purpose; the certified epsilon "
                    "(the claim audited) does not hold, and the audit should flag it"}
    return report


def _check(plan: Plan, canaries: int, defect: Optional[str], inner_lr: float, inner_noise: float) -> None:
    if defect not in (None, DEFECT):
        raise ValueError(f"dp-maml-sample's audit plants only the defect {DEFECT!r}, got {defect!r}")
    check_audit_plan(plan, canaries)
    for name, value in (("inner_lr", inner_lr), ("inner_noise", inner_noise)):
        if not (math.isfinite(value) and value > 0):
            raise ValueError(f"{name} must be a finite number > 0, got {value!r}")


def _report(plan: Plan, audit: SupportAudit, run_report: Dict[str, Any], *, beta: float,
            sizes: Tuple[int, ...]) -> Dict[str, Any]:
    """The audit's report (``run_support_audit``), without the control's entries."""
    c, k = audit.c, audit.k
    query = k.pool.query_per_task
    bounds = support_bounds(plan, audit.steps, noise=c.noise_multiplier, inner_noise=c.inner_noise,
                            query_per_task=query, first_order=c.first_order, inner_steps=c.inner_steps)
    claim = bounds[0]["epsilon"]
    tests, family = guess_and_bound({"white-box": audit.scores}, k.included, beta=beta, delta=plan.delta,
                                    claimed_epsilon=claim)
    flagged = any(t.p_value_at_claim < beta / family for t in tests)
    lower = max(t.epsilon_lower for t in tests)
    run_record: Dict[str, Any] = next((v for v in run_report.get("views", ()) if v.get("view") == "record"), {})
    shifts = np.asarray(audit.shifts) if audit.shifts else np.zeros(1)
    return {
        "audit": "one-run canary audit of a training run (support records of sample-level DP-MAML)",
        "method": CITATION, "algorithm": ALGORITHM, "plan": plan.name, "data": "sinusoid", "view": "record",
        "canaries": k.rows.numel(), "canary_kind": "support record", "canaries_included": int(k.included.sum()),
        "steps": audit.steps, "confidence": 1 - beta, "tests": family, "delta": plan.delta,
        "certified": {"epsilon": claim, "epsilon_display": format_upper(claim), "bound": "upper", "unit": "record",
                      "accountant": "pld", "relation": "substitution (one support record replaced)",
                      "claim": "a support record costs the inner Gaussian only (first-order argument)"},
        "epsilon_lower": lower, "epsilon_lower_display": format_lower(lower), "bound": "lower",
        "scorers": [t.to_dict() for t in tests],
        # the f-DP (Gaussian) empirical figure beside it (one_run_fdp.fdp_audit; never the verdict)
        "fdp": fdp_audit({"white-box": audit.scores}, k.included, beta=beta, delta=plan.delta),
        "verdict": "VIOLATION" if flagged else "consistent",
        "record_bounds": bounds,
        "run_record_view": {"epsilon": run_record.get("epsilon"), "event": run_record.get("event"),
                            "relation": run_record.get("relation"), "bound": "upper"},
        "settings": {"first_order": c.first_order, "inner_steps": c.inner_steps, "inner_lr": c.inner_lr,
                     "inner_noise": c.inner_noise,
                     "inner_clip": c.inner_clip, "noise_multiplier": c.noise_multiplier, "clip": c.clip,
                     "query_per_task": query, "support_per_task": k.pool.k_support,
                     "rate": cast(Poisson, plan.sampling).rate,
                     "model": list(sizes)},
        "shift": {"median": float(np.median(shifts)), "max": float(np.max(shifts)),
                  "appearances": int(audit.appearances.sum()),
                  "what": "|a - b| / (z C): a host's contribution with the canary in against out, at its released "
                          "inner step, in outer-noise standard deviations"},
        "score_parts": {"inner_abs_mean": float(np.mean(np.abs(audit.inner))),
                        "outer_abs_mean": float(np.mean(np.abs(audit.outer)))},
        "control": None,
    }


def predicted_power(plan: Plan, steps: int, m: int, claim: float, shift: float, *, beta: float, runs: int,
                    seed: int) -> float:
    """The probability that the game flags ``claim`` when each canary's host appears Bin(steps, q) times
    (revealed), each appearance a projection N(+-shift / 2, 1) scored by its likelihood ratio shift y
    (the inner Gaussian's share, at most 2 / z_in per appearance, is left out; the shift is the median
    at the initial model, so this is a prediction, not a bound on the run's power)."""
    q = cast(Poisson, plan.sampling).rate  # (check_audit_plan: Poisson)

    def scores(count: int, rng: np.random.Generator, sign: float) -> np.ndarray:
        hits = rng.binomial(steps, q, size=count)
        y = rng.standard_normal(count) * np.sqrt(hits) + sign * 0.5 * shift * hits
        return cast(np.ndarray, shift * y)

    return simulated_power(lambda c, rng: scores(c, rng, 1.0), lambda c, rng: scores(c, rng, -1.0), m, claim,
                           beta=beta, delta=plan.delta, scorers=1, runs=runs, seed=seed)
