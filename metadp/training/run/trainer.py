"""One readable loop for MAML, Reptile and their private forms, that stops exactly when the planned
budget is spent (DESIGN.md sec. 4 and 7).

Algorithms (``TrainConfig.algorithm``; registered in ``metadp.training.algorithms``, which adds more):

==================  ==================================================================  ======================
algorithm           a step                                                              released with noise
==================  ==================================================================  ======================
maml                per-task meta-gradients (first or second order), averaged, Adam     nothing (non-private)
reptile             per-task SGD updates theta_i - theta, averaged, SGD on them          nothing (non-private)
dp-maml             dp-maml.txt Alg. 1: per-task meta-gradients clipped to C, summed,     the sum, N(0, (zC)^2)
                    noise once, Adam
dp-maml-sample      dp-maml.txt Alg. 2: DP inner loop (per-example clip C_in, noise       inner sums; the sum
                    z_in C_in), per-example query gradients clipped to C, summed over
                    all tasks, noise once, Adam
dp-reptile          dp-meta-learning-task-global.txt Alg. 1 (batched): full-batch DP-SGD  each task's update
                    inside each task, updates averaged without further noise, SGD
dp-agr              dp-fedmeta.txt Alg. 1-2: clients' meta-gradients clipped by the       the sum, N(0, (zC)^2)
                    server, summed, noise once, Adam; one pass over clients by default
dp-agrlr            dp-fedmeta.txt Alg. 2-3: each client runs the sample-level DP         clients' updates;
                    computation and adds its own noise; the server as in dp-agr           the sum
==================  ==================================================================  ======================

Every run executes a plan (``metadp.plan``): a plan file's, or the plan a configuration compiles to
(``state.config_plan``; ``metadp train --save-plan`` writes it). The privacy of a run is the plan's set
of *views* (``metadp.releases``): task or client, record, and record against the party that sees the
clients' updates. Before step 1 the chosen view (``unit``)
gives the schedule: the last step within the budget (per step, per pass, or the visit cap per
record); the loop stops there. Every release is appended to each view's hash-chained ledger
(``ledger-<view>.jsonl``, fsync) *before* the update uses it; checkpoints hold the parameters,
optimiser, sampler, generator and clipping states and each ledger's length and head; a resumed run
counts every ledger entry, including releases after the last checkpoint (or all of them, from step 0,
when the checkpoint is lost), and never resets spent budget. At the end ``privacy_report.json`` is the
plan's report over the releases on record (``metadp plan --json`` of the plan, for a run that completes
it), every view charged as its ledger is.

The run folder (``metadp.training.run.folder``): ``run.json`` keeps the configuration, and a resumed
run must match it; one run writes at a time (a lock); every refusal comes before anything is written.

Samplers: Poisson over the fixed pool of tasks (static shapes: the sampled rows padded, pads
weighted 0; an empty sample still releases noise), fixed-size batches (substitution relation), and
one pass (each task in exactly one step of a pass, balls in bins). The update divides by the
*expected* batch size (the realised size of a Poisson sample is private).

Non-private runs use the same loop with no clipping and no noise, so with z = 0 and C = inf each DP
path reproduces its non-private path. No clipping threshold is computed from raw gradient norms unless
``clip_policy="raw-percentile"``, which exists only to reproduce dp-maml.txt and voids every guarantee.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import time
import warnings
from pathlib import Path
from typing import Callable, Dict, Optional

import torch

from metadp.accounting.adaptive_clipping import sum_noise_multiplier
from metadp.report import format_upper
from metadp.training.algorithms import functional as F
from metadp.training.run import folder as run_folder
from metadp.training.run.config import ALGORITHMS, SAMPLERS, TrainConfig, TrainResult
from metadp.training.algorithms.contributions import resolve as contribution_of
from metadp.training.algorithms.clipping import clip_rule
from metadp.training.engines import distributed
from metadp.training.engines.local import LOCAL
from metadp.training.run.ledgers import json_safe
from metadp.training.run.state import _Run, calibrate, config_plan, outer_optimizer, run_views, stream_seed

__all__ = ["TrainConfig", "TrainResult", "train", "check_run", "calibrate", "run_views", "stream_seed", "ALGORITHMS",
           "SAMPLERS", "ResumeWarning", "TrainingInterrupted"]


def _save(path: Path, state: dict) -> None:
    tmp = path.with_suffix(".tmp")
    torch.save(state, tmp)
    with open(tmp, "rb") as f:
        os.fsync(f.fileno())
    os.replace(tmp, path)  # atomic: a crash leaves the previous checkpoint


def _flat_norm(tensors: Dict[str, torch.Tensor]) -> float:
    return math.sqrt(sum(float(t.double().square().sum()) for t in tensors.values()))


class ResumeWarning(UserWarning):
    """A resumed run goes on in a way the user should know about (a lost checkpoint: restart from step 0)."""


class TrainingInterrupted(KeyboardInterrupt):
    """Ctrl-C (SIGINT) stopped the loop; the message says where, and that ``resume=True`` continues it.

    The ledgers hold every release made (each is fsynced before it is used) and the last checkpoint is
    intact (checkpoints are replaced atomically), so a resumed run forgets no spent budget.
    """


def _load_checkpoint(path: Path) -> dict:
    """The checkpoint's state, or a ValueError that names the file (a torn or foreign file raised pickle's or
    torch's own error after the run had started)."""
    try:
        state = torch.load(path, weights_only=False)
    except Exception as err:  # pickle, zip and torch errors alike: the file is not a checkpoint this run wrote
        raise ValueError(f"--resume: {path} cannot be read as a checkpoint ({type(err).__name__}); move it away to "
                         "restart from step 0 with every release on the ledgers still charged, or choose another "
                         "--out") from None
    if not isinstance(state, dict) or not {"params", "optimizer", "run", "step", "losses"} <= set(state):
        raise ValueError(f"--resume: {path} is not a checkpoint of metadp train; move it away or choose another --out")
    return state


