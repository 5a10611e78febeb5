"""Failures of the attack run on bfdea33 (benchmarks/attack.py; issue 28), one test each, every one failing there.

Tracebacks (a group of 10^15, one-pass plans at noise 0.01 over 10^7 steps, 10^12 episodes, audits of 10^12 steps,
cross-checks of anchors out of their range, DP-Pix cells of 10^5 pixels, nested dp-accounting events), bare
``inf`` epsilons, and the silences the PLD lattice spent below delta 1e-270.
"""

from __future__ import annotations

import math
import time

import numpy as np
import pytest
from scipy import stats

from clirun import metadp


def _write(tmp_path, text, name="plan.toml"):
    path = tmp_path / name
    path.write_text(text)
    return path


def _plan_text(sampling, *, unit="record", steps=100, multiplier=1.0, extra=""):
    return (f'name = "p"\nunit = "{unit}"\ndelta = 1e-5\nsteps = {steps}\n{extra}[sampling]\n{sampling}\n'
            f'[noise]\nmechanism = "gaussian"\nmultiplier = {multiplier}\n')


# -- infinite epsilon in words -------------------------------------------------------------------------------


def test_infinite_epsilon_is_said_in_words_never_as_a_bare_inf():
    from metadp.report import format_lower, format_upper

    assert format_upper(math.inf) == "infinity" and format_lower(-math.inf) == "-infinity"
    result = metadp("epsilon", "--sampling", "poisson", "--rate", "0.01", "--noise", "1e-300", "--steps", "100",
                    "--delta", "1e-5")
    assert result.returncode == 0
    assert "epsilon   <= infinity" in result.stdout and "no finite epsilon is certified" in result.stdout
    assert " inf " not in result.stdout and "<= inf\n" not in result.stdout
    latex = metadp("epsilon", "--sampling", "poisson", "--rate", "0.01", "--noise", "1e-300", "--steps", "100",
                   "--delta", "1e-5", "--latex")
    assert r"$\le \infty$" in latex.stdout and "inf$" not in latex.stdout.replace(r"\infty$", "")


def test_an_infinite_noise_event_is_described_in_words():
    from metadp.accounting import Gaussian

    assert Gaussian(math.inf).describe() == "Gaussian(noise multiplier infinity: releases nothing)"


def test_pld_result_prints_its_interval_in_words():
    from metadp.accounting import Gaussian, PldAccountant, PoissonSampled

    text = str(PldAccountant().compose(PoissonSampled(0.01, Gaussian(1.0))).get_epsilon_bounds(1e-300))
    assert text.startswith("certified epsilon in [0, ") and "no lattice" in text and "nan" not in text


# -- group sizes ---------------------------------------------------------------------------------------------------


def test_a_group_larger_than_the_cap_is_refused_naming_group_size(tmp_path):
    from metadp.plan import MAX_GROUP_SIZE

    plan = _write(tmp_path, _plan_text('scheme = "poisson"\nrate = 0.01', unit="group",
                                       extra=f"group_size = {10**15}\n"))
    result = metadp("plan", plan, "--no-risk")
    assert result.returncode == 2 and "group_size must be at most" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and MAX_GROUP_SIZE == 10**5


def test_fixed_size_groups_of_ten_thousand_answer_in_seconds(tmp_path):
    # was 96 s and 7 GB (the fixed-size RDP curve summed a term per integer order up to 2^14 x 256)
    plan = _write(tmp_path, _plan_text('scheme = "fixed"\nbatch_size = 100\npopulation = 1000000000', unit="group",
                                       extra="group_size = 10000\nrelation = \"substitute\"\n"))
    start = time.monotonic()
    result = metadp("plan", plan, "--no-risk")
    assert result.returncode == 0, result.stderr
    assert time.monotonic() - start < 30
    assert "epsilon   <= " in result.stdout


