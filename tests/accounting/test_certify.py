"""The one accountant interface (issue 29): every registered accountant answers ``certify`` with one result
type, ``accounting.certify`` keeps the tightest, and a new accountant is one class and one registration.

Oracles: each accountant's own ``get_epsilon`` / ``get_epsilon_bounds`` (the numbers the interface wraps),
and a third accountant registered only in the test (RDP with Mironov's classic conversion: a valid, looser
bound), which plans, event reports and the trainer's ledger then list without any other change."""

from __future__ import annotations

import math

import pytest

from metadp.accounting import (ACCOUNTANTS, FixedSizeSampled, Gaussian, Ledger, PldAccountant,
                               PoissonSampled, RdpAccountant, UnsupportedEventError)
from metadp.accounting.certificate import Certificate
from metadp.accounting.certify import NoAccountantError, accountant_names, certify, supporting, trajectory
from metadp.integrations._event_report import event_report
from metadp.plan import default_plan, plan_epsilon

STEP = PoissonSampled(0.01, Gaussian(1.1))


@pytest.mark.parametrize("name", list(ACCOUNTANTS))
def test_every_registered_accountant_has_the_interface(name):
    cls = ACCOUNTANTS[name]
    assert cls.name == name and isinstance(cls.timed, bool) and cls.citations
    acc = cls(relation="add_remove")
    assert acc.supports(STEP) and acc.why_unsupported(STEP) is None
    found = acc.compose(STEP, 100).certify(1e-6)
    assert isinstance(found, Certificate) and found.accountant == name and found.delta == 1e-6
    assert 0 < found.epsilon < math.inf and found.conversion
    assert found.epsilon_lower is None or found.epsilon_lower <= found.epsilon
    assert set(cls.citations) <= set(found.citations)
    curve = cls(relation="add_remove").trajectory([1, 10, 100], 1e-6, step_event=STEP)
    assert curve[0] <= curve[1] <= curve[2] and curve[2] == pytest.approx(found.epsilon, rel=5e-3)


def test_certificates_wrap_each_accountants_own_numbers():
    rdp_eps, order = RdpAccountant().compose(STEP, 300).get_epsilon_and_order(1e-6)
    pld = PldAccountant().compose(STEP, 300).get_epsilon_bounds(1e-6)
    found = certify(STEP, 1e-6, steps=300)
    assert [c.accountant for c in found.certificates] == list(ACCOUNTANTS) and found.refused == ()
    assert found.get("rdp").epsilon == rdp_eps and found.get("rdp").order == order
    assert found.get("rdp").epsilon_lower is None
    assert found.get("pld").epsilon == pld.epsilon_upper and found.get("pld").epsilon_lower == pld.epsilon_lower
    assert found.get("pld").lattice == pld.h or (math.isnan(found.get("pld").lattice) and math.isnan(pld.h))
    assert found.tightest.accountant == "pld" and found.epsilon == min(rdp_eps, pld.epsilon_upper)
    assert certify(STEP, 1e-6, steps=300, accountant="rdp").certificates == (found.get("rdp"),)


def test_alternatives_take_the_worst_and_its_lower_end():
    loud, quiet = PoissonSampled(0.01, Gaussian(0.9)), PoissonSampled(0.01, Gaussian(1.5))
    both = certify([quiet, loud], 1e-6, steps=50, accountant="pld").tightest
    alone = certify(loud, 1e-6, steps=50, accountant="pld").tightest
    assert both.epsilon == alone.epsilon and both.epsilon_lower == alone.epsilon_lower


def test_unsupported_everywhere_names_every_accountant():
    fixed = FixedSizeSampled(4, 40, Gaussian(1.0), 2.0)  # fixed-size batches: only under substitution
    ok, refused = supporting(fixed, "add_remove")
    assert ok == () and [n for n, _ in refused] == list(ACCOUNTANTS)
    with pytest.raises(NoAccountantError) as err:
        certify(fixed, 1e-6, relation="add_remove")
    assert isinstance(err.value, UnsupportedEventError) and "RDP" in str(err.value) and "PLD" in str(err.value)
    with pytest.raises(UnsupportedEventError, match="RDP accountant"):  # one name: that accountant's own error
        certify(fixed, 1e-6, relation="add_remove", accountant="rdp")
    with pytest.raises(NoAccountantError):
        trajectory(fixed, [1, 2], 1e-6, relation="add_remove")


