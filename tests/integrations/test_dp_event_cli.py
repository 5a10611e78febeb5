"""`metadp plan --dp-event FILE.json` and `metadp verify --crosscheck FILE.json` (in process).

The event files are written by hand in the named-tuple form, so these tests need no dp-accounting
(except the cross-check, which compares with it).
"""

from __future__ import annotations

import json
import math

import pytest

from metadp.accounting import FixedSizeSampled, Gaussian, PoissonSampled, RdpAccountant, SelfComposed
from metadp.accounting.pld import PldAccountant
from metadp.cli import main
from metadp.report import format_upper

M = "dp_accounting.dp_event"


def gaussian(s):
    return {"module_name": M, "class_name": "GaussianDpEvent", "noise_multiplier": s}


POISSON = {"module_name": M, "class_name": "SelfComposedDpEvent", "count": 250,
           "event": {"module_name": M, "class_name": "PoissonSampledDpEvent", "sampling_probability": 0.004,
                     "event": gaussian(1.0)}}
WOR = {"module_name": M, "class_name": "SelfComposedDpEvent", "count": 100,
       "event": {"module_name": M, "class_name": "SampledWithoutReplacementDpEvent", "source_dataset_size": 60000,
                 "sample_size": 256, "event": gaussian(1.1)}}


@pytest.fixture
def write(tmp_path):
    def _write(content, name="event.json"):
        path = tmp_path / name
        path.write_text(content if isinstance(content, str) else json.dumps(content), encoding="utf-8")
        return str(path)
    return _write


def run(argv, capsys):
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def test_plan_reports_the_certified_pld_bound_of_the_event(write, capsys):
    code, out, err = run(["plan", "--dp-event", write(POISSON), "--delta", "1e-6", "--json"], capsys)
    assert code == 0, err
    report = json.loads(out)
    event = SelfComposed(PoissonSampled(0.004, Gaussian(1.0)), 250)
    expected = PldAccountant(max_seconds=math.inf).compose(event).get_epsilon_bounds(1e-6)
    assert report["epsilon"] == pytest.approx(expected.epsilon_upper, rel=1e-12)
    assert report["epsilon_lower"] == pytest.approx(expected.epsilon_lower, rel=1e-12)
    assert (report["accountant"], report["relation"], report["unit"], report["bound"]) == \
        ("pld", "add_remove", "record", "upper")
    code, out, _ = run(["plan", "--dp-event", write(POISSON), "--delta", "1e-6"], capsys)
    assert f"epsilon   <= {format_upper(expected.epsilon_upper)}" in out and "certified interval" in out


def test_fixed_size_event_is_analysed_under_substitution_with_the_stated_reading(write, capsys):
    path = write(WOR)
    code, out, _ = run(["plan", "--dp-event", path, "--delta", "1e-5", "--json"], capsys)
    assert code == 0
    report = json.loads(out)
    # the PLD's symmetric pair (metadp.mechanisms.wor) is the tighter bound; the RDP one is listed with it
    assert report["relation"] == "substitute" and report["accountant"] == "pld"
    rdp = {a["accountant"]: a["epsilon"] for a in report["alternatives"]}["rdp"]
    as_documented = RdpAccountant("substitute").compose(SelfComposed(FixedSizeSampled(256, 60000, Gaussian(1.1)), 100))
    assert rdp == pytest.approx(as_documented.get_epsilon(1e-5), rel=1e-12)
    assert report["epsilon"] < rdp
    assert any("issue #378" in a for a in report["assumptions"])
    code, out, _ = run(["plan", "--dp-event", path, "--delta", "1e-5", "--json",
                        "--noise-relative-to", "replace_one_sensitivity"], capsys)
    doubled = RdpAccountant("substitute").compose(SelfComposed(FixedSizeSampled(256, 60000, Gaussian(2.2)), 100))
    again = json.loads(out)
    rdp = {a["accountant"]: a["epsilon"] for a in again["alternatives"]}["rdp"]
    assert rdp == pytest.approx(doubled.get_epsilon(1e-5), rel=1e-12) and again["epsilon"] < rdp


