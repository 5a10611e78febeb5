"""Multistage (episodic) subsampling: exact inclusion probabilities and a valid amplification bound.

An episode is drawn level by level (Tombs, Kotevska & Young 2022, Algorithm 1): from every unit
selected at level j-1 (level 0: the dataset), n_j child units are drawn without replacement
(``"fixed"``) or each child is kept with probability p_j (``"poisson"``); the last level's units are
the elements. An element's inclusion probability is the product along its path of
n_j / (children of its ancestor) or p_j; eta is the maximum over elements (ibid., Thm. 3).

The bound (DESIGN.md 3.6, corrected further here). With U the element's ultimate unit, P_U the
probability that U is selected and r the last level's own rate (p, or n/|U|), conditioning on the
upper levels (the same for D and D'), joint convexity and the one-level theorem give

    delta'(eps') <= P_U r delta(eps)   at   eps' = log(1 + r (e^eps - 1)),

with delta the base profile for the last level's relation: substitution for a fixed-size last level
(Balle, Barthe & Gaboardi 2018, arXiv:1807.01647, Thm. 9: the coupling replaces the removed element
by another member of its unit), add/remove for a Poisson one (ibid., Thm. 8). The maximum over
elements is taken over the Pareto-maximal (P_U, r) pairs, counting every element (also those in a
unit of exactly n elements, which cannot lose one: pessimistic).

The paper's eta delta(eps) at eps' = log(1 + eta (e^eps - 1)) is kept only where it is proved: when
every episode is one element (fixed draws of 1 at every level), as any two one-element inputs are
substitution neighbours and Thm. 2 of Balle et al. applies (tight on Example 3.1). Otherwise it can
fail, even with fixed draws and the substitution profile: one of two units of 3, then 2 of its 3
elements, Gaussian noisy sum (sigma 1, values in [0, 1]), eps' = 0.2: divergence 0.08192 > eta
delta(eps) = 0.07866 (eta = 1/3). Given that the element is not drawn, the episode may come from the
other unit, two substitutions away from the element's episode, not one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Callable, Iterator, List, Optional, Tuple, cast

import numpy as np

from metadp.core.validation import check_count
from metadp.amplification.levels import Hierarchy, Level
from metadp.amplification.profiles import AmplifiedProfile

__all__ = ["Level", "Hierarchy", "MultistageBound", "inclusion_probability", "multistage_amplification",
           "simulate_inclusion"]

_SIMULATION_BLOCK = 1 << 20  # booleans per chunk of simulated episodes (episodes x units)


Run = Tuple[Fraction, int, int]  # (selection probability, number of consecutive units, first unit)


def _blocks(runs: List[Run], level: Level, starts) -> Iterator[Tuple[Fraction, int, int, int]]:
    """(parent probability, parents, children per parent, first child) over the parents, in order."""
    units = level.units
    if isinstance(units, int):  # starts is None: one count for every parent
        for prob, count, first in runs:
            yield prob, count, units, first * units
        return
    for prob, count, first in runs:
        for parent in range(first, first + count):
            yield prob, 1, units[parent], starts[parent]


def _walk(hierarchy: Hierarchy) -> Tuple[List[Run], List[Tuple[Fraction, Fraction]]]:
    """Run-length encoded selection probabilities of the elements, and every (P_U, r) pair.

    Children of equally likely parents with equal child counts are equally likely, so a level's
    probabilities are runs over consecutive units; only per-parent count tuples break runs up.
    """
    runs: List[Run] = [(Fraction(1), 1, 0)]
    pairs = set()
    last = len(hierarchy.levels) - 1
    for j, level in enumerate(hierarchy.levels):
        merged: List[Run] = []
        for prob, parents, children, first in _blocks(runs, level, hierarchy.child_starts(j)):
            factor = level.factor(children)
            if j == last:
                pairs.add((prob, factor))
            child = prob * factor
            if merged and merged[-1][0] == child and merged[-1][1] + merged[-1][2] == first:
                merged[-1] = (child, merged[-1][1] + parents * children, merged[-1][2])
            else:
                merged.append((child, parents * children, first))
        runs = merged
    return runs, sorted(pairs)


def inclusion_probability(hierarchy: Hierarchy) -> Tuple[Fraction, Tuple[int, ...]]:
    """The exact maximal inclusion probability eta over elements, and a path attaining it.

    eta = max over elements of prod_j f_j, with f_j = n_j / (children of the element's level-(j-1)
    ancestor) for a fixed draw and p_j for a Poisson draw (Tombs, Kotevska & Young 2022, Thm. 3).

    Args:
        hierarchy: the sampler.

    Returns:
        (eta, path): eta as a Fraction in (0, 1]; path the position of the element's ancestor among
        its siblings at each level (0-based), the first such element in level order.
    """
    runs, _ = _walk(hierarchy)
    eta, _, first = max(runs, key=lambda run: (run[0], -run[2]))
    return eta, hierarchy.path_of(first)


def _pareto(pairs: List[Tuple[Fraction, Fraction]]) -> Tuple[Tuple[Fraction, Fraction], ...]:
    """The (P_U, r) pairs not dominated in both coordinates by another pair."""
    front: List[Tuple[Fraction, Fraction]] = []
    for p_unit, rate in sorted(pairs, key=lambda pr: (-pr[1], -pr[0])):  # by r descending
        if not front or p_unit > front[-1][0]:
            front.append((p_unit, rate))
    return tuple(front)


def _float_up(x: Fraction) -> float:
    """The smallest float >= x (the amplified delta grows with the rate and the weight)."""
    f = float(x)
    return math.nextafter(f, math.inf) if Fraction(f) < x else f


@dataclass(frozen=True)
class _MaxProfile:
    """eps' -> the largest of several amplified profiles (the maximum over elements)."""

    profiles: Tuple[AmplifiedProfile, ...]

    def __call__(self, epsilon) -> np.ndarray:
        return np.maximum.reduce([p(epsilon) for p in self.profiles])


