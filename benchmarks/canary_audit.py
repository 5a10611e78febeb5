"""The README's "Auditing a real run" figure: one-run canary audits (``metadp verify run``) of the trainer
on sinusoid, the correct run at task and record level and the planted controls, with one fixed seed.

    python benchmarks/canary_audit.py docs/figures/canary_audit.png            # every audit of RUNS, then the figure
    python benchmarks/canary_audit.py docs/figures/canary_audit.png task:low-noise record:none:data   # some of them

A run is ``view:control[:kind]`` (kind: ``gradient``, the default, Dirac canaries; ``data``, canary tasks or
records); ``support:none`` and ``support:second-order`` audit sample-level DP-MAML's support records
(``metadp.verify.support_canaries``, README Findings 4: the first-order run and the second-order control, both
against the support record's inner-Gaussian claim, on ``audit_sinusoid_support.toml``; about 10 s each). Each audit is written to ``<figure>.<view>-<control>-<kind>.json`` (kept: the figure is drawn
from every such file present). Gradient canaries: about 3 minutes an audit on 2 shared, loaded cores;
data canaries: 4.5 to 8.5 minutes there.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from metadp.plan import load_plan
from metadp.verify.canaries import run_canary_audit
from metadp.verify.run_command import audit_table, plot_canary_audits
from metadp.verify.support_canaries import run_support_audit

PLAN = Path(__file__).resolve().parent / "audit_sinusoid.toml"
# the record view: 300 canaries (100 cannot show more than 2.87 < the record bound 3.325)
RECORD_PLAN = Path(__file__).resolve().parent / "audit_sinusoid_record.toml"
# support records of sample-level DP-MAML (Findings 4): 200 tasks, rate 0.1, z = 1, 80 steps, 100 canaries
SUPPORT_PLAN = Path(__file__).resolve().parent / "audit_sinusoid_support.toml"
RUNS = ("task:none", "record:none", "task:low-noise", "record:low-noise", "task:no-clipping", "task:fixed-order",
        "task:low-noise:data", "support:none", "support:second-order")


def _parse(run: str):
    view, defect, *kind = run.split(":")
    return view, defect, kind[0] if kind else ("support" if view == "support" else "gradient")


def main(path: str, runs) -> None:
    for run in runs:
        view, defect, kind = _parse(run)
        wide = view == "record"
        plan_file = SUPPORT_PLAN if view == "support" else RECORD_PLAN if wide else PLAN
        start = time.time()
        if view == "support":
            r = run_support_audit(load_plan(plan_file), canaries=100, defect=None if defect == "none" else defect,
                                  seed=0, beta=0.05)
        else:
            r = run_canary_audit(load_plan(plan_file), canaries=300 if wide else 100, view=view,
                                 defect=None if defect == "none" else defect, kind=kind, seed=0, beta=0.05,
                                 sizes=(1, 16, 16, 1))
        r["seconds"] = round(time.time() - start, 1)
        r["plan_file"] = f"benchmarks/{plan_file.name}"
        print(audit_table(r), f"\n[{r['seconds']} s]\n", flush=True)
        Path(f"{path}.{view}-{defect}-{kind}.json").write_text(json.dumps(r, indent=1))
    found = [Path(f"{path}.{'-'.join(_parse(run))}.json") for run in RUNS]
    results = [json.loads(f.read_text()) for f in found if f.exists()]
    if results:
        plot_canary_audits(results, path)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "docs/figures/canary_audit.png", sys.argv[2:] or RUNS)
