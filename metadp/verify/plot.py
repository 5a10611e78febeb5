"""Plot an :class:`~metadp.verify.audit.AuditResult`: claimed profile against the empirical lower bound.

matplotlib is optional (``pip install "metadp[plot]"``) and imported only when a plot is drawn. The
figure is rendered with the Agg canvas directly (no pyplot), so the caller's backend and global pyplot
state are untouched.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Optional, Tuple, Union

import numpy as np

from metadp.verify.audit import AuditResult

__all__ = ["plot_audit"]

_FORMATS = {".png": "png", ".svg": "svg"}


def _matplotlib() -> Tuple[Any, Any]:
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError('plot_audit needs matplotlib: pip install "metadp[plot]" '
                          "(or pip install matplotlib)") from exc
    return Figure, FigureCanvasAgg


def plot_audit(result: AuditResult, path: Union[str, Path],
               claimed_profile: Optional[Callable[[np.ndarray], np.ndarray]] = None) -> Path:
    """Draw claimed delta(eps), the lower confidence bound delta_L(eps) and the point estimates.

    delta is on a log scale: zero claims and estimates are left out, and zero lower bounds (no evidence
    at that eps) are marked on the lower edge. Points with delta_L > claimed (VIOLATION) are red.

    Args:
        result: an audit's result.
        path: output file; the suffix picks the format (``.png`` or ``.svg``).
        claimed_profile: optional vectorised eps -> delta: the claim is then drawn as a curve over the
            whole eps range, not only joined between the audited points.

    Returns:
        The path written.

    Raises:
        ValueError: if result is not an AuditResult or the suffix is not .png/.svg.
        ImportError: if matplotlib is not installed.
    """
    if not isinstance(result, AuditResult):
        raise ValueError(f"result must be an AuditResult, got {type(result).__name__}")
    path = Path(path)
    fmt = _FORMATS.get(path.suffix.lower())
    if fmt is None:
        raise ValueError(f"path must end in .png or .svg, got {str(path)!r}")
    Figure, FigureCanvasAgg = _matplotlib()

    eps = np.array([r.epsilon for r in result.rows])
    claimed = np.array([r.claimed for r in result.rows])
    lower = np.array([r.delta_lower for r in result.rows])
    estimate = np.array([r.estimate for r in result.rows])
    positive = np.concatenate([claimed, lower, estimate])
    positive = positive[positive > 0]
    floor = positive.min() / 10.0 if positive.size else 1e-12  # where zeros are drawn
    violation = lower > claimed

    fig = Figure(figsize=(6.4, 4.2))
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    ax.set_yscale("log")
    # zero claims and estimates are left out (gaps); zero lower bounds are marked at the floor
    if claimed_profile is not None and len(eps) > 0:
        dense = np.linspace(0.0, float(eps.max()) * 1.1, 200)
        curve = np.asarray(claimed_profile(dense), dtype=float)
        ax.plot(dense, np.where(curve > 0, curve, np.nan), "-", color="black", label="claimed delta(eps)")
    else:
        ax.plot(eps, np.where(claimed > 0, claimed, np.nan), "-", color="black", label="claimed delta(eps)")
    ax.plot(eps, np.where(estimate > 0, estimate, np.nan), "x", color="tab:gray", label="point estimate")
    ok = ~violation & (lower > 0)
    if ok.any():
        ax.plot(eps[ok], lower[ok], "o", color="tab:blue", label=f"delta_L (lower bound, alpha={result.alpha:g})")
    zero = lower <= 0
    if zero.any():
        ax.plot(eps[zero], np.full(zero.sum(), floor), "v", color="tab:blue", mfc="none",
                label="delta_L = 0 (drawn at the floor)")
    if violation.any():
        ax.plot(eps[violation], lower[violation], "o", color="red", ms=9, label="VIOLATION")
    ax.set_xlabel("epsilon")
    ax.set_ylabel("delta")
    ax.set_title(f"audit: {result.verdict} (n={result.n:,} per side, {len(result.tests)} tests)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize="small")
    fig.tight_layout()
    fig.savefig(path, format=fmt)
    return path
