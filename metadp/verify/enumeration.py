"""Exact enumeration of multistage (episodic) subsampling on small universes, with a noisy sum.

A universe is a hierarchy of sampling units (Tombs, Kotevska & Young, "Privacy Amplification for
Episodic Training Methods", Sec. 3, Algorithm 1): at level j, from every unit chosen at level j-1,
either n_j sub-units are drawn without replacement (``Fixed(n)``) or each sub-unit is kept
independently with probability p (``Poisson(p)``); the last level draws elements. Every possible
sample is listed with its exact probability (``fractions.Fraction``).

The base mechanism is M(S) = sum_{i in S} x_i + N(0, sigma^2) with x_i in [-1, 1], so the subsampled
mechanism's output is a finite Gaussian mixture; ``hockey_stick`` computes the divergence between two
such mixtures from the exact crossing points of their densities (:mod:`metadp.verify.mixture_divergence`,
re-exported here).

``multistage_check`` compares the exact divergence between neighbouring datasets with Theorem 3 of
Tombs et al. (delta'(eps') <= eta delta(eps), eps' = log(1 + eta (e^eps - 1)), from Balle, Barthe &
Gaboardi 2018, arXiv:1807.01647, Thm 2, advanced joint convexity) or with the conditional correction
of DESIGN.md 3.6. The worst case is searched over a *family* of datasets, so every exact value it
reports is a LOWER bound on the true privacy profile: ratio exact / claimed > 1 is a real violation
of the claim; ratio <= 1 is evidence, not proof. The findings are pinned in
``tests/verify/test_enumeration.py``.
"""

from __future__ import annotations

import itertools
import math
import numbers
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Dict, Iterator, List, Mapping, Sequence, Tuple, Union, cast

from metadp.core.validation import check_count, check_positive, check_real
from metadp.verify.mixture_divergence import Mixture, gaussian_profile, hockey_stick

__all__ = [
    "Fixed", "Poisson", "Hierarchy", "CheckRow", "example_3_1", "inclusion_probabilities", "max_inclusion",
    "sample_distribution", "output_mixture", "hockey_stick", "gaussian_profile", "multistage_check",
]

Path = Tuple[int, ...]
Tree = Any  # a leaf count, or a tuple of trees (one per unit): nested to the hierarchy's depth

_MAX_SAMPLES = 200_000  # enumeration guard: beyond this the universe is not "small"
_FAMILY = (-1, 0, 1)  # constants of the dataset family searched by multistage_check


@dataclass(frozen=True)
class Fixed:
    """Draw ``n`` sub-units uniformly without replacement from each chosen unit."""

    n: int

    def __post_init__(self) -> None:
        object.__setattr__(self, "n", check_count("n", self.n, minimum=1))


@dataclass(frozen=True)
class Poisson:
    """Keep each sub-unit independently with probability ``p`` in (0, 1] (a float is taken exactly)."""

    p: Fraction

    def __post_init__(self) -> None:
        if isinstance(self.p, bool) or not isinstance(self.p, (numbers.Rational, float)):
            raise ValueError(f"p must be a rational number in (0, 1], got {self.p!r}")
        if not (math.isfinite(self.p) and 0 < Fraction(self.p) <= 1):
            raise ValueError(f"p must be in (0, 1], got {self.p!r}")
        object.__setattr__(self, "p", Fraction(self.p))


Draw = Union[Fixed, Poisson]


def _normalise(units: object, name: str) -> Tuple[Tree, int]:
    """Nested lists/tuples of leaf counts -> (nested tuples, depth)."""
    if isinstance(units, numbers.Integral) and not isinstance(units, bool):
        return check_count(name, units, minimum=1), 1
    if not isinstance(units, (tuple, list)) or len(units) == 0:
        raise ValueError(f"{name} must be a leaf count >= 1 or a non-empty tuple of units, got {units!r}")
    parts = [_normalise(u, f"{name}[{i}]") for i, u in enumerate(units)]
    if len({d for _, d in parts}) != 1:
        raise ValueError(f"{name} must have all its leaves at the same depth, got {units!r}")
    return tuple(t for t, _ in parts), parts[0][1] + 1


