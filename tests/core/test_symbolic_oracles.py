"""Symbolic oracles (sympy) for the closed forms the fast code and the other tests rely on.

Each oracle starts from a definition, not from the formula under test, and sympy carries it out exactly:
* Renyi divergence of the Gaussian mechanism: the integral of p^alpha q^(1 - alpha) over the real line,
  integrated symbolically, gives alpha / (2 z^2) exactly (Mironov 2017, Prop. 7).
* Poisson-subsampled Gaussian at integer orders: E_Q[(P/Q)^alpha] for P = (1 - q) N(0, z^2) + q N(1, z^2),
  Q = N(0, z^2), integrated term by term after expanding the power, equals the binomial sum of Mironov,
  Talwar & Zhang 2019 (arXiv:1908.10530), Sec. 3.3, and its value at 40 digits checks
  ``poisson_gaussian_rdp`` (which computes A_alpha - 1 directly) to 1e-12 relative.
* The analytic Gaussian profile: the hockey-stick divergence integrated over the region where
  p > e^eps q, whose boundary sympy solves for, equals Balle & Wang 2018 (arXiv:1805.06530), Thm. 8,
  and checks ``gaussian_pair(z).profile``.
* Inclusion probabilities of multistage sampling: the number of episodes holding an element over the
  number of episodes, counted with sympy's binomials, checks ``inclusion_probability``'s exact eta.
"""

from __future__ import annotations

import functools
from fractions import Fraction

import numpy as np
import pytest

sympy = pytest.importorskip("sympy")

from metadp.core.rdp import gaussian_rdp, poisson_gaussian_rdp  # noqa: E402
from metadp.amplification.multistage import Hierarchy, Level, inclusion_probability  # noqa: E402
from metadp.mechanisms.gaussian import gaussian_pair  # noqa: E402

x = sympy.Symbol("x", real=True)


def _normal_pdf(mean, z):
    return sympy.exp(-((x - mean) ** 2) / (2 * z**2)) / (z * sympy.sqrt(2 * sympy.pi))


def _integrate_gaussians(expr):
    """The integral over the real line of a sum of terms c exp(a x^2 + b x + d) with a < 0, exactly:
    c sqrt(pi / -a) exp(d - b^2 / (4 a)) per term (completing the square). Exact and fast where
    ``sympy.integrate`` takes seconds per term."""
    total = sympy.Integer(0)
    for term in sympy.Add.make_args(sympy.expand(sympy.powsimp(sympy.expand(expr), combine="exp"))):
        term = sympy.powsimp(term, combine="exp")
        coeff, rest = term.as_independent(x, as_Add=False)
        assert isinstance(rest, sympy.exp), f"not a Gaussian term: {term}"
        poly = sympy.Poly(sympy.expand(rest.args[0]), x)
        assert poly.degree() == 2 and poly.LC() < 0, f"not a Gaussian term: {term}"
        a, b, d = poly.all_coeffs()
        total += coeff * sympy.sqrt(sympy.pi / -a) * sympy.exp(d - b**2 / (4 * a))
    return sympy.simplify(total)


@pytest.mark.parametrize("alpha, z", [(2, 1), (3, sympy.Rational(1, 2)), (sympy.Rational(5, 2), 2),
                                      (sympy.Rational(3, 2), sympy.Rational(3, 4))])
def test_gaussian_rdp_is_the_renyi_divergence_integral(alpha, z):
    integral = _integrate_gaussians(_normal_pdf(1, z) ** alpha * _normal_pdf(0, z) ** (1 - alpha))
    divergence = sympy.simplify(sympy.expand_log(sympy.log(integral), force=True) / (alpha - 1))
    assert sympy.simplify(divergence - alpha / (2 * z**2)) == 0
    assert float(gaussian_rdp(float(z), [float(alpha)])[0]) == pytest.approx(float(divergence), rel=1e-14)


def _subsampled_moment(q, z, alpha: int):
    """E_Q[(P/Q)^alpha], integrated exactly term by term after expanding the power."""
    ratio = (1 - q) + q * sympy.exp((2 * x - 1) / (2 * z**2))  # P/Q for P = (1-q)N(0,z^2) + qN(1,z^2)
    return _integrate_gaussians(ratio**alpha * _normal_pdf(0, z))


@pytest.mark.parametrize("q, z, alpha", [(sympy.Rational(1, 100), 1, 2), (sympy.Rational(1, 10), sympy.Rational(1, 2), 3),
                                         (sympy.Rational(1, 4), 2, 4)])