def _say_rerun(run: _Run, step: int) -> None:
    """Tells (a ``ResumeWarning``) a resumed run that releases were made after its checkpoint: those steps run
    again and are charged again, every earlier release staying on the ledger."""
    ledger = run.primary_ledger
    after = [e for e in ledger.entries if e.step >= step] if ledger is not None else []  # 0-based step indices
    if after:
        warnings.warn(f"--resume: the checkpoint is at step {step}, but the {run.primary.key} ledger holds "
                      f"{len(after)} release(s) made after it (steps {after[0].step + 1}-{after[-1].step + 1}) by the "
                      f"interrupted run; those steps run again and are charged again: every release stays on the "
                      "ledger, so the budget is safe, and the run's epsilon counts them all", ResumeWarning,
                      stacklevel=3)


def _check_ledgers(out: Path, state, changed, run: _Run, warn) -> None:
    """Refuses ledgers in ``out`` this run cannot continue; says (``warn``) when a lost checkpoint makes
    the resumed run restart from step 0. Reads only."""
    if not state.holds_run:
        return
    mismatch = run.ledgers.mismatch(state.ledgers)
    if mismatch is not None:
        why = f" (changed: {'; '.join(changed)})" if changed else ""
        raise ValueError(f"--resume: this run cannot continue the ledgers in {out}{why}: {mismatch}; a ledger holds "
                         "one view's releases of one event (change no setting that changes the noise, the sampling "
                         "or the algorithm), or choose another --out")
    if state.checkpoint or warn is None:
        return
    primary = state.ledgers.get(f"ledger-{run.primary.key}.jsonl") if run.primary is not None else None
    spent = (f"the {run.primary.key} view has spent epsilon <= "
             f"{format_upper(primary.spent(run.config.delta))} at delta "
             f"{run.config.delta:g}" if primary is not None and len(primary) else None)
    warn(run_folder.lost_checkpoint_note(out, state, spent))