@dataclass(frozen=True)
class Hierarchy:
    """A universe (dataset D's unit sizes) and the draw made at each level.

    Args:
        units: nested tuples ending in leaf counts; ``((4, 2, 3), (4, 5))`` is Example 3.1 of Tombs
            et al.: two primary units, five ultimate units of 4, 2, 3, 4 and 5 elements.
        draws: one ``Fixed(n)`` or ``Poisson(p)`` per level (3 for the example). A ``Fixed(n)`` level
            needs at least n sub-units under every unit of the level above.

    Raises:
        ValueError: ragged nesting, counts < 1, wrong number of draws, or n larger than a unit.
    """

    units: Tuple[Tree, ...]
    draws: Tuple[Draw, ...]

    def __post_init__(self) -> None:
        tree, depth = _normalise(self.units, "units")
        if isinstance(tree, int):
            raise ValueError(f"units must be a tuple of units, got {self.units!r}")
        draws = tuple(self.draws)
        if len(draws) != depth or not all(isinstance(d, (Fixed, Poisson)) for d in draws):
            raise ValueError(f"draws must be {depth} Fixed/Poisson draws (one per level), got {self.draws!r}")
        object.__setattr__(self, "units", tree)
        object.__setattr__(self, "draws", draws)
        for level, draw in enumerate(draws):
            for path in _nodes(tree, level):
                if isinstance(draw, Fixed) and draw.n > _children(tree, path):
                    raise ValueError(f"draws[{level}] = Fixed({draw.n}) exceeds the {_children(tree, path)} "
                                     f"sub-units of unit {path}")

    @property
    def depth(self) -> int:
        return len(self.draws)


def _children(tree: Tree, path: Path) -> int:
    for i in path:
        tree = tree[i]
    return tree if isinstance(tree, int) else len(tree)


def _nodes(tree: Tree, level: int) -> List[Path]:
    """All paths of length ``level`` (level 0: the root ``()``), in lexicographic order."""
    paths: List[Path] = [()]
    for _ in range(level):
        paths = [p + (i,) for p in paths for i in range(_children(tree, p))]
    return paths


def _rate(h: Hierarchy, path: Path) -> Fraction:
    """Probability that the last node of ``path`` is drawn given that its parent was."""
    draw = h.draws[len(path) - 1]
    return draw.p if isinstance(draw, Poisson) else Fraction(draw.n, _children(h.units, path[:-1]))


def _path_probability(h: Hierarchy, path: Path) -> Fraction:
    return math.prod((_rate(h, path[:j]) for j in range(1, len(path) + 1)), start=Fraction(1))


def example_3_1(draws: Sequence[Draw] = (Fixed(1), Fixed(1), Fixed(1))) -> Hierarchy:
    """Example 3.1 of Tombs et al.: 18 elements, U = (U11 u U12 u U13) u (U21 u U22) of sizes 4, 2, 3, 4, 5.

    The paper gives no n_j for it; the default draws one unit at every level, so every level is really
    subsampled (1 of 2 primary units, 1 of 3 or 2 ultimate units, 1 element); eta = 1/12 (in U12).
    """
    return Hierarchy(((4, 2, 3), (4, 5)), tuple(draws))


def inclusion_probabilities(h: Hierarchy) -> Dict[Path, Fraction]:
    """Exact inclusion probability of every element: the product over levels of n_j / (sub-units under
    its ancestor), or of p_j at a Poisson level (Tombs et al., proof of Theorem 3)."""
    return {leaf: _path_probability(h, leaf) for leaf in _nodes(h.units, h.depth)}


def max_inclusion(h: Hierarchy) -> Tuple[Fraction, Path]:
    """eta = the largest inclusion probability, and the first element (path) attaining it."""
    probs = inclusion_probabilities(h)
    eta = max(probs.values())
    return eta, next(p for p, v in probs.items() if v == eta)


def _options(h: Hierarchy, path: Path) -> List[Tuple[Fraction, Tuple[Path, ...]]]:
    """Every set of sub-units that can be drawn under ``path``, with its probability."""
    k, draw = _children(h.units, path), h.draws[len(path)]
    sizes = [draw.n] if isinstance(draw, Fixed) else range(k + 1)
    out = []
    for size in sizes:
        if isinstance(draw, Fixed):
            weight = Fraction(1, math.comb(k, size))
        else:
            weight = draw.p ** size * (1 - draw.p) ** (k - size)
        if weight:
            out += [(weight, tuple(path + (i,) for i in c)) for c in itertools.combinations(range(k), size)]
    return out


