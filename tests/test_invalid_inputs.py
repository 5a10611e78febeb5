"""Invalid input is refused, never turned into a number.

Library: every case raises ``ValueError`` whose message names the offending parameter (the dotted plan
key, or the argument name) -- STYLE.md "Validate at the public boundary by raising". CLI: every case
exits with status 2, prints exactly one line on stderr naming the parameter, and prints nothing on
stdout (so no NaN and no silent number can reach a user).

Each case is its own parametrized test with an id; ``needles`` are substrings the message must contain.
"""

from __future__ import annotations

import copy
import os
import subprocess
import sys
from pathlib import Path

import pytest

from metadp.accounting import (
    FixedSizeSampled,
    Gaussian,
    Laplace,
    PoissonSampled,
    RdpAccountant,
    SelfComposed,
    epsilon_from_rdp,
)
from metadp.accounting.calibration import calibrate_noise, max_rate, max_steps
from metadp.core.rdp import gaussian_rdp, poisson_gaussian_rdp, wor_gaussian_rdp
from metadp.cli import main
from metadp.plan import Plan, load_plan, plan_epsilon

ROOT = Path(__file__).resolve().parents[1]

# A valid plan (the default plan's numbers); each case changes one thing.
BASE = {
    "name": "test plan",
    "unit": "task",
    "relation": "add_remove",
    "delta": 1e-6,
    "steps": 250,
    "sampling": {"scheme": "poisson", "population": 400_000, "batch_size": 1600},
    "noise": {"mechanism": "gaussian", "multiplier": 1.0},
}

BASE_TOML = """\
name = "test plan"
unit = "task"
relation = "add_remove"
delta = {delta}
steps = 250

[sampling]
scheme = "poisson"
population = 400000
{sampling_line}

[noise]
mechanism = "gaussian"
multiplier = {multiplier}
"""


def _toml(delta="1e-6", sampling_line="batch_size = 1600", multiplier="1.0") -> str:
    return BASE_TOML.format(delta=delta, sampling_line=sampling_line, multiplier=multiplier)


def _plan(**changes) -> dict:
    """BASE with changes: ``key=value`` sets, ``key=DELETE`` removes; ``sampling__rate`` is a nested key."""
    d = copy.deepcopy(BASE)
    for key, value in changes.items():
        table, _, sub = key.partition("__")
        target, name = (d[table], sub) if sub else (d, table)
        if value is DELETE:
            target.pop(name, None)
        else:
            target[name] = value
    return d


DELETE = object()
NAN = float("nan")



def _from_dict(**changes):
    return lambda tmp_path: Plan.from_dict(_plan(**changes))


def _from_text(text):
    return lambda tmp_path: load_plan(text)


def _from_file(text):
    def run(tmp_path):
        path = tmp_path / "plan.toml"
        path.write_text(text, encoding="utf-8")
        return load_plan(path)
    return run


def _call(fn, *args, **kwargs):
    return lambda tmp_path: fn(*args, **kwargs)


def _poisson_step(rate=0.01):
    return PoissonSampled(rate, Gaussian(1.0))


