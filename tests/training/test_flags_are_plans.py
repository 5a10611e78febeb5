"""Flags compile to a plan (issue 29): every ``metadp train`` command of the README and the docs pages that trains with flags,
run with ``--save-plan``, writes the plan it ran, and ``metadp plan --json`` of that file certifies exactly the
numbers of the run's ``privacy_report.json`` (its unit's epsilon and lower bound, every other unit's).

The commands are read from the README and the docs pages themselves, as CI reads them (``.ci/readme_commands.py``:
every ``metadp train`` line without ``--plan``, protonet and refusals shown on purpose aside); their sizes are cut (``--steps``, ``--pool``, ``--meta-batch``, ``--eval-tasks``) so each runs in seconds, which keeps
what decides the guarantee: the algorithm, its unit, sampler, budget and noise.
"""

from __future__ import annotations

import importlib.util
import json
import shlex
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from metadp.cli import main  # noqa: E402
from metadp.plan import load_plan  # noqa: E402
from metadp.training.data.omniglot import data_dir  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
SMALL = {"--steps": "3", "--pool": "60", "--meta-batch": "4", "--eval-tasks": "2"}


def _shown_commands():
    """The commands of the README and of the docs pages CI runs them from, that are shown to succeed (exit 0)."""
    spec = importlib.util.spec_from_file_location("readme_commands", ROOT / ".ci" / "readme_commands.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return [c.text for c in module.all_commands() if c.page not in module.NOT_RUN and c.status == 0]


def _flag_commands():
    """Every README and docs ``metadp train`` command with flags, once per distinct command after its sizes are cut."""
    commands = {}
    for line in _shown_commands():
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


# the two slowest (~10 s each: Omniglot with rotations, DP-Reptile's inner DP-SGD) run with the slow sweeps, to keep
# the default suite within its 4 minutes; the private task- and record-level ones stay in it
_SLOW = ("maml", "dp-reptile")


@pytest.mark.parametrize("argv", [pytest.param(a, marks=pytest.mark.slow) if a[1] in _SLOW else a for a in COMMANDS],
                         ids=_ids)
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


def test_a_saved_plan_of_an_inner_dp_algorithm_runs_again_and_calibrates_its_inner_noise(tmp_path, capsys):
    # dp-agrlr against the server: the plan's [release] carries the inner loop; run with --plan it reproduces the
    # flag run's report, and --epsilon calibrates release.inner_noise (the noise that unit is charged on)
    saved, flags, planned, tuned = (tmp_path / n for n in ("p.toml", "flags", "planned", "tuned"))
    common = ["--data", "glyphs", "--first-order", "--eval-tasks", "2"]
    assert main(["train", "dp-agrlr", "--unit", "record-vs-server", "--noise", "1.0", "--inner-noise", "3.0",
                 "--steps", "2", "--meta-batch", "4", "--pool", "40", "--save-plan", str(saved), "--out", str(flags),
                 *common]) == 0
    text = saved.read_text()
    assert 'against = "server"' in text and 'form = "local_noise"' in text and "inner_noise = 3.0" in text
    assert main(["train", "dp-agrlr", "--plan", str(saved), "--out", str(planned), *common]) == 0
    a, b = (json.loads((d / "privacy_report.json").read_text()) for d in (flags, planned))
    assert a["epsilon"] == b["epsilon"] and a["view"] == b["view"] == "record-vs-server"
    assert [o["epsilon"] for o in a["other_units"]] == [o["epsilon"] for o in b["other_units"]]
    capsys.readouterr()
    assert main(["train", "dp-agrlr", "--plan", str(saved), "--epsilon", "3", "--out", str(tuned), *common]) == 0
    said = capsys.readouterr().out
    assert "noise calibrated to the plan's budget: release.inner_noise = " in said
    report = json.loads((tuned / "privacy_report.json").read_text())
    assert report["epsilon"] <= 3.0 and report["epsilon"] == pytest.approx(3.0, rel=2e-3)
    config = json.loads((tuned / "run.json").read_text())["config"]
    assert config["noise_multiplier"] == 1.0 and config["inner_noise"] != 3.0


@pytest.mark.parametrize("flags, words", [
    (["--inner-noise", "2.0"], "--inner-noise 2.0 contradicts the plan (release.inner_noise = 3"),
    (["--inner-steps", "2"], "--inner-steps 2 contradicts the plan (release.inner_steps = 1"),
    (["--inner-noise", "2.0", "--epsilon", "1"], "--inner-noise and --epsilon"),
])
def test_flags_that_contradict_a_plans_release_are_refused(tmp_path, capsys, flags, words):
    plan = tmp_path / "p.toml"
    plan.write_text("""name = "x"
unit = "record"
against = "server"
delta = 1e-5
steps = 2
record_multiplicity = 40
[sampling]
scheme = "balls_in_bins"
population = 40
batch_size = 4
[noise]
mechanism = "gaussian"
multiplier = 1.0
[release]
form = "local_noise"
inner_steps = 1
inner_noise = 3.0
query_per_task = 5
first_order = true
""")
    out = tmp_path / "run"
    assert main(["train", "dp-agrlr", "--plan", str(plan), "--data", "glyphs", "--out", str(out), *flags]) == 2
    err = capsys.readouterr().err
    assert words in err and err.count("\n") == 1 and not out.exists()