def sample_distribution(h: Hierarchy) -> List[Tuple[Fraction, Tuple[Path, ...]]]:
    """Every possible sample of Algorithm 1 (Tombs et al.) with its exact probability.

    Returns:
        A list of (probability, sampled element paths in lexicographic order), one per distinct set
        (with a Poisson level, e.g. the empty set arises under several unit selections); the
        probabilities are positive and sum to exactly 1.

    Raises:
        ValueError: if more than 200,000 samples would have to be listed.
    """
    states: List[Tuple[Fraction, Tuple[Path, ...]]] = [(Fraction(1), ((),))]
    for _ in range(h.depth):
        nxt = []
        for prob, chosen in states:
            # Draws under different chosen units are independent: the product of their options.
            for combo in itertools.product(*(_options(h, path) for path in chosen)):
                weight = math.prod((w for w, _ in combo), start=prob)
                nxt.append((weight, tuple(p for _, paths in combo for p in paths)))
                if len(nxt) > _MAX_SAMPLES:
                    raise ValueError(f"the hierarchy has more than {_MAX_SAMPLES} samples; too large to enumerate")
        states = nxt
    merged: Dict[Tuple[Path, ...], Fraction] = {}
    for prob, leaves in states:
        merged[leaves] = merged.get(leaves, Fraction(0)) + prob
    return [(prob, leaves) for leaves, prob in merged.items()]


def _mixture(samples: Sequence[Tuple[Fraction, Tuple[Path, ...]]], values: Mapping[Path, Fraction]) -> Mixture:
    merged: Dict[Fraction, Fraction] = {}
    for prob, leaves in samples:
        mean = sum((values[p] for p in leaves), Fraction(0))
        merged[mean] = merged.get(mean, Fraction(0)) + prob
    return tuple(sorted((w, m) for m, w in merged.items()))


def output_mixture(h: Hierarchy, values: Mapping[Path, numbers.Real]) -> Mixture:
    """The law of the sampled sum sum_{i in S} x_i: the mechanism outputs sum_k w_k N(m_k, sigma^2).

    Args:
        h: the hierarchy (dataset D's unit sizes).
        values: x_i in [-1, 1] for every element path of ``h`` (a float is taken exactly).

    Returns:
        ((w_k, m_k), ...): the distinct sums m_k with their exact probabilities w_k (summing to 1).
    """
    leaves = _nodes(h.units, h.depth)
    if set(values) != set(leaves):
        raise ValueError(f"values must map each of the {len(leaves)} element paths of the hierarchy (such as "
                         f"{leaves[0]}) to a value, got {len(values)} keys")
    exact = {p: Fraction(check_real(f"values[{p}]", values[p], low=-1.0, high=1.0)) for p in leaves}
    return _mixture(sample_distribution(h), exact)


@dataclass(frozen=True)
class CheckRow:
    """One eps of ``multistage_check``, at the pair with the largest exact / claimed.

    Attributes:
        epsilon: the base mechanism's eps.
        epsilon_prime: the amplified eps' at which both sides are evaluated.
        exact: the exact D_{e^eps'} of that pair (a lower bound on the profile delta'(eps')).
        claimed: the bound under test for that pair.
        ratio: exact / claimed (> 1: the claim is violated).
        worst: the pair, e.g. "unit (0, 1) v=-1 c_unit=1 c_other=1 D||D'".
    """

    epsilon: float
    epsilon_prime: float
    exact: float
    claimed: float
    ratio: float
    worst: str


def _shrink(tree: Tree, unit: Path) -> Tree:
    """The tree with the ultimate unit ``unit`` one element smaller."""
    if not unit:
        return tree - 1
    return tuple(_shrink(t, unit[1:]) if i == unit[0] else t for i, t in enumerate(tree))


def _cases(h: Hierarchy, neighbours: str) -> Iterator[Tuple[Path, str, Mixture, Mixture]]:
    """Yields (ultimate unit, label, mixture of D, mixture of D') over the searched family.

    Family: the element that changes is the last of its unit (elements of a unit are exchangeable
    here), with value v in {-1, +1} (substitution: replaced by -v); the other elements of its unit
    all equal c_unit and every other element equals c_other, with c_unit, c_other in {-1, 0, 1}.
    """
    samples, last = sample_distribution(h), h.draws[-1]
    for unit in _nodes(h.units, h.depth - 1):
        target = unit + (_children(h.units, unit) - 1,)
        if neighbours == "add_remove":
            if target[-1] < (last.n if isinstance(last, Fixed) else 1):
                continue  # Tombs et al. require every ultimate unit to keep n_last (>= 1) elements
            samples2 = sample_distribution(Hierarchy(_shrink(h.units, unit), h.draws))
        for v, cu, co in itertools.product((-1, 1), _FAMILY, _FAMILY):
            vals = {p: Fraction(cu if p[:-1] == unit else co) for p in _nodes(h.units, h.depth)}
            vals[target] = Fraction(v)
            if neighbours == "add_remove":
                mix2 = _mixture(samples2, {p: x for p, x in vals.items() if p != target})
            else:
                mix2 = _mixture(samples, {**vals, target: Fraction(-v)})
            yield unit, f"unit {unit} v={v} c_unit={cu} c_other={co}", _mixture(samples, vals), mix2