def _warn(message: str) -> None:
    warnings.warn(message, ResumeWarning, stacklevel=3)


def train(model: torch.nn.Module, pool, loss_fn: Callable, config: TrainConfig, out_dir, *,
          device: str = "cpu", progress: Optional[Callable[[int, float, float], None]] = None,
          resume: bool = False, resume_changed: bool = False, setup: Optional[dict] = None,
          warn: Optional[Callable[[str], None]] = None, plan=None, engine=None, audit=None) -> TrainResult:
    """Trains ``model`` on the task ``pool`` (``tasks.SinusoidPool`` or ``tasks.EpisodePool``).

    ``out_dir`` receives ``run.json`` (the configuration and ``setup``), one ``ledger-<view>.jsonl`` per
    privacy view, ``checkpoint.pt``, ``metrics.jsonl`` and, at the end, ``privacy_report.json``
    (``metadp.training.run.folder``). ``progress(step, loss, epsilon)`` is called after each step with
    the budget view's certified epsilon so far.

    ``plan``: a ``metadp.plan.Plan`` the run executes (``metadp.training.run.plan_run``): its sampler and
    guarantees replace the configuration's; ``pool`` is then the plan's task pool (``population`` tasks)
    or, for fresh episodes, the image tensor [classes, per_class, C, H, W]; ``config`` carries the plan's
    settings (``plan_run.plan_settings``) and the model and optimiser settings.

    ``engine``: where each step's per-task contributions are computed (None: here, ``engines.LOCAL``).
    Otherwise an engine as ``metadp.training.engines`` describes it (``clipped_sum`` and ``report_fields``;
    e.g. ``engines.flower``'s strategy, whose clients compute them); sampling, noise, ledgers, update,
    checkpoints and report stay this loop's.

    ``audit``: test instrumentation of a canary audit (``metadp.verify.canaries``; never set by ``metadp
    train``), with ``attach(run)`` and the methods of ``_Unaudited`` (whose docstring says what each may do).

    Every refusal comes before anything is written: the configuration's (no guarantee to budget, a
    budget that does not cover one release), an output path that cannot be a folder, a folder that holds
    a run when ``resume`` is False, and with ``resume`` a run started on other ``setup`` (data, model) or
    with another algorithm, a run started with other settings unless ``resume_changed`` (learning rates
    and ``chunk_size`` may change freely), and ledgers holding another event than this run would release
    (another noise, sampling or view: one ledger composes one event). ``resume=True`` on a folder with
    no run starts one. A resumed run continues from ``checkpoint.pt`` and counts every ledger entry,
    including releases after the checkpoint; with the checkpoint lost it restarts from step 0 with every
    release still charged, and says so through ``warn`` (default: a ``ResumeWarning``). Two runs never
    write into one folder at once (``run_folder.locked``).

    Many processes (``torch.distributed`` initialised with more than one; ``engines.distributed``): call
    ``train`` with the same arguments on every rank. Rank 0 runs this loop and writes every file; the other
    ranks compute their shares of each step's tasks and return rank 0's result.

    Raises:
        ValueError: every refusal above (``LedgerError`` names a corrupt ledger's file and line).
        TrainingInterrupted: on Ctrl-C (a ``KeyboardInterrupt``), with where the run stopped.
        distributed.RankStopped: on a rank other than 0, when rank 0 stopped with an error.
    """
    here = distributed.world()
    if here is not None and here.rank != 0:
        return distributed.serve(model, pool, loss_fn, device, here)
    if here is not None:
        with distributed.Leader(pool, device, here) as lead:
            lead.check(config, engine, audit)  # (the other ranks are in serve's first collective)
            lead.result = _train(model, pool, loss_fn, config, out_dir, device, progress, resume, resume_changed,
                                 setup, warn, plan, lead, audit)
        return lead.result
    return _train(model, pool, loss_fn, config, out_dir, device, progress, resume, resume_changed, setup, warn,
                  plan, engine, audit)


