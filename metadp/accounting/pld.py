"""Privacy-loss-distribution (PLD) accountant with certified lower and upper bounds.

Each step's dominating pair (``metadp.mechanisms``) has a privacy loss L = log dP/dQ under P. We
round L up and down onto a lattice of spacing h (the cells' exact P- and Q-masses come from the
pair), compose by FFT (self-composition is a power in the frequency domain, so T = 1e9 costs what
T = 1e3 costs), and evaluate the hockey-stick profile delta(eps) = E[(1 - e^{eps - S})_+] of the sum S.

Rounding every step up (down) shifts the sum by up to T h, which would make long compositions
useless. Instead the drift is undone with a concentration bound. Write L_i = U_i - D_i with
U_i = ceil(L_i) and D_i in [0, h]; the D_i are independent (the composition's dominating pair is the
product of the per-step pairs: Zhu, Dong & Wang 2022, arXiv:2106.08567, Thm 10), so by Hoeffding
(1963), sum D_i >= c := sum E[D_i] - h sqrt(n log(1/tau) / 2) except with probability tau, and

    delta(eps) <= delta_U(eps + c) + tau,        delta(eps) >= delta_F(eps - c') - tau

where delta_U, delta_F are the profiles of the rounded-up and rounded-down sums (f(s) = (1-e^{eps-s})_+
is increasing). E[D_i] needs each cell's conditional mean of L; with l* = log(P(cell)/Q(cell)),
Jensen gives l* <= E[L | cell] and Hoeffding's lemma gives E[L | cell] <= l* + h^2/8. The resulting
two-sided error in epsilon is about 2 h sqrt(n log(1/tau)/2) (cf. the analysis of Gopi, Lee &
Wutschitz 2021, arXiv:2106.02848, Sec. 5), and h is chosen from the requested tolerance.

Everything that is truncated is charged to delta on the pessimistic side: per-step loss tails (upper:
to an infinity atom; lower: dropped), the mass outside the FFT window (Chernoff bounds on the lattice
sums: it would wrap around), the Hoeffding failure probability, and the floating-point noise of the
FFT (estimated from the largest negative output). Every public number is an upper bound; the
optimistic one comes with it from ``get_epsilon_bounds``.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import List, Tuple

import numpy as np
from scipy import fft as sfft
from scipy import special

from metadp._validation import check_count, check_delta, check_real
from metadp.accounting import events as ev
from metadp.accounting.rdp_accountant import RELATIONS, LedgerEntry, RdpAccountant, UnsupportedEventError

__all__ = ["PldAccountant", "PldResult", "event_pairs"]

_DELTA_SHARE = 1e-5  # fraction of delta spent on each truncation (tails, window, Hoeffding)


# ---------------------------------------------------------------------------------------------
# Event -> dominating pairs (dispatch table). Each item: (pairs, count), pairs = (add, remove) or a
# single pair when both directions share one PLD.


@functools.singledispatch
def event_pairs(event: ev.Event, relation: str) -> List[Tuple[tuple, int]]:
    """The dominating pairs of ``event`` with their multiplicities."""
    raise _pld_unsupported(event, f"no dominating pair for {type(event).__name__}")


def _pld_unsupported(event, reason):
    err = UnsupportedEventError(event, reason)
    err.args = (str(err).replace("RDP accountant", "PLD accountant"),)
    return err


@event_pairs.register
def _(event: ev.NoOp, relation):
    return []


@event_pairs.register
def _(event: ev.NonPrivate, relation):
    return [(None, 1)]


def _factor(relation: str) -> float:
    return 2.0 if relation == "substitute" else 1.0


@event_pairs.register
def _(event: ev.Gaussian, relation):
    from metadp.mechanisms.gaussian import gaussian_pair

    if math.isinf(event.noise_multiplier):
        return []
    return [((gaussian_pair(event.noise_multiplier / _factor(relation)),), 1)]


@event_pairs.register
def _(event: ev.Laplace, relation):
    from metadp.mechanisms.laplace import LaplacePair

    if math.isinf(event.scale):
        return []
    return [((LaplacePair(event.scale / _factor(relation)),), 1)]


@event_pairs.register
def _(event: ev.PoissonSampled, relation):
    from metadp.accounting.rdp_accountant import _effective_noise_multiplier
    from metadp.mechanisms.gaussian import poisson_gaussian_pairs

    if relation != "add_remove":
        raise _pld_unsupported(event, "Poisson sampling is analysed under the add_remove relation")
    z = _effective_noise_multiplier(event.inner)
    if event.rate == 0.0 or math.isinf(z):
        return []
    return [(poisson_gaussian_pairs(event.rate, z), 1)]


@event_pairs.register
def _(event: ev.SelfComposed, relation):
    return [(pairs, count * event.count) for pairs, count in event_pairs(event.inner, relation)
            if count * event.count > 0]


@event_pairs.register
def _(event: ev.Composed, relation):
    return [item for e in event.events for item in event_pairs(e, relation)]


# ---------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class _Lattice:
    """One pair on the lattice h Z: rounded-up and rounded-down masses from index ``start``."""

    start: int
    up: np.ndarray  # up[i]: Pr[ceil(L) = (start + i) h] (finite part)
    down: np.ndarray  # down[i]: Pr[floor(L) = (start + i) h] (dropped lower tail excluded)
    up_inf: float  # Pr[L > top]: the infinity atom of the rounded-up loss
    gap_up: float  # lower bound on E[ceil(L) - L] (over the regular cells)
    gap_down: float  # lower bound on E[L - floor(L)]


def _lattice(pair, h: float, tail: float) -> _Lattice:
    lo, hi = pair.loss_range(tail)
    j_lo, j_hi = math.floor(lo / h), math.ceil(hi / h)
    if j_hi == j_lo:
        j_hi += 1
    edges = np.arange(j_lo, j_hi + 1, dtype=np.float64) * h
    cp, below, above = pair.cell_masses(edges, "P")
    cq, _, _ = pair.cell_masses(edges, "Q")
    with np.errstate(divide="ignore", invalid="ignore"):
        l_star = np.clip(np.log(cp / cq), edges[:-1], edges[1:])
    l_star = np.where(cp > 0, l_star, edges[1:])
    up = np.concatenate([[below], cp])
    down = np.concatenate([cp, [0.0]])
    down[-1] += above  # L > top rounds down to top
    gap_up = float(np.sum(cp * np.maximum(0.0, edges[1:] - l_star - h * h / 8.0)))
    gap_down = float(np.sum(cp * (l_star - edges[:-1])))
    return _Lattice(j_lo, up, down, above, gap_up, gap_down)


@dataclasses.dataclass(frozen=True)
class _Sum:
    """A composed lattice sum on the window of indices [first, first + len(pmf)), spacing h."""

    first: int
    pmf: np.ndarray
    h: float
    inf_mass: float  # Pr[S = +inf]
    error: float  # mass outside the window + floating-point noise: added (upper) or subtracted (lower)

    def x_at(self, delta: float) -> float:
        """Smallest x with sum_w pmf_w (1 - e^{x - s_w})_+ <= delta (-inf if it holds everywhere)."""
        if delta <= 0:
            return math.inf
        s = (self.first + np.arange(len(self.pmf))) * self.h
        keep = self.pmf > 0
        s, p = s[keep], self.pmf[keep]
        if len(p) == 0:
            return -math.inf
        # On [s_{j-1}, s_j) the profile is A_j - e^x B_j, A_j = sum_{k>=j} p_k, B_j = sum_{k>=j} p_k e^{-s_k}.
        a = np.cumsum(p[::-1])[::-1]
        log_b = np.logaddexp.accumulate((np.log(p) - s)[::-1])[::-1]
        a_next, log_b_next = np.append(a[1:], 0.0), np.append(log_b[1:], -np.inf)
        with np.errstate(over="ignore"):
            at_points = a_next - np.exp(s + log_b_next)  # profile at s_j (points strictly above)
        j = int(np.argmax(at_points <= delta)) if np.any(at_points <= delta) else len(s) - 1
        if a[j] <= delta:
            return -math.inf if j == 0 else float(s[j - 1])
        x = math.log(a[j] - delta) - float(log_b[j])
        low = -math.inf if j == 0 else float(s[j - 1])
        return float(min(max(x, low), s[j]))


@dataclasses.dataclass(frozen=True)
class PldResult:
    """Certified bounds for one query, with the grid and the error terms that produced them."""

    epsilon_lower: float
    epsilon_upper: float
    delta: float
    h: float  # lattice spacing of the privacy loss
    steps: int  # number of composed releases
    fft_size: int
    notes: Tuple[str, ...] = ()


class PldAccountant:
    """Tight accountant over privacy loss distributions, returning certified (lower, upper) bounds.

    Args:
        relation: ``"add_remove"`` or ``"substitute"`` (as ``RdpAccountant``).
        tolerance: target width of [lower, upper] relative to epsilon; it sets the lattice spacing
            h = tolerance * eps_scale / (2 (2 sqrt(n log(1/tau)/2) + 1)) from Hoeffding's bound
            (module docstring), with eps_scale the RDP epsilon (an upper bound on the PLD one).
        max_memory: bytes the FFT may use; beyond it h is widened (the gap grows, the bounds stay valid).
        max_fft_size: the time budget, as the largest FFT length; beyond it h is widened likewise, with
            a note (2^22 keeps a query to a few seconds on 2 cores).
    """

    name = "pld"
    conversion = "pld"

    def __init__(self, relation: str = "add_remove", tolerance: float = 5e-3, max_memory: int = 2 << 30,
                 max_fft_size: int = 1 << 22):
        if relation not in RELATIONS:
            raise ValueError(f"relation must be one of {RELATIONS}, got {relation!r}")
        self.relation = relation
        self.tolerance = check_real("tolerance", tolerance, low=1e-6, high=1.0)
        self.max_memory = check_count("max_memory", max_memory, minimum=1 << 20)
        self.max_fft_size = check_count("max_fft_size", max_fft_size, minimum=1 << 10)
        self._ledger: List[LedgerEntry] = []
        self._items: List[Tuple[tuple, int]] = []
        self._rdp = RdpAccountant(relation)

    def compose(self, event: ev.Event, count: int = 1) -> "PldAccountant":
        """Composes ``event`` ``count`` times; raises before any state change if unsupported."""
        if not isinstance(event, ev.Event):
            raise ValueError(f"event must be a metadp Event, got {type(event).__name__}")
        count = check_count("count", count)
        items = [(pairs, c * count) for pairs, c in event_pairs(event, self.relation) if c * count > 0]
        self._rdp.compose(event, count)
        self._items.extend(items)
        self._ledger.append(LedgerEntry(event, count))
        return self

    @property
    def ledger(self):
        return tuple(self._ledger)

    def get_epsilon(self, delta: float) -> float:
        """Certified epsilon at ``delta`` (the upper bound)."""
        return self.get_epsilon_bounds(delta).epsilon_upper

    def get_epsilon_and_order(self, delta: float):
        """(epsilon, nan): the accountant interface shared with ``RdpAccountant`` (no Renyi order)."""
        return self.get_epsilon(delta), math.nan

    def get_epsilon_bounds(self, delta: float) -> PldResult:
        """Lower and upper bounds on the optimal epsilon at ``delta``."""
        delta = check_delta("delta", delta)
        if any(pairs is None for pairs, _ in self._items):
            return PldResult(math.inf, math.inf, delta, math.nan, self._steps(), 0, ("non-private release",))
        if not self._items:
            return PldResult(0.0, 0.0, delta, math.nan, 0, 0)
        scale = self._rdp.get_epsilon(delta)
        if scale == 0.0:
            return PldResult(0.0, 0.0, delta, math.nan, self._steps(), 0, ("RDP certifies epsilon 0",))
        result = _bounds(self._items, delta, scale, self.tolerance, min(self.max_memory, self.max_fft_size * 64))
        if result.epsilon_upper > scale:  # both are valid upper bounds: report the smaller, and say so
            note = (f"the PLD bound {result.epsilon_upper:.6g} is above the RDP bound {scale:.6g} "
                    "(floating-point noise or truncation dominates at this delta): the RDP bound is reported")
            return dataclasses.replace(result, epsilon_upper=scale, notes=result.notes + (note,))
        return result

    def trajectory(self, steps, delta: float, step_event: ev.Event = None) -> np.ndarray:
        """Certified epsilon (upper bound) after each listed number of steps.

        As ``RdpAccountant.trajectory``: the step is ``step_event`` on top of the ledger, or the last
        composed event on top of the entries before it. One lattice spacing and tail truncation serve
        every step count (sized for the finest need, from the RDP trajectory), so the step's lattice
        is built once; each listed count costs one Chernoff window and one FFT composition.
        """
        delta = check_delta("delta", delta)
        counts = [check_count("steps", s) for s in steps]
        if step_event is None:
            if not self._ledger:
                raise ValueError("trajectory needs a step_event or at least one composed event")
            base, step_event = [(e.event, e.count) for e in self._ledger[:-1]], self._ledger[-1].event
        else:
            base = [(e.event, e.count) for e in self._ledger]
        step_items = [(pairs, c) for pairs, c in event_pairs(step_event, self.relation) if c > 0]
        base_items = [item for e, c in base for item in
                      [(pairs, k * c) for pairs, k in event_pairs(e, self.relation) if k * c > 0]]
        rdp = RdpAccountant(self.relation)
        for e, c in base:
            rdp.compose(e, c)
        scales = rdp.trajectory(counts, delta, step_event=step_event)
        if any(pairs is None for pairs, _ in base_items + step_items):
            return np.full(len(counts), np.inf)
        n_of = [sum(c for _, c in base_items) + t * sum(c for _, c in step_items) for t in counts]
        tau = _DELTA_SHARE * delta
        spacings = [self.tolerance * sc / (2.0 * (2.0 * math.sqrt(n * math.log(1.0 / tau) / 2.0) + 1.0))
                    for sc, n in zip(scales, n_of) if n > 0 and sc > 0]
        h = min(spacings) if spacings else 1.0
        tail = _DELTA_SHARE * delta / max(max(n_of), 1)
        directions = 2 if any(len(pairs) == 2 for pairs, _ in base_items + step_items) else 1
        out = np.zeros(len(counts))
        for d in range(directions):
            pick = lambda items: [(_lattice_cached(pairs[min(d, len(pairs) - 1)], h, tail), c) for pairs, c in items]
            out = np.maximum(out, _trajectory_direction(pick(base_items), pick(step_items), counts, delta, h,
                                                        tail, min(self.max_memory, self.max_fft_size * 64)))
        return np.where(np.array(n_of) == 0, 0.0, np.minimum(out, scales))

    def get_delta(self, epsilon: float) -> float:
        """Certified delta at ``epsilon`` (upper bound), by bisection on the certified epsilon."""
        epsilon = check_real("epsilon", epsilon, low=0.0)
        lo, hi = 1e-300, 1.0 - 1e-12
        if self.get_epsilon(hi) > epsilon:
            return 1.0
        for _ in range(60):  # geometric bisection: get_epsilon(hi) <= epsilon throughout
            mid = math.sqrt(lo * hi)
            if self.get_epsilon(mid) <= epsilon:
                hi = mid
            else:
                lo = mid
            if hi / lo < 1.001:
                break
        return hi

    def _steps(self) -> int:
        return sum(c for _, c in self._items)


def _bounds(items, delta: float, scale: float, tolerance: float, max_memory: int, *, h: float = None,
            tail: float = None) -> PldResult:
    n = sum(c for _, c in items)
    tau = _DELTA_SHARE * delta
    hoeffding = math.sqrt(n * math.log(1.0 / tau) / 2.0)
    fixed = h is not None
    h = h if fixed else tolerance * scale / (2.0 * (2.0 * hoeffding + 1.0))
    tail = tail if tail is not None else _DELTA_SHARE * delta / n
    notes = []
    directions = 2 if any(len(pairs) == 2 for pairs, _ in items) else 1
    # Size the lattice before building it: a coarse lattice gives each step's loss variance, and the
    # window must hold about 14 standard deviations of the sum within the FFT budget.
    budget = max_memory // 64
    width = max(_window_estimate([(pairs[min(d, len(pairs) - 1)], c) for pairs, c in items], delta)
                for d in range(directions))
    if not fixed and width / h > 0.95 * budget:
        h = width / (0.95 * budget)
        notes.append(f"lattice widened to h = {h:.3g} to fit the FFT budget ({budget:,} points): the interval "
                     "is wider than the tolerance asked")
    while True:
        try:
            uppers, lowers, size = [], [], 0
            for d in range(directions):
                pairs = [(pairs[min(d, len(pairs) - 1)], c) for pairs, c in items]
                lo, up, size_d = _direction_bounds(pairs, delta, h, tau, hoeffding, max_memory, tail)
                lowers.append(lo)
                uppers.append(up)
                size = max(size, size_d)
            return PldResult(max(lowers), max(uppers), delta, h, n, size, tuple(notes))
        except MemoryError as err:  # the estimate above was short: widen further
            factor = max(1.25, float(err.args[0]) if err.args else 2.0)
            h *= factor
            notes = [f"lattice widened to h = {h:.3g} to stay within the memory/time budget "
                     f"({max_memory / 2**30:.3g} GiB): the interval is wider than the tolerance asked"]


_LAMBDAS = np.concatenate([np.geomspace(1e-10, 10.0, 96), -np.geomspace(1e-10, 10.0, 96)])


def _cgf_table(L: _Lattice) -> np.ndarray:
    """log E[e^{lam U}] of one lattice (indices as units) on the fixed grid ``_LAMBDAS``."""
    idx = np.arange(len(L.up)) + L.start
    with np.errstate(divide="ignore", over="ignore"):
        log_p = np.log(L.up)
        return np.array([float(special.logsumexp(log_p + lam * idx)) for lam in _LAMBDAS])


def _trajectory_direction(base, step, counts, delta, h, tail, max_memory) -> np.ndarray:
    """Upper bounds for base + t x step, t in counts, reusing lattice spectra and CGF tables."""
    tau = _DELTA_SHARE * delta
    log_tau = math.log(tau)
    tables = {id(L): _cgf_table(L) for L, _ in base + step}
    widths = []
    windows = []
    for t in counts:
        items = base + [(L, c * t) for L, c in step]
        cgf = sum(c * tables[id(L)] for L, c in items if c)
        with np.errstate(invalid="ignore"):
            ends = (cgf - log_tau) / _LAMBDAS  # upper ends for lam > 0, lower ends for lam < 0
        hi = math.ceil(np.nanmin(np.where(_LAMBDAS > 0, ends, np.inf))) + 1
        lo = math.floor(np.nanmax(np.where(_LAMBDAS < 0, ends, -np.inf))) - 1
        windows.append((lo, hi))
        widths.append(hi - lo + 1)
    support = max(len(L.up) for L, _ in base + step)
    size = sfft.next_fast_len(max(max(widths), support) + 1, real=True)
    if size * 16 * 4 > max_memory:
        raise MemoryError(size * 16 * 4 / max_memory)
    spectra = {id(L): sfft.rfft(L.up, size) for L, _ in base + step}
    base_spec = np.ones(size // 2 + 1, dtype=np.complex128)
    for L, c in base:
        base_spec *= np.power(spectra[id(L)], c)
    out = np.empty(len(counts))
    for i, t in enumerate(counts):
        items = base + [(L, c * t) for L, c in step if c * t]
        n = sum(c for _, c in items)
        if n == 0:
            out[i] = 0.0
            continue
        spectrum = base_spec.copy()
        for L, c in step:
            spectrum *= np.power(spectra[id(L)], c * t)
        offset = sum(c * L.start for L, c in items)
        lo, hi = windows[i]
        circular = sfft.irfft(spectrum, size)
        window = np.roll(circular, -((lo - offset) % size))
        noise = max(0.0, -float(window.min()))
        up = _Sum(lo, np.maximum(window, 0.0), h, 0.0, 2.0 * max(noise, 2.0**-60) * size)
        inf_mass = -math.expm1(sum(c * math.log1p(-L.up_inf) for L, c in items))
        hoeffding = math.sqrt(n * math.log(1.0 / tau) / 2.0)
        c_up = sum(c * L.gap_up for L, c in items) - h * hoeffding
        budget = delta - (inf_mass + 3 * tau + up.error)
        out[i] = max(0.0, up.x_at(budget) - c_up) if budget > 0 else math.inf
    return out


def _window_estimate(pairs, delta: float) -> float:
    """Approximate width (in loss units) of the composed sum's window plus one step's support."""
    n = sum(c for _, c in pairs)
    variance, support = 0.0, 0.0
    for pair, c in pairs:
        lo, hi = pair.loss_range(_DELTA_SHARE * delta / n)
        coarse = _lattice_cached(pair, (hi - lo) / 4096.0, _DELTA_SHARE * delta / n)
        idx = (np.arange(len(coarse.up)) + coarse.start) * (hi - lo) / 4096.0
        mass = float(coarse.up.sum())
        mean = float(np.dot(coarse.up, idx)) / mass
        variance += c * float(np.dot(coarse.up, (idx - mean) ** 2)) / mass
        support = max(support, hi - lo)
    return 14.0 * math.sqrt(variance) + support


def _direction_bounds(pairs, delta, h, tau, hoeffding, max_memory, tail):
    n = sum(c for _, c in pairs)
    lattices = [(_lattice_cached(pair, h, tail), c) for pair, c in pairs]
    if max(len(L.up) for L, _ in lattices) * 8 * 6 > max_memory:
        raise MemoryError
    lo, hi = _chernoff_window(lattices, tau)
    size = sfft.next_fast_len(max(hi - lo + 1, max(len(L.up) for L, _ in lattices)) + 1, real=True)
    if size * 16 * 4 > max_memory:
        raise MemoryError(1.05 * size * 16 * 4 / max_memory)  # how much wider h must be
    up = _compose(lattices, "up", lo, size, h)
    down = _compose(lattices, "down", lo - n, size, h)  # floor = ceil - 1 lattice step on every cell
    inf_mass = -math.expm1(sum(c * math.log1p(-L.up_inf) for L, c in lattices))
    c_up = sum(c * L.gap_up for L, c in lattices) - h * hoeffding
    c_down = sum(c * L.gap_down for L, c in lattices) - h * hoeffding
    # tails: the window misses <= tau per side for the rounded-up sum; the rounded-down sum differs
    # from it by exactly n lattice steps except when some step falls in a truncated tail (below or
    # above the lattice: probability <= 2 n tail).
    upper_budget = delta - (inf_mass + 2 * tau + up.error + tau)
    lower_budget = delta + (2 * tau + 2 * n * tail + down.error + tau)
    eps_upper = max(0.0, up.x_at(upper_budget) - c_up) if upper_budget > 0 else math.inf
    eps_lower = max(0.0, down.x_at(lower_budget) + c_down)
    return eps_lower, eps_upper, size


@functools.lru_cache(maxsize=64)
def _lattice_cached(pair, h, tail):
    return _lattice(pair, h, tail)


def _chernoff_window(lattices, tau: float) -> Tuple[int, int]:
    """Index window [lo, hi] outside which the rounded-up sum has mass <= tau on each side."""
    stats = []
    for L, c in lattices:
        idx = np.arange(len(L.up)) + L.start
        mass = float(L.up.sum())
        mean = float(np.dot(L.up, idx)) / mass
        stats.append((L, c, idx, mean, float(np.dot(L.up, (idx - mean) ** 2)) / mass))
    center = sum(c * m for _, c, _, m, _ in stats)
    sd = math.sqrt(max(sum(c * v for *_, v in stats), 1.0))
    log_tau = math.log(tau)
    ends = []
    for sign in (1.0, -1.0):
        best = math.inf
        for lam in sign * np.geomspace(1e-2, 50.0, 16) / sd:
            # centred cumulant generating function, sum_e c_e log E[e^{lam (U_e - mean_e)}]
            cgf = 0.0
            for L, c, idx, mean, _ in stats:
                with np.errstate(divide="ignore"):
                    cgf += c * float(special.logsumexp(np.log(L.up) + lam * (idx - mean)))
            best = min(best, (cgf - log_tau) / abs(lam))  # distance from the centre
        ends.append(best)
    return math.floor(center - ends[1]) - 1, math.ceil(center + ends[0]) + 1


def _compose(lattices, which: str, first: int, size: int, h: float) -> _Sum:
    """The composed pmf of the lattice sums on indices [first, first + size) by FFT powers."""
    spectrum = np.ones(size // 2 + 1, dtype=np.complex128)
    offset = 0
    for L, c in lattices:
        p = getattr(L, which)
        spectrum *= np.power(sfft.rfft(p, size), c)
        offset += c * L.start
    circular = sfft.irfft(spectrum, size)
    window = np.roll(circular, -((first - offset) % size))
    noise = max(0.0, -float(window.min()))
    window = np.maximum(window, 0.0)
    # each bin may carry noise ~ the largest negative value; charge it to every bin, doubled
    return _Sum(first, window, h, 0.0, 2.0 * max(noise, 2.0**-60) * size)
