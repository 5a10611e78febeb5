"""The README's multistage finding, as printed by ``python -m metadp.verify.multistage_findings``.

The ratios come from exact enumeration (``metadp.verify.enumeration``, itself checked against closed
forms and quadrature in test_enumeration.py); here we pin the verdicts the README states.
"""

import pytest

from metadp.verify import multistage_findings as mf


@pytest.fixture(scope="module")
def found():
    """The findings, enumerated once for this module (about 3 s)."""
    return mf.findings()


def test_printed_theorem_violated_and_conditioning_holds(found):
    worst = {title: max(r.ratio for r in rows) for title, rows in found}
    titles = [c[0] for c in mf.CASES]
    # Thm 3 as printed (add/remove profile): 4x at eps = 1, 120x at eps = 3
    assert worst[titles[0]] > 100
    rows = dict(found)[titles[0]]
    assert 3.9 < rows[mf.EPS.index(1.0)].ratio < 4.1
    # substitution profile, one unit per level: holds with equality (tight)
    assert abs(worst[titles[1]] - 1.0) < 1e-9
    # two elements per last-level unit: the substitution pairing fails too (1.03 at eps = 1.5)
    assert 1.02 < worst[titles[2]] < 1.05
    # the conditioning bound holds (equality at eps = 0), fixed and Poisson last levels
    assert worst[titles[3]] <= 1 + 1e-9 and worst[titles[5]] <= 1 + 1e-9
    # Poisson last level, full eta with the add/remove profile: violated
    assert worst[titles[4]] > 1.5


def test_command_prints_the_table(found, monkeypatch, capsys):
    # `python -m metadp.verify.multistage_findings` is `main()`; the enumeration is the fixture's
    monkeypatch.setattr(mf, "findings", lambda: found)
    mf.main()
    out = capsys.readouterr().out
    assert out.count("VIOLATED") == 3 and out.count("holds") == 3
