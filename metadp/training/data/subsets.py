"""Uniformly random k-subsets of {0, ..., n-1}, many rows at once, on the generator's device.

Small subsets of large populations are drawn by Floyd's algorithm (Bentley & Floyd 1987, "A sample of
brilliance", CACM 30(9)): k draws per subset whatever the population, then a uniform shuffle of the k
positions; others by the k largest of n uniform keys. Both give every k-subset, in every order, the
same probability. Uniforms are float64 (53 random bits), so a uniform choice among j items is within
about 2^-53 of 1/j. Used by the samplers (``metadp.training.data.samplers``) and the episode draws.
"""

from __future__ import annotations

import torch

__all__ = ["random_subsets", "uniform"]

# Floyd's algorithm costs about k^2 / 2 comparisons per row and k small kernels; n random keys per row
# cost n draws and one topk. Floyd is used when rows x n exceeds this many times k^2.
_FLOYD_ADVANTAGE = 64


def uniform(shape, generator: torch.Generator) -> torch.Tensor:
    """Uniforms on [0, 1) in float64, on the generator's device."""
    return torch.rand(shape, generator=generator, device=generator.device, dtype=torch.float64)


def random_subsets(rows: int, n: int, k: int, generator: torch.Generator) -> torch.Tensor:
    """``rows`` independent uniformly random k-subsets of {0, ..., n-1}, each in uniformly random order.

    Floyd's algorithm (k vectorised draws) where drawing n keys per row would cost more, else the k
    largest of n uniform keys per row (one ``topk``).

    Returns:
        int64 tensor [rows, k] on the generator's device.
    """
    if k == 0 or rows == 0:
        return torch.empty((rows, k), dtype=torch.int64, device=generator.device)
    if rows * n > _FLOYD_ADVANTAGE * k * k:
        return _floyd_subsets(rows, n, k, generator)
    return _key_subsets(rows, n, k, generator)


def _key_subsets(rows: int, n: int, k: int, generator: torch.Generator) -> torch.Tensor:
    """The k largest of n iid keys per row, sorted by key: a uniform subset in uniform order."""
    return uniform((rows, n), generator).topk(k, dim=1).indices


def _floyd_subsets(rows: int, n: int, k: int, generator: torch.Generator) -> torch.Tensor:
    """Floyd's algorithm, vectorised over rows, then a uniform shuffle of the k positions."""
    u = uniform((rows, k), generator)
    out = torch.empty((rows, k), dtype=torch.int64, device=generator.device)
    for i in range(k):  # the i-th draw is uniform on [0, j]; if already taken, j itself (not drawable before)
        j = n - k + i
        t = (u[:, i] * (j + 1)).long().clamp_(max=j)  # [rows]
        taken = (out[:, :i] == t[:, None]).any(dim=1)
        out[:, i] = torch.where(taken, j, t)
    order = uniform((rows, k), generator).argsort(dim=1)  # Floyd's order is not uniform: shuffle it
    return out.gather(1, order)