def _train(model, pool, loss_fn, config, out_dir, device, progress, resume, resume_changed, setup, warn, plan,
           engine, audit) -> TrainResult:
    c = config
    out, record, state, changed, run = _prepared(pool, c, out_dir, device, resume, resume_changed, setup, plan,
                                                 _warn if warn is None else warn)
    run_folder.create(out)
    with run_folder.locked(out):
        if run_folder.inspect(out).run_files != state.run_files:  # another run wrote here after the first check
            state, changed = run_folder.check_folder(out, record, resume, resume_changed)
            _check_ledgers(out, state, changed, run, None)
        _write_run_file(out, record, state)
        run.ledgers.open(out, resume)
        if audit is not None:
            audit.attach(run)
        try:
            return _loop(model, pool, loss_fn, c, out, run, device, progress, resume, engine,
                         _UNAUDITED if audit is None else audit)
        finally:
            run.close()


def _write_run_file(out: Path, record: dict, state) -> None:
    """``run.json``: this run's record, with the settings of the runs before it in the folder (``history``:
    each with the releases made before it changed) when they differ."""
    stored = state.stored
    if stored is None or "setup" not in stored or stored["config"] != record["config"]:
        history = list(stored.get("history", [])) if stored is not None and "setup" in stored else []
        if stored is not None:
            history.append({"config": stored["config"], "releases_before": state.releases, "until": time.time()})
        run_folder.write_run_file(out, dict(record, history=history))


def _prepared(pool, c: TrainConfig, out_dir, device, resume, resume_changed, setup, plan, warn):
    """(out, run.json record, folder state, changed settings, run) after every refusal ``train`` makes before
    writing; reads only."""
    out = run_folder.check_out_path(out_dir)
    record = {"config": json_safe(dataclasses.asdict(c)), "setup": dict(setup or {})}
    state, changed = run_folder.check_folder(out, record, resume, resume_changed)
    run = _Run(pool, c, device, plan if plan is not None else config_plan(pool, c))
    _check_ledgers(out, state, changed, run, warn)
    return out, record, state, changed, run


def check_run(pool, config: TrainConfig, out_dir, *, device: str = "cpu", resume: bool = False,
              resume_changed: bool = False, setup: Optional[dict] = None, plan=None) -> None:
    """Raises every refusal ``train`` with these arguments would raise before writing anything, and writes
    nothing (e.g. before a federated simulation starts its workers)."""
    _prepared(pool, config, out_dir, device, resume, resume_changed, setup, plan, None)


class _Unaudited:
    """What ``_loop`` asks an audit, when there is none: every value as the run computed it.

    An audit (``train(audit=...)``, ``metadp.verify.canaries``) also has ``attach(run)``, called once before
    the first step: it may wrap ``run.sampler``, e.g. to leave out the canaries the audit excluded. Its
    ``contributions(fn)`` is the per-task contribution function the step uses, possibly wrapped (gradient
    canaries replace their rows' contributions before the clip, sum and noise run on them); ``clipping(on)``,
    ``release_std(std)`` and ``observe(step, params, release, std)`` see each release after its noise and
    before the update uses it. An honest audit returns ``on`` and ``std`` unchanged; the audit's planted
    defects (its controls) change them, and such a run's guarantee is void (its report says so)."""

    @staticmethod
    def contributions(fn):
        return fn

    @staticmethod
    def clipping(on: bool) -> bool:
        return on

    @staticmethod
    def release_std(std: float) -> float:
        return std

    @staticmethod
    def observe(step, params, release, std) -> None:
        return None


_UNAUDITED = _Unaudited()