@dataclass(frozen=True)
class MultistageBound:
    """The amplification bound of a multistage sampler (module docstring).

    Attributes:
        eta: the maximal inclusion probability (Fraction).
        path: the local indices of an element attaining eta (see :func:`inclusion_probability`).
        relation: the relation the base profile must be computed under: ``"substitute"`` (fixed-size
            last level) or ``"add_remove"`` (Poisson last level).
        unit_probability: P_U, the probability that the path's ultimate unit is selected.
        unit_rate: r, the last level's own rate on the path (p, or n/|U|); eta = P_U r.
        pairs: (weight, rate) pairs; the bound is max over pairs of weight * delta(eps) at
            eps' = log(1 + rate (e^eps - 1)).
        method: ``"single-element"`` (every episode is one element: the paper's eta bound, proved) or
            ``"conditioning"`` (P_U r delta(eps) at eps' = log(1 + r (e^eps - 1))).
        hierarchy: the sampler.
    """

    eta: Fraction
    path: Tuple[int, ...]
    relation: str
    unit_probability: Fraction
    unit_rate: Fraction
    pairs: Tuple[Tuple[Fraction, Fraction], ...]
    method: str
    hierarchy: Hierarchy = field(repr=False)

    def profile(self, base_profile: Callable[[np.ndarray], np.ndarray], *, base_relation: str,
                neighbours: str = "add_remove"):
        """The amplified profile eps' -> delta' (vectorised, eps' >= 0) of a base profile.

        The bound holds for datasets that differ by adding or removing one element (Tombs et al.'s
        relation), with the base profile computed under ``self.relation``. Both are stated by the caller
        and checked, because a mismatch is not a little loose but wrong: with substitution neighbours
        and the add/remove base profile under a Poisson last level, the exact divergence exceeds this
        bound by orders of magnitude.

        Args:
            base_profile: the base mechanism's profile.
            base_relation: the relation ``base_profile`` was computed under (``"add_remove"`` or
                ``"substitute"``); must equal ``self.relation``.
            neighbours: the relation between the datasets the result is claimed for; only
                ``"add_remove"`` is covered.

        Raises:
            ValueError: on either mismatch, naming the relation required.
        """
        for name, value in (("base_relation", base_relation), ("neighbours", neighbours)):
            if value not in ("add_remove", "substitute"):
                raise ValueError(f"{name} must be 'add_remove' or 'substitute', got {value!r}")
        if neighbours != "add_remove":
            raise ValueError("neighbours='substitute' is not covered by the multistage bound: it holds for datasets "
                             "that differ by adding or removing one element (Tombs et al. 2022, Sec. 3)")
        if base_relation != self.relation:
            why = ("a fixed-size last level replaces the removed element by another member of its unit" if
                   self.relation == "substitute" else "a Poisson last level keeps each element independently")
            raise ValueError(f"base_relation must be {self.relation!r} for this hierarchy ({why}), got {base_relation!r}")
        theorem = ("Tombs, Kotevska & Young 2022, Thm. 3, corrected (DESIGN.md 3.6): " + self.method
                   + "; Balle, Barthe & Gaboardi 2018 (arXiv:1807.01647), Thm. 2")
        profiles = tuple(AmplifiedProfile(base_profile, _float_up(rate), _float_up(weight), self.relation, theorem)
                         for weight, rate in self.pairs)
        return profiles[0] if len(profiles) == 1 else _MaxProfile(profiles)

    def describe(self) -> str:
        """One line: eta, the path, the bound, and which base profile it needs and why."""
        names = " -> ".join(f"{lvl.name}[{i}]" for lvl, i in zip(self.hierarchy.levels, self.path))
        head = f"multistage sampling, {len(self.path)} levels: max inclusion probability eta = {self.eta} at {names}; "
        why = ("substitution profile (the coupling replaces the removed element by another member of its unit)"
               if self.relation == "substitute" else
               "add/remove profile (a Poisson last level keeps the element independently of the rest, so the "
               "episodes differ by adding or removing it)")
        if self.method == "single-element":
            bound = (f"every episode is one element, so delta'(eps') <= {self.eta} delta(eps) at "
                     f"eps' = log(1 + {self.eta} (e^eps - 1))")
        else:
            bound = (f"conditioning on the upper levels (P_U = {self.unit_probability} that the element's unit is "
                     f"selected, r = {self.unit_rate} its own rate): delta'(eps') <= P_U r delta(eps) at "
                     f"eps' = log(1 + r (e^eps - 1))"
                     + (f", max over {len(self.pairs)} (P_U, r) pairs" if len(self.pairs) > 1 else ""))
        return (head + bound + f", with delta the base mechanism's {why}; Tombs, Kotevska & Young 2022 Thm. 3 "
                "as corrected in DESIGN.md 3.6 (Balle, Barthe & Gaboardi 2018, arXiv:1807.01647, Thm. 2)")


