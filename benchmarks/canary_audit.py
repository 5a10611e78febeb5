"""The README's "Auditing a real run" figure: one-run canary audits (``metadp verify run``) of the trainer
on sinusoid, the correct run at task and record level and the three planted controls, with one fixed seed.

    python benchmarks/canary_audit.py docs/figures/canary_audit.png   [several minutes on 2 cores]

Writes the figure and, beside it, the audits as JSON (``.json``).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from metadp.plan import load_plan
from metadp.verify.canaries import run_canary_audit
from metadp.verify.run_command import audit_table, plot_canary_audits

PLAN = Path(__file__).resolve().parent.parent / "examples" / "audit_sinusoid.toml"
RUNS = (("task", None), ("record", None), ("task", "low-noise"), ("task", "no-clipping"), ("task", "fixed-order"))


def main(path: str) -> None:
    plan = load_plan(PLAN)
    results = []
    for view, defect in RUNS:
        start = time.time()
        r = run_canary_audit(plan, canaries=100, view=view, defect=defect, seed=0, beta=0.05, sizes=(1, 16, 16, 1))
        r["seconds"] = round(time.time() - start, 1)
        r["plan_file"] = "examples/audit_sinusoid.toml"
        print(audit_table(r), f"\n[{r['seconds']} s]\n", flush=True)
        results.append(r)
    plot_canary_audits(results, path)
    Path(path).with_suffix(".json").write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "docs/figures/canary_audit.png")
