"""Models for the private meta-learners: the four-block convolutional net of MAML and the sinusoid MLP.

Both are plain ``nn.Module`` s with parameters only (no registered buffers), meant to be called
through ``torch.func.functional_call(model, params, (x,))`` with a dict of parameter tensors, so one
module instance serves every task of a vmapped meta-batch.

Why no buffers: a private trainer's release is a function of the sampled tasks (or records) of the
current step and of earlier *noisy* releases only. Batch-norm running statistics would carry raw,
un-noised information from every task seen so far into later steps, outside the accountant's view
(STYLE.md, "Training code"). So ``norm="batch"`` normalises with the statistics of the current batch
only (the batch the model is called on, per task inside a vmap), both in training and at meta-test
time: transductive batch norm, as in the reference MAML implementation (Finn et al. 2017,
arXiv:1703.03400). ``norm="group"`` (GroupNorm; Wu & He 2018, arXiv:1803.08494) normalises each
example on its own and is the choice when per-example gradients must not interact (sample-level DP).
"""

from __future__ import annotations

import math
from collections import OrderedDict
from typing import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from metadp.core.validation import check_count

__all__ = ["Conv4", "MLP", "BatchStatNorm2d"]

NORMS = ("batch", "group")


class BatchStatNorm2d(nn.Module):
    """Batch normalisation over (N, H, W) with the current batch's statistics only; learnable affine.

    y = weight * (x - mean_batch) / sqrt(var_batch + eps) + bias, with the biased batch variance, as
    ``F.batch_norm(..., running_mean=None, running_var=None, training=True)`` computes it. Nothing is
    stored between calls, so the output on a batch never depends on earlier calls, and the layer is
    the same in ``train()`` and ``eval()`` mode. Works under ``torch.func.vmap`` (no running stats to
    update in place).
    """

    def __init__(self, num_features: int, eps: float = 1e-5):
        super().__init__()
        self.num_features = num_features
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(num_features))
        self.bias = nn.Parameter(torch.zeros(num_features))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.batch_norm(x, None, None, self.weight, self.bias, training=True, eps=self.eps)

    def extra_repr(self) -> str:
        return f"{self.num_features}, eps={self.eps}, statistics=current batch only"


def _group_count(hidden: int) -> int:
    # 32 groups as in Wu & He's default, fewer where `hidden` is not a multiple of 32 (48 -> 16).
    return math.gcd(hidden, 32)


class Conv4(nn.Module):
    """The MAML/Reptile few-shot classifier: 4 x [conv3x3 (padding 1) -> norm -> ReLU -> maxpool 2], linear.

    Architecture of Finn et al. 2017 (arXiv:1703.03400, Sec. 5.2) and Vinyals et al. 2016, also used
    by DP-MAML (dp-maml.txt, Sec. 6.1: 64 filters for Omniglot, 48 for CIFAR-FS and Mini-ImageNet).
    An image side of 28 becomes 14, 7, 3, 1 (floor division), so the head sees ``hidden`` features;
    84 gives 5 x 5 x hidden.

    Args:
        n_way: number of classes (output logits), >= 1.
        in_channels: image channels (1 for Omniglot, 3 for CIFAR-FS / Mini-ImageNet).
        hidden: filters per convolution.
        norm: "batch" (current-batch statistics only, ``BatchStatNorm2d``) or "group"
            (``nn.GroupNorm`` with gcd(hidden, 32) groups). Both have a learnable affine.
        image_size: side of the square input images, >= 16 (four halvings must leave a pixel).

    Raises:
        ValueError: on a non-positive size, an unknown norm, or an image too small.
    """

    def __init__(self, n_way: int, in_channels: int = 1, hidden: int = 64, norm: str = "batch",
                 image_size: int = 28):
        super().__init__()
        n_way = check_count("n_way", n_way, minimum=1)
        in_channels = check_count("in_channels", in_channels, minimum=1)
        hidden = check_count("hidden", hidden, minimum=1)
        image_size = check_count("image_size", image_size, minimum=16)
        if norm not in NORMS:
            raise ValueError(f"norm must be one of {', '.join(NORMS)}, got {norm!r}")
        self.norm = norm
        blocks = []
        channels, side = in_channels, image_size
        for _ in range(4):
            normalisation = BatchStatNorm2d(hidden) if norm == "batch" else nn.GroupNorm(_group_count(hidden), hidden)
            blocks.append(nn.Sequential(OrderedDict(conv=nn.Conv2d(channels, hidden, 3, padding=1),
                                                    norm=normalisation, relu=nn.ReLU(), pool=nn.MaxPool2d(2))))
            channels, side = hidden, side // 2
        self.features = nn.Sequential(*blocks)
        self.head = nn.Linear(hidden * side * side, n_way)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # x: [batch, in_channels, image_size, image_size] -> logits [batch, n_way]
        return self.head(self.features(x).flatten(1))


class MLP(nn.Module):
    """Fully connected net with ReLU between layers, none after the last (the sinusoid regressor).

    The default (1, 40, 40, 1) is the sinusoid model of Finn et al. 2017 (arXiv:1703.03400, Sec. 5.1).

    Args:
        sizes: layer widths, input first, output last; at least two entries, each >= 1.
    """

    def __init__(self, sizes: Sequence[int] = (1, 40, 40, 1)):
        super().__init__()
        if isinstance(sizes, (str, bytes)) or not isinstance(sizes, Sequence) or len(sizes) < 2:
            raise ValueError(f"sizes must be a sequence of at least two layer widths, got {sizes!r}")
        sizes = [check_count(f"sizes[{i}]", s, minimum=1) for i, s in enumerate(sizes)]
        layers = []
        for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:])):
            layers.append(nn.Linear(a, b))
            if i < len(sizes) - 2:
                layers.append(nn.ReLU())
        self.layers = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # x: [batch, sizes[0]] -> [batch, sizes[-1]]
        return self.layers(x)