@pytest.mark.parametrize("argv, content, message", [
    (["--delta", "1e-6"], "{", "not valid JSON"),
    (["--delta", "1e-6"], [1, 2], "must hold one JSON object"),
    ([], POISSON, "--delta is required"),
    (["--delta", "0"], POISSON, "--delta must be in (0, 1)"),
    (["--delta", "1e-6", "--relation", "add_remove"], WOR, "fixed-size sampling is only analysed under the substitute"),
    (["--delta", "1e-6"], {"module_name": M, "class_name": "RandomizedResponseDpEvent", "noise_parameter": 0.5,
                           "num_buckets": 3}, "RandomizedResponseDpEvent"),
    (["--delta", "1e-6"], {"module_name": M, "class_name": "PoissonSampledDpEvent", "sampling_probability": 2,
                           "event": gaussian(1.0)}, "dp_event.sampling_probability must be a number in [0, 1]"),
    (["--delta", "1e-6", "--latex"], POISSON, "--latex does not go with --dp-event"),
])
def test_bad_event_input_is_one_line_exit_2(write, capsys, argv, content, message):
    code, out, err = run(["plan", "--dp-event", write(content)] + argv, capsys)
    assert code == 2 and out == ""
    assert err.startswith("metadp: error: ") and err.count("\n") == 1 and message in err


def test_flags_of_events_are_refused_with_a_plan_file_and_nothing_is_written(write, tmp_path, capsys):
    code, _, err = run(["plan", "examples/dp_sgd_mnist.toml", "--delta", "1e-6"], capsys)
    assert code == 2 and "--delta applies only with --dp-event" in err
    code, _, err = run(["plan", "examples/dp_sgd_mnist.toml", "--dp-event", write(POISSON), "--delta", "1e-6"], capsys)
    assert code == 2 and "plan FILE does not go with --dp-event" in err
    figure = tmp_path / "eps.png"
    code, _, err = run(["plan", "--dp-event", write(POISSON), "--delta", "1e-6", "--plot", str(figure)], capsys)
    assert code == 2 and "--plot does not go with --dp-event" in err and not figure.exists()
    code, _, err = run(["plan", "--dp-event", str(tmp_path / "missing.json"), "--delta", "1e-6"], capsys)
    assert code == 2 and "does not exist" in err and err.count("\n") == 1


def test_verify_crosscheck_of_an_event_file(write, capsys):
    pytest.importorskip("dp_accounting")
    code, out, err = run(["verify", "--crosscheck", write(POISSON), "--delta", "1e-6", "--json"], capsys)
    assert code == 0, err
    table = json.loads(out)
    assert table["verdict"] == "all agree" and table["compared"] == ["dp-accounting"]
    rows = {r["source"]: r for r in table["rows"]}
    assert rows["metadp PLD (certified interval)"]["ok"] is True
    assert math.isclose(rows["dp-accounting PLD (1e-4)"]["epsilon"], rows["metadp PLD (certified interval)"]["epsilon"],
                        rel_tol=5e-3)


@pytest.mark.parametrize("argv, message", [
    (["verify", "--crosscheck", "{event}"], "--delta is missing"),
    (["verify", "--crosscheck", "{event}", "--delta", "1.5"], "--delta must be in (0, 1)"),
    (["verify", "--crosscheck", "examples/dp_sgd_mnist.toml", "--delta", "1e-6"],
     "--delta applies only to --crosscheck"),
    (["verify", "gaussian", "--noise", "1", "--delta", "1e-6"], "--delta applies only to --crosscheck"),
])
def test_verify_delta_is_for_event_files_only(write, capsys, argv, message):
    path = write(POISSON)
    code, _, err = run([a.replace("{event}", path) for a in argv], capsys)
    assert code == 2 and message in err and err.count("\n") == 1
