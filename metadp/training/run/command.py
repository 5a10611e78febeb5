"""``metadp train``: MAML, Reptile and their private forms on sinusoid, synthetic glyphs or Omniglot, and
prototypical networks on obfuscated images (``protonet``, ``metadp.training.algorithms.protonet``).

    metadp train dp-maml --data sinusoid --epsilon 1 --delta 1e-5 --steps 2000 --out runs/sin
    metadp train dp-reptile --data glyphs --epsilon 4 --inner-steps 3 --out runs/rep
    metadp train maml --data omniglot --steps 500 --out runs/omni

With ``--epsilon`` and no noise given, the noise is calibrated so that the asked steps fit the budget
of ``--unit`` (certified, PLD; ``metadp.training.run.trainer.calibrate``); with a noise given, the run stops
at the last step within the budget. The run writes one ``ledger-<view>.jsonl`` per guarantee,
``checkpoint.pt``, ``metrics.jsonl``, ``privacy_report.json`` (every view's epsilon), ``evaluation.json``
and ``run.json`` (its settings) into ``--out``; ``--resume`` continues a killed or interrupted run without
forgetting spent budget, and refuses changed settings unless ``--resume-changed``.

Bad input (``metadp.training.run.arguments``: flags; the data folder; the output folder) is refused with one
line before anything is loaded or written; a flag that would not take effect is refused, never dropped.
Ctrl-C stops with one line and status 130 (``trainer.TrainingInterrupted``).

``protonet`` trains on obfuscated images (``--obfuscation``; DP-Pix at ``--epsilon`` per image) with an
optional jointly trained denoiser and writes ``metrics.jsonl``, ``model.pt``, ``evaluation.json`` and a
``privacy_report.json`` with the user's per-image guarantee against the server.


Needs torch: ``metadp.cli`` loads this module only when ``metadp train`` runs (the flags are in the
torch-free ``metadp.training.run.parser``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import math
import os
import sys
import warnings
from pathlib import Path

import torch
from tqdm import tqdm

from metadp.heartbeat import silence
from metadp.report import format_upper
from metadp.sampling import of_lot
from metadp.training.algorithms.clipping import clip_rule
from metadp.training import algorithms
from metadp.training.data import setups as data_setups
from metadp.training.data import datasets
from metadp.training.run import folder as run_folder
from metadp.training.run import processes, summary
from metadp.training.engines.distributed import RankLost, RankStopped
from metadp.training.run.arguments import check_device, check_processes, check_train_args
from metadp.training.engines import flower as flower_engine
from metadp.training.engines import flower_run
from metadp.training.engines.flower_launch import FederationError
from metadp.training.engines.federated import deployment_refusal, flower_mode, flower_refusal
from metadp.training.run.parser import CLI_OBFUSCATIONS
from metadp.plan import check_plan_certifies
from metadp.plan_solve import noise_keys
from metadp.training.run.plan_command import calibrated, check_plan_flags, config_table, load_run_plan, save_plan
from metadp.training.run.plan_run import fresh_episodes, plan_settings
from metadp.training.algorithms.protonet import ProtoConfig, evaluate_protonet, privacy_report, train_protonet
from metadp.training.run.size import check_run_size, estimate_run, plan_run_size, say_estimate
from metadp.training.run.trainer import ResumeWarning, TrainConfig, stream_seed, calibrate, train

__all__ = ["run_train"]

class _Bar:
    """A run's progress bar on stderr: made on the first step, so a refusal before it prints one line only, or at
    once (``now``) for a run long enough to say so. A context manager that closes it."""

    def __init__(self, total: int, desc: str, now: bool = False):
        self.total, self.desc, self.bar = total, desc, None
        if now:
            self._made()

    def _made(self):
        if self.bar is None:
            self.bar = tqdm(total=self.total, file=sys.stderr, desc=self.desc, leave=False,
                            disable=processes.rank() > 0)  # rank 0 shows a many-process run's progress
        return self.bar

    def show(self, step: int, postfix: dict) -> None:
        bar = self._made()
        bar.n = step
        bar.set_postfix(postfix, refresh=False)
        bar.refresh()

    def clear(self) -> None:
        if self.bar is not None:
            self.bar.clear()

    def __enter__(self) -> "_Bar":
        return self

    def __exit__(self, *exc) -> None:
        if self.bar is not None:
            self.bar.close()


def _run_protonet(args) -> None:
    obfuscation = CLI_OBFUSCATIONS[args.obfuscation or "none"]
    config = ProtoConfig(
        obfuscation=obfuscation, epsilon=args.epsilon, cell=args.cell, m=args.m, radius=args.radius,
        blur_sigma=args.sigma if obfuscation == "gaussian_blur" else None,
        noise_sigma=args.sigma if obfuscation == "gaussian_noise" else None,
        denoiser=args.denoiser, denoise_weight=1.0 if args.denoise_weight is None else args.denoise_weight,
        norm=args.norm, n_way=args.ways or 5, k_shot=args.shots or 5, k_query=args.query or 5, steps=args.steps,
        lr=args.outer_lr if args.outer_lr is not None else 1e-3, seed=args.seed)
    state = run_folder.inspect(args.out)
    if state.holds_run:
        raise ValueError(f"--out {args.out} holds a run ({', '.join(state.run_files)}); protonet runs cannot be "
                         "resumed: choose another --out")
    size = estimate_run(args.data, config.steps, 1.0, 0, device=args.device)  # one episode a step, drawn afresh
    check_run_size(size, force_long=args.force_long, steps_name="--steps", pool_name="--pool", batch_name=None)
    long = say_estimate(size, f"metadp train {args.algorithm}", sys.stderr)
    train_images, held_images, split = data_setups.resolve(datasets.get(args.data).split)(args)
    _check_protonet_shapes(args, config, train_images, held_images)
    run_folder.create(args.out)
    with _Bar(config.steps, args.algorithm, now=long) as bar, run_folder.locked(args.out):
        if run_folder.inspect(args.out).holds_run:  # another run wrote here meanwhile
            raise ValueError(f"--out {args.out} holds a run; choose another --out")
        result = train_protonet(train_images, config, args.out, device=args.device, progress=lambda step, m: bar.show(
            step, {"loss": f"{m['loss']:.3f}", "acc": f"{m['accuracy']:.2f}"}))
    evaluation = evaluate_protonet(result.model, held_images, config, n_tasks=args.eval_tasks, seed=10_000 + args.seed)
    report = privacy_report(config, result.releases_per_image_max, evaluation.releases_per_image_max, args.delta)
    out = Path(args.out)
    score = evaluation.score
    (out / "evaluation.json").write_text(json.dumps({
        "data": args.data, "split": split, "metric": score.metric, "mean": score.mean,
        "half_width_95": score.half_width, "tasks": score.n_tasks, "ways": config.n_way, "shots": config.k_shot,
        "query": config.k_query, "denoiser": config.denoiser, "config": dataclasses.asdict(config),
        "per_task": evaluation.per_task.tolist(), "evaluation_seed": 10_000 + args.seed}))
    (out / "privacy_report.json").write_text(json.dumps(report, indent=1))
    print(f"protonet ({'with' if config.denoiser else 'without'} denoiser, obfuscation {obfuscation}): "
          f"{config.steps:,} steps; {split}")
    print(f"evaluation ({config.n_way}-way {config.k_shot}-shot, obfuscated support and query): {score}")
    if report["formal"]:
        one = report["composed_epsilon"]["one_test_image"]
        most = report["composed_epsilon"]["training_image_max"]
        print(f"guarantee (the user's, against the server that receives the obfuscated images): {report['guarantee']}")
        print(f"  one released test image: epsilon <= {format_upper(one['epsilon_pure'])} (upper bound, pure DP)")
        print(f"  a training image re-obfuscated {most['releases']} times (the most in this run): epsilon <= "
              f"{format_upper(most['epsilon_pure'])} (pure, basic composition), <= "
              f"{format_upper(most['epsilon_at_delta'])} at delta = "
              f"{args.delta:g} (upper bound, PLD)")
    else:
        print(f"guarantee: {report['guarantee']}")
        print(f"WARNING: obfuscation {obfuscation} carries NO formal privacy guarantee: {report['guarantee']}",
              file=sys.stderr)
    print(f"files in {out}/")


def _check_protonet_shapes(args, config, train_images, held_images) -> None:
    """Refuses episodes the data cannot fill (training and held-out classes), before anything is written."""
    classes = min(train_images.shape[0], held_images.shape[0])
    per_class = min(train_images.shape[1], held_images.shape[1])
    if config.n_way > classes:
        raise ValueError(f"--ways must be at most {classes} with --data {args.data} (its training and held-out "
                         f"classes), got {config.n_way}")
    if config.k_shot + config.k_query > per_class:
        raise ValueError(f"--shots + --query must be at most {per_class} with --data {args.data} (images per "
                         f"class), got {config.k_shot} + {config.k_query}")


def _setup(args):
    """(model, pool, loss, default inner lr); the model's initial weights come from ``--seed`` (its own
    stream), so a run is reproducible."""
    make, pool, loss, inner_lr = data_setups.resolve(datasets.get(args.data).setup)(args)
    with torch.random.fork_rng(devices=[]):  # leaves the global generator as it was
        torch.manual_seed(stream_seed(args.seed, "model"))
        model = make()
    return model.to(args.device), pool, loss, inner_lr


def _evaluate(args, model, params, loss_fn, inner_lr):
    return data_setups.resolve(datasets.get(args.data).evaluate)(args, model, params, loss_fn, inner_lr)


def _evaluated(args, model, result, loss_fn, inner_lr):
    """(score, run folder) after the held-out evaluation of a finished run, written to ``evaluation.json``."""
    score = _evaluate(args, model, result.params, loss_fn, inner_lr)
    out = Path(args.out)
    (out / "evaluation.json").write_text(json.dumps({"data": args.data, "metric": score.metric, "mean": score.mean,
                                                     "half_width_95": score.half_width, "tasks": score.n_tasks}))
    return score, out


def _check_inputs(args) -> None:
    """Every refusal that needs no training data: flags, device, data folder, output folder (reads only)."""
    check_train_args(args)
    check_device(args.device)
    dataset = datasets.get(args.data)
    if dataset.check is not None:
        try:
            folder = data_setups.resolve(dataset.check)(args, one_shot=algorithms.get(args.algorithm).meta_loop)
        except (FileNotFoundError, ValueError) as err:  # the data folder is an input: refused like a bad flag
            raise ValueError(f"--data {args.data}: {err}") from None
        args.data_dir = folder
    run_folder.check_out_path(args.out)


def _stored_noise(args, private: bool):
    """(z, z_in) of the run being resumed in --out, or None: a resumed run keeps its (calibrated) noise."""
    if not (private and args.resume and args.noise is None and args.inner_noise is None):
        return None
    stored = run_folder.inspect(args.out).stored
    if stored is None:
        return None
    config = stored["config"]
    if config.get("algorithm") != args.algorithm:
        return None  # refused by train(): another algorithm
    return float(config["noise_multiplier"]), float(config["inner_noise"])


def _run_plan(args) -> None:
    """``metadp train ALGO --plan FILE`` (``metadp.training.run.plan_run``)."""
    alg = algorithms.get(args.algorithm)
    plan, table, long = _prepared_plan(args, alg)
    model, source, loss_fn, inner_lr = _setup(args)
    if args.fresh_episodes:
        try:
            source.check(plan.hierarchy)
        except ValueError as err:
            raise ValueError(f"--plan {args.plan} does not match --data {args.data}: {err}") from None
    inner_lr = args.inner_lr if args.inner_lr is not None else inner_lr
    config = _plan_config(args, plan, alg, inner_lr)
    if args.save_plan and not processes.rank():
        save_plan(args.save_plan, table)
    setup = {"--data": args.data, "--rotations": args.rotations, "--shots": args.shots,
             "--norm": args.norm if datasets.get(args.data).images else None, "--plan": table}
    with _Bar(plan.steps, args.algorithm, now=long) as bar:
        def progress(step, loss, spent):  # a Flower run knows the loss only from its metric lines (NaN before)
            bar.show(step, {"loss": f"{loss:.3f}"} if math.isfinite(loss) else {})

        def warn(message):
            bar.clear()
            print(f"metadp: warning: {' '.join(str(message).split())}", file=sys.stderr)

        if args.engine == "flower":  # metadp.training.engines.federated checked that Flower is installed
            setup["--engine"] = "flower"
            clients = flower_engine.SimulatedTasks(args.data, args.pool, args.seed, data_dir=_folder(args.data_dir),
                                                   rotations=args.rotations, norm=args.norm)
            result = flower_run.run_plan(config, args.out, plan=plan, table=table, tasks=clients,
                                         mode=flower_mode(args), superlink=args.superlink,
                                         root_certificates=args.root_certificates,
                                         timeout=args.client_timeout or 600.0, progress=progress, resume=args.resume,
                                         resume_changed=args.resume_changed, setup=setup, warn=warn)
        else:
            result = train(model, source, loss_fn, config, args.out, device=args.device, progress=progress,
                           resume=args.resume, resume_changed=args.resume_changed, setup=setup, plan=plan)
    if result is None:  # --superlink on another machine: the run folder is there
        print(f"the run finished on the SuperLink's machine ({args.superlink}); its run folder is {args.out} there")
        return
    if processes.rank():
        return  # rank 0 evaluates and reports
    score, out = _evaluated(args, model, result, loss_fn, inner_lr)
    summary.print_plan_run(args, plan, alg, result.report)
    print(f"evaluation: {score}; files in {out}/")


def _prepared_plan(args, alg):
    """(the plan, its table, whether the run is long enough to say so): the plan read, checked against the flags
    and the engine, calibrated to ``--epsilon`` where given, certified and sized, before any data is loaded."""
    plan, table = load_run_plan(args.plan)
    _check_inputs(args)
    check_plan_flags(args, plan)
    if args.engine == "flower":
        why = (flower_refusal(alg, plan, chunk_size=args.chunk_size, device=args.device)
               or deployment_refusal(args, getattr(plan.sampling, "population", None)))
        if why is not None:
            raise ValueError(why)
    if args.epsilon is not None:
        keys = noise_keys(table)
        was = ", ".join(f"{table[k.split('.')[0]][k.split('.')[1]]:g}" for k in keys)
        plan, table, z = calibrated(table, args.epsilon)
        print(f"noise calibrated to the plan's budget: {' = '.join(keys)} = {z:.6g} (the file says {was}); the plan's "
              f"{plan.units()[0].key} epsilon <= {args.epsilon:g} at delta {plan.delta:g}")
    if args.inner_steps is None:
        args.inner_steps = plan.release.inner_steps if plan.release is not None else 1
    if alg.private:
        check_plan_certifies(plan)
    size = plan_run_size(plan, args.data, args.inner_steps, args.device)
    check_run_size(size, force_long=args.force_long, steps_name="the plan's steps", pool_name="sampling.population",
                   batch_name="its tasks a step (sampling.batch_size, rate or episodes)")
    long = say_estimate(size, f"metadp train {args.algorithm} --plan {args.plan}", sys.stderr)
    args.fresh_episodes = fresh_episodes(plan)
    args.n_way = plan.hierarchy.levels[0].size if args.fresh_episodes else None
    if not args.fresh_episodes:
        args.pool = plan.sampling.population
    return plan, table, long


def _plan_config(args, plan, alg, inner_lr: float) -> TrainConfig:
    """The run's configuration: the plan's privacy settings (``plan_settings``) and the flags' optimisation ones."""
    flags = dict(inner_steps=args.inner_steps, inner_lr=inner_lr,
                 outer_lr=args.outer_lr if args.outer_lr is not None else alg.default_outer_lr,
                 outer_optimizer=args.outer_optimizer, outer_momentum=args.outer_momentum or 0.0,
                 first_order=args.first_order, clip=args.clip, clip_mode=args.clip_mode, seed=args.seed,
                 chunk_size=args.chunk_size, checkpoint_every=args.checkpoint_every)
    if args.inner_clip is not None:
        flags["inner_clip"] = args.inner_clip
    flags.update(plan_settings(plan, alg))  # the plan's privacy settings (its [release]'s too) win
    if args.clip_policy is not None and clip_rule(args.clip_policy).from_released:
        flags["clip_policy"] = args.clip_policy  # post-processing of the released sums: the plan's accounting holds
    return TrainConfig(algorithm=args.algorithm, **flags)