def _loop(model, pool, loss_fn, c: TrainConfig, out: Path, run: _Run, device, progress, resume,
          engine=None, audit=_UNAUDITED) -> TrainResult:
    params = {k: v.to(device).requires_grad_(True) for k, v in F.param_dict(model).items()}
    alg = c.family
    step = _Release(c, run, audit, LOCAL if engine is None else engine, contribution_of(alg))
    optimizer = outer_optimizer(params.values(), c)
    done, losses = _resumed(out, params, optimizer, run) if resume and (out / "checkpoint.pt").exists() else (0, [])
    run.first_step = done
    scale = None
    saved = done
    try:
        while done < c.steps and run.releases(done) < run.last_step:
            new_pass = run.new_pass(done)  # a charged pass starts (run.new_pass)
            if new_pass and _passes_spent(run):
                break
            tasks, rows, weights = run.step_tasks(run.sampler.sample())
            visits = run.count_visits(rows, weights)
            added = 0
            if visits is not None:
                added = (int(visits.max()) if visits.numel() else 0) - run.max_visits
                if run.visits_on_record() + added > run.visit_cap:  # a record would pass the budget: stop first
                    break
            total, norms, task_losses, count = step.release(model, params, tasks, rows, weights, loss_fn, done)
            run.ledgers.charge(done, new_pass, added)  # every release is on record before it is used
            if visits is not None:
                run.record_visits, run.max_visits = visits, run.max_visits + added
            if scale is None:  # the divisor of the sum: fixed for the run (fresh episodes all have one shape)
                scale = alg.update_scale(run.expected, tasks.query_per_task)
            _update(optimizer, params, total, alg.update_sign, scale)
            _adapt_clipping(run, c, total, count, norms, weights)
            done += 1
            losses.append(float((task_losses.detach() * weights).sum() / weights.sum().clamp(min=1.0)))
            if progress is not None:
                progress(done, losses[-1], run.spent(done))
            if done % c.checkpoint_every == 0 or done >= c.steps or run.releases(done) >= run.last_step:
                _checkpoint(out, params, optimizer, run, done, losses)
                saved = done
    except KeyboardInterrupt:
        raise _interrupted(run, done, saved) from None
    if saved != done or not (out / "checkpoint.pt").exists():
        _checkpoint(out, params, optimizer, run, done, losses)
    return _result(out, params, run, done, losses, step.engine)


class _Release:
    """One step's release: the engine's clipped sum of the tasks' contributions, the Gaussian noise drawn once
    on the whole sum, and (quantile clipping) the noisy count of unclipped contributions on the same sample."""

    def __init__(self, c: TrainConfig, run: _Run, audit, engine, contribution):
        self.c, self.run, self.audit, self.engine = c, run, audit, engine
        self.contribution = audit.contributions(contribution)
        self.central = c.private and c.family.central_clip  # per-task clip, then noise on the sum
        rule = clip_rule(c.clip_policy)
        self.raw_norms = self.central and rule.reads_raw_norms
        self.quantile = rule.releases_count and self.central and c.bounded
        self.z_sum = (sum_noise_multiplier(c.noise_multiplier, c.quantile_count_noise) if self.quantile
                      else c.noise_multiplier)

    def release(self, model, params, tasks, rows, weights, loss_fn, done: int):
        """(the noisy sum, the contributions' norms before clipping or None, the tasks' losses, the noisy count
        or None)."""
        c, run, audit = self.c, self.run, self.audit
        detached = {k: v.detach() for k, v in params.items()}
        threshold = run.policy.threshold
        clipping = audit.clipping(self.central and math.isfinite(threshold) and c.bounded)
        total, norms, task_losses = self.engine.clipped_sum(
            c.family, model, detached, tasks, rows, weights, loss_fn, c, run, self.contribution,
            threshold if clipping else None, self.raw_norms)
        std = audit.release_std(c.family.release_std(c, threshold, self.z_sum))
        # the noise, once on the whole sum (one draw per tensor, as F.noisy_sum draws it unchunked; banded: run.add_noise)
        total = run.add_noise(total, std)
        audit.observe(done, detached, total, std)
        count = None
        if self.quantile:
            unclipped = ((norms <= threshold).to(weights.dtype) - 0.5) * weights
            count = float(unclipped.sum()) + c.quantile_count_noise * float(
                torch.randn((), generator=run.noise_gen, device=weights.device, dtype=torch.float64))
        return total, norms, task_losses, count