@pytest.mark.parametrize("bad", ["prv", "", 3, ("rdp", "rdp"), (), ("rdp", "prv"), None])
def test_unknown_accountant_names_are_refused(bad):
    with pytest.raises(ValueError, match="accountant"):
        accountant_names(bad)


def test_the_tightest_trajectory_is_the_pointwise_minimum():
    counts = [1, 10, 100, 1000]
    each = {n: ACCOUNTANTS[n]().trajectory(counts, 1e-6, step_event=STEP) for n in ACCOUNTANTS}
    both = trajectory(STEP, counts, 1e-6)
    assert both == tuple(min(v[i] for v in each.values()) for i in range(len(counts)))


def test_the_time_budget_reaches_only_the_accountants_that_have_one():
    found = certify(STEP, 1e-6, steps=300, max_seconds=math.inf)
    assert not found.get("pld").stopped_by_time and not found.get("rdp").stopped_by_time


class ClassicRdp(RdpAccountant):
    """A new accountant, as a user adds one: RDP converted by Mironov's classic rule (valid, looser)."""

    name = "rdp_classic"
    citations = ("mironov2017renyi",)

    def __init__(self, relation: str = "add_remove"):
        super().__init__(relation, conversion="classic")


@pytest.fixture
def third_accountant(monkeypatch):
    monkeypatch.setitem(ACCOUNTANTS, ClassicRdp.name, ClassicRdp)
    return ClassicRdp.name


def test_a_new_accountant_is_one_class_and_one_registration(third_accountant, tmp_path):
    report = plan_epsilon(default_plan(), "all")
    listed = {a["accountant"]: a["epsilon"] for a in report.alternatives}
    assert set(listed) == set(ACCOUNTANTS) and listed[third_accountant] >= listed["rdp"]
    assert report.accountant == "pld" and "rdp_classic" in report.to_table()
    assert plan_epsilon(default_plan(), third_accountant).accountant == third_accountant
    event = event_report(STEP, 1e-6, accountant="all")
    assert {a["accountant"] for a in event.alternatives} == set(ACCOUNTANTS)
    ledger = Ledger.create(tmp_path / "l.jsonl", "add_remove", "record", 1e-6)
    with ledger:
        ledger.append(STEP, 5, step=1)
        assert {c.accountant for c in ledger.certify().certificates} == set(ACCOUNTANTS)
        assert ledger.spent(accountant=third_accountant) >= ledger.spent(accountant="rdp")


class GaussianOnly(ClassicRdp):
    """A registered accountant that interprets plain Gaussian releases only."""

    name = "gaussian_only"

    def why_unsupported(self, event):
        return None if isinstance(event, Gaussian) else "only plain Gaussian releases"

    def compose(self, event, count=1):
        if not isinstance(event, Gaussian):
            raise UnsupportedEventError(event, "only plain Gaussian releases", accountant="GAUSSIAN_ONLY")
        return super().compose(event, count)


def test_an_accountant_that_refuses_is_listed_not_fatal(monkeypatch):
    monkeypatch.setitem(ACCOUNTANTS, GaussianOnly.name, GaussianOnly)
    found = certify(STEP, 1e-6, steps=10)
    assert [c.accountant for c in found.certificates] == ["rdp", "pld"]
    assert [n for n, _ in found.refused] == ["gaussian_only"] and "GAUSSIAN_ONLY" in found.refused[0][1]
    assert supporting(STEP)[0] == ("rdp", "pld")
    assert {a["accountant"] for a in plan_epsilon(default_plan(), "all").alternatives} == {"rdp", "pld"}
    with pytest.raises(UnsupportedEventError, match="GAUSSIAN_ONLY"):  # asked alone, it says why
        certify(STEP, 1e-6, accountant="gaussian_only")
    plain = certify(Gaussian(2.0), 1e-6, steps=4)  # and where it can, it answers beside the others
    assert [c.accountant for c in plain.certificates] == ["rdp", "pld", "gaussian_only"]


@pytest.mark.parametrize("event,relation", [(STEP, "add_remove"),
                                            (FixedSizeSampled(4, 40, Gaussian(1.0), 2.0), "substitute")])
def test_upper_only_gives_the_same_upper_bound_and_no_lower(event, relation):
    full = certify(event, 1e-5, steps=3, relation=relation)
    upper = certify(event, 1e-5, steps=3, relation=relation, lower=False)
    assert [c.epsilon for c in upper.certificates] == [c.epsilon for c in full.certificates]
    assert all(c.epsilon_lower is None for c in upper.certificates)
    assert full.get("pld").epsilon_lower is not None  # the full question does carry one
