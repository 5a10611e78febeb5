"""Episodic record-level pairs (metadp.mechanisms.episodic): the revealed-J mixture and the hidden binomial.

Oracles and provenance:
* ``_binomial_support``: the Binomial(n, p) pmf and its upper tail summed exactly in mpmath at 50 digits
  (the cut is Pr[K > k_max] = 1 - sum_{k <= k_max} pmf, and k_max the smallest value whose tail is
  <= 1e-18). scipy's ``stats.binom.pmf`` (Boost) sums to 1 within 9e-16 on every case below (measured
  on this machine, scipy 1.17), so 1e-15 is attainable in double precision.
* ``RevealedMixture.profile``: rebuilt independently as sum_j Bin(j; L, P_U) x the hockey-stick divergence
  of ``GaussianMixturePair(Bin(.; j, r), shift * [0..j], z)`` over the full (untruncated) supports, with
  scipy's pmf (the module's docstring formula). The truncated mass (<= 3e-18) is far below the 1e-12
  tolerance.
* P_U = 1: J = L surely, so the revealed pair *is* the hidden binomial pair with eta = r (1e-10).
* Joint convexity of the hockey-stick divergence (Balle, Barthe & Gaboardi 2018, arXiv:1807.01647,
  Thm. 2): revealing J can only increase it, so revealed >= hidden binomial with eta = P_U r, strictly
  for P_U < 1 (margins measured: 1e-3 to 0.5 at eps in [0, 8]).
* ``sample``: E_P[X] = sum_j w_j sum_k Bin(k; j, r) k shift for the add pair, 0 for the remove pair,
  checked to 5 standard errors (seeded generators).
"""

from __future__ import annotations

import itertools
import math
from fractions import Fraction

import mpmath
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from metadp.mechanisms.episodic import RevealedMixture, _binomial_support, episodic_record_pairs, hidden_binomial_pairs
from metadp.mechanisms.gaussian import GaussianMixturePair
from metadp.verify.enumeration import Fixed, Hierarchy, Poisson, hockey_stick, sample_distribution

EPS = np.array([0.0, 0.05, 0.3, 1.0, 2.0, 4.0, 8.0, 16.0])

# _binomial_support takes the pmf from stats.binom.pmf: scipy's logpmf loses up to 1e-9 relative at
# n = 400000 (gammaln differences), which once left 3.2e-10 of mass charged nowhere (caught here).


def mp_binomial(n: int, p: float, values) -> tuple:
    """(pmf at values, upper tail beyond max(values)) in mpmath at 50 digits, p taken as the exact double."""
    with mpmath.workdps(50):
        P = mpmath.mpf(p)
        pmf = [mpmath.binomial(n, int(k)) * P ** int(k) * (1 - P) ** (n - int(k)) for k in values]
        return [float(x) for x in pmf], float(1 - mpmath.fsum(pmf))


# -- the truncated binomial ---------------------------------------------------------------------------

SUPPORT_CASES = [
    (1, 0.5),
    (7, 1.0),  # rate 1: the whole mass at n, nothing cut
    (10, 0.0),  # rate 0: the whole mass at 0
    (20, 0.3),  # with logpmf: total 1 - 3.7e-15
    (1600, 1 / 2300),  # DP-MAML eta (logpmf: 1 - 3.8e-13)
    (400_000, 1e-5),  # logpmf: 1 - 3.2e-10
    (400_000, 0.004),  # DP-MAML task slots: total 1 - 1.4e-10
    (1000, 0.999),  # total 1 + 3.2e-13
]


@pytest.mark.parametrize("count, rate", SUPPORT_CASES)
def test_binomial_support_sums_to_one_with_its_cut(count, rate):
    values, probs, cut = _binomial_support(count, rate)
    assert abs(math.fsum(probs) + cut - 1.0) <= 1e-15


CUT_CASES = [(1, 0.5), (7, 1.0), (10, 0.0), (20, 0.3), (1600, 1 / 2300), (400_000, 1e-5), (400_000, 0.004),
             (1000, 0.999)]


