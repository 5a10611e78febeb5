"""Where a training step's per-task contributions are computed: the engines of the one trainer.

The trainer (``metadp.training.run.trainer.train``) owns sampling, clipping policy, noise, ledgers, budget and
reports; an engine only computes the step's clipped sum. An engine has

* ``clipped_sum(alg, model, params, tasks, rows, weights, loss_fn, config, run, contribution, threshold,
  raw_norms)`` -> (the weighted sum of the clipped per-task contributions, their norms before clipping or
  None, the tasks' losses);
* ``report_fields()`` -> the keys it adds to ``privacy_report.json`` (at least ``engine``).

``local`` (``local.LOCAL``): this process computes every task's contribution. ``flower``: each task is a Flower
client that computes its own (``flower.DpFedMetaStrategy``, a Flower ``Strategy``, on the server;
``flower_client`` on the clients; Flower is an optional extra, imported by those modules only where
installed). The released sum's noise is drawn by the trainer in both, once per release, so the mechanism
and its accounting do not depend on the engine; DP-AGRLR's local noise is the client's own (drawn by the
local engine from the run's generator, by a Flower client from the operating system's entropy).

The Flower engine runs as a Flower App (``flower_app``: its ServerApp starts ``flower.DpFedMetaStrategy``,
which runs this trainer; its ClientApp computes one task's update) under ``flwr run``: ``flower_run`` launches
a plan's run, ``flower_launch`` starts, watches and stops Flower's processes (a SuperLink in simulation
mode, or a loopback deployment of a SuperLink and N SuperNodes, or an existing SuperLink) with no torch.
Flower users' own DP strategies are accounted by ``metadp.integrations.flower`` (outside the trainer).

``federated`` holds the checks of which runs the Flower engine takes (no torch, no flwr: the flags
parser reads it). The package imports nothing, so those checks load without torch.
"""
