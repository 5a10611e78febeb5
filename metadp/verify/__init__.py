"""Verification (DESIGN.md sec. 6): does a claimed guarantee hold for the mechanism as implemented?

* ``audit``: empirical audits of a claimed privacy profile on a neighbouring pair's own samples
  (exploration and confirmation samples, one-sided Clopper-Pearson bounds, Bonferroni);
* ``planner``: samples needed to detect a violation of a given size with a given power;
* ``pipelines``: sampled and composed pipelines with a canary (Poisson, fixed-size, episodic, one pass,
  DP-Pix), and ``pipeline_for``, the pipeline of an accountant event (built on ``runs``, ``sampled``,
  ``one_pass`` and ``dp_pix_pipeline``);
* ``claims``: the certified profile an audit tests (the tightest accountant that reads the step);
* ``sizing``: the draws, time and memory an audit needs, before it runs;
* ``fidelity``: goodness-of-fit tests that a sampler realises the inclusion law the accountant assumed;
* ``crosscheck``: metadp's accountants against dp-accounting and prv-accountant on one plan;
* ``enumeration`` and ``multistage_findings``: exact enumeration of multistage subsampling (Example 3.1),
  with the exact mixture divergences of ``mixture_divergence``;
* ``plot``: claimed vs empirical profile (matplotlib, the ``plot`` extra);
* ``one_run`` and ``canaries``: one-run canary audits of a real training run (Steinke, Nasr & Jagielski
  2023, arXiv:2305.08846), ``metadp verify run`` (``run_command``; the run needs torch).

``metadp verify`` (``command``) is the command-line front end.
"""

from metadp.verify.audit import AuditResult, AuditRow, audit, audit_pair
from metadp.verify.planner import gaussian_audit_plan, planned_power, samples_needed

__all__ = ["audit", "audit_pair", "AuditResult", "AuditRow", "samples_needed", "planned_power",
           "gaussian_audit_plan"]
