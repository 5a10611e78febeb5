"""Where a training step's per-task contributions are computed: the engines of the one trainer.

The trainer (``metadp.training.run.trainer.train``) owns sampling, clipping policy, noise, ledgers, budget and
reports; an engine only computes the step's clipped sum. An engine has

* ``clipped_sum(alg, model, params, tasks, rows, weights, loss_fn, config, run, contribution, threshold,
  raw_norms)`` -> (the weighted sum of the clipped per-task contributions, their norms before clipping or
  None, the tasks' losses);
* ``report_fields()`` -> the keys it adds to ``privacy_report.json`` (at least ``engine``).

``local`` (``local.LOCAL``): this process computes every task's contribution. ``flower``: each task is a Flower
client that computes its own (``flower.DpFedMetaStrategy``; Flower is an optional extra, imported by that
module only where installed). Noise is drawn by the trainer in both, once per release, so the mechanism
and its accounting do not depend on the engine.

``federated`` holds the checks of which runs the Flower engine takes (no torch, no flwr: the flags
parser reads it). The package imports nothing, so those checks load without torch.
"""
