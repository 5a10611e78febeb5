"""The bottom layer: what every other part of metadp imports, and which imports nothing of metadp above it.

* ``events``: the plan algebra (frozen descriptions: ``Gaussian``, ``PoissonSampled``, ``SelfComposed``, ...);
* ``serialize``: events to and from JSON (the ledger's format);
* ``validation``: input checks raising ``ValueError`` naming the parameter, the value and the range;
* ``_logmath``, ``_quadrature``: the log-space kit and the adaptive quadrature of non-negative integrands;
* ``rdp``: Renyi-DP curves of the basic mechanisms (Gaussian, Laplace, Poisson- and fixed-size-subsampled
  Gaussian); ``conversions``: RDP to (epsilon, delta).

Layers (docs/architecture.md): core -> mechanisms -> amplification -> accounting -> plans and reports |
training | verify | integrations -> cli. A module imports only from its own layer and the ones before it.
"""

from metadp.core.events import (
    MAX_COUNT,
    Composed,
    EpisodicSampled,
    Event,
    FixedSizeSampled,
    Gaussian,
    Group,
    Laplace,
    NonPrivate,
    NoOp,
    PoissonSampled,
    PoolSubstitution,
    SelfComposed,
)

__all__ = ["Event", "NoOp", "NonPrivate", "Gaussian", "Laplace", "PoissonSampled", "FixedSizeSampled",
           "SelfComposed", "Composed", "EpisodicSampled", "PoolSubstitution", "Group", "MAX_COUNT"]