def _folder(path):
    return None if path is None else str(path)


def _check_flag_run_size(args, alg) -> bool:
    """Refuses a flag run that cannot end (``run_size``), before any data is loaded; True when its estimate is long
    enough that the run says so now and shows its bar from step 0."""
    scheme = of_lot(args.sampler or alg.default_sampler, args.pool, min(args.meta_batch, args.pool))
    size = estimate_run(args.data, args.steps, min(args.meta_batch, args.pool), args.pool, inner_steps=args.inner_steps,
                        poisson=scheme.draws_each_unit, device=args.device)
    check_run_size(size, force_long=args.force_long, steps_name="--steps", pool_name="--pool", batch_name="--meta-batch")
    return say_estimate(size, f"metadp train {args.algorithm}", sys.stderr)


def run_train(args):
    """``metadp train``; with ``--nproc N`` (outside torchrun) it starts N processes of the same command."""
    if (args.nproc or 1) > 1 and processes.world_size() < 2:
        return _launch(args)
    if processes.world_size() > 1:
        return _as_rank(args)
    try:
        return _run(args)
    except FederationError as err:  # a Flower process failed: one line, with where its logs are
        print(f"metadp: error: {' '.join(str(err).split())}", file=sys.stderr)
        return 1


def _launch(args) -> int:
    """``--nproc N``: the refusals that need no data made once, here, then N processes of this command
    (``processes.launch``); each process makes them again, silently where they pass."""
    silence()  # rank 0 reports, its heartbeat included
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        if args.plan is not None:
            _prepared_plan(args, algorithms.get(args.algorithm))
        else:
            _check_inputs(args)
            if algorithms.get(args.algorithm).meta_loop:
                _check_flag_run_size(args, algorithms.get(args.algorithm))
    return processes.launch(args.argv, args.nproc, args.out)


