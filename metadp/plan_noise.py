"""The ``[noise]`` table of a training plan (``metadp.plan``): the mechanism on each step's clipped sum, how its
clip is set, and, for the Gaussian, whether the noise is independent across steps or banded (DP-FTRL's banded
matrix factorization, certified by ``metadp.banded_noise``); and the key checks every plan table shares.
"""

from __future__ import annotations

import dataclasses
import difflib
from typing import Any, Mapping, Optional, Tuple, cast

from metadp.accounting.adaptive_clipping import combined_noise_multiplier
from metadp.core import events as ev
from metadp.core.validation import check_count, check_positive, check_real

__all__ = ["NoiseSpec", "MECHANISMS", "CLIPS", "CLIPPING", "CORRELATIONS"]

MECHANISMS = ("gaussian", "laplace", "none")
CLIPS = ("fixed", "raw_norms", "none")
CLIPPING = ("per_episode", "per_example")
CORRELATIONS = ("independent", "banded")
_NOISE_KEYS = ("mechanism", "multiplier", "scale", "clipping", "count_noise", "clip", "correlation", "bands",
               "horizon", "momentum")


def _check_keys(table: Mapping[str, Any], allowed: Tuple[str, ...], prefix: str) -> None:
    for key in table:
        if key not in allowed:
            close = difflib.get_close_matches(str(key), allowed, n=1)
            hint = f"; did you mean '{close[0]}'?" if close else f"; allowed keys: {', '.join(allowed)}"
            raise ValueError(f"{prefix}{key} is not a known plan key{hint}")


def _choice(name: str, value: object, allowed: Tuple[str, ...]) -> str:
    if value not in allowed:
        close = difflib.get_close_matches(str(value), allowed, n=1)
        hint = f"; did you mean '{close[0]}'?" if close else ""
        raise ValueError(f"{name} must be one of {', '.join(allowed)}, got {value!r}{hint}")
    return value


@dataclasses.dataclass(frozen=True)
class NoiseSpec:
    """The mechanism applied to each step's (clipped) sum."""

    mechanism: str  # gaussian | laplace | none (the released sum carries no central noise)
    multiplier: Optional[float] = None  # gaussian: sigma / clip norm
    scale: Optional[float] = None  # laplace: b / L1 sensitivity
    clipping: str = "per_episode"  # episodes' records: clip each episode's (task's) update, or each example's
    count_noise: Optional[float] = None  # adaptive clipping: noise std of the count of unclipped updates
    # how the clip is set (None: "fixed", a threshold fixed or computed from released values only); "raw_norms":
    # thresholds from raw gradient norms; "none": a contribution is not bounded (no clip, or no inner noise)
    clip: Optional[str] = None
    # "independent" (each step's noise fresh) or "banded" (DP-FTRL BandMF: step t adds (C^-1 Z)_t, C lower-triangular
    # with ``bands`` bands; metadp.banded_noise)
    correlation: str = "independent"
    bands: int = 1
    # banded: the steps the strategy's coefficients are optimised for (None: the plan's steps). A run stopped early
    # is reported as a plan of fewer steps whose noise is still the run's: its horizon pins the coefficients.
    horizon: Optional[int] = None
    # banded: C optimised for SGD with heavy-ball momentum (the momentum workload) instead of plain prefix sums
    momentum: Optional[float] = None

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "NoiseSpec":
        _check_keys(d, _NOISE_KEYS, "noise.")
        mechanism = _choice("noise.mechanism", d.get("mechanism", "gaussian"), MECHANISMS)
        clipping = _choice("noise.clipping", d.get("clipping", "per_episode"), CLIPPING)
        clip = _choice("noise.clip", d["clip"], CLIPS) if "clip" in d else None
        correlation = _choice("noise.correlation", d.get("correlation", "independent"), CORRELATIONS)
        if correlation == "banded" and mechanism != "gaussian":
            raise ValueError("noise.correlation = 'banded' applies to the gaussian mechanism")
        if "bands" in d and correlation != "banded":
            raise ValueError("noise.bands applies to noise.correlation = 'banded'")
        bands = check_count("noise.bands", d.get("bands", 1), minimum=1, maximum=4096)
        if "horizon" in d and correlation != "banded":
            raise ValueError("noise.horizon applies to noise.correlation = 'banded'")
        horizon = None if d.get("horizon") is None else check_count("noise.horizon", d["horizon"], minimum=bands)
        if "momentum" in d and correlation != "banded":
            raise ValueError("noise.momentum applies to noise.correlation = 'banded' (the workload C is optimised for)")
        momentum = None if d.get("momentum") is None else check_real("noise.momentum", d["momentum"], low=0.0,
                                                                     high=1.0, high_open=True)
        if mechanism == "gaussian":
            if "scale" in d:
                raise ValueError("noise.scale applies to the laplace mechanism; use noise.multiplier for gaussian")
            if "multiplier" not in d:
                raise ValueError("noise.multiplier is required for the gaussian mechanism")
            count_noise = d.get("count_noise")
            if count_noise is not None:
                count_noise = check_positive("noise.count_noise", count_noise)
            if correlation == "banded" and count_noise is not None:
                raise ValueError("noise.count_noise (adaptive clipping) is not certified with noise.correlation = "
                                 "'banded'")
            return cls(mechanism, multiplier=check_positive("noise.multiplier", d["multiplier"]), clipping=clipping,
                       count_noise=count_noise, clip=clip, correlation=correlation, bands=bands,
                       horizon=horizon, momentum=momentum)
        if "count_noise" in d:
            raise ValueError("noise.count_noise (adaptive clipping) applies to the gaussian mechanism")
        if "multiplier" in d:
            raise ValueError(f"noise.multiplier applies to the gaussian mechanism, not '{mechanism}'"
                             + ("; use noise.scale for laplace" if mechanism == "laplace" else ""))
        if mechanism == "none":
            if "scale" in d:
                raise ValueError("noise.scale applies to the laplace mechanism, not 'none'")
            return cls(mechanism, clip=clip)
        if clip is not None:
            raise ValueError("noise.clip applies to the gaussian mechanism's clipped sums")
        if "scale" not in d:
            raise ValueError("noise.scale is required for the laplace mechanism")
        return cls(mechanism, scale=check_positive("noise.scale", d["scale"]))

    @property
    def private(self) -> bool:
        """The release can carry a guarantee: noise on a bounded contribution whose clip depends on released
        values only (a ``release.form = 'inner_dp'`` plan's noise is inside the tasks: ``mechanism = 'none'``)."""
        return self.clip in (None, "fixed")

    def event(self) -> ev.Event:
        if self.mechanism == "none":
            return ev.NonPrivate()
        if self.mechanism == "gaussian" and self.count_noise is not None:
            # the noisy sum and the noisy count of unclipped updates on one sample: one Gaussian
            return ev.Gaussian(combined_noise_multiplier(cast(float, self.multiplier), self.count_noise))
        if self.mechanism == "gaussian":  # (a gaussian spec has a multiplier, a laplace one a scale)
            return ev.Gaussian(cast(float, self.multiplier))
        return ev.Laplace(cast(float, self.scale))
