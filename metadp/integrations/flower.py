"""metadp inside Flower's own differential privacy (``pip install 'metadp[federated]'``; flwr 1.42).

Flower's fixed-clipping wrappers (``DifferentialPrivacyServerSideFixedClipping`` and the client-side one)
account through a ``PrivacyAccountant`` protocol (``flwr.serverapp``) with an RDP backend, and accept only
``sampling_method = "no-amplification"``: their rounds address FedAvg's fixed-size sample and divide by
the number of replies, which no amplification theorem covers. Two pieces fix that:

* :class:`MetadpPrivacyAccountant` implements Flower's protocol with metadp's certified accounting (every
  registered accountant, the tightest certified upper bound: the number ``metadp plan`` prints). Each
  ``GaussianPrivacyEvent(z, sample_size, population_size)`` becomes the event its configuration means:

  ============================  =================  ================================================
  sampling_method               neighbouring       metadp event (per release)
  ============================  =================  ================================================
  no-amplification              add-or-remove-one  ``Gaussian(z)``: sensitivity C, no sampling
  poisson                       add-or-remove-one  ``PoissonSampled(m / N, Gaussian(z))``
  without-replacement           replace-one        ``FixedSizeSampled(m, N, Gaussian(z), 2)``: 2C
  ============================  =================  ================================================

  The last row is where Flower's own backend passes the multiplier unchanged (sensitivity C, as in
  dp-accounting issue #378): one client replaced moves the clipped sum by up to 2C, so metadp charges 2C.

* :class:`ClientSelection` wraps Flower's fixed-clipping wrapper (around ``FedAvg(fraction_train=1.0)``)
  and makes its rounds the mechanism the accountant claims: it draws the round's clients itself
  (``poisson``: each of the N clients independently with probability m / N; ``fixed``: exactly m of the N
  uniformly; ``balls_in_bins``: rounds in passes of t = k N / m, each client in k distinct uniformly random
  rounds of each pass, accounted as ``RandomAllocation(t, Gaussian(z), selected=k)`` a pass by an accountant
  made with ``MetadpPrivacyAccountant(PrivacyConfig(delta, N, "add-or-remove-one", "no-amplification"),
  allocation=(t, k))``, the number ``metadp plan`` prints for ``scheme = "balls_in_bins"``, ``selected = k``), sends the round only to them, counts a client that fails or sends a non-finite update as a
  zero update (and adds an exactly zero update as zero itself: Flower's clip divides by its norm), and divides the noisy sum by the fixed m instead of the number of replies:
  ``new = current + (sum of clipped updates + N(0, (zC)^2 I)) / m``. A round that draws nobody still
  releases that noise (Poisson). Each round composes one event on its accountant.

For a user of Flower's wrappers the change is three lines::

    dp = DifferentialPrivacyServerSideFixedClipping(FedAvg(fraction_train=1.0), z, C, num_sampled_clients=m)
    accountant = MetadpPrivacyAccountant(PrivacyConfig(1e-5, N, "add-or-remove-one", "poisson"))
    strategy = ClientSelection(dp, clients=m, population=N, accountant=accountant)  # "poisson"; or "fixed"

and ``strategy.start(grid, arrays, num_rounds=R)`` as before; ``accountant.get_epsilon(1e-5)`` then equals
``metadp plan`` of the plan with ``scheme = "poisson"``, ``population = N``, ``batch_size = m``, ``steps = R``,
noise ``z`` (tested on a Flower simulation). The amplification assumes the selection stays hidden from the
observer the guarantee is against, and that client weights are equal (the wrapper sets each reply's
weight to 1; FedAvg then averages the clipped models of the replies).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Dict, Iterable, List, Optional, Tuple, cast

import numpy as np

from metadp.accounting._rdp_events import UnsupportedEventError
from metadp.accounting.certify import accountant_names, certify
from metadp.accounting.registry import Accountant, make_accountant
from metadp.core import events as ev

_MISSING: Optional[ImportError]
try:  # an optional extra: the module imports without it, and each class says what to install
    from flwr.app import Array, ArrayRecord, ConfigRecord, Message, MetricRecord
    from flwr.serverapp import GaussianPrivacyEvent, PrivacyConfig, PrivacySpent
    from flwr.serverapp.strategy import Strategy
    from flwr.serverapp.strategy.dp_fixed_clipping import DifferentialPrivacyFixedClippingBase
    from flwr.supercore.privacy_accounting import NeighboringRelation, SamplingMethod
except ImportError as _err:  # pragma: no cover - exercised only without flwr
    Strategy, _MISSING = object, _err  # type: ignore[misc, assignment]  # (without flwr: a plain base class)
else:
    _MISSING = None

if TYPE_CHECKING:
    from flwr.serverapp import Grid

__all__ = ["MetadpPrivacyAccountant", "ClientSelection", "metadp_event"]

_INSTALL = "pip install 'metadp[federated]'"


def _require_flwr() -> None:
    if _MISSING is not None:
        raise ImportError(f"metadp.integrations.flower needs Flower: {_INSTALL}") from _MISSING


def _pair(config: "PrivacyConfig") -> Tuple["SamplingMethod", "NeighboringRelation"]:
    """The configuration's (sampling method, relation) as Flower's enums (a PrivacyConfig keeps strings as given)."""
    return SamplingMethod(config.sampling_method), NeighboringRelation(config.neighboring_relation)


def metadp_event(config: "PrivacyConfig", event: "GaussianPrivacyEvent") -> Tuple[ev.Event, str]:
    """(metadp's event, its relation) for one of Flower's releases under ``config`` (module docstring's table)."""
    z = ev.Gaussian(float(event.noise_multiplier))
    method, relation = _pair(config)
    if method is SamplingMethod.NO_AMPLIFICATION and relation is NeighboringRelation.ADD_OR_REMOVE_ONE:
        return z, "add_remove"
    if method is SamplingMethod.POISSON and relation is NeighboringRelation.ADD_OR_REMOVE_ONE:
        return ev.PoissonSampled(event.sample_size / event.population_size, z), "add_remove"
    if method is SamplingMethod.WITHOUT_REPLACEMENT and relation is NeighboringRelation.REPLACE_ONE:
        return ev.FixedSizeSampled(int(event.sample_size), int(event.population_size), z, 2.0), "substitute"
    raise ValueError(f"sampling_method {method.value!r} with neighboring_relation {relation.value!r} has no theorem "
                     "here: use no-amplification or poisson with add-or-remove-one, or without-replacement with "
                     "replace-one")


class MetadpPrivacyAccountant:
    """Flower's ``PrivacyAccountant`` protocol, answered by metadp's certified accounting.

    ``get_epsilon(delta)`` is the tightest certified upper bound over metadp's accountants (the one
    ``metadp plan`` prints for the same events); ``get_delta(epsilon)`` a certified upper bound on delta.
    """

    def __init__(self, config: "PrivacyConfig", *, allocation: Optional[Tuple[int, int]] = None):
        _require_flwr()
        if not isinstance(config, PrivacyConfig):
            raise ValueError(f"config must be flwr.serverapp.PrivacyConfig, got {type(config).__name__}")
        metadp_event(config, GaussianPrivacyEvent(1.0, 1, max(1, config.population_size)))  # refuses the pair early
        if allocation is not None:
            allocation = _check_allocation(config, allocation)
        self._config, self._allocation = config, allocation
        self._history: List[Tuple["GaussianPrivacyEvent", int]] = []

    @property
    def allocation(self) -> Optional[Tuple[int, int]]:
        """(t, k): rounds come in passes of t, each client in k of them (``ClientSelection(scheme="balls_in_bins")``);
        None: each round is its own release (the configuration's sampling method)."""
        return self._allocation

    @property
    def config(self) -> "PrivacyConfig":
        return self._config

    @property
    def num_releases(self) -> int:
        return sum(count for _, count in self._history)

    def compose(self, event: "GaussianPrivacyEvent", count: int = 1) -> None:
        self._history = self._with(event, count)

    def _with(self, event: "GaussianPrivacyEvent", count: int) -> List[Tuple["GaussianPrivacyEvent", int]]:
        if not isinstance(count, int) or isinstance(count, bool) or count < 1:
            raise ValueError(f"count must be an integer >= 1, got {count!r}")
        if event.population_size != self._config.population_size:
            raise ValueError(f"the event's population_size {event.population_size} is not the configuration's "
                             f"{self._config.population_size}")
        metadp_event(self._config, event)
        history = list(self._history)
        if history and history[-1][0] == event:
            history[-1] = (event, history[-1][1] + count)
        else:
            history.append((event, count))
        return history

    def _certify(self, delta: float, history: List[Tuple["GaussianPrivacyEvent", int]]) -> float:
        if not history:
            return 0.0
        if self._allocation is not None:
            event, passes = self._passes(history)
            return float(certify(event, delta, steps=passes, relation="add_remove", lower=False).epsilon)
        relation = metadp_event(self._config, history[0][0])[1]
        if len(history) == 1:  # one event composed T times: the question `metadp plan` asks
            release, count = history[0]
            return float(certify(metadp_event(self._config, release)[0], delta, steps=count, relation=relation,
                                 lower=False).epsilon)

        def composed(accountant: Accountant) -> Accountant:
            for event, count in history:
                accountant.compose(metadp_event(self._config, event)[0], count)
            return accountant

        return float(certify(None, delta, relation=relation, composed=composed, lower=False).epsilon)

    def _passes(self, history: List[Tuple["GaussianPrivacyEvent", int]]) -> Tuple[ev.Event, int]:
        """(one pass's event, passes) of an allocated history: each client in k of each t rounds, a partial last
        pass charged in full (as ``metadp plan`` of the balls-in-bins plan charges it)."""
        t, k = cast(Tuple[int, int], self._allocation)  # (an allocated accountant's)
        noises = {float(e.noise_multiplier) for e, _ in history}
        if len(noises) != 1:
            raise ValueError(f"an allocated run's rounds must share one noise multiplier, got {sorted(noises)}")
        rounds = sum(n for _, n in history)
        return ev.RandomAllocation(t, ev.Gaussian(noises.pop()), k), math.ceil(rounds / t)

    def get_epsilon(self, delta: float) -> float:
        if not 0 < delta < 1:
            raise ValueError(f"delta must be in (0, 1), got {delta!r}")
        return self._certify(delta, self._history)

    def get_delta(self, epsilon: float) -> float:
        """The smallest certified upper bound on delta at ``epsilon`` over metadp's accountants that support the
        events (each accountant's own ``get_delta``)."""
        if not (epsilon >= 0 and math.isfinite(epsilon)):
            raise ValueError(f"epsilon must be finite and >= 0, got {epsilon!r}")
        if not self._history:
            return 0.0
        relation = metadp_event(self._config, self._history[0][0])[1]
        composed = [self._passes(self._history)] if self._allocation is not None else [
            (metadp_event(self._config, event)[0], count) for event, count in self._history]
        bounds = []
        for name in accountant_names("all"):
            accountant = make_accountant(name, relation)
            try:
                for event, count in composed:
                    accountant.compose(event, count)
            except UnsupportedEventError:
                continue
            bounds.append(float(accountant.get_delta(epsilon)))
        return min(bounds)

    def get_privacy_spent(self, delta: Optional[float] = None) -> "PrivacySpent":
        delta = self._config.target_delta if delta is None else delta
        return PrivacySpent(epsilon=self.get_epsilon(delta), delta=delta, num_releases=self.num_releases,
                            accounting_method="metadp (certified upper bound, tightest of its accountants)")

    def would_exceed(self, event: "GaussianPrivacyEvent", max_epsilon: Optional[float] = None, count: int = 1) -> bool:
        limit = self._config.max_epsilon if max_epsilon is None else max_epsilon
        if limit is None:
            raise ValueError("would_exceed needs max_epsilon (here or in the PrivacyConfig)")
        return self._certify(self._config.target_delta, self._with(event, count)) > limit

    def state_dict(self) -> Dict[str, Any]:
        c = self._config
        return {"config": {"target_delta": c.target_delta, "population_size": c.population_size,
                           "neighboring_relation": _pair(c)[1].value, "sampling_method": _pair(c)[0].value,
                           "max_epsilon": c.max_epsilon},
                "allocation": None if self._allocation is None else list(self._allocation),
                "compositions": [{"event": {"noise_multiplier": e.noise_multiplier, "sample_size": e.sample_size,
                                            "population_size": e.population_size}, "count": n}
                                 for e, n in self._history]}

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        c = state["config"]
        config = PrivacyConfig(c["target_delta"], c["population_size"], NeighboringRelation(c["neighboring_relation"]),
                               SamplingMethod(c["sampling_method"]), c.get("max_epsilon"))
        allocation = state.get("allocation")
        fresh = MetadpPrivacyAccountant(config, allocation=None if allocation is None else tuple(allocation))
        for item in state["compositions"]:
            fresh.compose(GaussianPrivacyEvent(**item["event"]), int(item["count"]))
        self._config, self._allocation, self._history = fresh._config, fresh._allocation, fresh._history


def _check_allocation(config: "PrivacyConfig", allocation: Any) -> Tuple[int, int]:
    method, relation = _pair(config)
    if (method, relation) != (SamplingMethod.NO_AMPLIFICATION, NeighboringRelation.ADD_OR_REMOVE_ONE):
        raise ValueError("an allocation's rounds are each a plain Gaussian release: the configuration must say "
                         f"no-amplification with add-or-remove-one, got {method.value}, {relation.value}")
    try:
        t, k = allocation
    except (TypeError, ValueError):
        raise ValueError(f"allocation must be (steps_per_pass, selected), got {allocation!r}") from None
    if not all(isinstance(x, int) and not isinstance(x, bool) for x in (t, k)) or not 1 <= k <= t:
        raise ValueError(f"allocation must be integers (t, k) with 1 <= k <= t, got {allocation!r}")
    return t, k


_SCHEMES = {"poisson": ("poisson", "add-or-remove-one"), "fixed": ("without-replacement", "replace-one"),
            "balls_in_bins": ("no-amplification", "add-or-remove-one")}
"""ClientSelection's schemes: the (sampling_method, neighboring_relation) its accountant must have."""


class ClientSelection(Strategy):
    """Flower's fixed-clipping DP wrapper with its clients drawn by ``scheme`` and its sum divided by ``clients``
    (module docstring).

    Args:
        strategy: ``DifferentialPrivacyServerSideFixedClipping`` or ``...ClientSideFixedClipping`` around
            ``FedAvg(fraction_train=1.0)``, without an accountant of its own.
        clients: m, the expected (``poisson``) or exact (``fixed``) number of clients a round.
        population: N, the clients of the federation (every round checks that N are connected).
        scheme: ``poisson``, ``fixed`` or ``balls_in_bins`` (random allocation: rounds in passes of
            t = selected x population / clients, each client in ``selected`` distinct uniformly random rounds of
            each pass, independently of the others; about ``clients`` a round).
        selected: k, each client's rounds a pass (``balls_in_bins`` only; default 1).
        accountant: composed once per round (its configuration must match the scheme; ``balls_in_bins``: a
            ``MetadpPrivacyAccountant`` of no-amplification, add-or-remove-one, ``allocation=(t, k)``); None: no
            accounting.
        seed: the selection's generator (None: the operating system's entropy; fix it only in tests).
    """

    def __init__(self, strategy: "DifferentialPrivacyFixedClippingBase", *, clients: int, population: int,
                 scheme: str = "poisson", accountant: Any = None, seed: Optional[int] = None, selected: int = 1):
        _require_flwr()
        if not isinstance(strategy, DifferentialPrivacyFixedClippingBase):
            raise ValueError("strategy must be one of Flower's fixed-clipping DP wrappers "
                             f"(DifferentialPrivacy*FixedClipping), got {type(strategy).__name__}")
        if strategy.accountant is not None:
            raise ValueError("give the accountant to ClientSelection, not to Flower's wrapper (which accepts only "
                             "no-amplification)")
        if getattr(strategy.strategy, "fraction_train", None) != 1.0:
            raise ValueError("the wrapped FedAvg must address every client (fraction_train=1.0): ClientSelection draws "
                             "the round's clients")
        if scheme not in _SCHEMES:
            raise ValueError(f"scheme must be one of {', '.join(_SCHEMES)}, got {scheme!r}")
        if not (isinstance(population, int) and isinstance(clients, int) and 0 < clients <= population):
            raise ValueError(f"need integers 0 < clients <= population, got clients={clients!r}, "
                             f"population={population!r}")
        self.pass_rounds = _pass_rounds(scheme, clients, population, selected)
        if accountant is not None:
            method, relation = _SCHEMES[scheme]
            c = accountant.config
            if tuple(x.value for x in _pair(c)) != (method, relation) or c.population_size != population:
                raise ValueError(f"the accountant's configuration ({_pair(c)[0].value}, {_pair(c)[1].value}, "
                                 f"population {c.population_size}) is not this "
                                 f"selection's ({method}, {relation}, population {population})")
            wanted = (self.pass_rounds, selected) if scheme == "balls_in_bins" else None
            if getattr(accountant, "allocation", None) != wanted:
                raise ValueError(f"the accountant's allocation {getattr(accountant, 'allocation', None)} is not this "
                                 f"selection's {wanted} (MetadpPrivacyAccountant(config, allocation=(t, k)))")
        self.strategy, self.clients, self.population, self.scheme = strategy, clients, population, scheme
        self.selected, self.accountant = selected, accountant
        self.rng = np.random.default_rng(seed)
        self.rounds: List[Dict[str, int]] = []
        self._pass: Optional[np.ndarray] = None  # balls_in_bins: each client's rounds of the current pass

    def summary(self) -> None:
        self.strategy.summary()

    def configure_train(self, server_round: int, arrays: "ArrayRecord", config: "ConfigRecord",
                        grid: "Grid") -> Iterable["Message"]:
        messages = list(self.strategy.configure_train(server_round, arrays, config, grid))
        nodes = sorted({m.metadata.dst_node_id for m in messages})
        if len(nodes) != self.population or len(messages) != self.population:
            raise ValueError(f"ClientSelection draws from the population of {self.population} clients, but the wrapped "
                             f"strategy addressed {len(nodes)} (FedAvg(fraction_train=1.0, min_available_nodes="
                             f"{self.population}) waits for all of them)")
        if self.scheme == "poisson":
            keep = self.rng.random(len(nodes)) < self.clients / self.population
        elif self.scheme == "balls_in_bins":
            rounds = cast(int, self.pass_rounds)  # (balls_in_bins: a pass's rounds)
            at = len(self.rounds) % rounds  # the round's place in its pass: a new pass draws afresh
            if at == 0:
                self._pass = np.stack([self.rng.choice(rounds, size=self.selected, replace=False) for _ in nodes])
            keep = (cast(np.ndarray, self._pass) == at).any(axis=1)
        else:
            keep = np.zeros(len(nodes), dtype=bool)
            keep[self.rng.choice(len(nodes), size=self.clients, replace=False)] = True
        chosen = {n for n, k in zip(nodes, keep) if k}
        self.rounds.append({"selected": len(chosen), "dropped": 0})
        return [m for m in messages if m.metadata.dst_node_id in chosen]

    def aggregate_train(self, server_round: int,
                        replies: Iterable["Message"]) -> Tuple[Optional["ArrayRecord"], Optional["MetricRecord"]]:
        current: ArrayRecord = cast(Any, self.strategy).current_arrays  # (set by the wrapped FedAvg)
        valid = [r for r in replies if _finite_reply(r, current)]
        self.rounds[-1]["dropped"] = self.rounds[-1]["selected"] - len(valid)
        for reply in valid:  # equal weights: FedAvg's mean is then the plain mean of the clipped models
            for record in reply.content.metric_records.values():
                record[cast(Any, self.strategy.strategy).weighted_by_key] = 1  # (a FedAvg's)
        dp = self.strategy
        # Flower's clip divides by the update's norm (an exactly unchanged model raises ZeroDivisionError there):
        # a zero update adds nothing to the sum, so only the moving ones go through the wrapper
        moving = [r for r in valid if _moves(r, current)]
        if moving:
            dp.num_sampled_clients = len(moving)  # its noise std zC / k on the mean of the k moving updates
            found, metrics = dp.aggregate_train(server_round, moving)
            arrays = cast(ArrayRecord, found)  # (the wrapper aggregates the moving updates)
            scale = len(moving) / self.clients  # (sum + N(0, (zC)^2)) / m
            out = {k: current[k].numpy() + (arrays[k].numpy() - current[k].numpy()) * scale for k in current.keys()}
        else:  # nobody answered, or every update is zero: the release is the noise alone
            std = dp.noise_multiplier * dp.clipping_norm / self.clients
            out = {k: current[k].numpy() + self.rng.normal(0.0, std, current[k].numpy().shape) for k in current.keys()}
            metrics = MetricRecord({})
        if self.accountant is not None:
            self.accountant.compose(GaussianPrivacyEvent(dp.noise_multiplier, self.clients, self.population))
        return ArrayRecord({k: Array(np.asarray(v, dtype=current[k].numpy().dtype)) for k, v in out.items()}), metrics

    def configure_evaluate(self, server_round: int, arrays: "ArrayRecord", config: "ConfigRecord",
                           grid: "Grid") -> Iterable["Message"]:
        return self.strategy.configure_evaluate(server_round, arrays, config, grid)

    def aggregate_evaluate(self, server_round: int, replies: Iterable["Message"]) -> Optional["MetricRecord"]:
        return self.strategy.aggregate_evaluate(server_round, replies)


def _pass_rounds(scheme: str, clients: int, population: int, selected: int) -> Optional[int]:
    """t = selected x population / clients for ``balls_in_bins`` (which clients must divide); None otherwise."""
    if scheme != "balls_in_bins":
        if selected != 1:
            raise ValueError(f"selected applies only to scheme = 'balls_in_bins', got selected={selected!r}")
        return None
    if isinstance(selected, bool) or not isinstance(selected, int) or selected < 1 or (selected * population) % clients:
        raise ValueError(f"balls_in_bins needs an integer selected >= 1 with clients dividing selected x population, "
                         f"got selected={selected!r}, clients={clients}, population={population}")
    return selected * population // clients


def _moves(reply: "Message", current: "ArrayRecord") -> bool:
    """The reply's model differs from ``current`` (its update is not exactly zero)."""
    record = next(iter(reply.content.array_records.values()))
    return any(not np.array_equal(record[k].numpy(), current[k].numpy()) for k in current.keys())


def _finite_reply(reply: "Message", current: "ArrayRecord") -> bool:
    """A reply without error, with one ArrayRecord of the model's names and shapes, finite."""
    if reply.has_error() or len(reply.content.array_records) != 1:
        return False
    record = next(iter(reply.content.array_records.values()))
    if set(record.keys()) != set(current.keys()):
        return False
    for k in current.keys():
        value = record[k].numpy()
        if value.shape != current[k].numpy().shape or not np.isfinite(value).all():
            return False
    return True

