"""What each registered data set (``metadp.training.data.datasets``) builds for ``metadp train``: the model,
the task pool, the loss and the default inner learning rate (``*_setup``), the held-out evaluation
(``*_evaluate``), protonet's class split (``*_split``) and the data folder check (``*_check``)."""

from __future__ import annotations

import torch

from metadp.training.data import sources as data

from metadp.training.run import evaluate

from metadp.training.algorithms import models

from metadp.training.data import tasks
from metadp.training.algorithms.protonet import HELD_OUT_ALPHABETS, split_by_alphabet

__all__ = ["resolve"]


def _mse(out, y):
    return ((out - y) ** 2).mean()


def sinusoid_setup(args):
    if getattr(args, "fresh_episodes", False):
        raise ValueError("sinusoid tasks are generated, not drawn from records: a plan with [[hierarchy]] levels "
                         "needs image data (--data glyphs or omniglot)")
    pool = tasks.SinusoidPool(args.pool, 10, 10, seed=args.seed, device=args.device)
    return models.MLP, pool, _mse, 0.01


def sinusoid_evaluate(args, model, params, loss_fn, inner_lr):
    return evaluate.evaluate_sinusoid(model, params, n_tasks=args.eval_tasks, steps=args.inner_steps, lr=inner_lr)


def _glyphs(args):
    return data.synthetic_glyphs(200, 20, seed=args.seed, device=args.device).images


def _ways(args, default: int) -> int:
    """The episodes' classes: a plan run's (its hierarchy's top draw, ``args.n_way``) or the data set's."""
    return getattr(args, "n_way", None) or default


def _pool_or_source(args, images, n_way: int):
    """A plan run's fresh-episode source (``args.fresh_episodes``) or the fixed pool of ``args.pool`` tasks."""
    if getattr(args, "fresh_episodes", False):
        return tasks.EpisodeImages(images, k_shot=args.shots or 1)
    return tasks.EpisodePool(images, args.pool, n_way=n_way, k_shot=1, k_query=1, seed=args.seed)


def glyphs_setup(args):
    n = _ways(args, 5)
    pool = _pool_or_source(args, _glyphs(args)[:150], n)
    return (lambda: models.Conv4(n, norm=args.norm)), pool, torch.nn.functional.cross_entropy, 0.4


def glyphs_evaluate(args, model, params, loss_fn, inner_lr):
    held = _glyphs(args)[150:]
    test = tasks.EpisodePool(held, args.eval_tasks, n_way=_ways(args, 5), k_shot=1, k_query=5, seed=args.seed + 7)
    return evaluate.evaluate_tasks(model, params, test.batch(torch.arange(args.eval_tasks, device=held.device)),
                                   loss_fn, args.inner_steps, inner_lr, "accuracy")


def glyphs_split(args):
    images = _glyphs(args)
    return images[:150], images[150:], "synthetic glyphs: classes 0-149 train, 150-199 held out"


def omniglot_setup(args):
    images = data.load_omniglot_background(args.data_dir, rotations=args.rotations, device=args.device).images
    n = _ways(args, 20)
    pool = _pool_or_source(args, images, n)
    # inner lr: Finn et al.'s, 0.1 for 20-way (0.4 overshoots at initialisation: the support loss rises), 0.4 for 5-way
    return (lambda: models.Conv4(n, norm=args.norm)), pool, torch.nn.functional.cross_entropy, 0.1 if n > 5 else 0.4


def omniglot_evaluate(args, model, params, loss_fn, inner_lr):
    runs = data.load_one_shot_runs(args.data_dir, device=args.device)
    return evaluate.evaluate_one_shot_runs(model, params, runs, args.inner_steps, inner_lr, n_way=_ways(args, 20))


def omniglot_split(args):
    pool = data.load_omniglot_background(args.data_dir, rotations=args.rotations, device=args.device)  # no download
    train, held = split_by_alphabet(pool.class_names)
    return (pool.images[train], pool.images[held],
            f"Omniglot background (minimal split): {len(train)} classes train; the {len(held)} classes of the "
            f"alphabets {', '.join(HELD_OUT_ALPHABETS)} held out")


def omniglot_check(args, one_shot: bool):
    """The data folder (``--data-dir`` or the default search), checked without decoding images."""
    folder = data.data_dir(args.data_dir)
    data.check_omniglot_folder(folder, one_shot=one_shot)
    return folder


def resolve(name: str):
    """The function ``name`` of this module (a ``DataSet`` field)."""
    found = globals().get(name)
    if not callable(found) or name.startswith("_") or name == "resolve":
        raise ValueError(f"no data set function {name!r} in metadp.training.data.setups")
    return found