def _as_rank(args):
    """One process of a many-process run (``launch``'s or torchrun's): rank 0 runs and reports, the others
    compute their shares (``engines.distributed``) and print nothing."""
    check_processes(args, not algorithms.get(args.algorithm).meta_loop)  # before joining the others
    args.device = processes.init_from_env(args.device)
    if processes.rank():
        sys.stdout = open(os.devnull, "w")
    try:
        return _run(args)
    except RankStopped:
        return 0  # rank 0 stopped with an error and said it
    except RankLost as err:  # another process died: rank 0 says what the ledgers keep
        if not processes.rank():
            print(f"metadp: error: {err}; every release made is on the ledgers in {args.out} (each is written before "
                  "it is used): continue with --resume", file=sys.stderr)
        return 1
    finally:
        import torch.distributed as dist

        if dist.is_initialized():
            dist.destroy_process_group()


def _run(args) -> None:
    shown = warnings.showwarning

    def show(message, category, *rest, **kwargs):  # a resumed run's warnings as one line each, like the others
        if issubclass(category, ResumeWarning):
            print(f"metadp: warning: {' '.join(str(message).split())}", file=sys.stderr)
        else:
            shown(message, category, *rest, **kwargs)

    with warnings.catch_warnings():
        warnings.showwarning = show
        return _run_command(args)