@pytest.mark.parametrize("count, rate", CUT_CASES)
def test_binomial_support_cut_is_the_exact_tail_and_minimal(count, rate):
    values, probs, cut = _binomial_support(count, rate)
    np.testing.assert_array_equal(values, np.arange(len(values)))
    assert np.all(probs >= 0) and len(probs) == len(values)
    assert 0.0 <= cut <= 1e-18
    k_max = int(values[-1])
    if rate == 1.0:
        assert k_max == count and cut == 0.0 and probs[-1] == 1.0
        return
    if rate == 0.0:
        assert k_max == 0 and cut == 0.0 and probs[0] == 1.0
        return
    # the tail cut is computed in log space: exact to 1e-9 relative against mpmath (observed 4e-12)
    _, exact_cut = mp_binomial(count, rate, range(k_max + 1))
    assert cut == pytest.approx(exact_cut, rel=1e-9, abs=1e-30)
    # k_max is the smallest admissible value: the tail beyond k_max - 1 exceeds 1e-18
    if k_max > 0:
        _, previous_tail = mp_binomial(count, rate, range(k_max))
        assert previous_tail > 1e-18


def test_binomial_support_probabilities_against_mpmath_small_counts():
    # At small counts the logpmf route is accurate to a few ulps (6e-15 relative at n = 20 observed).
    for count, rate in [(1, 0.5), (5, 0.3), (20, 0.3), (12, 1e-3)]:
        values, probs, _ = _binomial_support(count, rate)
        exact, _ = mp_binomial(count, rate, values)
        np.testing.assert_allclose(probs, exact, rtol=5e-14, atol=0)


# -- the revealed mixture -------------------------------------------------------------------------------

MIXTURE_CASES = [  # (episodes L, unit rate P_U, within rate r, noise multiplier z, shift)
    (1, 0.8, 0.9, 1.5, 3.0),
    (5, 0.3, 0.4, 1.0, 2.0),
    (6, 0.4, 1.0, 1.0, 2.0),  # r = 1: each component is a single Gaussian of shift j * shift
    (12, 0.5, 0.1, 0.7, 2.0),
    (20, 0.05, 0.5, 2.0, 1.0),
]


@pytest.mark.parametrize("case", [
    (5, 0.3, 0.4, 1.0, 2.0),
    (12, 0.5, 0.1, 0.7, 2.0),
    ((20, 0.3, 0.2, 2.0, 1.0)),
    ((1600, 5 / 1150, 0.1, 1.0, 2.0)),  # DP-MAML, 1 - 3.8e-13
    ((400_000, 5 / 1150 * 0.004, 0.1, 1.0, 2.0)),  # default plan, 1 - 1.8e-10
])
def test_revealed_weights_and_infinite_mass_sum_to_one(case):
    add, remove = episodic_record_pairs(*case)
    for mix in (add, remove):
        assert abs(math.fsum(mix.weights) + mix.inf_mass - 1.0) <= 1e-15


@pytest.mark.parametrize("case", MIXTURE_CASES + [(1600, 5 / 1150, 0.1, 1.0, 2.0)])
def test_revealed_structure(case):
    episodes, unit_rate, within_rate, z, shift = case
    add, remove = episodic_record_pairs(*case)
    assert isinstance(add, RevealedMixture) and isinstance(remove, RevealedMixture)
    assert add.weights == remove.weights and add.inf_mass == remove.inf_mass
    # each truncation (J, then K | J for every j) cuts <= 1e-18; the K cut is charged twice (TV)
    assert 0.0 <= add.inf_mass <= 3e-18
    js, pj, _ = _binomial_support(episodes, unit_rate)
    np.testing.assert_array_equal(add.weights, pj)
    assert add.components[0] is None and remove.components[0] is None  # j = 0: P = Q
    for j, (a, r) in enumerate(zip(add.components[1:], remove.components[1:]), start=1):
        assert (a.direction, r.direction) == ("add", "remove")
        assert a.sigma == z and r.sigma == z
        ks = np.arange(len(a.weights)) if within_rate < 1.0 else np.array([j])
        np.testing.assert_allclose(a.shifts, shift * ks, rtol=0, atol=0)
        if within_rate < 1.0:
            np.testing.assert_allclose(a.weights, stats.binom.pmf(ks, j, within_rate), rtol=1e-11)