def test_integer_order_binomial_sum_is_the_moment_integral(q, z, alpha):
    moment = _subsampled_moment(q, z, alpha)
    binomial_sum = sum(sympy.binomial(alpha, k) * (1 - q) ** (alpha - k) * q**k * sympy.exp(sympy.Rational(k * k - k) / (2 * z**2))
                       for k in range(alpha + 1))
    assert sympy.simplify(moment - binomial_sum) == 0


@pytest.mark.parametrize("q, z, alpha", [(sympy.Rational(1, 10**6), 1, 2), (sympy.Rational(1, 250), 1, 8),
                                         (sympy.Rational(1, 100), sympy.Rational(7, 10), 5),
                                         (sympy.Rational(1, 2), 3, 32), (sympy.Rational(1, 10**9), sympy.Rational(1, 2), 64)])
def test_poisson_gaussian_rdp_at_integer_orders_against_the_exact_binomial_sum(q, z, alpha):
    """log(A_alpha) / (alpha - 1) with A_alpha summed exactly, evaluated at 40 digits; A_alpha - 1 is
    ~1e-12 at q = 1e-6, where computing A_alpha in double precision and subtracting 1 loses everything."""
    a = sum(sympy.binomial(alpha, k) * (1 - q) ** (alpha - k) * q**k * sympy.exp(sympy.Rational(k * k - k) / (2 * z**2))
            for k in range(alpha + 1))
    exact = float(sympy.log(a).evalf(40) / (alpha - 1))
    fast = float(poisson_gaussian_rdp(float(q), float(z), [float(alpha)])[0])
    assert fast == pytest.approx(exact, rel=1e-12, abs=0.0)


@functools.cache
def _gaussian_upper_tail():
    """int_b^oo N(x; m, s^2) dx as an expression in (m, s, b), integrated by sympy once."""
    m, b = sympy.symbols("m b", real=True)
    s = sympy.Symbol("s", positive=True)
    pdf = sympy.exp(-((x - m) ** 2) / (2 * s**2)) / (s * sympy.sqrt(2 * sympy.pi))
    return sympy.Lambda((m, s, b), sympy.simplify(sympy.integrate(pdf, (x, b, sympy.oo))))


@pytest.mark.parametrize("z, eps", [(1, 1), (sympy.Rational(1, 2), sympy.Rational(1, 10)), (3, 2)])
def test_analytic_gaussian_profile_is_the_hockey_stick_integral(z, eps):
    z, eps = sympy.sympify(z), sympy.sympify(eps)
    p, q = _normal_pdf(1, z), _normal_pdf(0, z)
    (boundary,) = sympy.solve(sympy.Eq(sympy.expand_log(sympy.log(p / q), force=True), eps), x)  # p > e^eps q beyond
    assert sympy.simplify(boundary - (sympy.Rational(1, 2) + eps * z**2)) == 0
    tail = _gaussian_upper_tail()
    delta = tail(1, z, boundary) - sympy.exp(eps) * tail(0, z, boundary)
    closed = (sympy.erfc(-(1 / (2 * z) - eps * z) / sympy.sqrt(2)) / 2
              - sympy.exp(eps) * sympy.erfc((1 / (2 * z) + eps * z) / sympy.sqrt(2)) / 2)
    assert abs(float((delta - closed).evalf(50))) < 1e-40
    assert float(gaussian_pair(float(z)).profile(float(eps))) == pytest.approx(float(delta.evalf(30)), rel=1e-12)


@pytest.mark.parametrize("levels, element_path", [
    # the DP-MAML episode: 5 of 1,150 classes, then 2 of the class's 20 drawings (eta = 1/2300)
    (((5, 1150), (2, 20)), None),
    # Tombs et al. Example 3.1 shape with uneven units: 1 of 2 units, 2 of its 3 sub-units, 1 of 4 elements
    (((1, 2), (2, 3), (1, 4)), None),
])
def test_inclusion_probability_counts_episodes(levels, element_path):
    """eta = (episodes holding the element) / (episodes): a product over levels of
    C(units - 1, draws - 1) / C(units, draws), counted with sympy binomials."""
    hierarchy = Hierarchy(tuple(Level(f"level{i}", "fixed", size=n, units=u) for i, (n, u) in enumerate(levels)))
    counted = sympy.prod([sympy.binomial(u - 1, n - 1) / sympy.binomial(u, n) for n, u in levels])
    eta, _ = inclusion_probability(hierarchy)
    assert eta == Fraction(int(counted.p), int(counted.q))
    assert np.isclose(float(eta), float(counted))
