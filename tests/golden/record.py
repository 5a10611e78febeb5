"""The numbers metadp prints, recorded before a restructuring and compared after (issue 15).

    python tests/golden/record.py            # rewrite tests/golden/outputs.json from the current code

What is recorded: for the built-in default plan and every ``examples/*.toml``, the headline epsilon,
its certified lower bound and every other unit's epsilon (``metadp plan --json``); for every training
algorithm, a fixed-seed five-step sinusoid run (``metadp train``): each guarantee's epsilon, the
training losses and the evaluation score. ``tests/test_golden_outputs.py`` recomputes them and
compares: a refactor that moves a printed number is a bug until explained (then re-record, and say
why in the commit).
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))  # run as a script too: tests/clirun.py, the in-process command
import clirun  # noqa: E402
OUTPUTS = Path(__file__).resolve().parent / "outputs.json"
PLANS = ["default"] + sorted(p.name for p in (ROOT / "examples").glob("*.toml"))
SLOW_PLANS = {"train_omniglot_5way_paper.toml"}  # ~18 s of PLD: compared under -m slow
ALGORITHMS = ["maml", "reptile", "dp-maml", "dp-maml-sample", "dp-reptile", "dp-agr", "dp-agrlr"]


def _metadp(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "metadp", *args], capture_output=True, text=True, cwd=ROOT,
                          timeout=900, check=True)


def plan_numbers(name: str) -> dict:
    """The epsilons ``metadp plan --json`` prints for a plan (``default``: the built-in one), run in this
    process (``tests/clirun.py``: no fresh interpreter to start)."""
    result = clirun.metadp("plan", *([] if name == "default" else [f"examples/{name}"]), "--json", "--no-risk")
    assert result.returncode == 0, f"metadp plan {name} --json exited {result.returncode}: {result.stderr}"
    report = json.loads(result.stdout)
    return {"epsilon": report["epsilon"], "epsilon_lower": report.get("epsilon_lower"),
            "other_units": {o["unit"]: o["epsilon"] for o in report.get("other_units", [])}}


def train_args(algorithm: str, out: str) -> list:
    private = algorithm.startswith("dp-")
    return ["train", algorithm, "--data", "sinusoid", "--steps", "5", "--meta-batch", "4", "--pool", "40",
            "--eval-tasks", "20", "--seed", "3", "--out", out, *(["--noise", "1.0"] if private else [])]


def train_numbers(algorithm: str) -> dict:
    """Every guarantee's epsilon, the losses and the evaluation of a fixed-seed five-step run."""
    with tempfile.TemporaryDirectory() as tmp:
        out = str(Path(tmp) / "run")
        _metadp(*train_args(algorithm, out))
        report = json.loads((Path(out) / "privacy_report.json").read_text())
        metrics = [json.loads(line) for line in (Path(out) / "metrics.jsonl").read_text().splitlines() if line]
        evaluation = json.loads((Path(out) / "evaluation.json").read_text())
    return {"views": {v["view"]: v["epsilon"] for v in report.get("views", [])},
            "losses": [m["loss"] for m in metrics if "loss" in m],
            "evaluation": evaluation["mean"]}


def record() -> dict:
    return {"plans": {name: plan_numbers(name) for name in PLANS},
            "training": {algorithm: train_numbers(algorithm) for algorithm in ALGORITHMS}}


if __name__ == "__main__":
    OUTPUTS.write_text(json.dumps(record(), indent=1, sort_keys=True) + "\n")
    print(f"wrote {OUTPUTS}")