def independent_profile(episodes, unit_rate, within_rate, z, shift, direction, eps):
    """sum_j Bin(j; L, P_U) delta_j(eps) over the full supports, built from GaussianMixturePair directly."""
    total = np.zeros_like(eps)
    for j in range(1, episodes + 1):
        w = stats.binom.pmf(j, episodes, unit_rate)
        if w == 0.0:
            continue
        ks = np.arange(j + 1)
        pair = GaussianMixturePair(stats.binom.pmf(ks, j, within_rate), shift * ks, z, direction)
        total += w * pair.profile(eps)
    return total


@pytest.mark.parametrize("case", MIXTURE_CASES)
def test_revealed_profile_is_the_mixture_of_conditional_profiles(case):
    for direction, mix in zip(("add", "remove"), episodic_record_pairs(*case)):
        expected = independent_profile(*case, direction, EPS)
        np.testing.assert_allclose(mix.profile(EPS), expected, rtol=0, atol=1e-12)


@pytest.mark.parametrize("episodes, within_rate, z, shift", [(8, 0.3, 1.0, 2.0), (100, 0.05, 2.0, 1.0),
                                                              (3, 1.0, 0.5, 2.0)])
def test_full_unit_rate_is_the_hidden_binomial_pair(episodes, within_rate, z, shift):
    # P_U = 1: J = L surely, nothing is revealed; the same pair (observed difference <= 2.6e-19).
    revealed = episodic_record_pairs(episodes, 1.0, within_rate, z, shift)
    add, remove, cut = hidden_binomial_pairs(episodes, within_rate, z, shift)
    assert cut <= 1e-18
    for mix, pair in zip(revealed, (add, remove)):
        np.testing.assert_allclose(mix.profile(EPS), pair.profile(EPS), rtol=0, atol=1e-10)


@pytest.mark.parametrize("case", [(5, 0.3, 0.4, 1.0, 2.0), (20, 0.05, 0.5, 2.0, 1.0), (3, 0.5, 1.0, 1.0, 2.0),
                                  (1600, 5 / 1150, 0.1, 1.0, 2.0)])
def test_revealing_j_increases_the_divergence_strictly(case):
    # Measured margins (max over EPS): 9e-3 / 9e-2, 1.5e-2 / 2.1e-2, 4e-2 / 0.57, 1.6e-3 / 3.2e-2 (add / remove).
    episodes, unit_rate, within_rate, z, shift = case
    revealed = episodic_record_pairs(*case)
    add, remove, _ = hidden_binomial_pairs(episodes, unit_rate * within_rate, z, shift)
    for mix, pair in zip(revealed, (add, remove)):
        r, h = mix.profile(EPS), pair.profile(EPS)
        assert np.all(r >= h - 1e-15)
        assert np.max(r - h) > 1e-3


@settings(max_examples=40, deadline=None, derandomize=True)
@given(episodes=st.integers(1, 30), unit_rate=st.floats(0.01, 1.0), within_rate=st.floats(0.01, 1.0),
       z=st.floats(0.5, 4.0), shift=st.sampled_from([1.0, 2.0]))
def test_revealed_dominates_hidden_binomial_property(episodes, unit_rate, within_rate, z, shift):
    revealed = episodic_record_pairs(episodes, unit_rate, within_rate, z, shift)
    add, remove, _ = hidden_binomial_pairs(episodes, unit_rate * within_rate, z, shift)
    for mix, pair in zip(revealed, (add, remove)):
        assert np.all(mix.profile(EPS) >= pair.profile(EPS) - 1e-12)


@settings(max_examples=25, deadline=None, derandomize=True)
@given(episodes=st.integers(1, 20), unit_rate=st.floats(0.05, 1.0), within_rate=st.floats(0.05, 1.0),
       z=st.floats(0.5, 3.0))
