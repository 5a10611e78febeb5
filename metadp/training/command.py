"""``metadp train``: MAML, Reptile and their private forms on sinusoid, synthetic glyphs or Omniglot, and
prototypical networks on obfuscated images (``protonet``, ``metadp.training.protonet``).

    metadp train dp-maml --data sinusoid --epsilon 1 --delta 1e-5 --steps 2000 --out runs/sin
    metadp train dp-reptile --data glyphs --epsilon 4 --inner-steps 3 --out runs/rep
    metadp train maml --data omniglot --steps 500 --out runs/omni

With ``--epsilon`` and no noise given, the noise is calibrated so that the asked steps fit the budget
of ``--unit`` (certified, PLD; ``metadp.training.trainer.calibrate``); with a noise given, the run stops
at the last step within the budget. The run writes one ``ledger-<view>.jsonl`` per guarantee,
``checkpoint.pt``, ``metrics.jsonl``, ``privacy_report.json`` (every view's epsilon) and
``evaluation.json`` into ``--out``; ``--resume`` continues a killed run without forgetting spent budget.

``protonet`` trains on obfuscated images (``--obfuscation``; DP-Pix at ``--epsilon`` per image) with an
optional jointly trained denoiser and writes ``metrics.jsonl``, ``model.pt``, ``evaluation.json`` and a
``privacy_report.json`` with the user's per-image guarantee against the server.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

from metadp.report import format_upper

__all__ = ["add_train_parser", "run_train"]

_EXAMPLES = ("examples:\n  metadp train dp-maml --data sinusoid --epsilon 1 --delta 1e-5 --steps 2000 --out runs/sin\n"
             "  metadp train maml --data glyphs --steps 300 --out runs/glyphs\n"
             "  metadp train dp-agr --data glyphs --epsilon 2 --clip-policy quantile --out runs/agr\n"
             "  metadp train dp-maml --data omniglot --epsilon 8 --delta 1e-5 --steps 500 --out runs/omni --resume\n"
             "  metadp train protonet --data omniglot --obfuscation dp-pix --epsilon 3 --cell 4 --m 1 --denoiser "
             "--steps 1000 --out runs/proto")


def add_train_parser(sub, number, formatter) -> None:
    from metadp.training.clipping import POLICIES

    algorithms = ("maml", "reptile", "dp-maml", "dp-maml-sample", "dp-reptile", "dp-agr", "dp-agrlr", "protonet")
    t = sub.add_parser("train", help="train MAML, Reptile, DP-MAML, DP-Reptile or DP-FedMeta within a privacy budget "
                       "(needs torch)", epilog=_EXAMPLES, formatter_class=formatter)
    t.add_argument("algorithm", choices=algorithms,
                   help="maml, reptile (non-private); dp-maml (task level, dp-maml Alg. 1), dp-maml-sample (Alg. 2), "
                        "dp-reptile (task-global), dp-agr, dp-agrlr (DP-FedMeta); protonet (prototypical network on "
                        "obfuscated images, optional denoiser: privacy-enhanced few-shot Alg. 1)")
    t.add_argument("--data", choices=("sinusoid", "glyphs", "omniglot"), default="sinusoid")
    t.add_argument("--unit", choices=("task", "record", "record-vs-server"),
                   help="the guarantee whose budget stops the run (default: task; record for dp-maml-sample and "
                        "dp-reptile); every other one is reported too")
    t.add_argument("--sampler", choices=("poisson", "fixed", "one-pass"),
                   help="task sampling (default poisson; one-pass for dp-agr, dp-agrlr, dp-reptile)")
    t.add_argument("--epsilon", type=number("--epsilon", float),
                   help="budget of --unit at --delta; protonet: the DP-Pix epsilon per released image")
    t.add_argument("--delta", type=number("--delta", float), default=1e-5)
    t.add_argument("--noise", type=number("--noise", float),
                   help="noise multiplier z of the released sum (default: calibrated to the budget)")
    t.add_argument("--clip", type=number("--clip", float), default=1.0,
                   help="C: per-task clip (dp-maml, dp-agr*) or per-example query clip (dp-maml-sample)")
    t.add_argument("--clip-mode", choices=("flat", "per_layer"), default="flat")
    t.add_argument("--clip-policy", choices=POLICIES, default="fixed",
                   help="threshold updates: noisy-window (post-processing), quantile (Andrew et al., accounted), "
                        "raw-percentile (NOT private; needs no --epsilon)")
    t.add_argument("--count-noise", type=number("--count-noise", float),
                   help="quantile policy: noise std on the unclipped count (default meta-batch / 20)")
    t.add_argument("--inner-clip", type=number("--inner-clip", float), default=1.0,
                   help="per-example clip inside tasks (dp-maml-sample, dp-agrlr, dp-reptile)")
    t.add_argument("--inner-noise", type=number("--inner-noise", float),
                   help="z_in inside tasks (default: --noise; calibrated for dp-reptile and record-vs-server)")
    t.add_argument("--steps", type=number("--steps", int), default=1000)
    t.add_argument("--meta-batch", type=number("--meta-batch", float), default=32.0, help="expected tasks per step")
    t.add_argument("--pool", type=number("--pool", int), default=10000, help="fixed pool of training tasks")
    t.add_argument("--inner-steps", type=number("--inner-steps", int), default=1)
    t.add_argument("--inner-lr", type=number("--inner-lr", float))
    t.add_argument("--outer-lr", type=number("--outer-lr", float),
                   help="Adam learning rate (MAML family, default 1e-3) or Reptile step size (default 1.0)")
    t.add_argument("--first-order", action="store_true")
    t.add_argument("--chunk-size", type=number("--chunk-size", int), help="tasks per vmap chunk (bounds memory)")
    t.add_argument("--seed", type=number("--seed", int), default=0)
    t.add_argument("--device", default="cpu", help="cpu or cuda")
    t.add_argument("--out", default="metadp-run", help="output folder (default metadp-run)")
    t.add_argument("--resume", action="store_true", help="continue the run in --out")
    t.add_argument("--norm", choices=("batch", "group"), default="batch",
                   help="Conv-4 normalisation for image data: batch statistics of the current batch only (MAML's "
                        "setting; per-example gradients use each example alone) or group norm")
    t.add_argument("--rotations", action="store_true",
                   help="Omniglot: characters rotated by 90, 180, 270 degrees are new classes (augmentation)")
    t.add_argument("--eval-tasks", type=number("--eval-tasks", int), default=600,
                   help="held-out tasks for the final evaluation (default 600; Omniglot uses its 20 one-shot runs)")
    p = t.add_argument_group("protonet (obfuscated images; the options above that apply: --data glyphs|omniglot, "
                             "--epsilon, --delta, --steps, --outer-lr, --seed, --out, --device, --norm, --rotations, "
                             "--eval-tasks)")
    p.add_argument("--obfuscation", choices=_OBFUSCATIONS,
                   help="applied to support and query images (default none); only dp-pix has a formal guarantee")
    p.add_argument("--cell", type=number("--cell", int), help="dp-pix, pixelize: the cell side b in pixels")
    p.add_argument("--m", type=number("--m", int),
                   help="dp-pix: neighbouring images differ in at most m pixel values (default 1)")
    p.add_argument("--radius", type=number("--radius", int), help="blur: kernel half-width r ((2r+1)^2 kernel)")
    p.add_argument("--sigma", type=number("--sigma", float),
                   help="blur: kernel std in pixels (default r); gaussian: noise std in [0, 1] units (paper / 255)")
    p.add_argument("--denoiser", action="store_true", help="train a residual (DnCNN-style) denoiser jointly")
    p.add_argument("--denoise-weight", type=number("--denoise-weight", float),
                   help="lambda in loss = classification + lambda * denoising MSE (default 1, the paper's)")
    p.add_argument("--ways", type=number("--ways", int),
                   help="N of N-way episodes, training and evaluation (default 5)")
    p.add_argument("--shots", type=number("--shots", int), help="support images per class (default 5)")
    p.add_argument("--query", type=number("--query", int), help="query images per class (default 5)")


_OBFUSCATIONS = {"none": "none", "dp-pix": "dp_pix", "pixelize": "pixelize", "blur": "gaussian_blur",
                 "gaussian": "gaussian_noise"}
_PROTONET_ONLY = ("obfuscation", "cell", "m", "radius", "sigma", "denoise_weight", "ways", "shots", "query")


def _protonet_data(args):
    """(training images, held-out images, description of the split)."""
    from metadp.training import data
    from metadp.training.protonet import HELD_OUT_ALPHABETS, split_by_alphabet

    if args.data == "glyphs":
        images = data.synthetic_glyphs(200, 20, seed=args.seed, device=args.device).images
        return images[:150], images[150:], "synthetic glyphs: classes 0-149 train, 150-199 held out"
    pool = data.load_omniglot_background(rotations=args.rotations, device=args.device)  # no download
    train, held = split_by_alphabet(pool.class_names)
    return (pool.images[train], pool.images[held],
            f"Omniglot background (minimal split): {len(train)} classes train; the {len(held)} classes of the "
            f"alphabets {', '.join(HELD_OUT_ALPHABETS)} held out")


def _run_protonet(args) -> None:
    import dataclasses

    from tqdm import tqdm

    from metadp.training.protonet import ProtoConfig, evaluate_protonet, privacy_report, train_protonet

    if args.data == "sinusoid":
        raise ValueError("protonet classifies images: use --data glyphs or --data omniglot (sinusoid is regression)")
    obfuscation = _OBFUSCATIONS[args.obfuscation or "none"]
    config = ProtoConfig(
        obfuscation=obfuscation, epsilon=args.epsilon, cell=args.cell, m=args.m, radius=args.radius,
        blur_sigma=args.sigma if obfuscation == "gaussian_blur" else None,
        noise_sigma=args.sigma if obfuscation == "gaussian_noise" else None,
        denoiser=args.denoiser, denoise_weight=1.0 if args.denoise_weight is None else args.denoise_weight,
        norm=args.norm, n_way=args.ways or 5, k_shot=args.shots or 5, k_query=args.query or 5, steps=args.steps,
        lr=args.outer_lr if args.outer_lr is not None else 1e-3, seed=args.seed)
    if args.sigma is not None and obfuscation not in ("gaussian_blur", "gaussian_noise"):
        raise ValueError(f"--sigma applies to --obfuscation blur or gaussian, not {args.obfuscation or 'none'}")
    train_images, held_images, split = _protonet_data(args)
    bar = tqdm(total=config.steps, file=sys.stderr, desc="protonet", leave=False)

    def progress(step, metrics):
        bar.n = step
        bar.set_postfix({"loss": f"{metrics['loss']:.3f}", "acc": f"{metrics['accuracy']:.2f}"}, refresh=False)
        bar.refresh()

    try:
        result = train_protonet(train_images, config, args.out, device=args.device, progress=progress)
    finally:
        bar.close()
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


def _setup(args):
    import torch

    from metadp.training import data, models, tasks

    if args.data == "sinusoid":
        pool = tasks.SinusoidPool(args.pool, 10, 10, seed=args.seed, device=args.device)
        return models.MLP(), pool, lambda o, y: ((o - y) ** 2).mean(), 0.01
    if args.data == "glyphs":
        images = data.synthetic_glyphs(200, 20, seed=args.seed, device=args.device).images
        pool = tasks.EpisodePool(images[:150], args.pool, n_way=5, k_shot=1, k_query=1, seed=args.seed)
        return models.Conv4(5, norm=args.norm).to(args.device), pool, torch.nn.functional.cross_entropy, 0.4
    images = data.load_omniglot_background(rotations=args.rotations, device=args.device).images  # no download
    pool = tasks.EpisodePool(images, args.pool, n_way=20, k_shot=1, k_query=1, seed=args.seed)
    # inner lr 0.1: Finn et al.'s 20-way Omniglot setting (0.4 overshoots at initialisation: the support loss rises)
    return models.Conv4(20, norm=args.norm).to(args.device), pool, torch.nn.functional.cross_entropy, 0.1


def _evaluate(args, model, params, loss_fn, inner_lr):
    import torch

    from metadp.training import data, evaluate, tasks

    if args.data == "sinusoid":
        return evaluate.evaluate_sinusoid(model, params, n_tasks=args.eval_tasks, steps=args.inner_steps, lr=inner_lr)
    if args.data == "glyphs":
        held = data.synthetic_glyphs(200, 20, seed=args.seed, device=args.device).images[150:]
        test = tasks.EpisodePool(held, args.eval_tasks, n_way=5, k_shot=1, k_query=5, seed=args.seed + 7)
        return evaluate.evaluate_tasks(model, params, test.batch(torch.arange(args.eval_tasks, device=held.device)), loss_fn,
                                       args.inner_steps, inner_lr, "accuracy")
    runs = data.load_one_shot_runs(device=args.device)
    return evaluate.evaluate_one_shot_runs(model, params, runs, args.inner_steps, inner_lr)


def run_train(args) -> None:
    try:
        import torch  # noqa: F401
    except ImportError:
        raise ValueError('metadp train needs torch: pip install "metadp[train]" (CPU build: pip install torch)') from None
    from tqdm import tqdm

    if args.algorithm == "protonet":
        return _run_protonet(args)
    given = [name for name in _PROTONET_ONLY if getattr(args, name) is not None]
    given += ["denoiser"] if args.denoiser else []
    if given:
        raise ValueError(f"--{', --'.join(n.replace('_', '-') for n in given)} apply to protonet only, "
                         f"not {args.algorithm}; drop them")
    from metadp.training.trainer import TrainConfig, calibrate, train

    private = args.algorithm.startswith("dp-")
    if private and args.epsilon is None and args.noise is None and args.inner_noise is None:
        raise ValueError(f"{args.algorithm} needs --epsilon (the budget) or --noise (then the budget is unlimited)")
    model, pool, loss_fn, inner_lr = _setup(args)
    inner_lr = args.inner_lr if args.inner_lr is not None else inner_lr
    outer_lr = args.outer_lr if args.outer_lr is not None else (1.0 if "reptile" in args.algorithm else 1e-3)
    epsilon = args.epsilon if args.epsilon is not None else math.inf
    noise = args.noise if args.noise is not None else 1.0
    config = TrainConfig(algorithm=args.algorithm, unit=args.unit, sampler=args.sampler, steps=args.steps,
                         meta_batch=args.meta_batch, inner_steps=args.inner_steps, inner_lr=inner_lr, outer_lr=outer_lr,
                         first_order=args.first_order, clip=args.clip, clip_mode=args.clip_mode, noise_multiplier=noise,
                         inner_clip=args.inner_clip, inner_noise=args.inner_noise if args.inner_noise is not None else noise,
                         clip_policy=args.clip_policy, count_noise=args.count_noise, epsilon=epsilon, delta=args.delta,
                         seed=args.seed, chunk_size=args.chunk_size)
    if private and math.isfinite(epsilon) and args.noise is None and args.inner_noise is None:
        config = calibrate(pool, config)
        print(f"noise calibrated to the budget of the {config.budget_unit} view: z = {config.noise_multiplier:.4g}, "
              f"z_in = {config.inner_noise:.4g} ({args.steps:,} steps fit epsilon <= {epsilon:g} at delta "
              f"{args.delta:g}, PLD)")
    if args.clip_policy == "raw-percentile":
        print("WARNING: --clip-policy raw-percentile computes clipping thresholds from raw gradient norms "
              "(dp-maml.txt Sec. 5.2.1): this run is NOT differentially private and reports no epsilon", file=sys.stderr)
    bar = tqdm(total=args.steps, file=sys.stderr, desc=args.algorithm, leave=False)

    def progress(step, loss, spent):
        bar.n = step
        # the budget view's certified epsilon so far: an upper bound at --delta
        bar.set_postfix({"loss": f"{loss:.3f}",
                         f"eps({config.budget_unit})<=": format_upper(spent, 3) if private else "n/a (non-private)"},
                        refresh=False)
        bar.refresh()

    try:
        result = train(model, pool, loss_fn, config, args.out, device=args.device, progress=progress, resume=args.resume)
    finally:
        bar.close()
    score = _evaluate(args, model, result.params, loss_fn, inner_lr)
    out = Path(args.out)
    (out / "evaluation.json").write_text(json.dumps({"data": args.data, "metric": score.metric, "mean": score.mean,
                                                     "half_width_95": score.half_width, "tasks": score.n_tasks}))
    sampling = result.report["sampling"]
    print(f"{args.algorithm}: {len(result.losses):,} steps (last within budget: {result.last_step:,}); tasks sampled "
          f"{sampling['scheme']} from a fixed pool of {sampling['pool']:,} (expected {sampling['expected_batch']:.4g} a "
          "step)")
    if not private:
        print("non-private: no privacy guarantee")
    for view in result.report["views"]:
        budget = " [budget]" if view["view"] == config.budget_unit else ""
        if view["epsilon"] is None:
            print(f"  {view['view']}{budget}: no guarantee ({view['note']})")
        else:
            print(f"  {view['view']}{budget}: epsilon <= {format_upper(view['epsilon'])} (upper bound, PLD) at delta = "
                  f"{args.delta:g}, {view['relation'].replace('_', '/')} neighbours, {view['charged_per']} charges; "
                  f"against {view['adversary']}; {view['note']}")
    print(f"evaluation: {score}; files in {out}/")
