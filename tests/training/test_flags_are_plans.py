"""Flags compile to a plan (issue 29): every ``metadp train`` command of the README that trains with flags,
run with ``--save-plan``, writes the plan it ran, and ``metadp plan --json`` of that file certifies exactly the
numbers of the run's ``privacy_report.json`` (its unit's epsilon and lower bound, every other unit's).

The commands are read from the README itself (every ``metadp train`` line without ``--plan``, protonet
aside); their sizes are cut (``--steps``, ``--pool``, ``--meta-batch``, ``--eval-tasks``) so each runs in seconds, which keeps
what decides the guarantee: the algorithm, its unit, sampler, budget and noise.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from metadp.cli import main  # noqa: E402
from metadp.plan import load_plan  # noqa: E402
from metadp.training.data.omniglot import data_dir  # noqa: E402

README = Path(__file__).resolve().parents[2] / "README.md"
SMALL = {"--steps": "3", "--pool": "60", "--meta-batch": "4", "--eval-tasks": "2"}


def _flag_commands():
    """Every README ``metadp train`` command with flags, once per distinct command after its sizes are cut."""
    commands = {}
    for line in README.read_text(encoding="utf-8").splitlines():
        line = line.split("#")[0].strip()
        if not line.startswith("metadp train ") or "--plan" in line or " protonet" in line:
            continue
        argv = shlex.split(line)[1:]
        commands.setdefault(tuple(sorted(_small(argv[1:], "OUT", "PLAN"))), argv)  # (a variant's order aside)
    return list(commands.values())



def _small(argv, out, saved):
    """``argv`` with its sizes cut (``SMALL``), its ``--out`` and ``--save-plan`` in ``tmp_path``."""
    small, skip = [], False
    for arg in argv:
        if skip:
            skip = False
            continue
        if arg in SMALL or arg in ("--out", "--save-plan"):
            if arg in SMALL:
                small += [arg, SMALL[arg]]
            skip = True
            continue
        small.append(arg)
    for arg, value in SMALL.items():
        if arg not in small:
            small += [arg, value]
    return small + ["--out", str(out), "--save-plan", str(saved)]


COMMANDS = _flag_commands()


def test_the_readme_has_flag_training_commands_of_every_kind():
    algorithms = {argv[1] for argv in COMMANDS}
    assert {"dp-maml", "dp-reptile", "dp-agrlr", "maml", "dp-agr"} <= algorithms, algorithms


def _ids(argv):
    return " ".join(a for a in argv[1:6] if not a.startswith("runs/"))


@pytest.mark.parametrize("argv", COMMANDS, ids=_ids)
def test_a_flag_runs_saved_plan_certifies_the_runs_numbers(argv, tmp_path, capsys):
    if "omniglot" in argv:
        try:
            data_dir()
        except FileNotFoundError:
            pytest.skip("Omniglot is not in ../shared/data/omniglot or $METADP_DATA")
    out, saved = tmp_path / "run", tmp_path / "plan.toml"
    assert main(["train", *_small(argv[1:], out, saved)]) == 0, capsys.readouterr().err
    capsys.readouterr()
    run = json.loads((out / "privacy_report.json").read_text())
    plan = load_plan(saved)
    assert plan.steps == run["steps_done"] == 3 and run["plan_prefix_steps"] == 3
    assert main(["plan", str(saved), "--json"]) == 0
    planned = json.loads(capsys.readouterr().out)
    if not run["private"]:  # a non-private baseline: its plan has no noise and certifies nothing, as the run says
        assert planned["epsilon"] == "inf" and planned["noise"] == {"mechanism": "none", "clipping": "per_episode"}
        assert run["epsilon"] is None and run["bound"] == "none" and run["sampling"] == planned["sampling"]
        return
    for key in ("epsilon", "epsilon_lower", "unit", "relation", "delta", "sampling", "noise", "steps", "accountant"):
        assert run[key] == planned[key], key
    assert [(o["unit"], o["epsilon"], o["epsilon_lower"]) for o in run["other_units"]] == \
        [(o["unit"], o["epsilon"], o["epsilon_lower"]) for o in planned["other_units"]]
    by_view = {v["view"]: v for v in run["views"]}
    assert by_view[run["view"]]["epsilon"] == run["epsilon"] != "inf"
    # every view with a guarantee has its ledger, holding the plan's event as often as the plan charges it
    assert all(v["ledger_matches_plan"] for v in run["views"] if v["event"] is not None), run["views"]
