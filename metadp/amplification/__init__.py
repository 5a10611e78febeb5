"""Privacy amplification (privacy profiles, joint convexity, multistage episodes, groups), DESIGN.md sec. 3.5-3.9.

* ``profiles``: privacy profiles amplified by Poisson sampling (add/remove), sampling without and
  with replacement (substitution), by advanced joint convexity (Balle, Barthe & Gaboardi 2018,
  arXiv:1807.01647), and the epsilon of a profile at a given delta;
* ``levels``: episodic multistage sampling hierarchies (levels, draws, the tree of units);
* ``multistage``: their exact maximal inclusion probability and a valid amplification bound (Tombs, Kotevska & Young 2022, Thm. 3, corrected: DESIGN.md 3.6);
* ``group``: group privacy (the (eps, delta) chain, Mironov's RDP group rule, exact Gaussian and
  Poisson-subsampled group pairs);
* ``one_pass``: one pass over the units: random allocation (balls-in-bins, Monte Carlo with a certified
  upper confidence bound) and the equal-partition shuffle (single-Gaussian epsilon, with a warning);
* ``allocation_bounds``: deterministic [lower, upper] for random allocation (RDP of both orders of the
  pair; the max-over-steps event) and a certified lower bound for the shuffle.
"""

from metadp.amplification.profiles import (
    AmplifiedProfile,
    amplify_poisson,
    amplify_with_replacement,
    amplify_without_replacement,
    epsilon_for_delta,
)
from metadp.amplification.group import (
    GROUP_DELTA_FORMS,
    gaussian_group_pair,
    group_epsilon_delta,
    poisson_group_pairs,
    rdp_group,
)
from metadp.amplification.one_pass import (
    MC_BOUNDS,
    SHUFFLE_WARNING,
    AllocationEpsilon,
    MonteCarloDelta,
    gaussian_epsilon,
    random_allocation_delta,
    random_allocation_epsilon,
    shuffle_epsilon,
)
from metadp.amplification.allocation_bounds import (
    AllocationBounds,
    one_pass_bounds,
    allocation_lower,
    allocation_upper,
    shuffle_lower,
)
from metadp.amplification.multistage import (
    Hierarchy,
    Level,
    MultistageBound,
    inclusion_probability,
    multistage_amplification,
    simulate_inclusion,
)

__all__ = [
    "AmplifiedProfile", "amplify_poisson", "amplify_without_replacement", "amplify_with_replacement",
    "epsilon_for_delta",
    "Level", "Hierarchy", "MultistageBound", "inclusion_probability", "multistage_amplification",
    "simulate_inclusion",
    "group_epsilon_delta", "rdp_group", "gaussian_group_pair", "poisson_group_pairs", "GROUP_DELTA_FORMS",
    "random_allocation_delta", "random_allocation_epsilon", "MonteCarloDelta", "AllocationEpsilon",
    "gaussian_epsilon", "shuffle_epsilon", "SHUFFLE_WARNING", "MC_BOUNDS",
    "AllocationBounds", "one_pass_bounds", "allocation_lower", "allocation_upper", "shuffle_lower",
]