def test_profile_grows_with_shift_and_episodes(episodes, unit_rate, within_rate, z):
    # A longer shift is a post-processing-dominating pair, and one more episode adds a nonnegative loss.
    for i, base in enumerate(episodic_record_pairs(episodes, unit_rate, within_rate, z, 1.0)):
        longer = episodic_record_pairs(episodes, unit_rate, within_rate, z, 2.0)[i]
        more = episodic_record_pairs(episodes + 1, unit_rate, within_rate, z, 1.0)[i]
        assert np.all(longer.profile(EPS) >= base.profile(EPS) - 1e-12)
        assert np.all(more.profile(EPS) >= base.profile(EPS) - 1e-12)


def test_loss_range_tails_are_within_the_budget():
    # Both P-tails of the mixture's loss outside [lo, hi] are <= tail (every component kept here).
    tail = 1e-8
    for case in [(20, 0.3, 0.2, 2.0, 1.0), (5, 1.0, 0.5, 1.0, 2.0), (1600, 5 / 1150, 0.1, 1.0, 2.0)]:
        for mix in episodic_record_pairs(*case):
            lo, hi = mix.loss_range(tail)
            assert lo <= 0.0 <= hi
            above = sum(w * float(c.loss_sf(hi)) for w, c in zip(mix.weights, mix.components) if c is not None)
            below = sum(w * float(c.loss_cdf(lo)) for w, c in zip(mix.weights, mix.components) if c is not None)
            assert above <= tail and below <= tail


# -- sampling ---------------------------------------------------------------------------------------------


def expected_shift(mix: RevealedMixture) -> float:
    """sum_j w_j sum_k Bin(k; j, r) k shift: the mean output of the add pair under P."""
    return sum(w * float(np.dot(c.weights, c.shifts)) for w, c in zip(mix.weights, mix.components) if c is not None)


@pytest.mark.parametrize("case, seed", [((5, 0.3, 0.4, 1.0, 2.0), 11), ((20, 0.05, 0.5, 2.0, 1.0), 12),
                                        ((12, 0.5, 0.1, 0.7, 2.0), 13)])
def test_sample_shapes_and_means(case, seed):
    episodes, unit_rate, within_rate, z, shift = case
    add, remove = episodic_record_pairs(*case)
    # the formula's value is L P_U r shift (the mean of K ~ Binomial(L, P_U r), times the shift)
    assert expected_shift(add) == pytest.approx(episodes * unit_rate * within_rate * shift, rel=1e-12)
    n = 200_000
    rng = np.random.default_rng(seed)
    for mix, under, mean in [(add, "P", expected_shift(add)), (add, "Q", 0.0),
                             (remove, "P", 0.0), (remove, "Q", expected_shift(remove))]:
        j, x = mix.sample(n, rng, under)
        assert j.shape == (n,) and x.shape == (n,)
        assert np.issubdtype(j.dtype, np.integer) and x.dtype == np.float64
        assert j.min() >= 0 and j.max() < len(mix.components)  # no inf_mass draws at these rates (< 3e-18)
        se = x.std() / math.sqrt(n)
        assert abs(x.mean() - mean) <= 5 * se
        # the revealed index follows the weights under both P and Q (5 standard errors per index)
        freq = np.bincount(j, minlength=len(mix.weights)) / n
        w = np.asarray(mix.weights)
        assert np.all(np.abs(freq - w) <= 5 * np.sqrt(w * (1 - w) / n) + 1e-12)


def test_sample_gives_index_minus_one_to_the_infinite_mass():
    # A hand-built mixture with a visible inf_mass: under P those draws are labelled -1, never under Q.
    pair = GaussianMixturePair([0.5, 0.5], [0.0, 2.0], 1.0, "add")
    mix = RevealedMixture((0.45, 0.45), (None, pair), 0.1)
    rng = np.random.default_rng(5)
    j, _ = mix.sample(100_000, rng, "P")
    assert set(np.unique(j)) == {-1, 0, 1}
    assert abs(np.mean(j == -1) - 0.1) <= 5 * math.sqrt(0.1 * 0.9 / 100_000)
    j, _ = mix.sample(10_000, rng, "Q")
    assert j.min() >= 0