LIBRARY_CASES = [
    # -- sampling rate --------------------------------------------------------------------------
    pytest.param(_from_dict(sampling__batch_size=DELETE, sampling__rate=1.5),
                 ["sampling.rate", "[0, 1]", "1.5"], id="plan-rate-above-1"),
    pytest.param(_from_dict(sampling__batch_size=DELETE, sampling__rate=-0.1),
                 ["sampling.rate", "-0.1"], id="plan-rate-negative"),
    pytest.param(_from_text(_toml(sampling_line="rate = nan")), ["sampling.rate", "nan"], id="plan-rate-nan-toml"),
    pytest.param(_from_dict(sampling__batch_size=DELETE, sampling__rate="0.004"),
                 ["sampling.rate"], id="plan-rate-string"),
    # -- noise ----------------------------------------------------------------------------------
    pytest.param(_from_dict(noise__multiplier=0.0), ["noise.multiplier"], id="plan-noise-zero"),
    pytest.param(_from_dict(noise__multiplier=-1.0), ["noise.multiplier", "-1"], id="plan-noise-negative"),
    pytest.param(_from_text(_toml(multiplier="nan")), ["noise.multiplier", "nan"], id="plan-noise-nan-toml"),
    # An infinite multiplier releases pure noise: meaningless as a training plan.
    pytest.param(_from_text(_toml(multiplier="inf")), ["noise.multiplier"], id="plan-noise-inf-toml"),
    pytest.param(_from_dict(noise__multiplier=DELETE), ["noise.multiplier"], id="plan-gaussian-without-multiplier"),
    pytest.param(_from_dict(noise={"mechanism": "laplace", "scale": 0.0}), ["noise.scale"], id="plan-laplace-scale-zero"),
    pytest.param(_from_dict(noise__mechanism="exponential"), ["noise.mechanism"], id="plan-unknown-mechanism"),
    pytest.param(_from_dict(noise=DELETE), ["noise"], id="plan-missing-noise-table"),
    # -- delta ----------------------------------------------------------------------------------
    pytest.param(_from_dict(delta=0.0), ["delta", "(0, 1)"], id="plan-delta-zero"),
    pytest.param(_from_dict(delta=1.0), ["delta", "(0, 1)"], id="plan-delta-one"),
    pytest.param(_from_dict(delta=-1e-5), ["delta"], id="plan-delta-negative"),
    pytest.param(_from_text(_toml(delta="nan")), ["delta", "nan"], id="plan-delta-nan-toml"),
    pytest.param(_from_dict(delta="1e-6"), ["delta"], id="plan-delta-string"),
    pytest.param(_from_dict(delta=DELETE), ["delta"], id="plan-missing-delta"),
    # -- steps / epochs -------------------------------------------------------------------------
    pytest.param(_from_dict(steps=-1), ["steps", "-1"], id="plan-steps-negative"),
    pytest.param(_from_dict(steps=2.5), ["steps", "2.5"], id="plan-steps-fractional"),
    pytest.param(_from_dict(steps="250"), ["steps"], id="plan-steps-string"),
    pytest.param(_from_dict(steps=True), ["steps"], id="plan-steps-bool"),
    pytest.param(_from_dict(steps=DELETE), ["steps"], id="plan-missing-steps"),
    pytest.param(_from_dict(epochs=5), ["steps", "epochs"], id="plan-both-steps-and-epochs"),
    pytest.param(_from_dict(steps=DELETE, epochs=5, sampling={"scheme": "poisson", "rate": 0.01}),
                 ["epochs", "population"], id="plan-epochs-without-population"),
    pytest.param(_from_dict(steps=DELETE, epochs=-2), ["epochs"], id="plan-epochs-negative"),
    # -- sampling shape -------------------------------------------------------------------------
    pytest.param(_from_dict(relation="substitute", sampling={"scheme": "fixed", "population": 10, "batch_size": 20}),
                 ["sampling.batch_size", "sampling.population"], id="plan-fixed-batch-exceeds-population"),
    pytest.param(_from_dict(sampling__batch_size=-5), ["sampling.batch_size", "-5"], id="plan-batch-negative"),
    pytest.param(_from_dict(sampling__population=0), ["sampling.population"], id="plan-population-zero"),
    pytest.param(_from_dict(sampling__rate=0.004), ["sampling.rate", "sampling.batch_size"],
                 id="plan-both-rate-and-batch-size"),
    pytest.param(_from_dict(sampling__scheme="uniform"), ["sampling.scheme"], id="plan-unknown-scheme"),
    pytest.param(_from_dict(sampling={"scheme": "none", "batch_size": 10}), ["sampling.batch_size"],
                 id="plan-none-with-batch-size"),
    pytest.param(_from_dict(relation="substitute", sampling={"scheme": "fixed", "population": 100, "rate": 0.1}),
                 ["sampling.rate"], id="plan-fixed-with-rate"),
    pytest.param(_from_dict(relation="add_remove", sampling={"scheme": "fixed", "population": 100, "batch_size": 10}),
                 ["relation", "substitute"], id="plan-fixed-with-add-remove"),
    # -- keys, unit, relation, accountant -------------------------------------------------------
    pytest.param(_from_dict(stpes=250), ["stpes", "steps"], id="plan-unknown-top-level-key"),
    pytest.param(_from_dict(sampling__batchsize=1600, sampling__batch_size=DELETE),
                 ["sampling.batchsize", "did you mean 'batch_size'"], id="plan-mistyped-nested-key"),
    pytest.param(_from_dict(relation="replace_one"), ["relation"], id="plan-unknown-relation"),
    pytest.param(_from_dict(unit="user"), ["unit"], id="plan-unknown-unit"),
    # DESIGN.md sec. 2: the unit is "explicit on every plan ... Never implied"; docs/plan-format.md
    # marks relation and accountant optional, not unit.
    pytest.param(_from_dict(unit=DELETE), ["unit"], id="plan-missing-unit"),
    # docs/plan-format.md: unit = "group" needs group_size >= 2; [[hierarchy]] is an array of tables.
    pytest.param(_from_dict(unit="group"), ["group_size", "required"], id="plan-unit-group-without-size"),
    pytest.param(_from_dict(unit="group", group_size=1), ["group_size"], id="plan-unit-group-of-one"),
    pytest.param(_from_dict(hierarchy={"levels": ["tasks", "classes", "examples"]}), ["hierarchy", "array of tables"],
                 id="plan-hierarchy-table"),
    pytest.param(_from_dict(accountant="moments"), ["accountant"], id="plan-unknown-accountant"),
    pytest.param(_from_dict(claim=5), ["claim"], id="plan-claim-not-a-table"),
    pytest.param(_from_dict(claim={"epsilon": -1.0}), ["claim.epsilon"], id="plan-claim-negative"),
    # -- files and TOML -------------------------------------------------------------------------
    pytest.param(_from_text('name = "x"\nunit = task\n'), ["TOML"], id="plan-malformed-toml"),
    pytest.param(_from_file(""), ["plan.toml", "empty"], id="plan-empty-file"),
    pytest.param(_from_file("# only a comment\n"), ["missing"], id="plan-comment-only-file"),
    pytest.param(_call(load_plan, Path("/nonexistent/metadp/plan.toml")), ["/nonexistent/metadp/plan.toml"],
                 id="plan-nonexistent-file"),
    pytest.param(_call(plan_epsilon, "examples/dp_sgd_mnist.toml"), ["plan"], id="plan-epsilon-of-a-path"),
    # -- events ---------------------------------------------------------------------------------
    pytest.param(_call(Gaussian, 0.0), ["noise_multiplier"], id="event-gaussian-zero"),
    pytest.param(_call(Gaussian, NAN), ["noise_multiplier", "nan"], id="event-gaussian-nan"),
    pytest.param(_call(Laplace, 0.0), ["scale"], id="event-laplace-scale-zero"),
    pytest.param(_call(PoissonSampled, 1.5, Gaussian(1.0)), ["rate"], id="event-poisson-rate-above-1"),
    pytest.param(_call(PoissonSampled, NAN, Gaussian(1.0)), ["rate", "nan"], id="event-poisson-rate-nan"),
    pytest.param(_call(PoissonSampled, 0.1, "gaussian"), ["inner"], id="event-poisson-inner-not-event"),
    pytest.param(_call(FixedSizeSampled, 11, 10, Gaussian(1.0)), ["batch"], id="event-fixed-batch-exceeds-population"),
    pytest.param(_call(FixedSizeSampled, 1, 0, Gaussian(1.0)), ["population"], id="event-fixed-population-zero"),
    pytest.param(_call(SelfComposed, Gaussian(1.0), -1), ["count"], id="event-selfcomposed-negative-count"),
    # -- RDP functions: orders must be > 1 ------------------------------------------------------
    pytest.param(_call(gaussian_rdp, 1.0, [1.0]), ["orders"], id="rdp-gaussian-order-1"),
    pytest.param(_call(gaussian_rdp, 1.0, [0.5, 2.0]), ["orders"], id="rdp-gaussian-order-below-1"),
    pytest.param(_call(poisson_gaussian_rdp, 0.01, 1.0, [1.0, 2.0]), ["orders"], id="rdp-poisson-order-1"),
    pytest.param(_call(wor_gaussian_rdp, 0.01, 1.0, [NAN]), ["orders"], id="rdp-wor-order-nan"),
    pytest.param(_call(epsilon_from_rdp, [1.0], [0.1], 1e-5), ["orders"], id="conversion-order-1"),
    pytest.param(_call(epsilon_from_rdp, [2.0], [0.1], 0.0), ["delta"], id="conversion-delta-zero"),
    # -- accountant -----------------------------------------------------------------------------
    pytest.param(_call(lambda: RdpAccountant().compose(_poisson_step(), -1)), ["count"], id="compose-count-negative"),
    pytest.param(_call(lambda: RdpAccountant().compose(_poisson_step(), 2.5)), ["count"], id="compose-count-fractional"),
    pytest.param(_call(lambda: RdpAccountant().compose("gaussian", 1)), ["event"], id="compose-non-event"),
    pytest.param(_call(lambda: RdpAccountant().compose(None)), ["event"], id="compose-none"),
    pytest.param(_call(lambda: RdpAccountant("substitute").compose(_poisson_step())), ["Poisson"],
                 id="compose-poisson-under-substitution"),
    pytest.param(_call(RdpAccountant, "replace_one"), ["relation"], id="accountant-unknown-relation"),
    pytest.param(_call(lambda: RdpAccountant().compose(_poisson_step()).get_epsilon(0.0)), ["delta"],
                 id="get-epsilon-delta-zero"),
    pytest.param(_call(lambda: RdpAccountant().compose(_poisson_step()).get_epsilon(NAN)), ["delta"],
                 id="get-epsilon-delta-nan"),
    pytest.param(_call(lambda: RdpAccountant().compose(_poisson_step()).get_delta(-1.0)), ["epsilon"],
                 id="get-delta-epsilon-negative"),
    # -- calibration ----------------------------------------------------------------------------
    pytest.param(_call(calibrate_noise, lambda z: SelfComposed(PoissonSampled(0.01, Gaussian(z)), 100), 0.0, 1e-5),
                 ["target_epsilon"], id="calibrate-noise-target-zero-unreachable"),
    pytest.param(_call(calibrate_noise, lambda z: SelfComposed(PoissonSampled(0.01, Gaussian(z)), 100), -1.0, 1e-5),
                 ["target_epsilon"], id="calibrate-noise-target-negative"),
    pytest.param(_call(calibrate_noise, lambda z: SelfComposed(PoissonSampled(0.01, Gaussian(z)), 100), NAN, 1e-5),
                 ["target_epsilon"], id="calibrate-noise-target-nan"),
    pytest.param(_call(calibrate_noise, lambda z: SelfComposed(PoissonSampled(0.01, Gaussian(z)), 100), 1.0, 1.0),
                 ["delta"], id="calibrate-noise-delta-one"),
    pytest.param(_call(max_steps, _poisson_step(), 0.0, 1e-5), ["target_epsilon"], id="max-steps-target-zero"),
    pytest.param(_call(max_steps, _poisson_step(), 1.0, 1e-5, limit=0), ["limit"], id="max-steps-limit-zero"),
    pytest.param(_call(max_rate, lambda q: PoissonSampled(q, Gaussian(1.0)), 0.0, 1e-5), ["target_epsilon"],
                 id="max-rate-target-zero"),
]