def _resumed(out: Path, params, optimizer, run: _Run):
    """(steps done, their losses) from the checkpoint, with the parameters, optimiser and run state restored."""
    state = _load_checkpoint(out / "checkpoint.pt")
    with torch.no_grad():
        for k, v in state["params"].items():
            params[k].copy_(v)
    optimizer.load_state_dict(state["optimizer"])
    run.load(state["run"])
    done, losses = state["step"], list(state["losses"])
    _say_rerun(run, done)
    return done, losses


def _passes_spent(run: _Run) -> bool:
    """Whether a pass-charged budget view has spent its passes (checked as a new pass starts)."""
    if run.primary is None or run.primary.charge != "pass":
        return False
    return (len(run.primary_ledger.entries) if run.primary_ledger is not None else 0) >= run.pass_cap


def _update(optimizer, params, total, sign: float, scale: float) -> None:
    """One optimiser step on the released sum times ``sign`` over ``scale`` (Reptile's sign moves towards the
    adapted parameters)."""
    optimizer.zero_grad()
    for k, p in params.items():
        p.grad = sign * total[k] / scale
    optimizer.step()


def _adapt_clipping(run: _Run, c: TrainConfig, total, count, norms, weights) -> None:
    """The clipping policy's update after a release: from released values only, except the raw-percentile
    policy, which reads raw norms and makes the run non-private (said when it starts)."""
    run.policy.after_release(_flat_norm(total) / run.expected)
    if count is not None:
        run.policy.after_count(count, run.expected)
    if clip_rule(c.clip_policy).reads_raw_norms and norms is not None:
        run.policy.after_raw_norms(norms[weights > 0].tolist())


def _interrupted(run: _Run, done: int, saved: int) -> TrainingInterrupted:
    """The Ctrl-C refusal: where the run stopped, what the ledgers hold and what ``--resume`` will charge."""
    ledger = run.primary_ledger
    held = f"; {len(ledger.entries)} releases of the {run.primary.key} view on record" if ledger is not None else ""
    rerun = (f"; --resume continues from the checkpoint: steps {saved + 1}-{done} are run again and charged again "
             "(their first releases stay charged: the budget stays safe, and the run stops earlier)"
             if done > saved else "; continue with --resume")
    return TrainingInterrupted(f"interrupted at step {done + 1} ({done} steps done; checkpoint at step {saved}); the "
                               f"ledgers hold every release{held}{rerun}")


def _result(out: Path, params, run: _Run, done: int, losses, engine) -> TrainResult:
    """Writes ``privacy_report.json`` and returns the run's result (its epsilon: the primary guarantee's)."""
    c = run.config
    report = run.report(done)
    report.update(engine.report_fields())
    (out / "privacy_report.json").write_text(json.dumps(report, indent=2), encoding="utf-8")
    # the plan's report: its epsilon is the primary guarantee's ("inf" in JSON where nothing finite is certified)
    epsilon = float(report["epsilon"]) if c.private else 0.0
    with torch.no_grad():
        final = {k: v.detach().clone() for k, v in params.items()}
    return TrainResult(final, run.releases(done), run.last_step, epsilon, tuple(losses), report)


def _checkpoint(out, params, optimizer, run: _Run, step, losses) -> None:
    _save(out / "checkpoint.pt", {
        "params": {k: v.detach().cpu() for k, v in params.items()}, "optimizer": optimizer.state_dict(),
        "run": run.state(), "step": step, "losses": list(losses)})
    with open(out / "metrics.jsonl", "a", encoding="utf-8") as f:
        f.write(json.dumps({"step": step, "loss": losses[-1] if losses else None,
                            # the budget view's certified upper bound so far (PLD), at the run's delta
                            "epsilon": run.spent(step, fresh=True), "epsilon_view": run.primary.key if run.primary else None,
                            "delta": run.config.delta if run.primary else None,
                            "clip": run.policy.threshold}) + "\n")
