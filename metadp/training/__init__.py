"""Private meta-learning trainers (torch, the ``train`` extra; DESIGN.md sec. 7).

Modules: ``algorithms`` (the registry of algorithm families: contribution, noise, update, views),
``datasets`` (the registry of data sets; their builders in ``data_setups``), ``data`` (``images``:
pools, synthetic glyphs, folder loaders; ``omniglot``: the shipped zips), ``tasks`` (fixed task
pools), ``samplers`` (samplers that record their privacy events), ``models`` (Conv-4 with batch
statistics or group norm, the sinusoid MLP), ``functional`` and ``private_steps`` (torch.func per-task
and per-example gradients, clipping, noisy sums), ``contributions`` (each family's per-task step),
``privacy`` (the views' events), ``budget`` (the schedule before step 1), ``config`` (``TrainConfig``),
``run_state`` (sampling, views, ledgers, calibration), ``trainer`` (the loop) and ``protonet``.

``budget`` and ``ledger`` need no torch; the rest is imported on first use, so ``import
metadp.training`` works without torch.
"""

import importlib

from metadp.training.budget import BudgetSchedule, budget_schedule, noise_for_budget
from metadp.accounting.ledger import Ledger, LedgerCorruptError, LedgerError, LedgerRecord, TornLedgerError

_LAZY = {
    "data": ("ImagePool", "OneShotRun", "data_dir", "load_image_folder", "load_mini_imagenet_csv",
             "load_omniglot_background", "load_one_shot_runs", "synthetic_glyphs"),
    "samplers": ("PoissonSampler", "FixedSizeSampler", "BallsInBinsSampler", "EpisodicSampler", "Episodes"),
    "models": ("Conv4", "MLP", "BatchStatNorm2d"),
    "functional": ("param_dict", "inner_adapt", "maml_task_loss", "per_task_meta_grads",
                   "per_task_meta_grads_and_losses", "reptile_task_update", "per_example_grads", "flat_norms",
                   "clip", "noisy_sum"),
    "tasks": ("SinusoidPool", "EpisodePool"),
    "trainer": ("TrainConfig", "TrainResult", "train"),
}
_WHERE = {name: module for module, names in _LAZY.items() for name in names}

__all__ = ["BudgetSchedule", "budget_schedule", "noise_for_budget", "Ledger", "LedgerRecord", "LedgerError",
           "LedgerCorruptError", "TornLedgerError"] + sorted(_WHERE)


def __getattr__(name):
    if name in _WHERE:
        return getattr(importlib.import_module(f"metadp.training.{_WHERE[name]}"), name)
    raise AttributeError(f"module 'metadp.training' has no attribute {name!r}")
