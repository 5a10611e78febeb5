"""One training run, from flags or a plan file: the flags (``parser``; their checks in ``arguments``),
the command (``command``; a plan's side in ``plan_command``), the settings (``config``), the loop
(``trainer``), the run's state (``state``: sampling, views, calibration), its ledgers (``ledgers``),
budget schedule (``budget``), output folder (``folder``), size estimate (``size``), meta-test
evaluation (``evaluate``) and ``privacy_report.json`` (``report``; a plan run's in ``plan_run``).

The package imports nothing, so the flags (``parser``) load without torch.
"""