def _run_command(args) -> None:
    if args.plan is not None:
        return _run_plan(args)
    _check_inputs(args)
    alg = algorithms.get(args.algorithm)
    if not alg.meta_loop:
        return _run_protonet(args)

    private = alg.private
    long = _check_flag_run_size(args, alg)
    model, pool, loss_fn, inner_lr = _setup(args)
    inner_lr = args.inner_lr if args.inner_lr is not None else inner_lr
    outer_lr = args.outer_lr if args.outer_lr is not None else alg.default_outer_lr
    epsilon = args.epsilon if args.epsilon is not None else math.inf
    noise = args.noise if args.noise is not None else 1.0
    stored = _stored_noise(args, private)
    z, z_in = stored or (noise, args.inner_noise if args.inner_noise is not None else noise)
    config = TrainConfig(algorithm=args.algorithm, unit=args.unit, sampler=args.sampler, steps=args.steps,
                         meta_batch=args.meta_batch, inner_steps=args.inner_steps, inner_lr=inner_lr, outer_lr=outer_lr,
                         outer_optimizer=args.outer_optimizer, outer_momentum=args.outer_momentum or 0.0,
                         first_order=args.first_order, clip=args.clip, clip_mode=args.clip_mode, noise_multiplier=z,
                         inner_clip=args.inner_clip, inner_noise=z_in, clip_policy=args.clip_policy,
                         count_noise=args.count_noise, epsilon=epsilon, delta=args.delta, seed=args.seed,
                         chunk_size=args.chunk_size, checkpoint_every=args.checkpoint_every)
    if stored is not None:
        print(f"noise of the run in {args.out} (resumed): z = {config.noise_multiplier:.4g}, "
              f"z_in = {config.inner_noise:.4g}")
    elif private and math.isfinite(epsilon) and args.noise is None and args.inner_noise is None:
        config = calibrate(pool, config)
        print(f"noise calibrated to the budget of the {config.budget_unit} view: z = {config.noise_multiplier:.4g}, "
              f"z_in = {config.inner_noise:.4g} ({args.steps:,} steps fit epsilon <= {epsilon:g} at delta "
              f"{args.delta:g}, the tightest of the accountants that interpret its event: accounting.certify)")
    if args.save_plan and not processes.rank():
        save_plan(args.save_plan, config_table(config, pool.size, pool.record_multiplicity(), pool.query_per_task,
                                               name=f"metadp train {args.algorithm} --data {args.data}"))
        print(f"plan written to {args.save_plan} (metadp plan {args.save_plan} certifies it)")
    if args.clip_policy is not None and clip_rule(args.clip_policy).reads_raw_norms:
        print("WARNING: --clip-policy raw-percentile computes clipping thresholds from raw gradient norms "
              "(dp-maml.txt Sec. 5.2.1): this run is NOT differentially private and reports no epsilon", file=sys.stderr)
    setup = {"--data": args.data, "--pool": args.pool, "--rotations": args.rotations,
             "--norm": args.norm if datasets.get(args.data).images else None}
    with _Bar(args.steps, args.algorithm, now=long) as bar:
        def progress(step, loss, spent):
            # the budget view's certified epsilon so far: an upper bound at --delta
            bar.show(step, {"loss": f"{loss:.3f}", f"eps({config.budget_unit})":
                            "<= " + format_upper(spent, 3) if private else "n/a (non-private)"})

        def warn(message):
            bar.clear()
            print(f"metadp: warning: {message}", file=sys.stderr)

        result = train(model, pool, loss_fn, config, args.out, device=args.device, progress=progress,
                       resume=args.resume, resume_changed=args.resume_changed, setup=setup, warn=warn)
    if processes.rank():
        return  # rank 0 evaluates and reports
    score, out = _evaluated(args, model, result, loss_fn, inner_lr)
    summary.print_flag_run(args, result, config, private, score, out)