@pytest.mark.parametrize("case, needles", LIBRARY_CASES)
def test_library_rejects(case, needles, tmp_path):
    with pytest.raises(ValueError) as info:
        result = case(tmp_path)
        pytest.fail(f"accepted invalid input and returned {result!r}")
    message = str(info.value)
    for needle in needles:
        assert needle in message, f"message {message!r} does not contain {needle!r}"


# ---------------------------------------------------------------------------------------------
# CLI: python -m metadp ..., exit status 2, one line on stderr, nothing on stdout.

EPSILON = ["epsilon", "--sampling", "poisson", "--rate", "0.01", "--noise", "1", "--steps", "100", "--delta", "1e-5"]


def _epsilon_with(**changes):
    """The valid EPSILON command with options replaced (value None drops the option and its value)."""
    argv = list(EPSILON)
    for flag, value in changes.items():
        flag = "--" + flag.replace("_", "-")
        if flag in argv:
            i = argv.index(flag)
            del argv[i:i + 2]
        if value is not None:
            argv += [flag, value]
    return argv


def _plan_file(text):
    """`metadp plan FILE` on a file holding ``text``."""
    def argv(tmp_path):
        path = tmp_path / "plan.toml"
        path.write_text(text, encoding="utf-8")
        return ["plan", str(path)]
    return argv


