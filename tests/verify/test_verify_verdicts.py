"""`metadp verify`: verdicts and exit statuses (0 consistent, 1 VIOLATION, 3 inconclusive, 2 bad input),
printed lower bounds rounded down, a fast planner, and refusals of audits that would not finish."""

from __future__ import annotations

import json
import math
import re
import sys
import time
from decimal import Decimal

import numpy as np
import pytest

from metadp.cli import main
from metadp.report import format_lower
from metadp.verify.audit import AuditResult, AuditRow
from metadp.verify.crosscheck import CrossCheckRow, CrossCheckTable


def _row(delta_lower, claimed=0.01, margin=None):
    margin = delta_lower - claimed if margin is None else margin
    return AuditRow(1.0, claimed, delta_lower, 0.5, margin, "D||D'", ">", 0.5, 10, 1, 0.3, 0.1, 1.0)


# -- printed lower bounds are rounded down -------------------------------------------------------------

@pytest.mark.parametrize("x, text", [
    (0.123456, "0.1234"),  # .4g printed 0.1235, above the bound
    (1.23456e-4, "0.0001234"),
    (9.99995, "9.999"),  # .4g printed 10
    (2.71828e-9, "2.718e-09"),
    (0.1, "0.1000"),  # the float 0.1 is 0.1000000000000000055...: rounding down keeps 0.1000
    (0.29, "0.2899"),  # the float 0.29 is 0.28999999999999998...: 0.2900 would overstate it
])
def test_format_lower_rounds_down_exactly(x, text):
    assert format_lower(x) == text
    assert Decimal(text) <= Decimal(x)


def test_audit_table_prints_delta_lower_rounded_down():
    # delta_L = 1.23456e-4: the table's ".4e" printed 1.2346e-04, above the lower confidence bound
    result = AuditResult("consistent", (_row(1.23456e-4),), (_row(1.23456e-4),), 100, 10, 0.01, 0.005)
    line = result.to_table().splitlines()[2]
    printed = line.split()[2]
    assert Decimal(printed) <= Decimal(1.23456e-4), line
    assert Decimal(printed) >= Decimal("1.234e-4")
    margin = line.split()[4]  # margin = delta_L - claimed is a lower bound on the excess as well
    assert Decimal(margin) <= Decimal(1.23456e-4 - 0.01), line


def test_command_prints_the_implied_epsilon_lower_bound_rounded_down(monkeypatch, capsys):
    # the implied lower bound on epsilon was printed with ".4g" (0.123456 -> 0.1235, an overstatement)
    monkeypatch.setattr(AuditResult, "epsilon_lower", lambda self, delta: 0.123456)
    main(["verify", "gaussian", "--noise", "1", "--epsilons", "0.5,1", "--samples", "5000", "--quiet"])
    out = capsys.readouterr().out
    line = next(s for s in out.splitlines() if s.startswith("implied lower bound on epsilon"))
    assert ": 0.1234 (" in line, line


def test_crosscheck_table_prints_lower_bounds_rounded_down():
    # prv-accountant's and metadp's certified lower bounds were printed with ".6g": 0.1234567 -> 0.123457
    table = CrossCheckTable("p", 1e-6, (CrossCheckRow("metadp PLD", 0.2, 0.1234567, "check", True),))
    row = table.to_table().splitlines()[-1]
    assert "0.123456 " in row and "0.123457" not in row, row


# -- verdicts and exit statuses ----------------------------------------------------------------------

def test_an_audit_too_small_to_see_is_inconclusive_not_consistent(capsys):
    # 10 draws per side: the planner needs thousands to see noise 20% below the claim; this said "consistent"
    code = main(["verify", "gaussian", "--noise", "1", "--epsilons", "0.5,1", "--samples", "10"])
    out = capsys.readouterr().out
    assert code == 3, out
    assert "INCONCLUSIVE" in out and "consistent" not in out
    needed = re.search(r"needs ([\d,]+) draws per side", out)
    assert needed and int(needed.group(1).replace(",", "")) > 1000, out


def test_inconclusive_in_json_names_the_samples_needed(capsys):
    code = main(["verify", "laplace", "--scale", "1", "--epsilons", "0.5,1", "--samples", "20", "--json"])
    d = json.loads(capsys.readouterr().out)
    assert code == 3 and d["verdict"] == "INCONCLUSIVE"
    assert d["n"] == 20 and d["n_required"] > 20


def test_enough_samples_and_no_violation_is_consistent_exit_0(capsys):
    code = main(["verify", "gaussian", "--noise", "1", "--epsilons", "0.5,1", "--samples", "20000", "--quiet"])
    out = capsys.readouterr().out
    assert code == 0 and "audit: consistent" in out, out


def test_a_violation_exits_1_even_below_the_planned_samples(capsys):
    # noise 0.5 against a claim of 1: found with far fewer draws than planned for noise 0.8; a VIOLATION's
    # false-alarm guarantee does not depend on the power
    code = main(["verify", "gaussian", "--noise", "0.5", "--claim-noise", "1", "--epsilons", "0.5,1",
                 "--samples", "500", "--json"])
    d = json.loads(capsys.readouterr().out)
    assert d["verdict"] == "VIOLATION" and d["n"] < d["n_required"]
    assert code == 1


