"""Private meta-learning trainers (torch, the ``train`` extra; DESIGN.md sec. 7).

Modules: ``algorithms`` (the registry of algorithm families: contribution, noise, update, views),
``datasets`` (the registry of data sets; their builders in ``data_setups``), ``data`` (``images``:
pools, synthetic glyphs, folder loaders; ``omniglot``: the shipped zips), ``tasks`` (fixed task
pools), ``samplers`` (samplers that record their privacy events), ``models`` (Conv-4 with batch
statistics or group norm, the sinusoid MLP), ``functional`` and ``private_steps`` (torch.func per-task
and per-example gradients, clipping, noisy sums), ``contributions`` (each family's per-task step),
``privacy`` (the views' events), ``budget`` (the schedule before step 1), ``config`` (``TrainConfig``),
``run_state`` (sampling, views, ledgers, calibration), ``trainer`` (the loop) and ``protonet``.

Engines (``engines``: ``local``, ``flower``) compute a step's clipped sum for the one trainer.

``budget`` and ``ledger`` need no torch and are re-exported here, so ``import metadp.training`` works
without torch; the torch parts are imported from their modules (``from metadp.training.trainer import
train, TrainConfig``).
"""

from metadp.training.budget import BudgetSchedule, budget_schedule, noise_for_budget
from metadp.accounting.ledger import Ledger, LedgerCorruptError, LedgerError, LedgerRecord, TornLedgerError

__all__ = ["BudgetSchedule", "budget_schedule", "noise_for_budget", "Ledger", "LedgerRecord", "LedgerError",
           "LedgerCorruptError", "TornLedgerError"]