def _argv(argv):
    return lambda tmp_path: argv


CLI_CASES = [
    pytest.param(_argv(_epsilon_with(rate="abc")), ["--rate"], id="cli-rate-not-a-number"),
    pytest.param(_argv(_epsilon_with(rate="1.5")), ["rate", "[0, 1]"], id="cli-rate-above-1"),
    pytest.param(_argv(_epsilon_with(noise=None)), ["--noise"], id="cli-missing-noise"),
    pytest.param(_argv(_epsilon_with(delta=None)), ["--delta"], id="cli-missing-delta"),
    pytest.param(_argv(_epsilon_with(noise="0")), ["noise"], id="cli-noise-zero"),
    pytest.param(_argv(_epsilon_with(delta="0")), ["delta", "(0, 1)"], id="cli-delta-zero"),
    pytest.param(_argv(_epsilon_with(delta="nan")), ["delta"], id="cli-delta-nan"),
    pytest.param(_argv(_epsilon_with(steps="-3")), ["steps"], id="cli-steps-negative"),
    pytest.param(_argv(_epsilon_with(steps="2.5")), ["steps"], id="cli-steps-fractional"),
    pytest.param(_argv(_epsilon_with(steps="inf")), ["steps"], id="cli-steps-inf"),
    pytest.param(_argv(_epsilon_with(sampling="uniform")), ["sampling"], id="cli-unknown-sampling"),
    pytest.param(_argv(_epsilon_with(sampling="fixed", rate=None, batch="20", population="10")), ["batch"],
                 id="cli-fixed-batch-exceeds-population"),
    pytest.param(_argv(["plan", "/nonexistent/metadp/plan.toml"]), ["/nonexistent/metadp/plan.toml"],
                 id="cli-nonexistent-plan-file"),
    pytest.param(_plan_file(_toml(sampling_line="rate = 1.5").replace("population = 400000\n", "")),
                 ["sampling.rate"], id="cli-plan-file-rate-above-1"),
    pytest.param(_plan_file('name = "x"\nunit = task\n'), ["TOML"], id="cli-plan-file-malformed"),
    pytest.param(_argv(["calibrate", "--target-epsilon", "0", "--delta", "1e-5", "--sampling", "poisson",
                        "--rate", "0.01", "--steps", "100"]), ["target"], id="cli-calibrate-target-zero-unreachable"),
    pytest.param(_argv(["calibrate", "--target-epsilon", "1e-6", "--delta", "1e-5", "--sampling", "poisson",
                        "--rate", "0.5", "--noise", "0.5", "--solve", "steps"]), ["target"],
                 id="cli-calibrate-steps-unreachable"),
]


