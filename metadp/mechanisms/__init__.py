"""Mechanisms as dominating pairs (DESIGN.md sec. 2): Gaussian and mixtures of shifted Gaussians
(plain, Poisson-subsampled, group and episodic cases), Laplace, randomized response and DP-Pix
(the release itself: :func:`metadp.mechanisms.dp_pix.dp_pix`; the image obfuscations without a
guarantee: :mod:`metadp.mechanisms.obfuscation`).

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
# dp_pix (the function) is not re-exported: metadp.mechanisms.dp_pix stays the module
from metadp.mechanisms.dp_pix import dp_pix_event, dp_pix_noise_scale, dp_pix_pair, dp_pix_pairs
from metadp.mechanisms._mixture_rdp import mixture_rdp

__all__ = [
    "DominatingPair",
    "GaussianMixturePair", "gaussian_pair", "poisson_gaussian_pairs", "mixture_rdp",
    "LaplacePair", "laplace_pairs",
    "RandomizedResponsePair", "randomized_response_pairs", "randomized_response",
    "dp_pix_event", "dp_pix_noise_scale", "dp_pix_pair", "dp_pix_pairs",
]
