"""Fixed pools of meta-training tasks (the units of task-level DP) and held-out evaluation tasks.

Task-level DP-MAML (dp-maml.txt Alg. 1; DESIGN.md sec. 4) protects one task of a fixed, disjoint pool
of N tasks, each sampled into a step independently (Poisson). So the pool is drawn once, from the
seed, and stays the same for the whole run (and across a resume):

* ``SinusoidPool``: N sinusoid tasks, each with its own amplitude, phase and support/query inputs;
* ``EpisodePool``: N classification episodes (n-way, k-shot support, q query per class) over the
  classes of an ``ImagePool``, stored as indices and gathered on the device when used.

``batch(indices)`` returns the stacked task tensors (x_s, y_s, x_q, y_q) that
``functional.per_task_meta_grads`` takes.

A plan whose tasks are episodes drawn afresh (``sampling.scheme = "episodic"``, or task sampling with a
``[[hierarchy]]``) has no pool: each step's episodes, drawn by ``samplers.EpisodicSampler``, become a
``FreshEpisodes`` with the same ``batch`` interface, used for that step only.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Tuple

import torch

from metadp.core.validation import check_count

__all__ = ["SinusoidPool", "EpisodePool", "EpisodeImages", "FreshEpisodes", "check_episode_shape"]


@dataclasses.dataclass
class SinusoidPool:
    """N fixed sinusoid regression tasks (Finn et al. 2017): y = A sin(x - phase), A ~ U[0.1, 5],
    phase ~ U[0, pi], x ~ U[-5, 5]; ``k_support`` + ``k_query`` points per task."""

    size: int
    k_support: int = 10
    k_query: int = 10
    seed: int = 0
    device: str = "cpu"

    def __post_init__(self):
        self.size = check_count("size", self.size, minimum=1)
        self.k_support = check_count("k_support", self.k_support, minimum=1)
        self.k_query = check_count("k_query", self.k_query, minimum=0)
        g = torch.Generator().manual_seed(self.seed)
        k = self.k_support + self.k_query
        amplitude = 0.1 + 4.9 * torch.rand(self.size, 1, 1, generator=g, dtype=torch.float64)
        phase = math.pi * torch.rand(self.size, 1, 1, generator=g, dtype=torch.float64)
        x = -5.0 + 10.0 * torch.rand(self.size, k, 1, generator=g, dtype=torch.float64)
        y = amplitude * torch.sin(x - phase)
        self._x, self._y = x.float().to(self.device), y.float().to(self.device)

    def batch(self, indices: torch.Tensor) -> Tuple[torch.Tensor, ...]:
        x, y, k = self._x[indices], self._y[indices], self.k_support
        return x[:, :k], y[:, :k], x[:, k:], y[:, k:]

    def joint_batch(self, indices: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        """(x, y) of each task's records, support and query together (Reptile trains on all of them)."""
        return self._x[indices], self._y[indices]

    @property
    def query_per_task(self) -> int:
        return self.k_query

    def record_ids(self, indices: torch.Tensor) -> torch.Tensor:
        """The records of the given tasks, int64 [len(indices), k_support + k_query] (each point is a record)."""
        k = self.k_support + self.k_query
        return indices.reshape(-1, 1) * k + torch.arange(k, device=indices.device)

    def record_multiplicity(self) -> int:
        """The most tasks any record is in: 1 (every task draws its own points)."""
        return 1

    @staticmethod
    def fresh(n_tasks: int, k_support: int, k_query: int, generator: torch.Generator, device="cpu"):
        """Held-out tasks drawn afresh (evaluation), in the same layout."""
        pool = SinusoidPool(n_tasks, k_support, k_query, seed=int(torch.randint(0, 2**62, (1,), generator=generator)),
                            device=device)
        return pool.batch(torch.arange(n_tasks, device=device))