def _check_rejection(code, stdout, stderr, needles):
    assert code == 2, f"exit {code}; stderr: {stderr[-2000:]}"
    assert stdout == "", f"printed on stdout despite bad input: {stdout!r}"
    lines = stderr.strip("\n").splitlines()
    assert len(lines) == 1, f"stderr is not one line: {stderr!r}"
    for needle in needles:
        assert needle in lines[0], f"stderr {lines[0]!r} does not contain {needle!r}"


@pytest.mark.parametrize("case, needles", CLI_CASES)
def test_cli_rejects(case, needles, tmp_path, capsys):
    # In-process (metadp.cli.main, as the console script calls it); real processes below.
    try:
        code = main(case(tmp_path))
    except SystemExit as err:  # argparse's own refusals
        code = err.code
    out = capsys.readouterr()
    _check_rejection(code, out.out, out.err, needles)


_REAL_PROCESS = ("cli-delta-nan", "cli-nonexistent-plan-file", "cli-unknown-sampling")


@pytest.mark.parametrize("case, needles", [p for p in CLI_CASES if p.id in _REAL_PROCESS])
def test_a_real_process_rejects_with_one_line_and_no_traceback(case, needles, tmp_path):
    proc = subprocess.run([sys.executable, "-m", "metadp", *case(tmp_path)], capture_output=True, text=True,
                          cwd=ROOT, timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)})
    _check_rejection(proc.returncode, proc.stdout, proc.stderr, needles)


def test_there_are_at_least_30_distinct_cases():
    ids = [p.id for p in LIBRARY_CASES + CLI_CASES]
    assert len(ids) == len(set(ids)) >= 30