def multistage_amplification(hierarchy: Hierarchy) -> MultistageBound:
    """The valid amplification bound of a multistage sampler (module docstring for the statement).

    Args:
        hierarchy: the sampler; the element's ultimate unit must keep at least n_last elements in both
            datasets when it is fixed-size (the paper's assumption; Tombs et al., Sec. 3).

    Returns:
        A :class:`MultistageBound`: ``bound.profile(base, base_relation=bound.relation)`` is the
        amplified profile, with ``base`` computed under ``bound.relation``.
    """
    _, all_pairs = _walk(hierarchy)
    eta, path = inclusion_probability(hierarchy)
    relation = "substitute" if hierarchy.levels[-1].draw == "fixed" else "add_remove"
    factors = _path_factors(hierarchy, path)
    unit_probability, unit_rate = math.prod(factors[:-1], start=Fraction(1)), factors[-1]
    pairs: Tuple[Tuple[Fraction, Fraction], ...]
    if all(level.draw == "fixed" and level.size == 1 for level in hierarchy.levels):
        pairs, method = ((eta, eta),), "single-element"
    else:
        pairs = tuple((p_unit * rate, rate) for p_unit, rate in _pareto(all_pairs))
        method = "conditioning"
    return MultistageBound(eta, path, relation, unit_probability, unit_rate, pairs, method, hierarchy)


def _path_factors(hierarchy: Hierarchy, path: Tuple[int, ...]) -> List[Fraction]:
    """The selection probability of each unit on ``path`` given its parent, level by level."""
    factors, index = [], 0
    for j, (level, local) in enumerate(zip(hierarchy.levels, path)):
        children = level.units if isinstance(level.units, int) else level.units[index]
        factors.append(level.factor(children))
        starts = hierarchy.child_starts(j)
        index = index * children + local if starts is None else starts[index] + local
    return factors


def _layout(hierarchy: Hierarchy) -> List[Tuple[np.ndarray, np.ndarray]]:
    """Per level: each unit's parent index and its position among its siblings."""
    out, parents = [], 1
    for level in hierarchy.levels:
        counts = np.full(parents, level.units) if isinstance(level.units, int) else np.asarray(level.units)
        parent_of = np.repeat(np.arange(parents), counts)
        starts = np.concatenate(([0], np.cumsum(counts)[:-1]))
        out.append((parent_of, np.arange(len(parent_of)) - np.repeat(starts, counts)))
        parents = len(parent_of)
    return out


def simulate_inclusion(hierarchy: Hierarchy, n_draws: int, rng: np.random.Generator,
                       path: Optional[Tuple[int, ...]] = None) -> float:
    """Runs the whole sampler n_draws times; the fraction of episodes containing one element.

    Every unit of every level is simulated (a fixed draw keeps the ``size`` children of smallest
    uniform key in each selected parent, a Poisson draw each child with probability ``rate``), in
    blocks of about 2^20 unit draws: cost O(n_draws x total units).

    Args:
        hierarchy: the sampler.
        n_draws: number of episodes, >= 1.
        rng: numpy random generator.
        path: the element (local indices, as returned by :func:`inclusion_probability`); default:
            the maximizing element.

    Returns:
        The empirical inclusion frequency (count / n_draws).
    """
    n_draws = check_count("n_draws", n_draws, minimum=1)
    element = hierarchy.element_of(path if path is not None else inclusion_probability(hierarchy)[1])
    layout = _layout(hierarchy)
    block = max(1, _SIMULATION_BLOCK // max(len(parent_of) for parent_of, _ in layout))
    hits = 0
    for start in range(0, n_draws, block):
        rows = min(block, n_draws - start)
        selected = np.ones((rows, 1), dtype=bool)  # the dataset itself
        for level, (parent_of, local) in zip(hierarchy.levels, layout):
            if level.draw == "fixed":
                keys = parent_of + rng.random((rows, len(parent_of)))  # sorts each parent's children together
                order = np.argsort(keys, axis=1)
                chosen = np.empty_like(selected, shape=(rows, len(parent_of)))
                np.put_along_axis(chosen, order, np.broadcast_to(local < level.size, order.shape), axis=1)
            else:
                chosen = rng.random((rows, len(parent_of))) < float(cast(Fraction, level.rate))  # Poisson: a rate
            selected = selected[:, parent_of] & chosen
        hits += int(np.count_nonzero(selected[:, element]))
    return hits / n_draws