def test_verify_plan_uses_the_same_exit_statuses(tmp_path, capsys):
    plan = tmp_path / "shuffle.toml"
    plan.write_text('unit = "task"\nrelation = "add_remove"\ndelta = 1e-6\nsteps = 10\n[sampling]\n'
                    'scheme = "shuffle"\npopulation = 100\nbatch_size = 10\n[noise]\nmultiplier = 1.0\n')
    code = main(["verify", "plan", str(plan), "--epsilons", "1,2", "--samples", "100", "--quiet"])
    assert code == 3 and "INCONCLUSIVE" in capsys.readouterr().out


def test_help_documents_the_exit_statuses(capsys):
    with pytest.raises(SystemExit):
        main(["verify", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    for needle in ("0 consistent", "1 VIOLATION", "2 bad input", "3 inconclusive", "--force-long"):
        assert needle in text, needle


# -- --crosscheck: it fails when nothing was compared -----------------------------------------------

def _hide(monkeypatch, *modules):
    for name in modules:  # an import of a module mapped to None raises ImportError
        monkeypatch.setitem(sys.modules, name, None)


def test_crosscheck_without_the_libraries_compares_nothing_and_fails(monkeypatch, capsys):
    _hide(monkeypatch, "dp_accounting", "prv_accountant")
    code = main(["verify", "--crosscheck", "examples/dp_sgd_mnist.toml"])
    out = capsys.readouterr().out
    assert code == 3, out
    assert "all agree" not in out and "nothing compared" in out.lower()


def test_crosscheck_with_one_library_says_which_was_compared(monkeypatch, capsys):
    pytest.importorskip("dp_accounting")
    _hide(monkeypatch, "prv_accountant")
    code = main(["verify", "--crosscheck", "examples/dp_sgd_mnist.toml", "--json"])
    d = json.loads(capsys.readouterr().out)
    assert code == 0 and d["compared"] == ["dp-accounting"] and d["not_compared"] == ["prv-accountant"]


def test_crosscheck_disagreement_exits_1(monkeypatch, capsys):
    from metadp.verify import crosscheck

    monkeypatch.setattr(crosscheck, "_dp_accounting", lambda plan, step: (100.0, 100.0, ""))
    monkeypatch.setattr(crosscheck, "_prv", lambda plan, step: (None, None, "prv-accountant: not run here"))
    code = main(["verify", "--crosscheck", "examples/dp_sgd_mnist.toml"])
    assert code == 1 and "DISAGREEMENT" in capsys.readouterr().out


# -- the planner is fast; audits that would not finish are refused -----------------------------------

def test_planner_sizes_the_readme_poisson_audit_in_seconds():
    # metadp verify poisson --rate 0.01 --noise 1 --steps 10 --epsilons 1,2: the exact refinement summed
    # ~1e6 Clopper-Pearson bounds per side and step of the search (over a minute, tens of minutes in all)
    from metadp.verify.planner import samples_needed

    # the claim at eps = 2: PldAccountant().compose(PoissonSampled(0.01, Gaussian(1)), 10).get_delta(2)
    # = 1.83e-11 (metadp's PLD upper bound, 1.3 s of its own); the 1e-4 excess to see dominates it
    claimed = 1.83e-11

    def profile(eps):
        return np.full(np.shape(eps), claimed)

    start = time.perf_counter()
    n = samples_needed(profile, 2.0, 1e-4, tests=2)
    assert time.perf_counter() - start < 5.0  # observed: 0.7 s
    approx = samples_needed(profile, 2.0, 1e-4, tests=2, exact=False)
    assert 1e10 < n and approx <= n <= 1.02 * approx  # ~1.16e10: thousands of millions of hits, normal regime


def test_samples_beyond_an_hour_are_refused_with_an_estimate(capsys):
    start = time.perf_counter()
    code = main(["verify", "gaussian", "--noise", "1", "--samples", "1e12"])
    err = capsys.readouterr().err
    assert time.perf_counter() - start < 10.0
    assert code == 2 and err.count("\n") == 1 and err.startswith("metadp: error: --samples")
    assert "hour" in err and "--force-long" in err


def test_samples_beyond_memory_are_refused_even_with_force_long(monkeypatch, capsys):
    # the exploration sample (n/10 draws per side, at most 2^24) is held in memory: on a 1 GiB machine,
    # 1e8 draws (1e7 to explore, ~0.6 GiB) are refused; 1e6 run
    from metadp.verify import sizing

    monkeypatch.setattr(sizing, "_memory_bytes", lambda: 1 << 30)
    code = main(["verify", "gaussian", "--noise", "1", "--samples", "1e8", "--force-long"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and err.startswith("metadp: error: --samples")
    assert "memory" in err and "GiB" in err
    assert main(["verify", "gaussian", "--noise", "1", "--epsilons", "1", "--samples", "1e4", "--quiet"]) == 0


def test_estimated_time_is_printed_before_sampling(capsys):
    main(["verify", "gaussian", "--noise", "1", "--epsilons", "0.5,1", "--samples", "20000"])
    out = capsys.readouterr().out
    planner = next(line for line in out.splitlines() if line.startswith("planner:"))
    assert re.search(r"about [\d.]+ (s|min|h)", planner), planner
    assert math.isfinite(float(re.search(r"about ([\d.]+)", planner).group(1)))
