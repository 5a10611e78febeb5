"""One model of sampling, and one guarantee type (issue 15; DESIGN.md sec. 1-4).

Layer: above ``amplification`` and ``accounting``, below ``plan``/``units``/``report``, ``training`` and
``verify``; it imports only ``core`` and ``amplification``.

Each sampling scheme is one frozen dataclass (``schemes``; the base class and the registries in
``base``), whose fields are its parameters, giving:

* ``step_event(inner)``: one step's event for one unit, as sampled (what the accountants compose);
  ``charge_event(inner)`` the event of one charge and ``releases(steps)`` how many charges;
* ``relation`` (the relation it is analysed under; ``relations`` those a plan may state) and
  ``charge`` ("step" or "pass"); ``Episodic`` gives its units' events by ``record_events`` and
  ``unit_event`` (they depend on the clipping), its ``step_event`` being the release itself;
* ``assumptions(unit, how)``, ``warnings`` and ``citations`` (keys in ``metadp.citations``): what a
  report of it prints;
* ``guarantees(unit, relation, inner, steps, ...)``: every meaningful unit's ``Guarantee`` of a plan;
* ``from_table`` (a plan's ``[sampling]`` table), ``to_dict``/``from_record`` (the report's
  ``sampling`` record), ``of_lot`` (the trainer's ``--sampler`` over its pool), ``text``/``latex`` (report cells).

===============  ================  ============================================  ==========  ======
class            plan name         step event                                    relation    charge
===============  ================  ============================================  ==========  ======
Poisson          poisson           PoissonSampled(q, inner)                      add_remove  step
FixedSize        fixed             FixedSizeSampled(m, n, inner)                 substitute  step
WithReplacement  with_replacement  ReplacementSampled(m, n, inner)               add_remove  step
NoSampling       none              inner                                         either      step
Shuffle          shuffle           inner, once per pass                          either      pass
Episodic         episodic          record: EpisodicSampled(L, P_U, r, inner, s)  add_remove  step
BallsInBins      balls_in_bins     RandomAllocation(t, inner) per pass (plans)   add_remove  pass
CyclicPoisson    cyclic_poisson    PoissonSampled(q, inner) per pass of groups   add_remove  pass
MinSeparation    min_separation    inner composed k times, once per run          either      pass
===============  ================  ============================================  ==========  ======

``Guarantee`` (``guarantee``) is the one result type: unit, relation, adversary, event(s), charge,
basis and citations, and the certified epsilon interval once an accountant has computed it. Plan
reports (``metadp.units``) and the trainer's views are Guarantees.

**To add a sampling scheme**: write one dataclass in ``metadp/sampling/schemes.py`` (subclass
``Sampling`` from ``base``; its fields, ``from_table``, ``step_event``, ``assumptions``, ``text``, and the
class attributes above), decorated with ``@register(...)`` (plan files, the trainer's ``--sampler``
name), and add its tests to ``tests/test_sampling.py``. Nothing else changes: plans, unit views,
reports, the trainer's ``_central`` and the samplers' ``*_event`` methods read it from there.
"""

from metadp.sampling.guarantee import EVERYONE, Guarantee
from metadp.sampling.hierarchy import LEVEL_KEYS, episode_shift, parse_hierarchy, record_events, top_unit_shift
from metadp.sampling.base import NOT_IN_PLANS, RUN_SCHEMES, SCHEMES, Sampling, from_record, of_lot, register
from metadp.sampling.schemes import Episodic, FixedSize, NoSampling, Poisson, WithReplacement
from metadp.sampling.one_pass import BallsInBins, Shuffle
from metadp.sampling.participation import CyclicPoisson, MinSeparation

__all__ = ["Guarantee", "EVERYONE", "Sampling", "Poisson", "FixedSize", "WithReplacement", "NoSampling", "Shuffle", "Episodic",
           "BallsInBins", "CyclicPoisson", "MinSeparation", "SCHEMES", "RUN_SCHEMES", "NOT_IN_PLANS", "from_record", "of_lot", "register",
           "parse_hierarchy", "episode_shift", "top_unit_shift", "record_events", "LEVEL_KEYS"]