def test_group_rdp_above_the_order_cap_is_infinite_and_below_it_unchanged():
    from metadp.amplification.group import MAX_BASE_ORDER, rdp_group

    calls = []

    def curve(orders):
        calls.append(np.max(orders))
        return orders / 2.0  # the Gaussian at z = 1

    orders = np.array([2.0, 8.0, 64.0])
    out = rdp_group(curve, orders, 2**16)  # base orders 2^16 x {2, 8, 64}: only the first is below 2^17
    assert max(calls) <= MAX_BASE_ORDER
    assert out[0] == 3.0**16 * (2.0**16 * 2.0) / 2.0 and np.all(np.isinf(out[1:]))


# -- one-pass lower bounds at tiny noise -------------------------------------------------------------------------


def test_the_one_pass_binomial_tables_match_scipy_and_survive_tiny_rates():
    from metadp.amplification.allocation_bounds import _binomial_pmfs

    p = np.array([0.0, 1e-300, 1e-9, 0.3, 0.5, 1.0 - 1e-12, 1.0])
    for epochs in (1, 7, 256):
        ours = _binomial_pmfs(p, epochs)
        ref = stats.binom.pmf(np.arange(epochs + 1)[:, None], epochs, p[None, :])
        big = ref > 1e-200
        assert np.all(np.abs(ours[big] - ref[big]) <= 1e-12 * ref[big])
        assert np.allclose(ours.sum(axis=0), 1.0, rtol=1e-12)


@pytest.mark.parametrize("scheme", ["shuffle", "balls_in_bins"])
def test_one_pass_plans_at_noise_001_over_ten_million_steps_answer(tmp_path, scheme):
    plan = _write(tmp_path, _plan_text(f'scheme = "{scheme}"\npopulation = 400000\nbatch_size = 1600', unit="task",
                                       steps=10_000_000, multiplier=0.01))
    result = metadp("plan", plan, "--no-risk")
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr and "epsilon   <= " in result.stdout


# -- episodic plans of 10^12 episodes a step ------------------------------------------------------------------------


_EPISODIC = ('scheme = "episodic"\nepisodes = {episodes}\n', '[[hierarchy]]\nname = "class"\ndraw = "fixed"\nsize = 5\n'
             'units = 1150\n[[hierarchy]]\nname = "drawing"\ndraw = "fixed"\nsize = 2\nunits = 20\n')


def test_an_episodic_plan_of_a_trillion_episodes_a_step_answers_with_rdp(tmp_path):
    text = ('name = "e"\nunit = "record"\ndelta = 1e-6\nsteps = 50\n[sampling]\n' + _EPISODIC[0].format(
        episodes=10**12) + '[noise]\nmechanism = "gaussian"\nmultiplier = 1.0\n' + _EPISODIC[1])
    start = time.monotonic()
    result = metadp("plan", _write(tmp_path, text))
    assert result.returncode == 0, result.stderr
    assert time.monotonic() - start < 30 and "RDP accountant" in result.stdout


def test_tail_bounded_groups_bound_the_dense_sum_from_above():
    import metadp.mechanisms.episodic_rdp as er

    for episodes, rate in ((200_000, 0.3), (3_000_000, 0.01)):
        er._integer_curve.cache_clear()
        dense, _ = er._integer_curve(episodes, rate, 0.1, 5.0, 2.0, 64, er.TAIL)
        log_w, js = er._tail_bounded_groups(episodes, rate, er.truncation_point(episodes, rate)[0])
        assert len(js) <= er._MAX_COMPONENTS and np.all(log_w <= 0.0)
        # the same curve through the tail-bounded groups (forced by a small dense limit) is never below
        saved = er._DENSE_COMPONENTS
        try:
            er._DENSE_COMPONENTS = 10
            er._integer_curve.cache_clear()
            tailed, _ = er._integer_curve(episodes, rate, 0.1, 5.0, 2.0, 64, er.TAIL)
        finally:
            er._DENSE_COMPONENTS = saved
            er._integer_curve.cache_clear()
        assert np.all(tailed >= dense * (1 - 1e-12)) and np.all(tailed <= dense * 1.01)


# -- audits and cross-checks -------------------------------------------------------------------------------------


