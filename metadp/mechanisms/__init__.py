"""Mechanisms as dominating pairs (DESIGN.md sec. 2): Gaussian and mixtures of shifted Gaussians
(plain, Poisson-subsampled, group and episodic cases), Laplace, randomized response and DP-Pix.

Each pair (P, Q) gives its privacy loss distribution under P and Q (``loss_cdf``, ``loss_sf``), its
privacy profile delta(eps) (``profile``), a sampler, and its RDP curve (``rdp`` for the closed-form
mechanisms, :func:`mixture_rdp` for Gaussian mixtures).
"""

from metadp.mechanisms.base import DominatingPair
from metadp.mechanisms.gaussian import GaussianMixturePair, gaussian_pair, poisson_gaussian_pairs
from metadp.mechanisms.laplace import LaplacePair, laplace_pairs
from metadp.mechanisms.randomized_response import (
    RandomizedResponsePair,
    randomized_response,
    randomized_response_pairs,
)
from metadp.mechanisms.dp_pix import dp_pix, dp_pix_pair, dp_pix_pairs, dp_pix_scale, pixelize, upsample
from metadp.mechanisms._mixture_rdp import mixture_rdp

__all__ = [
    "DominatingPair",
    "GaussianMixturePair", "gaussian_pair", "poisson_gaussian_pairs", "mixture_rdp",
    "LaplacePair", "laplace_pairs",
    "RandomizedResponsePair", "randomized_response_pairs", "randomized_response",
    "pixelize", "upsample", "dp_pix", "dp_pix_scale", "dp_pix_pair", "dp_pix_pairs",
]
