"""The shipped example plans (examples/*.toml), the built-in default plan and the plans printed in the
documentation: each loads, follows docs/plan-format.md, and yields a finite certified epsilon at the
unit and relation it states.

Reference values are not re-typed numbers but independent computations, each with its tolerance:
dp-accounting's RDP accountant (Google, an independent implementation of Mironov, Talwar & Zhang 2019
and of Wang, Balle & Kasiviswanathan 2019, Thm 9) for the sampled plans, and the exact analytic
Gaussian profile (Balle & Wang 2018, arXiv:1805.06530, Thm 8) for the unsampled one.
"""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from scipy import optimize, special

from metadp.cli import main
from metadp.accounting import Gaussian, PoissonSampled
from metadp.accounting.pld import PldAccountant
from metadp.plan import Plan, default_plan, load_plan, plan_epsilon

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"

# What each example states (and what its report must repeat). delta and steps are the file's own
# numbers; the header comment of each file says where they come from.
EXPECTED = {
    "dp_sgd_mnist.toml": dict(unit="record", relation="add_remove", scheme="poisson", steps=14040, delta=1e-5),
    "dp_maml_task_omniglot.toml": dict(unit="task", relation="add_remove", scheme="poisson", steps=250, delta=1e-6),
    "dp_maml_fixed_batches.toml": dict(unit="task", relation="substitute", scheme="fixed", steps=250, delta=1e-6),
    "dp_fedmeta_agr.toml": dict(unit="task", relation="add_remove", scheme="poisson", steps=250, delta=1e-6),
    "dp_reptile_task_global.toml": dict(unit="record", relation="add_remove", scheme="none", steps=2, delta=1e-3),
    # episodic record-level accounting: PLD is the tighter of the two accountants (RDP is far looser here)
    "dp_maml_record_episodic.toml": dict(unit="record", relation="add_remove", scheme="episodic", steps=250,
                                         delta=1e-6, accountant="pld"),
    "dp_fedmeta_one_pass_shuffle.toml": dict(unit="task", relation="add_remove", scheme="shuffle", steps=250,
                                             delta=1e-6),
    "dp_fedmeta_one_pass_balls_in_bins.toml": dict(unit="task", relation="add_remove", scheme="balls_in_bins",
                                                   steps=250, delta=1e-6),
    "dp_sgd_loader_with_replacement.toml": dict(unit="record", relation="add_remove", scheme="with_replacement",
                                                steps=48, delta=1e-5, accountant="pld"),
    "dp_reptile_group.toml": dict(unit="group", relation="add_remove", scheme="none", steps=2, delta=1e-3),
    # DP-FTRL's banded correlated noise (issue 34): amplified by cyclic Poisson participation, and without sampling
    "dp_fedmeta_bandmf_cyclic.toml": dict(unit="task", relation="add_remove", scheme="cyclic_poisson", steps=1000,
                                          delta=1e-6),
    "dp_fedmeta_bandmf_min_separation.toml": dict(unit="task", relation="add_remove", scheme="min_separation",
                                                  steps=1000, delta=1e-6),
    # plans the trainer runs (metadp train ALGO --plan FILE): episodes drawn from the data shipped here
    "train_glyphs_episodic_quick.toml": dict(unit="record", relation="add_remove", scheme="episodic", steps=20,
                                             delta=1e-5, accountant="pld"),
    "train_sinusoid_dp_maml.toml": dict(unit="task", relation="add_remove", scheme="poisson", steps=2000, delta=1e-5),
    "train_omniglot_5way_cpu.toml": dict(unit="record", relation="add_remove", scheme="episodic", steps=150,
                                         delta=1e-5, accountant="pld"),
    "train_omniglot_5way_paper.toml": dict(unit="record", relation="add_remove", scheme="episodic", steps=250,
                                           delta=1e-5, accountant="pld"),
    "train_sinusoid_dp_maml_quick.toml": dict(unit="task", relation="add_remove", scheme="poisson", steps=100,
                                              delta=1e-5, accountant="pld"),
    "train_omniglot_5way_task.toml": dict(unit="task", relation="add_remove", scheme="poisson", steps=400,
                                          delta=1e-5, accountant="pld"),
    "train_omniglot_5way_paper_task.toml": dict(unit="task", relation="add_remove", scheme="poisson", steps=250,
                                                delta=1e-5, accountant="pld"),
}

