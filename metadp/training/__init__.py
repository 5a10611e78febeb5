"""Private meta-learning trainers (torch, the ``train`` extra; DESIGN.md sec. 7).

Four subpackages show the trainer's parts:

* ``algorithms``: the registry of algorithm families (the package itself: contribution, noise, update,
  views), each algorithm's privacy views (``privacy``), the functional core (``functional``,
  ``private_steps``: torch.func per-task and per-example gradients, clipping, noisy sums), each family's
  per-task step (``contributions``), the clip policies (``clipping``), the models (``models``) and
  prototypical networks on obfuscated images (``protonet``, ``protonet_models``).
* ``data``: the data sets ``--data`` offers (``datasets``, their builders in ``setups``), the sources
  (``sources``: ``images``, ``omniglot``), fixed task pools (``tasks``) and the samplers that execute a
  sampling scheme (``samplers``, ``subsets``).
* ``engines``: where a step's clipped sum is computed (``local``, ``flower``) and which runs the Flower
  engine takes (``federated``).
* ``run``: one run from flags or a plan: the flags (``parser``, ``arguments``), the command
  (``command``, ``plan_command``), the configuration (``config``), the loop (``trainer``), its state
  (``state``: sampling, views, calibration), ledgers (``ledgers``), budget (``budget``), folder
  (``folder``), size estimate (``size``), evaluation (``evaluate``) and report (``report``, ``plan_run``).

``budget`` and ``ledger`` need no torch and are re-exported here, so ``import metadp.training`` works
without torch; the torch parts are imported from their modules (``from metadp.training.run.trainer import
train, TrainConfig``).
"""

from metadp.training.run.budget import BudgetSchedule, budget_schedule, noise_for_budget
from metadp.accounting.ledger import Ledger, LedgerCorruptError, LedgerError, LedgerRecord, TornLedgerError

__all__ = ["BudgetSchedule", "budget_schedule", "noise_for_budget", "Ledger", "LedgerRecord", "LedgerError",
           "LedgerCorruptError", "TornLedgerError"]