def multistage_check(h: Hierarchy, sigma: float, eps_grid: Sequence[float], *, neighbours: str = "add_remove",
                     base_relation: str = "add_remove", bound: str = "theorem3") -> List[CheckRow]:
    """Exact delta' of the subsampled noisy sum against an amplification bound, for each eps.

    delta below is ``gaussian_profile`` with sensitivity 1 (``base_relation="add_remove"``) or 2
    (``"substitute"``). The bounds, for a pair differing in element x of ultimate unit U:
      * ``"theorem3"`` (Tombs et al., Thm 3, as printed): delta'(eps') <= eta delta(eps),
        eps' = log(1 + eta (e^eps - 1)), eta = ``max_inclusion(h)`` (over all elements of D).
      * ``"pairwise"`` (the proof's per-pair step): the same with eta replaced by x's own inclusion
        probability gamma.
      * ``"conditional"`` (DESIGN.md 3.6): joint convexity over the levels above U (the common part
        cancels), then Balle et al. 2018, Thm 2, at the last level: with P_U the probability that U is
        selected and r the last level's own rate (p, or n/|U|), delta'(eps') <= P_U r delta(eps) at
        eps' = log(1 + r (e^eps - 1)).

    The exact side is the larger of D_{e^eps'}(M'(D)||M'(D')) and D_{e^eps'}(M'(D')||M'(D)), maximised
    over every ultimate unit and the dataset family of ``_cases`` (add/remove: D' is D less one element,
    and units must keep n_last elements; substitution: one value v -> -v). A maximum over a family is a
    LOWER bound on the true profile: ratio > 1 proves a violation, ratio <= 1 does not prove the bound.

    Args:
        h: the hierarchy (dataset D's unit sizes).
        sigma: noise standard deviation of the noisy sum, > 0.
        eps_grid: base-mechanism epsilons, each finite and >= 0.
        neighbours: ``"add_remove"`` or ``"substitute"``: the relation between D and D'.
        base_relation: ``"add_remove"`` or ``"substitute"``: which base profile the bound uses.
        bound: ``"theorem3"``, ``"pairwise"`` or ``"conditional"``.

    Returns:
        One ``CheckRow`` per eps, for the pair with the largest exact / claimed.

    Raises:
        ValueError: an unknown option, sigma <= 0, an eps < 0 or not finite, or no admissible pair.
    """
    for name, value in (("neighbours", neighbours), ("base_relation", base_relation)):
        if value not in ("add_remove", "substitute"):
            raise ValueError(f"{name} must be 'add_remove' or 'substitute', got {value!r}")
    if bound not in ("theorem3", "pairwise", "conditional"):
        raise ValueError(f"bound must be 'theorem3', 'pairwise' or 'conditional', got {bound!r}")
    sigma = check_positive("sigma", sigma)
    grid = [check_real(f"eps_grid[{i}]", e, low=0.0) for i, e in enumerate(eps_grid)]
    eta, _ = max_inclusion(h)
    cases: List[Tuple[float, float, str, Mixture, Mixture]] = []
    for unit, label, mix, mix2 in _cases(h, neighbours):
        last_rate = _rate(h, unit + (0,))
        gamma = _path_probability(h, unit) * last_rate
        rate = {"theorem3": eta, "pairwise": gamma, "conditional": last_rate}[bound]
        cases.append((float(rate), float(eta if bound == "theorem3" else gamma), label, mix, mix2))
    if not cases:
        raise ValueError("no ultimate unit can lose an element and keep n_last elements: no add/remove pair")
    sensitivity = 1.0 if base_relation == "add_remove" else 2.0
    return [_check_row(cases, sigma, eps, gaussian_profile(sensitivity, sigma, eps)) for eps in grid]


def _check_row(cases: Sequence[Tuple[float, float, str, Mixture, Mixture]], sigma: float, eps: float,
               base: float) -> CheckRow:
    """The worst pair at one eps; each case is (rate in eps', factor on delta, label, mix D, mix D')."""
    best: Union[CheckRow, None] = None
    for rate, factor, label, mix, mix2 in cases:
        eps_p = math.log1p(rate * math.expm1(eps))
        claimed = factor * base
        for direction, (a, b) in (("D||D'", (mix, mix2)), ("D'||D", (mix2, mix))):
            exact = hockey_stick(a, b, sigma, eps_p)
            ratio = exact / claimed if claimed > 0 else (math.inf if exact > 0 else 0.0)
            if best is None or ratio > best.ratio:
                best = CheckRow(eps, eps_p, exact, claimed, ratio, f"{label} {direction}")
    return cast(CheckRow, best)  # (cases is not empty)