SLOW_EXAMPLES = {"train_omniglot_5way_paper.toml"}  # 1,600 episodes a step: ~18 s of PLD (checked under -m slow)


def _names(names=None):
    """The examples as test parameters, the slow ones marked."""
    return [pytest.param(n, marks=pytest.mark.slow) if n in SLOW_EXAMPLES else n for n in sorted(names or EXPECTED)]

# The plan keys documented in docs/plan-format.md; examples must use only these.
DOCUMENTED_KEYS = {
    "": {"name", "description", "unit", "group_size", "relation", "delta", "steps", "epochs", "accountant",
         "references", "sampling", "noise", "hierarchy", "claim"},
    "sampling": {"scheme", "population", "batch_size", "rate", "episodes", "groups", "participations", "separation"},
    "noise": {"mechanism", "multiplier", "scale", "clipping", "correlation", "bands"},
    "hierarchy": {"name", "draw", "size", "rate", "units"},
    "claim": {"epsilon", "source"},
}


def _privacy_fields(plan: Plan):
    """Everything in a plan that the certified bound depends on (name and description are free text)."""
    return (plan.unit, plan.relation, plan.delta, plan.steps, plan.sampling, plan.noise, plan.accountant)


def _toml_blocks(markdown: str):
    """(preceding prose, block text) for every ```toml fenced block of a Markdown document."""
    out = []
    for match in re.finditer(r"```toml\n(.*?)```", markdown, flags=re.S):
        before = markdown[: match.start()]
        paragraph = before.rstrip().rsplit("\n\n", 1)[-1]  # the prose right above the block
        out.append((paragraph, match.group(1)))
    return out


def test_every_example_is_listed():
    """A new or removed example file must be added to / removed from EXPECTED (so it gets tested)."""
    assert sorted(p.name for p in EXAMPLES.glob("*.toml")) == sorted(EXPECTED)


class _Reports(dict):
    def __missing__(self, name):
        self[name] = plan_epsilon(load_plan(EXAMPLES / name), accountant=EXPECTED[name].get("accountant", "rdp"))
        return self[name]


@pytest.fixture(scope="module")
def reports():
    """Each example's report, computed when first asked for and kept for the module."""
    return _Reports()


@pytest.mark.parametrize("name", _names())
def test_example_report_is_finite_at_the_stated_unit_and_relation(name, reports):
    expected = EXPECTED[name]
    report = reports[name]
    assert math.isfinite(report.epsilon) and report.epsilon > 0.0
    assert report.unit == expected["unit"]
    assert report.relation == expected["relation"]
    assert report.sampling["scheme"] == expected["scheme"]
    assert report.steps == expected["steps"]
    assert report.delta == expected["delta"]
    assert report.accountant == expected.get("accountant", "rdp")
    assert report.assumptions and report.citations
    # Every rendering carries the bound and its direction, with no NaN anywhere.
    d = json.loads(report.to_json())
    assert d["epsilon"] == report.epsilon
    assert d["bound"] == "upper" and d["unit"] == expected["unit"] and d["relation"] == expected["relation"]
    for text in (report.to_json(), report.to_table(), report.to_latex()):
        assert not re.search(r"\bnan\b", text, flags=re.I)
    assert "upper bound" in report.to_table()
    assert "\\le" in report.to_latex()


@pytest.mark.parametrize("name", _names())
def test_example_loads_the_same_from_path_and_from_text(name):
    path = EXAMPLES / name
    assert load_plan(path) == load_plan(path.read_text(encoding="utf-8")) == load_plan(str(path))


