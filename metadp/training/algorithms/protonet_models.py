"""The networks and losses of ``metadp.training.algorithms.protonet``: a DnCNN-style residual denoiser, the
prototypical network on Conv-4 embeddings (Snell, Swersky & Zemel 2017, arXiv:1703.05175), its loss and
the denoising loss (privacy-enhanced few-shot paper, Sec. IV, Eqs. 6-7)."""

from __future__ import annotations

import math
from typing import Optional

import torch
import torch.nn.functional as F
from torch import nn

from metadp.core.validation import check_count
from metadp.training.algorithms.models import Conv4

__all__ = ["Denoiser", "ProtoNet", "prototypical_loss", "denoising_loss"]


class Denoiser(nn.Module):
    """DnCNN-style residual denoiser (Zhang et al. 2017, arXiv:1608.03981; the paper's Sec. IV).

    ``residual(y)`` = R(y), the predicted noise: conv3x3 -> ReLU, (depth - 2) x [conv3x3 -> GroupNorm ->
    ReLU], conv3x3. ``forward(y)`` = y - R(y), the estimate of the clean image. GroupNorm (groups of
    width / gcd(width, 4) channels; Wu & He 2018, arXiv:1803.08494) replaces DnCNN's batch norm so that
    nothing depends on other images. The last convolution starts at zero, so an untrained denoiser is
    the identity and the denoiser path starts from the no-denoiser model.
    """

    def __init__(self, channels: int = 1, width: int = 16, depth: int = 6):
        super().__init__()
        channels = check_count("channels", channels, minimum=1)
        width = check_count("width", width, minimum=1)
        depth = check_count("depth", depth, minimum=2)
        layers = [nn.Conv2d(channels, width, 3, padding=1), nn.ReLU()]
        for _ in range(depth - 2):
            layers += [nn.Conv2d(width, width, 3, padding=1, bias=False), nn.GroupNorm(math.gcd(width, 4), width),
                       nn.ReLU()]
        last = nn.Conv2d(width, channels, 3, padding=1)
        nn.init.zeros_(last.weight)
        nn.init.zeros_(last.bias)
        self.body = nn.Sequential(*layers, last)

    def residual(self, y: torch.Tensor) -> torch.Tensor:
        # y: [batch, C, H, W] obfuscated -> the predicted noise R(y), same shape
        return self.body(y)

    def forward(self, y: torch.Tensor) -> torch.Tensor:
        return y - self.residual(y)


class ProtoNet(nn.Module):
    """Optional ``Denoiser`` then the Conv-4 feature extractor (no head): images -> flat embeddings."""

    def __init__(self, in_channels: int = 1, image_size: int = 28, hidden: int = 64, norm: str = "batch",
                 denoiser: Optional[Denoiser] = None):
        super().__init__()
        self.embedding = Conv4(2, in_channels, hidden, norm, image_size).features  # the 2-way head is dropped
        self.denoiser = denoiser

    def denoise(self, x: torch.Tensor) -> torch.Tensor:
        """[..., C, H, W] -> the denoised images (unchanged without a denoiser)."""
        if self.denoiser is None:
            return x
        return self.denoiser(x.reshape(-1, *x.shape[-3:])).reshape(x.shape)

    def embed(self, x: torch.Tensor) -> torch.Tensor:
        """[episodes, images, C, H, W] -> [episodes, images, D]; batch statistics come from one episode."""
        return torch.func.vmap(lambda e: self.embedding(e).flatten(1))(x)


def prototypical_loss(support: torch.Tensor, query: torch.Tensor, labels: torch.Tensor):
    """Snell et al. 2017 (arXiv:1703.05175), Eqs. 1-2: mean cross-entropy of softmax(-||f(q) - p_c||^2).

    Args:
        support: embeddings [episodes, n_way, k_shot, D]; the prototype p_c is the mean over k_shot.
        query: embeddings [episodes, queries, D].
        labels: int64 [episodes, queries], the class index c in [0, n_way) of each query.

    Returns:
        (loss, logits): the mean over all queries of -log softmax(logits)[label], and logits
        [episodes, queries, n_way] = minus the squared Euclidean distances to the prototypes.
    """
    prototypes = support.mean(dim=2)  # [T, N, D]
    logits = -((query[:, :, None, :] - prototypes[:, None, :, :]) ** 2).sum(-1)  # [T, Q, N]
    return F.cross_entropy(logits.flatten(0, 1), labels.flatten()), logits


def denoising_loss(denoised: torch.Tensor, clean: torch.Tensor) -> torch.Tensor:
    """Mean squared error per pixel value between denoised and clean images (Algorithm 1's MSE).

    With denoised = y - R(y) this is the mean of (R(y) - (y - x))^2, the paper's Eq. 6 up to its
    factor (pixel values per image) / 2: zero exactly when the predicted residual is the true noise.
    """
    return F.mse_loss(denoised, clean)