def test_sample_zero_loss_component_has_the_noise_scale():
    add, _ = episodic_record_pairs(5, 0.3, 0.4, 3.0, 2.0)
    j, x = add.sample(100_000, np.random.default_rng(7), "P")
    assert np.var(x[j == 0]) == pytest.approx(9.0, rel=0.05)


def test_profile_is_a_valid_privacy_profile():
    for case in MIXTURE_CASES:
        for mix in episodic_record_pairs(*case):
            d = mix.profile(EPS)
            assert np.all((0.0 <= d) & (d <= 1.0))
            assert np.all(np.diff(d) <= 1e-15)  # non-increasing in eps


def test_degenerate_rates():
    # unit rate 0 or within rate 0: the record is never in an episode, every component is P = Q
    for args in [(10, 0.0, 0.5, 1.0), (10, 0.5, 0.0, 1.0)]:
        for mix in episodic_record_pairs(*args):
            assert all(c is None for c in mix.components)
            np.testing.assert_array_equal(mix.profile(EPS), 0.0)


# -- invalid arguments ------------------------------------------------------------------------------------


@pytest.mark.parametrize("kwargs, name", [
    (dict(episodes=0), "episodes"), (dict(episodes=2.5), "episodes"), (dict(episodes=True), "episodes"),
    (dict(unit_rate=-0.1), "unit_rate"), (dict(unit_rate=1.5), "unit_rate"), (dict(unit_rate=math.nan), "unit_rate"),
    (dict(within_rate=2.0), "within_rate"), (dict(within_rate=-1e-9), "within_rate"),
    (dict(noise_multiplier=0.0), "noise_multiplier"), (dict(noise_multiplier=-1.0), "noise_multiplier"),
    (dict(noise_multiplier=math.inf), "noise_multiplier"),
    (dict(shift=0.0), "shift"), (dict(shift=-2.0), "shift"), (dict(shift=math.nan), "shift"),
    (dict(shift=math.inf), "shift"),
])
def test_episodic_record_pairs_rejects_bad_input(kwargs, name):
    args = dict(episodes=4, unit_rate=0.3, within_rate=0.2, noise_multiplier=1.0, shift=2.0) | kwargs
    with pytest.raises(ValueError, match=name):
        episodic_record_pairs(**args)


@pytest.mark.parametrize("kwargs, name", [
    (dict(episodes=0), "episodes"), (dict(inclusion=1.5), "inclusion"), (dict(inclusion=-0.5), "inclusion"),
    (dict(noise_multiplier=0.0), "noise_multiplier"), (dict(noise_multiplier=math.inf), "noise_multiplier"),
])
def test_hidden_binomial_pairs_rejects_bad_input(kwargs, name):
    args = dict(episodes=4, inclusion=0.3, noise_multiplier=1.0) | kwargs
    with pytest.raises(ValueError, match=name):
        hidden_binomial_pairs(**args)


def test_hidden_binomial_pairs_unchecked_shift_and_zero_inclusion_still_raise():
    # shift is not validated by name here (reported); GaussianMixturePair still rejects it, as it rejects
    # inclusion 0 (a valid probability, but every shift is then 0).
    for kwargs in [dict(shift=0.0), dict(shift=-1.0), dict(shift=math.nan), dict(inclusion=0.0)]:
        args = dict(episodes=4, inclusion=0.3, noise_multiplier=1.0) | kwargs
        with pytest.raises(ValueError):
            hidden_binomial_pairs(**args)


# ---------------------------------------------------------------------------------------------
# What exact enumeration shows about the hidden-binomial pair (the statements of the module docstring
# and README Finding 2). Universe: two classes of 3 records; an episode takes 1 of the 2 classes
# (P_U = 1/2), then each of its records with probability 1/2 (Poisson last level, r = 1/2) or 2 of its 3
# (fixed last level, r = 2/3). The record is the last of class 0; D' is D without it (add/remove).
# The output is the sum over L independent episodes of each episode's contribution, plus N(0, z^2).