@pytest.mark.parametrize("args, words", [
    (["verify", "poisson", "--rate", "0.5", "--noise", "1", "--steps", "1e15", "--samples", "20000"],
     "an audit simulates every step"),
    (["verify", "poisson", "--rate", "0.5", "--noise", "1", "--steps", "1e9", "--samples", "20000"],
     "an audit simulates every step"),
    (["verify", "dp-pix", "--epsilon", "1", "--cell", "100000", "--m", "1", "--samples", "20000"],
     "use a cell of at most"),
    (["verify", "gaussian", "--noise", "1", "--alpha", "1e-300", "--samples", "20000"], "--alpha must be in [1e-12, 1)"),
])
def test_audits_beyond_any_machine_are_refused_before_sampling(args, words):
    result = metadp(*args)
    assert result.returncode == 2 and words in result.stderr and len(result.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("multiplier, steps, words", [
    ("1e-300", "10", "noise.multiplier must be in [1e-50, 1e50] for an audit"),
    ("1.0", "1_000_000_000_000", "an audit simulates every step"),
])
def test_plan_audits_out_of_range_are_refused(tmp_path, multiplier, steps, words):
    plan = _write(tmp_path, _plan_text('scheme = "poisson"\nrate = 0.01', multiplier=multiplier, steps=steps))
    result = metadp("verify", "plan", plan, "--samples", "20000")
    assert result.returncode == 2 and words in result.stderr
    assert "Warning" not in result.stderr and len(result.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("multiplier, steps", [("1e-300", "100"), ("1e300", "100"), ("1.0", "1_000_000_000_000")])
def test_crosscheck_outside_the_anchors_range_reports_metadp_and_says_why_not_them(tmp_path, multiplier, steps):
    pytest.importorskip("dp_accounting")
    plan = _write(tmp_path, _plan_text('scheme = "poisson"\nrate = 0.01', multiplier=multiplier, steps=steps))
    result = metadp("verify", "--crosscheck", plan)
    assert "Traceback" not in result.stderr and result.returncode in (0, 3), result.stderr
    assert "metadp RDP" in result.stdout and "dp-accounting not run" in result.stdout


# -- the PLD lattice below delta 1e-270 ------------------------------------------------------------------------------


def test_below_the_delta_floor_the_pld_accountant_answers_at_once_and_still_bounds():
    from metadp.accounting import Gaussian, PldAccountant, PoissonSampled
    from metadp.accounting.pld import DELTA_FLOOR

    event = PoissonSampled(0.01, Gaussian(1.0))
    start = time.monotonic()
    low = PldAccountant(max_seconds=math.inf).compose(event).get_epsilon_bounds(1e-300)
    assert time.monotonic() - start < 5  # refined 17 s to no finite bound before
    at_floor = PldAccountant(max_seconds=math.inf).compose(event).get_epsilon_bounds(DELTA_FLOOR)
    # epsilon(delta) decreases in delta: a bound at 1e-300 is at least the true epsilon at the floor
    assert math.isfinite(low.epsilon_upper) and low.epsilon_upper >= at_floor.epsilon_lower
    assert any("below 1e-270" in note for note in low.notes)


# -- training flags -------------------------------------------------------------------------------------------------


def test_a_diverged_score_is_said_in_words():
    pytest.importorskip("torch")
    from metadp.training.run.evaluate import Score

    text = str(Score(math.nan, math.nan, 5, "mse"))
    assert "diverged" in text and "nan" not in text
    assert str(Score(0.5, math.nan, 1, "mse")) == "mse 0.5 (1 task, no interval)"


@pytest.mark.parametrize("flag, value, words", [("--outer-lr", "1e300", "--outer-lr must be a number in (0, 10000]"),
                                                ("--inner-lr", "1e300", "--inner-lr must be a number in (0, 10000]")])
def test_learning_rates_beyond_any_step_size_are_refused_before_training(tmp_path, flag, value, words):
    pytest.importorskip("torch")
    result = metadp("train", "dp-maml", "--data", "sinusoid", "--steps", "2", "--meta-batch", "4", "--pool", "50",
                    "--eval-tasks", "5", "--out", tmp_path / "run", "--noise", "1", flag, value)
    assert result.returncode == 2 and words in result.stderr and not (tmp_path / "run").exists()


def test_a_blur_radius_beyond_any_image_is_refused(tmp_path):
    pytest.importorskip("torch")
    result = metadp("train", "protonet", "--data", "glyphs", "--steps", "2", "--obfuscation", "blur", "--radius",
                    "1000000000", "--sigma", "1", "--eval-tasks", "5", "--out", tmp_path / "run")
    assert result.returncode == 2 and "--radius must be a whole number >= 0 and <= 256" in result.stderr


# -- integrations -------------------------------------------------------------------------------------------------


def test_nested_dp_accounting_objects_are_refused_by_depth_not_by_recursion():
    dpa = pytest.importorskip("dp_accounting")
    from metadp.integrations.dp_accounting import from_dp_event

    event = dpa.GaussianDpEvent(1.0)
    for _ in range(3000):
        event = dpa.SelfComposedDpEvent(event, 1)
    with pytest.raises(ValueError, match="nests more than 100 levels"):
        from_dp_event(event)


def test_the_opacus_accountant_refuses_a_delta_that_is_not_a_number():
    pytest.importorskip("opacus")
    from metadp.integrations.opacus import MetadpAccountant

    accountant = MetadpAccountant()
    accountant.step(noise_multiplier=1.0, sample_rate=0.01)
    for bad in (np.array([1e-5]), [1e-5]):
        with pytest.raises(ValueError, match="delta must be a real number"):
            accountant.get_epsilon(bad)


def test_make_private_checked_refuses_a_run_that_cannot_end():
    pytest.importorskip("opacus")
    import torch

    from metadp.integrations.opacus import make_private_checked
    from opacus import PrivacyEngine

    data = torch.utils.data.TensorDataset(torch.randn(100, 3), torch.randn(100, 1))
    loader = torch.utils.data.DataLoader(data, batch_size=10)
    model = torch.nn.Linear(3, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.raises(ValueError, match="at most 1,000,000,000 steps"):
        make_private_checked(PrivacyEngine(accountant="metadp"), module=model, optimizer=optimizer,
                             data_loader=loader, target_epsilon=1.0, target_delta=1e-5, epochs=1e12, max_grad_norm=1.0)


@pytest.mark.parametrize("args", [["plan", "--plot", ""], ["cite", "--out", ""], ["plan", "--dp-event", "", "--delta",
                                                                                  "1e-5"]])
def test_an_empty_file_name_is_refused_not_read_as_absent(args):
    result = metadp(*args)  # --plot '' printed the report and wrote no figure, with status 0
    assert result.returncode == 2 and "needs a file name, got ''" in result.stderr


def test_a_population_beyond_float_precision_is_refused_naming_it():
    # 1e19 reached the symmetrised pair's internals ("base pair has P(L > 0) + Q(L > 0) > 1 ...: not symmetrisable")
    result = metadp("epsilon", "--sampling", "fixed", "--batch", "256", "--population", "1e19", "--noise", "1.1",
                    "--steps", "10", "--delta", "1e-5")
    assert result.returncode == 2 and "sampling.population must be an integer >= 1 and <= 9007199254740992" in result.stderr


def test_a_pld_report_of_its_rdp_bound_cites_what_that_bound_rests_on():
    # 1.18e10 steps at rate 0.01, z = 1: the lattice's bound (1.025e6) is above its RDP cap (999,566), which is
    # the number reported; its conversion and citations were missing from the report
    result = metadp("epsilon", "--sampling", "poisson", "--rate", "0.01", "--noise", "1", "--steps", "11844700000",
                    "--delta", "1e-5", "--accountant", "pld")
    assert result.returncode == 0 and "the RDP bound is reported" in result.stdout
    assert "the number reported is the PLD accountant's RDP bound" in result.stdout
    assert "[canonne2020discrete]" in result.stdout and "[mironov2017renyi]" in result.stdout
