"""Events as Renyi-DP curves: the RDP accountant's dispatch table (``event_rdp``), the delta charged by
events whose RDP bound holds only off a small-probability set (``event_delta_charge``), and the
error raised for an event an accountant cannot interpret.

Neighbouring relation (``relation``): ``"add_remove"`` (one unit added or removed) or ``"substitute"``
(one unit replaced). Under substitution a clipped sum's sensitivity is twice its add/remove
sensitivity, so Gaussian and Laplace events are analysed at half their stated noise (DESIGN.md 3.3).

Episodic events (``EpisodicSampled``) are bounded by a truncated pair whose truncation costs a total-
variation distance tau per step (``metadp.mechanisms.episodic_rdp``): ``event_delta_charge`` sums
these charges, and the accountant converts at delta minus the charge (``less_charge``).
"""

from __future__ import annotations

import functools
import math
from typing import overload

import numpy as np

from metadp.amplification.group import rdp_group
from metadp.amplification.allocation_bounds import allocation_rdp_at
from metadp.core import events as ev
from metadp.mechanisms.episodic_rdp import episodic_rdp
from metadp.core.rdp import gaussian_rdp, laplace_rdp, poisson_gaussian_rdp, wor_gaussian_rdp
from metadp.core._typing import FloatArray

__all__ = ["RELATIONS", "DEFAULT_ORDERS", "UnsupportedEventError", "event_rdp", "event_delta_charge",
           "effective_noise_multiplier", "less_charge", "times"]

RELATIONS = ("add_remove", "substitute")


def _default_orders() -> FloatArray:
    fractional = 1.0 + np.array([0.01, 0.02, 0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9])
    small_integers = np.arange(2, 65, dtype=np.float64)
    # Beyond 4096 the grid is extended on demand (``_refine`` doubles the order while it helps),
    # so very noisy plans are not capped while ordinary ones do not pay for huge orders.
    large = np.unique(np.round(np.geomspace(64, 4096, 25)))[1:]
    return np.concatenate([fractional, small_integers, large])


DEFAULT_ORDERS = _default_orders()


class UnsupportedEventError(ValueError):
    """An accountant cannot interpret an event; the message names the accountant, the sub-event and
    the reason (``accountant`` is the name the raising accountant gives itself, e.g. ``"PLD"``)."""

    def __init__(self, event: ev.Event, reason: str, *, accountant: str):
        self.event = event
        self.accountant = accountant
        super().__init__(f"{accountant} accountant cannot handle {event.describe()}: {reason}")


def _unsupported(event: ev.Event, reason: str) -> UnsupportedEventError:
    return UnsupportedEventError(event, reason, accountant="RDP")


# ---------------------------------------------------------------------------------------------
# Event -> RDP curve (dispatch table).


@functools.singledispatch
def event_rdp(event: ev.Event, orders: FloatArray, relation: str) -> FloatArray:
    """RDP curve of ``event`` at ``orders`` under ``relation`` (an upper bound per order)."""
    raise _unsupported(event, f"no RDP analysis for {type(event).__name__}")


@event_rdp.register
def _(event: ev.NoOp, orders: FloatArray, relation: str) -> FloatArray:
    return np.zeros_like(orders)


@event_rdp.register
def _(event: ev.NonPrivate, orders: FloatArray, relation: str) -> FloatArray:
    return np.full_like(orders, np.inf)


@overload
def times(count: float, curve: float) -> float: ...
@overload
def times(count: float, curve: FloatArray) -> FloatArray: ...
def times(count: float, curve: float | FloatArray) -> float | FloatArray:
    """count x an RDP curve (count >= 1); a product beyond every float is +inf, the pessimistic side."""
    with np.errstate(over="ignore"):
        return float(count) * curve


def _relation_factor(relation: str) -> float:
    # A unit's substitution moves a clipped sum twice as far as its removal (DESIGN.md 3.3).
    return 2.0 if relation == "substitute" else 1.0


@event_rdp.register
def _(event: ev.Gaussian, orders: FloatArray, relation: str) -> FloatArray:
    return gaussian_rdp(event.noise_multiplier / _relation_factor(relation), orders)


@event_rdp.register
def _(event: ev.Laplace, orders: FloatArray, relation: str) -> FloatArray:
    return laplace_rdp(event.scale / _relation_factor(relation), orders)


@event_rdp.register
def _(event: ev.SelfComposed, orders: FloatArray, relation: str) -> FloatArray:
    if event.count == 0:
        return np.zeros_like(orders)
    return times(event.count, event_rdp(event.inner, orders, relation))


@event_rdp.register
def _(event: ev.Composed, orders: FloatArray, relation: str) -> FloatArray:
    total = np.zeros_like(orders)
    for e in event.events:
        total = total + event_rdp(e, orders, relation)
    return total


@event_rdp.register
def _(event: ev.Group, orders: FloatArray, relation: str) -> FloatArray:
    inner, k = event.inner, event.size
    if isinstance(inner, ev.Gaussian):  # exact: sensitivity k (Mironov 2017, Prop. 7)
        return gaussian_rdp(inner.noise_multiplier / (k * _relation_factor(relation)), orders)
    if isinstance(inner, ev.SelfComposed):
        if inner.count == 0:
            return np.zeros_like(orders)
        return times(inner.count, event_rdp(ev.Group(k, inner.inner), orders, relation))
    if isinstance(inner, ev.Composed):
        return sum((event_rdp(ev.Group(k, e), orders, relation) for e in inner.events), np.zeros_like(orders))
    if event_delta_charge(inner, relation) > 0.0:
        raise _unsupported(event, "a group of an event whose RDP bound charges a truncation to delta")
    # generic and loose: Mironov 2017, Prop. 2 (the exact binomial mixture is in the PLD accountant)
    return rdp_group(lambda o: event_rdp(inner, np.asarray(o, dtype=np.float64), relation), orders, k)