def _episode_laws(draws, values, contribution):
    """The contribution's law for one episode of D and of D' (the record removed), as {value: prob}."""
    laws = []
    for units, vals in (((3, 3), values), ((2, 3), {p: v for p, v in values.items() if p != (0, 2)})):
        law = {}
        for prob, leaves in sample_distribution(Hierarchy(units, draws)):
            value = contribution(leaves, vals)
            law[value] = law.get(value, 0) + prob
        laws.append(law)
    return laws


def _l_fold(law, episodes):
    """The law of the sum of ``episodes`` independent contributions, as [(weight, mean)]."""
    out = {0: 1}
    for _ in range(episodes):
        nxt = {}
        for m1, w1 in out.items():
            for m2, w2 in law.items():
                nxt[m1 + m2] = nxt.get(m1 + m2, 0) + w1 * w2
        out = nxt
    return [(float(w), float(m)) for m, w in out.items()]


def _exact(laws, episodes, z, eps):
    a, b = (_l_fold(law, episodes) for law in laws)
    return max(hockey_stick(a, b, z, eps), hockey_stick(b, a, z, eps))


def test_hidden_binomial_pair_is_violated_with_per_example_clipping_and_a_poisson_last_level():
    """Per-example clipping (each record's value in [-1, 1], the episode sums them), L = 1, z = 1:
    record -1, the rest of its class 0, the other class all +1 (so which class an episode drew shows).
    Exact 8.256e-4 at eps = 2 against the hidden pair's 1.589e-4 (5.2x): not a dominating pair. The
    revealed pair (1.136e-3) holds."""
    values = {(0, 0): 0, (0, 1): 0, (0, 2): -1, (1, 0): 1, (1, 1): 1, (1, 2): 1}
    laws = _episode_laws((Fixed(1), Poisson(Fraction(1, 2))), values, lambda leaves, v: sum(v[p] for p in leaves))
    exact = _exact(laws, 1, 1.0, 2.0)
    hidden = max(float(pair.profile(2.0)) for pair in hidden_binomial_pairs(1, 0.25, 1.0, shift=1.0)[:2])
    revealed = max(float(pair.profile(2.0)) for pair in episodic_record_pairs(1, 0.5, 0.5, 1.0, shift=1.0))
    assert exact == pytest.approx(8.256133831e-4, rel=1e-6)
    assert exact > 5.0 * hidden
    assert exact < revealed


@pytest.mark.parametrize("episodes", [1, 2])
def test_hidden_binomial_pair_with_per_episode_clipping_is_attained_not_exceeded_on_this_family(episodes):
    """Per-episode clipping at C = 1 (shift 2): each episode's clipped contribution is any value in
    [-1, 1]; the family gives it one value f1 when the episode holds the record, f0 when it drew the
    record's class without it, fo for the other class, each in {-1, 0, 1} (fixed last level, 2 of 3).
    The hidden pair is attained (f1 = -f0 = -fo) and not exceeded; this is evidence, not a proof, and
    richer datasets exceed it slightly from L = 2 (issue 13: <= 5.5%), so metadp does not use it."""
    z, worst_hidden, worst_revealed = 1.0, 0.0, 0.0
    for eps in (0.2, 1.0):
        hidden = max(float(p.profile(eps)) for p in hidden_binomial_pairs(episodes, 1 / 3, z)[:2])
        revealed = max(float(p.profile(eps)) for p in episodic_record_pairs(episodes, 0.5, 2 / 3, z))
        for f1, f0, fo in itertools.product((-1, 0, 1), repeat=3):
            def contribution(leaves, v, f1=f1, f0=f0, fo=fo):
                return fo if leaves[0][0] == 1 else (f1 if (0, 2) in leaves else f0)

            exact = _exact(_episode_laws((Fixed(1), Fixed(2)), {(0, 0): 0, (0, 1): 0, (0, 2): 0, (1, 0): 0,
                                                                 (1, 1): 0, (1, 2): 0}, contribution), episodes, z, eps)
            worst_hidden, worst_revealed = max(worst_hidden, exact / hidden), max(worst_revealed, exact / revealed)
    assert 1 - 1e-9 < worst_hidden < 1 + 1e-9
    assert worst_revealed < 1.0