@dataclasses.dataclass
class EpisodePool:
    """N fixed n-way episodes over ``images`` [classes, per_class, C, H, W] (an ``ImagePool``'s tensor):
    each picks n_way classes and, per class, k_shot support and k_query query examples."""

    images: torch.Tensor
    size: int
    n_way: int = 5
    k_shot: int = 1
    k_query: int = 1
    seed: int = 0

    def __post_init__(self):
        self.size = check_count("size", self.size, minimum=1)
        n_classes, per_class = self.images.shape[:2]
        if self.n_way > n_classes or self.k_shot + self.k_query > per_class:
            raise ValueError(f"episodes need n_way <= {n_classes} classes and k_shot + k_query <= {per_class} examples "
                             f"per class, got {self.n_way}-way {self.k_shot}+{self.k_query}")
        g = torch.Generator().manual_seed(self.seed)
        self._classes = torch.argsort(torch.rand(self.size, n_classes, generator=g), dim=1)[:, : self.n_way]
        m = self.k_shot + self.k_query
        self._examples = torch.argsort(torch.rand(self.size, self.n_way, per_class, generator=g), dim=2)[:, :, :m]
        device = self.images.device
        self._classes, self._examples = self._classes.to(device), self._examples.to(device)

    @property
    def query_per_task(self) -> int:
        return self.n_way * self.k_query

    def record_ids(self, indices: torch.Tensor) -> torch.Tensor:
        """The records (images, numbered class * per_class + example) of the given tasks, int64 [T, n_way (k_shot
        + k_query)]; a task holds distinct images."""
        per_class = self.images.shape[1]
        ids = self._classes[indices][:, :, None] * per_class + self._examples[indices]
        return ids.reshape(ids.shape[0], -1)

    def record_multiplicity(self) -> int:
        """The most tasks of the pool that any one image is in (the k of record-level accounting)."""
        counts = torch.bincount(self.record_ids(torch.arange(self.size, device=self._classes.device)).reshape(-1))
        return int(counts.max())

    def joint_batch(self, indices: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        """(x, y) of each task's images, support and query together (Reptile trains on all of them)."""
        x_s, y_s, x_q, y_q = self.batch(indices)
        return torch.cat([x_s, x_q], dim=1), torch.cat([y_s, y_q], dim=1)

    def batch(self, indices: torch.Tensor) -> Tuple[torch.Tensor, ...]:
        classes, examples = self._classes[indices], self._examples[indices]  # [T, n], [T, n, m]
        return _split(self.images[classes[:, :, None], examples], self.k_shot)  # [T, n, m, C, H, W]


def check_episode_shape(hierarchy, images_shape, k_shot: int = 1) -> None:
    """Refuses a hierarchy the trainer cannot draw from image data of ``images_shape`` [classes,
    per_class, ...]: two fixed-size levels (classes, then examples of a class), whose unit counts are the
    data's, with at least ``k_shot`` + 1 examples drawn per class (support and query).

    Raises:
        ValueError: naming the level, what the plan says and what the data has.
    """
    n_classes, per_class = int(images_shape[0]), int(images_shape[1])
    levels = hierarchy.levels
    if len(levels) != 2:
        raise ValueError(f"the plan's [[hierarchy]] has {len(levels)} level(s); the trainer draws image episodes "
                         "through two: classes, then examples of each class")
    for level in levels:
        if level.draw != "fixed":
            raise ValueError(f"hierarchy level {level.name!r} draws by Poisson sampling; the trainer draws fixed-size "
                             "levels only (an episode's shape must not vary): use draw = 'fixed'")
        if not isinstance(level.units, int):
            raise ValueError(f"hierarchy level {level.name!r} has per-parent unit counts; the data has one count per "
                             "level")
    top, bottom = levels
    if top.units != n_classes:
        raise ValueError(f"hierarchy level {top.name!r} has units = {top.units}, but the data has {n_classes} "
                         "classes: the plan would account for another data set")
    if bottom.units != per_class:
        raise ValueError(f"hierarchy level {bottom.name!r} has units = {bottom.units}, but the data has {per_class} "
                         "examples per class: the plan would account for another data set")
    if bottom.size < k_shot + 1:
        raise ValueError(f"hierarchy level {bottom.name!r} draws size = {bottom.size} examples per class; an episode "
                         f"needs {k_shot} support and at least 1 query example per class")


@dataclasses.dataclass(frozen=True)
class EpisodeImages:
    """Where a plan's fresh episodes are drawn from: ``images`` [classes, per_class, C, H, W] and the
    support examples per class (``k_shot``; the rest of each class's drawn examples are its query)."""

    images: torch.Tensor
    k_shot: int = 1

    def __post_init__(self):
        check_count("k_shot", self.k_shot, minimum=1)

    def check(self, hierarchy) -> None:
        """``check_episode_shape`` of ``hierarchy`` against these images."""
        check_episode_shape(hierarchy, self.images.shape, self.k_shot)

    @property
    def device(self) -> torch.device:
        return self.images.device


@dataclasses.dataclass
class FreshEpisodes:
    """One step's episodes over ``images`` [classes, per_class, C, H, W]: ``classes`` [L, n] and
    ``drawings`` [L, n, m] (global indices class * per_class + position, as ``EpisodicSampler`` draws
    them). Each class's first ``k_shot`` drawings are its support, the rest its query; labels are the
    classes' positions in the episode (uniformly random order)."""

    images: torch.Tensor
    classes: torch.Tensor
    drawings: torch.Tensor
    k_shot: int = 1

    @classmethod
    def of(cls, source: EpisodeImages, episodes) -> "FreshEpisodes":
        """From ``samplers.Episodes`` of a two-level fixed hierarchy (``check_episode_shape``)."""
        classes, drawings = episodes.indices
        return cls(source.images, classes, drawings, source.k_shot)

    @property
    def size(self) -> int:
        return self.classes.shape[0]

    @property
    def query_per_task(self) -> int:
        return self.classes.shape[1] * (self.drawings.shape[2] - self.k_shot)

    def batch(self, indices: torch.Tensor) -> Tuple[torch.Tensor, ...]:
        per_class = self.images.shape[1]
        classes, examples = self.classes[indices], self.drawings[indices] % per_class  # [T, n], [T, n, m]
        return _split(self.images[classes[:, :, None], examples], self.k_shot)

    def joint_batch(self, indices: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        x_s, y_s, x_q, y_q = self.batch(indices)
        return torch.cat([x_s, x_q], dim=1), torch.cat([y_s, y_q], dim=1)


def _split(pics: torch.Tensor, k: int) -> Tuple[torch.Tensor, ...]:
    """(x_s, y_s, x_q, y_q) of episodes' images [T, n, m, C, H, W]: the first k of each class support."""
    t, n, m = pics.shape[:3]
    labels = torch.arange(n, device=pics.device).view(1, n, 1).expand(t, n, m)
    support, query = pics[:, :, :k].reshape(t, n * k, *pics.shape[3:]), pics[:, :, k:].reshape(t, -1, *pics.shape[3:])
    return support, labels[:, :, :k].reshape(t, -1), query, labels[:, :, k:].reshape(t, -1)