@pytest.mark.parametrize("name", _names())
def test_example_follows_the_documented_format_and_cites_its_sources(name):
    import tomllib

    text = (EXAMPLES / name).read_text(encoding="utf-8")
    data = tomllib.loads(text)
    for key, value in data.items():
        assert key in DOCUMENTED_KEYS[""], f"{name}: top-level key {key!r} is not in docs/plan-format.md"
        tables = [value] if isinstance(value, dict) else [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []
        for table in tables:  # [table] or [[array of tables]]
            assert set(table) <= DOCUMENTED_KEYS[key], f"{name}: [{key}] has undocumented keys"
    # Explicit unit and relation on every example (DESIGN.md sec. 2: never implied).
    assert {"unit", "relation", "delta", "sampling", "noise"} <= set(data)
    # A comment header that says where the numbers come from: a paper section, table or file.
    header = []
    for line in text.splitlines():
        if not line.startswith("#"):
            break
        header.append(line)
    assert len(header) >= 5, f"{name}: header comment missing or too short"
    assert re.search(r"Sec\. \d|Table \d|tutorial", "\n".join(header)), f"{name}: header cites no source"


@pytest.mark.parametrize("name", ["dp_sgd_mnist.toml", "dp_maml_task_omniglot.toml", "dp_fedmeta_agr.toml"])
def test_poisson_examples_match_dp_accounting(name, reports):
    """Cross-check against dp-accounting's RDP accountant (same CKS conversion, its default order grid:
    1.1 to 10.9 in steps of 0.1, then integers and powers of two).

    metadp minimises over the continuous order, so it may only be lower, and by little: its result
    must be <= dp-accounting's (1e-9 relative slack for rounding) and >= 99% of it. (With z = 1 the
    RDP curve rises steeply between orders 10 and 11: an integer-only grid gives 1.181 for the
    default plan against 1.1466 at order 10.7, so a grid without fractional orders is no reference.)
    """
    dp_accounting = pytest.importorskip("dp_accounting")
    from dp_accounting import rdp

    plan = load_plan(EXAMPLES / name)
    acc = rdp.RdpAccountant()
    acc.compose(dp_accounting.PoissonSampledDpEvent(
        plan.sampling.rate, dp_accounting.GaussianDpEvent(plan.noise.multiplier)), plan.steps)
    reference = acc.get_epsilon(plan.delta)
    assert reports[name].epsilon <= reference * (1 + 1e-9)
    assert reports[name].epsilon >= 0.99 * reference


def test_fixed_size_example_below_dp_accounting_and_costs_more_than_poisson(reports):
    """Sampling without replacement under substitution, cross-checked.

    dp-accounting states the noise relative to the replace-one sensitivity; metadp's multiplier is
    relative to the add/remove sensitivity C and the substitution sensitivity of a clipped sum is 2C,
    so the same mechanism is GaussianDpEvent(z / 2) there. Its RDP (WBK 2019 Thm 27) gives 9.1705, as
    metadp's; metadp's PLD bound with the symmetric pair (metadp.mechanisms.wor) is 6.2207, and can
    be no lower than the Poisson add/remove epsilon at rate 1600/400000 and multiplier z / 2, whose two
    pairs that symmetric pair dominates (lower oracle: that plan's certified PLD lower bound).
    """
    dp_accounting = pytest.importorskip("dp_accounting")
    from dp_accounting import rdp

    plan = load_plan(EXAMPLES / "dp_maml_fixed_batches.toml")
    acc = rdp.RdpAccountant(neighboring_relation=dp_accounting.NeighboringRelation.REPLACE_ONE)
    acc.compose(dp_accounting.SampledWithoutReplacementDpEvent(
        plan.sampling.population, plan.sampling.batch_size,
        dp_accounting.GaussianDpEvent(plan.noise.multiplier / 2.0)), plan.steps)
    reference = acc.get_epsilon(plan.delta)  # 9.1705 with dp-accounting 0.6.0
    fixed = reports["dp_maml_fixed_batches.toml"].epsilon  # the RDP report
    assert fixed <= reference * (1 + 1e-6)
    assert fixed >= 0.99 * reference
    pld = plan_epsilon(plan, accountant="pld").epsilon
    assert pld <= 0.7 * reference
    poisson_half = PldAccountant().compose(PoissonSampled(plan.sampling.rate, Gaussian(plan.noise.multiplier / 2.0)),
                                           plan.steps).get_epsilon_bounds(plan.delta)
    assert poisson_half.epsilon_lower <= pld
    # The demonstration the file makes: same lots, same noise, fixed-size lots cost > 5x in epsilon.
    poisson = reports["dp_maml_task_omniglot.toml"].epsilon
    assert fixed > 5.0 * poisson


def _exact_gaussian_epsilon(mu: float, delta: float) -> float:
    """Exact epsilon of a Gaussian mechanism with sensitivity/sigma = mu at delta (Balle & Wang 2018, Thm 8):
    delta(eps) = Phi(mu/2 - eps/mu) - e^eps Phi(-mu/2 - eps/mu), solved for eps (decreasing in eps)."""
    def log_delta_gap(eps):
        a = special.log_ndtr(mu / 2 - eps / mu)
        b = eps + special.log_ndtr(-mu / 2 - eps / mu)
        return a + np.log1p(-np.exp(b - a)) - math.log(delta)
    return optimize.brentq(log_delta_gap, 0.0, 100.0, xtol=1e-12)


def test_unsampled_example_between_exact_gaussian_and_rdp_closed_form(reports):
    """Two full-batch Gaussian steps with multiplier z are one Gaussian with z / sqrt(2).

    Lower reference: its exact epsilon (no valid upper bound can be below it). Upper reference: the
    RDP closed form T alpha / (2 z^2) with the CKS conversion minimised on a 10^6-point order grid
    (metadp optimises continuously: equal to 1e-6 relative).
    """
    plan = load_plan(EXAMPLES / "dp_reptile_task_global.toml")
    z, steps, delta = plan.noise.multiplier, plan.steps, plan.delta
    eps = reports["dp_reptile_task_global.toml"].epsilon
    exact = _exact_gaussian_epsilon(math.sqrt(steps) / z, delta)
    alpha = np.linspace(1.0001, 40.0, 1_000_000)
    rdp_eps = steps * alpha / (2 * z * z) + np.log1p(-1 / alpha) - (math.log(delta) + np.log(alpha)) / (alpha - 1)
    closed_form = float(np.min(rdp_eps))
    assert exact <= eps
    assert eps == pytest.approx(closed_form, rel=1e-6)


@pytest.mark.parametrize("name", ["dp_sgd_mnist.toml", "dp_maml_task_omniglot.toml", "dp_fedmeta_agr.toml",
                                  "dp_reptile_task_global.toml"])
def test_example_bound_supports_its_claim(name, reports):
    """Where an example records a published epsilon, the certified bound is at or below it and the
    report raises no 'claim not supported' warning. (dp_maml_fixed_batches records no claim.)"""
    plan = load_plan(EXAMPLES / name)
    assert plan.claim is not None and plan.claim["source"]
    assert reports[name].epsilon <= plan.claim["epsilon"]
    assert not any("BELOW" in w for w in reports[name].warnings)


def test_fixed_example_records_no_claim():
    assert load_plan(EXAMPLES / "dp_maml_fixed_batches.toml").claim is None


def test_poisson_dp_maml_example_is_the_default_plan(reports):
    assert _privacy_fields(load_plan(EXAMPLES / "dp_maml_task_omniglot.toml")) == _privacy_fields(default_plan())
    assert plan_epsilon(default_plan(), accountant="rdp").epsilon == reports["dp_maml_task_omniglot.toml"].epsilon


def test_default_plan_golden_epsilon():
    """default plan: epsilon <= 1.147 at delta 1e-6 (RdpAccountant docstring example). Provenance of
    1.1464: dp-accounting 0.6.0, RdpAccountant() default orders, PoissonSampledDpEvent(0.004,
    GaussianDpEvent(1.0)) x 250 -> 1.14660 at order 10.7; metadp's continuous optimum is at order 10.73.
    Tolerance 1e-3 relative."""
    report = plan_epsilon(default_plan(), accountant="rdp")
    assert report.unit == "task" and report.relation == "add_remove"
    assert report.epsilon == pytest.approx(1.1464, rel=1e-3)


def test_default_plan_file_is_the_documented_default():
    """docs/plan-format.md: 400,000 tasks, lot 1,600 (Poisson, rate 0.004), z = 1, 250 steps, delta 1e-6."""
    plan = default_plan()
    assert (plan.unit, plan.relation, plan.delta, plan.steps) == ("task", "add_remove", 1e-6, 250)
    assert plan.sampling.scheme == "poisson" and plan.sampling.population == 400_000
    assert plan.sampling.rate == pytest.approx(0.004, rel=1e-12)
    assert plan.noise.mechanism == "gaussian" and plan.noise.multiplier == 1.0


def test_plan_format_doc_example_loads_and_is_the_default_plan():
    """The annotated example in docs/plan-format.md is a valid plan with the default plan's numbers."""
    blocks = _toml_blocks((ROOT / "docs" / "plan-format.md").read_text(encoding="utf-8"))
    assert blocks, "docs/plan-format.md has no ```toml block"
    plan = load_plan(blocks[0][1])
    assert _privacy_fields(plan) == _privacy_fields(default_plan())
    assert math.isfinite(plan_epsilon(plan).epsilon)


def _readme() -> str:
    readme = ROOT / "README.md"
    assert readme.is_file(), "README.md is missing (pyproject.toml declares it as the package readme)"
    return readme.read_text(encoding="utf-8")


def test_readme_default_plan_equals_default_plan():
    """README.md's plan-file block is the default plan: the block introduced by prose that says
    'default', or else the README's first ```toml block (its 'Plan files' section)."""
    blocks = _toml_blocks(_readme())
    assert blocks, "README.md has no ```toml block"
    chosen = [block for prose, block in blocks if "default" in prose.lower()] or [blocks[0][1]]
    for block in chosen:
        assert _privacy_fields(load_plan(block)) == _privacy_fields(default_plan())


@pytest.mark.parametrize("page, heading", [("README.md", "## What `metadp plan` prints"),
                                          ("docs/index.md", "## Reading `metadp plan`'s output")])
def test_readme_printed_report_is_the_default_plans_report(page, heading):
    """The rows README.md shows under "What `metadp plan` prints" (epsilon through steps), and the documentation's
    getting-started page under its heading, are exactly what `metadp plan` prints for default_plan(), its attack
    rows included (the title line, which carries the version, is not compared)."""
    readme = _readme() if page == "README.md" else (ROOT / page).read_text(encoding="utf-8")
    heading = readme.index(heading)
    block = re.search(r"```\n(.*?)```", readme[heading:], flags=re.S).group(1)
    rows = []
    for line in block.splitlines()[1:]:
        if line.strip():
            rows.append(line.rstrip())
        if line.lstrip().startswith("steps"):
            break
    assert rows and rows[0].lstrip().startswith("epsilon") and rows[-1].lstrip().startswith("steps")
    from metadp.plan_risk import with_risk

    table = [line.rstrip() for line in with_risk(plan_epsilon(default_plan()), default_plan()).to_table().splitlines()]
    for row in rows:
        assert row in table, f"README row not printed by `metadp plan`: {row!r}"


@pytest.mark.parametrize("name", _names())
def test_cli_plan_json_matches_library(name, reports, capsys):
    """`metadp plan FILE --json` prints the library's report (same epsilon, unit and relation); in-process."""
    accountant = EXPECTED[name].get("accountant", "rdp")
    assert main(["plan", str(EXAMPLES / name), "--json", "--accountant", accountant, "--no-risk"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["epsilon"] == reports[name].epsilon
    assert d["unit"] == EXPECTED[name]["unit"] and d["relation"] == EXPECTED[name]["relation"]


def test_cli_plan_json_in_a_real_process(reports):
    name = "dp_sgd_mnist.toml"
    proc = subprocess.run([sys.executable, "-m", "metadp", "plan", str(EXAMPLES / name), "--json", "--accountant",
                           EXPECTED[name].get("accountant", "rdp")], capture_output=True, text=True, cwd=ROOT,
                          timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["epsilon"] == reports[name].epsilon