def effective_noise_multiplier(event: ev.Event, accountant: str = "RDP") -> float:
    """Noise multiplier of the single Gaussian equivalent to ``event`` run on one sample.

    k Gaussian releases on the same data with multipliers z_i compose to one Gaussian with
    z = (sum_i z_i^-2)^(-1/2) (their privacy loss distributions add). Raises UnsupportedEventError,
    in the name of ``accountant`` (the caller), for anything that is not a Gaussian or a composition
    of Gaussians.
    """
    if isinstance(event, ev.Gaussian):
        return event.noise_multiplier
    if isinstance(event, ev.NoOp):
        return math.inf
    if isinstance(event, ev.SelfComposed):
        z = effective_noise_multiplier(event.inner, accountant)
        return math.inf if event.count == 0 else z / math.sqrt(event.count)
    if isinstance(event, ev.Composed):
        precision = sum(effective_noise_multiplier(e, accountant) ** -2 for e in event.events)
        return math.inf if precision == 0 else precision ** -0.5
    raise UnsupportedEventError(event, "inside a sampled event only Gaussian mechanisms are supported",
                                accountant=accountant)


@event_rdp.register
def _(event: ev.PoissonSampled, orders: FloatArray, relation: str) -> FloatArray:
    if relation != "add_remove":
        raise _unsupported(event, "Poisson sampling is analysed under the add_remove relation")
    z = effective_noise_multiplier(event.inner)
    return poisson_gaussian_rdp(event.rate, z, orders)


@event_rdp.register
def _(event: ev.FixedSizeSampled, orders: FloatArray, relation: str) -> FloatArray:
    if relation != "substitute":
        raise _unsupported(
            event, "fixed-size sampling is only analysed under the substitute relation "
            "(Balle, Barthe & Gaboardi 2018); set relation = 'substitute'"
        )
    z = effective_noise_multiplier(event.inner)
    return wor_gaussian_rdp(event.rate, z / event.sensitivity_factor, orders)


@event_rdp.register
def _(event: ev.ReplacementSampled, orders: FloatArray, relation: str) -> FloatArray:
    # the binomial mixture pair is a Poisson group's (metadp.mechanisms.replacement): its group rule (Mironov 2017,
    # Prop. 2), valid and loose; the PLD accountant composes the pair itself
    if relation != "add_remove":
        raise _unsupported(event, "sampling with replacement is analysed under the add_remove relation")
    if event.draws == 0:
        return np.zeros_like(orders)
    z = effective_noise_multiplier(event.inner)
    return event_rdp(ev.Group(event.draws, ev.PoissonSampled(event.rate, ev.Gaussian(z / 2.0))), orders, relation)


@event_rdp.register
def _(event: ev.RandomAllocation, orders: FloatArray, relation: str) -> FloatArray:
    if relation != "add_remove":
        raise _unsupported(event, "random allocation is analysed under the add_remove relation")
    if not isinstance(event.inner, ev.Gaussian):
        raise _unsupported(event, "random allocation is analysed for a Gaussian inner mechanism only")
    if event.selected > 1:  # k of t: k one-step allocations of floor(t / k) steps (allocation_bounds' reduction)
        return event_rdp(event.reduced(), orders, relation)
    return allocation_rdp_at(event.inner.noise_multiplier, event.steps, orders)


def _episodic_check(event: ev.EpisodicSampled, relation: str) -> None:
    if relation != "add_remove":
        raise _unsupported(event, "episodic sampling is analysed under the add_remove relation (one record)")


@event_rdp.register
def _(event: ev.EpisodicSampled, orders: FloatArray, relation: str) -> FloatArray:
    # the revealed-J pair with J truncated; the truncation is charged to delta (event_delta_charge)
    _episodic_check(event, relation)
    return episodic_rdp(event.episodes, event.unit_rate, event.within_rate, event.inner.noise_multiplier,
                        orders, event.shift)[0]


@functools.singledispatch
def event_delta_charge(event: ev.Event, relation: str) -> float:
    """delta charged per run of ``event`` on top of its RDP curve (a truncation's total-variation
    cost, ``metadp.mechanisms.episodic_rdp``): a composition is (eps, delta' + sum of charges)-DP
    where (eps, delta') is converted from the composed curve. 0 for every exact analysis."""
    return 0.0


@event_delta_charge.register
def _(event: ev.EpisodicSampled, relation: str) -> float:
    _episodic_check(event, relation)
    return episodic_rdp(event.episodes, event.unit_rate, event.within_rate, event.inner.noise_multiplier,
                        [2.0], event.shift)[1]


@event_delta_charge.register
def _(event: ev.SelfComposed, relation: str) -> float:
    return times(event.count, event_delta_charge(event.inner, relation)) if event.count else 0.0


@event_delta_charge.register
def _(event: ev.Composed, relation: str) -> float:
    return float(sum(event_delta_charge(e, relation) for e in event.events))


def less_charge(delta: float, charge: float) -> float:
    """A float <= delta - charge (exactly: one step down from the rounded difference); <= 0 if none."""
    if charge <= 0.0:
        return delta
    return math.nextafter(delta - charge, -math.inf) if charge < delta else 0.0
