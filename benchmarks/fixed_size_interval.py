"""How wide the certified interval of a fixed-size (substitution) plan is, and what lies inside it.

Run: ``python benchmarks/fixed_size_interval.py [--adaptive]`` (about half a minute; ``--adaptive`` adds
the multi-step dynamic programme, about 5 minutes on 2 cores for the README's 14,062 steps).

For the README's plan (256 of 60,000 records, z = 1.1, 14,062 steps, delta 1e-5) it prints, in one run:

* metadp's certified interval: the upper end composes the symmetrised per-step pair (tight for one step),
  the lower end is attained by named datasets (every other record at -C, the replaced one at -C against
  +C); and the composed pair's own lower bound, which is *not* a bound on the mechanism;
* dp-accounting's PLD of the named datasets' releases (the Poisson pair, both directions, pessimistic, value
  discretisation 1e-4), an independent upper bound on what those datasets attain, with its ratio to
  metadp's lower end;
* the one-line configurations on a 5-point grid (``metadp.verify.fixed_size.search_configurations``),
  ranked by their estimated T-fold epsilon: the named configuration should come first;
* with ``--adaptive``: the estimated epsilon of an adversary that picks, before each step, either order of
  the named configuration given everything released so far (``adaptive_epsilon``): above the static lower
  end, so the truth for adaptively chosen gradients may lie above it.

Not a timed test; the numbers are estimates where said.
"""

from __future__ import annotations

import argparse
import time

from metadp.accounting.pld import PldAccountant
from metadp.core.events import FixedSizeSampled, Gaussian
from metadp.verify import fixed_size as fs

BATCH, POPULATION, Z, STEPS, DELTA = 256, 60000, 1.1, 14062, 1e-5


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--adaptive", action="store_true", help="also run the adaptive dynamic programme (minutes)")
    args = parser.parse_args()
    rate = BATCH / POPULATION

    start = time.perf_counter()
    bounds = PldAccountant("substitute").compose(FixedSizeSampled(BATCH, POPULATION, Gaussian(Z)), STEPS) \
        .get_epsilon_bounds(DELTA)
    took = time.perf_counter() - start
    width = (bounds.epsilon_upper - bounds.epsilon_lower) / bounds.epsilon_upper
    print(f"plan: {BATCH} of {POPULATION:,} records, z = {Z}, {STEPS:,} steps, delta {DELTA:g}")
    print(f"metadp certified interval   [{bounds.epsilon_lower:.4f}, {bounds.epsilon_upper:.4f}]  width {width:.1%}"
          f"  ({took:.1f} s)")
    print(f"composed pair's own lower   {bounds.pair_lower:.4f}  (a bound on the composed pair, not on the mechanism)")

    try:
        from dp_accounting.pld import privacy_loss_distribution as pldm
    except ImportError:
        print("dp-accounting not installed: its cross-check is skipped")
    else:
        start = time.perf_counter()
        named = pldm.from_gaussian_mechanism(standard_deviation=Z / 2, sensitivity=1.0, sampling_prob=rate,
                                             pessimistic_estimate=True, value_discretization_interval=1e-4)
        anchor = named.self_compose(STEPS).get_epsilon_for_delta(DELTA)
        print(f"dp-accounting, named datasets (upper)  {anchor:.4f}  ratio to metadp's lower end "
              f"{anchor / bounds.epsilon_lower:.4f}  ({time.perf_counter() - start:.1f} s)")

    start = time.perf_counter()
    ranked = fs.search_configurations(rate, Z, STEPS, DELTA)
    print(f"\none-line configurations (others v, replaced u, replacement w; estimated epsilon, both orders), "
          f"{len(ranked)} up to symmetry ({time.perf_counter() - start:.1f} s):")
    for c in ranked[:8]:
        print(f"  v = {c.others:+.1f}  u = {c.replaced:+.1f}  w = {c.replacement:+.1f}   {c.epsilon:.4f}")

    if args.adaptive:
        edges = fs.output_grid(Z)
        p, q = fs.configuration_masses(-1.0, -1.0, 1.0, rate, Z, edges)
        start = time.perf_counter()
        adaptive = fs.adaptive_epsilon([(p, q), (q, p)], STEPS, DELTA,
                                       progress=lambda t: print(f"  step {t:,}", flush=True) if t % 2000 == 0 else None)
        print(f"adaptive order of the named configuration (estimate, lattice 1e-3)  {adaptive:.3f}  "
              f"({time.perf_counter() - start:.0f} s)")


if __name__ == "__main__":
    main()
