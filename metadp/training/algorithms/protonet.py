"""Prototypical networks on obfuscated images, with an optional jointly trained residual denoiser.

The few-shot private image classification (FS-PIC) model of the privacy-enhanced few-shot paper
(``../shared/papers/privacy-enhanced-few-shot.txt``, Sec. IV and its Algorithm 1): every episode's
support and query images are obfuscated (``metadp.mechanisms.dp_pix``: DP-Pix;
``metadp.mechanisms.obfuscation``: pixelization, Gaussian blur or Gaussian noise), optionally passed through a DnCNN-style residual denoiser (Zhang et al. 2017,
arXiv:1608.03981), embedded by the Conv-4 feature extractor (``models.Conv4(...).features``) and
classified by a prototypical network (Snell, Swersky & Zemel 2017, arXiv:1703.05175): the softmax over
minus the squared Euclidean distances from each query embedding to the class means of the support
embeddings. The training loss is the classification loss plus ``denoise_weight`` times the mean
squared error between denoised and clean images (the paper's Eq. 7 with weight 1).

Who sees what. The server trains on its own labelled images (disjoint classes from the users'), so
the clean image behind every obfuscated training image is known to it: the denoising loss exists only
at training time. A user then obfuscates the support and query images of a task locally and sends
them; the denoiser and the embedding are post-processing of what the user released. The guarantee
that matters is therefore the *user's* against the server that receives the obfuscated images: per
released image, epsilon-DP for m-pixel neighbours under DP-Pix (Fan 2018), and none at all under
pixelization, blur or Gaussian noise (``obfuscation.guarantee``). Every fresh obfuscation of the same
image is another release, and releases compose (``dp_pix.dp_pix_event``): a training image drawn into
n episodes is released n times, which :func:`privacy_report` states with the composed epsilon.

No state crosses episodes except the trained weights: the denoiser normalises with GroupNorm (per
image); the embedding's ``norm="batch"`` uses the statistics of the episode's own images (support and
query together, transductively, as in MAML; ``vmap`` over episodes), ``norm="group"`` each image alone.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
from pathlib import Path
from typing import Callable, Optional

import torch

from metadp.core.validation import check_count, check_delta, check_positive, check_real
from metadp.accounting.certify import certify
from metadp.mechanisms import obfuscation as obfuscations
from metadp.mechanisms.dp_pix import dp_pix, dp_pix_event
from metadp.report import Report, no_guarantee
from metadp.training.run.evaluate import Score
from metadp.training.algorithms.protonet_models import Denoiser, ProtoNet, denoising_loss, prototypical_loss

__all__ = ["OBFUSCATIONS", "ProtoConfig", "Denoiser", "ProtoNet", "build_model", "prototypical_loss", "denoising_loss",
           "make_obfuscation", "ProtoResult", "ProtoEvaluation", "train_protonet", "evaluate_protonet",
           "percentage_gain", "privacy_report", "HELD_OUT_ALPHABETS", "split_by_alphabet"]

OBFUSCATIONS = ("none", "dp_pix", "pixelize", "gaussian_blur", "gaussian_noise")
# the parameters each obfuscation reads; any other one given is rejected
_PARAMETERS = {"none": (), "dp_pix": ("epsilon", "cell"), "pixelize": ("cell",), "gaussian_blur": ("radius",),
               "gaussian_noise": ("noise_sigma",)}
_OPTIONAL = {"dp_pix": ("m",), "gaussian_blur": ("blur_sigma",)}
Obfuscate = Callable[[torch.Tensor, torch.Generator], torch.Tensor]


@dataclasses.dataclass(frozen=True)
class ProtoConfig:
    """One FS-PIC run: obfuscation, model, episodes, optimiser. Parameters of other obfuscations are rejected."""

    obfuscation: str = "none"  # one of OBFUSCATIONS, applied to support and query alike
    epsilon: Optional[float] = None  # DP-Pix eps per released image ([0, 1] images; paper: 3)
    cell: Optional[int] = None  # DP-Pix / pixelization cell side b in pixels
    m: Optional[int] = None  # DP-Pix neighbours differ in at most m pixel values (default 1, the paper's)
    radius: Optional[int] = None  # Gaussian blur half-width r: a (2r+1)^2 kernel
    blur_sigma: Optional[float] = None  # Gaussian blur kernel std in pixels (default r)
    noise_sigma: Optional[float] = None  # Gaussian noise std in [0, 1] units (paper's sigma / 255)
    denoiser: bool = False  # jointly train a residual denoiser in front of the embedding
    denoise_weight: float = 1.0  # lambda: loss = classification + lambda * denoising MSE (paper: 1)
    denoiser_width: int = 16  # denoiser filters per convolution (CPU-sized; the paper's light DnCNN: 64)
    denoiser_depth: int = 6  # denoiser convolutions, first and last included (paper: 8; DnCNN: 17)
    hidden: int = 64  # Conv-4 filters per convolution (Snell et al.: 64)
    norm: str = "batch"  # Conv-4 normalisation: "batch" (per-episode statistics) or "group" (per image)
    n_way: int = 5  # classes per episode (training and evaluation)
    k_shot: int = 5  # support images per class
    k_query: int = 5  # query images per class
    episodes_per_step: int = 1  # episodes in one Adam step, processed as one batch
    steps: int = 500  # Adam steps
    lr: float = 1e-3  # Adam learning rate (paper: 1e-3 for both networks)
    lr_halving_steps: int = 0  # halve the learning rate every this many steps (0: never; paper: 20 epochs)
    seed: int = 0  # model initialisation, episodes and obfuscation noise

    def __post_init__(self):
        if self.obfuscation not in OBFUSCATIONS:
            raise ValueError(f"obfuscation must be one of {OBFUSCATIONS}, got {self.obfuscation!r}")
        wanted = _PARAMETERS[self.obfuscation]
        allowed = wanted + _OPTIONAL.get(self.obfuscation, ())
        for name in ("epsilon", "cell", "m", "radius", "blur_sigma", "noise_sigma"):
            value = getattr(self, name)
            if name in wanted and value is None:
                raise ValueError(f"obfuscation {self.obfuscation!r} needs {name}; set it")
            if name not in allowed and value is not None:
                raise ValueError(f"{name} does not apply to obfuscation {self.obfuscation!r} "
                                 f"(it reads {', '.join(allowed) or 'nothing'}); leave {name} unset")
        if self.obfuscation == "dp_pix":
            check_positive("epsilon", self.epsilon)
        if self.cell is not None:
            check_count("cell", self.cell, minimum=1)
        if self.m is not None:
            check_count("m", self.m, minimum=1)
        if self.radius is not None:
            check_count("radius", self.radius, minimum=0)
        if self.blur_sigma is not None:
            check_positive("blur_sigma", self.blur_sigma)
        if self.noise_sigma is not None:
            check_real("noise_sigma", self.noise_sigma, low=0.0)
        check_real("denoise_weight", self.denoise_weight, low=0.0)
        if self.denoise_weight != 1.0 and not self.denoiser:
            raise ValueError("denoise_weight applies only with denoiser=True; turn the denoiser on or drop it")
        check_count("denoiser_width", self.denoiser_width, minimum=1)
        check_count("denoiser_depth", self.denoiser_depth, minimum=2)
        check_count("hidden", self.hidden, minimum=1)
        if self.norm not in ("batch", "group"):
            raise ValueError(f"norm must be 'batch' or 'group', got {self.norm!r}")
        check_count("n_way", self.n_way, minimum=2)
        check_count("k_shot", self.k_shot, minimum=1)
        check_count("k_query", self.k_query, minimum=1)
        check_count("episodes_per_step", self.episodes_per_step, minimum=1)
        check_count("steps", self.steps, minimum=0)
        check_positive("lr", self.lr)
        check_count("lr_halving_steps", self.lr_halving_steps, minimum=0)
        check_count("seed", self.seed, minimum=0)


def make_obfuscation(config: ProtoConfig) -> Obfuscate:
    """The config's obfuscation as ``f(images [..., C, H, W], generator) -> same shape``, fresh noise per image."""
    c = config
    if c.obfuscation == "dp_pix":
        return lambda x, g: dp_pix(x, epsilon=c.epsilon, cell=c.cell, m=c.m or 1, rng=g)
    if c.obfuscation == "pixelize":
        return lambda x, g: obfuscations.pixelize(x, c.cell)
    if c.obfuscation == "gaussian_blur":
        return lambda x, g: obfuscations.gaussian_blur(x, c.radius, sigma=c.blur_sigma)
    if c.obfuscation == "gaussian_noise":
        return lambda x, g: obfuscations.gaussian_noise(x, c.noise_sigma, rng=g)
    return lambda x, g: x


# the Omniglot background "minimal" split has no test classes of its own: these alphabets are held out
HELD_OUT_ALPHABETS = ("Sanskrit", "Tagalog")  # 42 + 17 = 59 of its 242 characters


def split_by_alphabet(class_names, held_out=HELD_OUT_ALPHABETS):
    """(training, held-out) class indices of Omniglot names ``"Alphabet/characterNN[/rotK]"``, in order.

    Held-out classes come from whole alphabets, as Omniglot's own evaluation split does, so no
    alphabet appears on both sides. Raises ValueError when a side would be empty.
    """
    held = [i for i, name in enumerate(class_names) if name.split("/")[0] in held_out]
    train = [i for i, name in enumerate(class_names) if name.split("/")[0] not in held_out]
    if not held or not train:
        raise ValueError(f"held-out alphabets {held_out} leave {len(train)} training and {len(held)} held-out classes")
    return train, held


# ---------------------------------------------------------------------------------------- episodes
def _episode_ids(n_classes: int, per_class: int, episodes: int, n_way: int, per_episode: int,
                 generator: torch.Generator) -> torch.Tensor:
    """Flat image indices class * per_class + example, int64 [episodes, n_way, per_episode], drawn on the CPU:
    n_way distinct classes, per_episode distinct examples of each (support first, then query)."""
    classes = torch.rand(episodes, n_classes, generator=generator).argsort(dim=1)[:, :n_way]
    examples = torch.rand(episodes, n_way, per_class, generator=generator).argsort(dim=2)[:, :, :per_episode]
    return classes[:, :, None] * per_class + examples


def _check_images(images: torch.Tensor, config: ProtoConfig) -> None:
    if not isinstance(images, torch.Tensor) or images.dim() != 5:
        raise ValueError(f"images must be a tensor [classes, per_class, C, H, W], got shape "
                         f"{tuple(getattr(images, 'shape', ()))}")
    n_classes, per_class = images.shape[:2]
    if config.n_way > n_classes or config.k_shot + config.k_query > per_class:
        raise ValueError(f"{config.n_way}-way episodes with {config.k_shot} + {config.k_query} images per class need "
                         f"at least {config.n_way} classes and {config.k_shot + config.k_query} images per class, "
                         f"got {n_classes} x {per_class}")


def _episode_logits(model: ProtoNet, images: torch.Tensor, ids: torch.Tensor, config: ProtoConfig,
                    obfuscate: Obfuscate, noise):
    """One batch of episodes: obfuscate, denoise, embed; returns (loss, logits, labels, clean, denoised).

    ``noise`` is one generator for the batch, or one seed per episode (results then do not depend on
    how episodes are batched)."""
    t, n, per = ids.shape
    k = config.k_shot
    clean = images.flatten(0, 1)[ids.to(images.device)]  # [T, N, K + Q, C, H, W]
    if isinstance(noise, torch.Generator):
        released = obfuscate(clean, noise)  # fresh noise per image: every image here is one release
    else:
        gen = torch.Generator(device=images.device)
        released = torch.stack([obfuscate(episode, gen.manual_seed(s)) for episode, s in zip(clean, noise)])
    denoised = model.denoise(released)
    emb = model.embed(denoised.flatten(1, 2)).reshape(t, n, per, -1)  # [T, N, K + Q, D]
    labels = torch.arange(n, device=emb.device).repeat_interleave(per - k).expand(t, -1)  # [T, N Q]
    loss, logits = prototypical_loss(emb[:, :, :k], emb[:, :, k:].flatten(1, 2), labels)
    return loss, logits, labels, clean, denoised


def _generators(seed: int, device) -> tuple:
    """(episodes on the CPU, obfuscation noise on ``device``), seeded apart from each other."""
    episodes = torch.Generator().manual_seed(2 * seed)
    noise = torch.Generator(device=device).manual_seed(2 * seed + 1)
    return episodes, noise


# ---------------------------------------------------------------------------------------- training
@dataclasses.dataclass
class ProtoResult:
    model: ProtoNet  # trained weights (on the training device)
    config: ProtoConfig
    losses: list  # total loss per step
    releases_per_image_max: int  # the most times any training image was obfuscated (released)
    releases_per_image_mean: float  # mean over training images


def build_model(config: ProtoConfig, image_shape) -> ProtoNet:
    """The config's ``ProtoNet`` for images (C, H, W), initialised from ``config.seed`` alone."""
    c, h, w = image_shape
    if h != w:
        raise ValueError(f"Conv-4 takes square images, got {h} x {w}")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(config.seed)
        model = ProtoNet(c, h, config.hidden, config.norm)
        # the embedding is drawn first, so both paths start from the same Conv-4 weights
        model.denoiser = Denoiser(c, config.denoiser_width, config.denoiser_depth) if config.denoiser else None
    return model


@contextlib.contextmanager
def _metrics_log(out_dir):
    """``out_dir/metrics.jsonl`` open for writing (the folder made), or None where ``out_dir`` is None."""
    if out_dir is None:
        yield None
        return
    Path(out_dir).mkdir(parents=True, exist_ok=True)
    with open(Path(out_dir) / "metrics.jsonl", "w") as log:
        yield log


def _step(model, optimiser, images, ids, config: ProtoConfig, obfuscate, noise_gen, device) -> dict:
    """One Adam step on the episodes ``ids``: prototypical loss plus the weighted denoising loss; the step's
    metrics (``loss``, ``classification``, ``denoising``, ``accuracy`` on its queries)."""
    classification, logits, labels, clean, denoised = _episode_logits(model, images, ids, config, obfuscate,
                                                                      noise_gen)
    denoising = denoising_loss(denoised, clean) if config.denoiser else torch.zeros((), device=device)
    loss = classification + config.denoise_weight * denoising
    optimiser.zero_grad(set_to_none=True)
    loss.backward()
    optimiser.step()
    return {"loss": loss.item(), "classification": classification.item(), "denoising": denoising.item(),
            "accuracy": (logits.argmax(-1) == labels).float().mean().item()}


def train_protonet(images: torch.Tensor, config: ProtoConfig, out_dir=None, *, device="cpu",
                   progress: Optional[Callable[[int, dict], None]] = None,
                   obfuscate: Optional[Obfuscate] = None) -> ProtoResult:
    """Episodic FS-PIC training, the paper's Algorithm 1 (one readable loop).

    Each step draws ``episodes_per_step`` n-way episodes from ``images`` (k_shot support and k_query
    query images per class, distinct), obfuscates every image with fresh noise, denoises (when the
    denoiser is on), embeds, and takes one Adam step on

        loss = prototypical loss of the queries + denoise_weight * MSE(denoised, clean).

    The clean images are the server's own training data, known to it; they are used only here.

    Privacy: each obfuscation of a training image is a release (n releases compose to
    ``dp_pix_event(eps, n)``); the result records the most and the mean releases per image, and
    :func:`privacy_report` gives the user's guarantee for a released test image (one release).

    Args:
        images: the training pool [classes, per_class, C, H, W], values in [0, 1] (``ImagePool.images``).
        config: the run.
        out_dir: where ``metrics.jsonl`` (one line per step) and ``model.pt`` go; None writes nothing.
        device: where the model, the images and the noise live.
        progress: called after each step as ``progress(step, metrics)`` (1-based step; metrics
            ``loss``, ``classification``, ``denoising``, ``accuracy`` on that step's queries).
        obfuscate: replaces the config's obfuscation (tests); ``f(images, generator) -> images``.

    Returns:
        A ``ProtoResult``.
    """
    _check_images(images, config)
    images = images.to(device)
    obfuscate = obfuscate or make_obfuscation(config)
    model = build_model(config, tuple(images.shape[2:])).to(device)
    optimiser = torch.optim.Adam(model.parameters(), lr=config.lr)
    scheduler = (torch.optim.lr_scheduler.StepLR(optimiser, config.lr_halving_steps, gamma=0.5)
                 if config.lr_halving_steps else None)
    episode_gen, noise_gen = _generators(config.seed, device)
    n_classes, per_class = images.shape[:2]
    releases = torch.zeros(n_classes * per_class, dtype=torch.long)
    losses = []
    with _metrics_log(out_dir) as log:
        model.train()
        for step in range(1, config.steps + 1):
            ids = _episode_ids(n_classes, per_class, config.episodes_per_step, config.n_way,
                               config.k_shot + config.k_query, episode_gen)  # [T, N, K + Q]
            releases += torch.bincount(ids.flatten(), minlength=releases.numel())
            metrics = _step(model, optimiser, images, ids, config, obfuscate, noise_gen, device)
            if scheduler is not None:
                scheduler.step()
            metrics = {"step": step, **metrics}
            losses.append(metrics["loss"])
            if log is not None:
                log.write(json.dumps(metrics) + "\n")
            if progress is not None:
                progress(step, metrics)
    result = ProtoResult(model, config, losses, int(releases.max()), float(releases.double().mean()))
    if out_dir is not None:
        torch.save({"config": dataclasses.asdict(config), "model": model.state_dict(),
                    "releases_per_image_max": result.releases_per_image_max}, Path(out_dir) / "model.pt")
    return result


# -------------------------------------------------------------------------------------- evaluation
@dataclasses.dataclass(frozen=True)
class ProtoEvaluation:
    score: Score  # query accuracy over tasks, mean +- 1.96 standard errors
    per_task: torch.Tensor  # float64 [n_tasks]: accuracy of each task (paired comparisons, percentage_gain)
    releases_per_image_max: int  # the most times any held-out image was obfuscated over the tasks


@torch.no_grad()
def evaluate_protonet(model: ProtoNet, images: torch.Tensor, config: ProtoConfig, *, n_tasks: int = 600,
                      seed: int = 12345, chunk: Optional[int] = None,
                      obfuscate: Optional[Obfuscate] = None) -> ProtoEvaluation:
    """Accuracy on held-out n-way k-shot tasks, support and query obfuscated as in training.

    Tasks (config.n_way classes, config.k_shot support and config.k_query query images per class) and
    the obfuscation noise are drawn from ``seed`` alone, so two models evaluated with the same seed
    see the same obfuscated tasks: their per-task accuracies are paired (``percentage_gain``).

    Args:
        model: a trained ``ProtoNet`` (on the device of ``images``).
        images: held-out classes [classes, per_class, C, H, W], disjoint from the training classes.
        config: the run's config (obfuscation and episode shape).
        n_tasks: tasks, >= 1 (the few-shot convention: 600).
        seed: task and noise seed.
        chunk: tasks per batch (bounds memory; the result does not depend on it); default 1 on the CPU
            (larger batches run slower per task there), 50 elsewhere.
        obfuscate: replaces the config's obfuscation (tests).

    Returns:
        A ``ProtoEvaluation``; its ``score`` follows ``evaluate.Score`` (metric "accuracy").
    """
    n_tasks = check_count("n_tasks", n_tasks, minimum=1)
    chunk = check_count("chunk", chunk, minimum=1) if chunk is not None else (1 if images.device.type == "cpu" else 50)
    _check_images(images, config)
    obfuscate = obfuscate or make_obfuscation(config)
    episode_gen, noise_gen = _generators(seed, "cpu")
    n_classes, per_class = images.shape[:2]
    ids = _episode_ids(n_classes, per_class, n_tasks, config.n_way, config.k_shot + config.k_query, episode_gen)
    noise_seeds = torch.randint(0, 2**62, (n_tasks,), generator=noise_gen).tolist()  # one per task
    releases = torch.bincount(ids.flatten(), minlength=n_classes * per_class)
    was_training = model.training
    model.eval()
    accuracies = []
    for start in range(0, n_tasks, chunk):
        part = slice(start, start + chunk)
        _, logits, labels, _, _ = _episode_logits(model, images, ids[part], config, obfuscate, noise_seeds[part])
        accuracies.append((logits.argmax(-1) == labels).double().mean(dim=1).cpu())
    model.train(was_training)
    per_task = torch.cat(accuracies)
    sd = float(per_task.std()) if n_tasks > 1 else math.nan
    score = Score(float(per_task.mean()), 1.96 * sd / math.sqrt(n_tasks), n_tasks, "accuracy")
    return ProtoEvaluation(score, per_task, int(releases.max()))


def percentage_gain(with_denoiser: torch.Tensor, without: torch.Tensor):
    """The paper's % gain, 100 (acc_with - acc_without) / acc_without, with a 95% half-width.

    Needs paired per-task accuracies (the same tasks and noise: ``evaluate_protonet`` with one seed).
    The half-width is the delta method for a ratio of paired means: 1.96 * 100 * sd(a - R b) /
    (sqrt(n) mean(b)), R = mean(a) / mean(b) (the usual linearisation of a ratio estimator).

    Returns:
        (gain in percent, half-width in percentage points).
    """
    a, b = with_denoiser.double().flatten(), without.double().flatten()
    if a.shape != b.shape or a.numel() < 2:
        raise ValueError(f"need paired per-task accuracies of equal length >= 2, got {a.numel()} and {b.numel()}")
    ratio = a.mean() / b.mean()
    half = 1.96 * 100.0 * float((a - ratio * b).std()) / (math.sqrt(a.numel()) * float(b.mean()))
    return 100.0 * (float(ratio) - 1.0), half


# ------------------------------------------------------------------------------------------ privacy
def _composed(epsilon: float, releases: int, delta: float) -> dict:
    bound = certify(dp_pix_event(epsilon, releases), delta, accountant="pld").epsilon
    return {"releases": releases, "epsilon_pure": releases * epsilon, "epsilon_at_delta": bound, "delta": delta,
            "direction": "upper bound (pure: basic composition, exact for n releases at delta 0; at delta: PLD)"}


_ADVERSARY = "the server that receives the obfuscated images"


def privacy_report(config: ProtoConfig, train_releases: int, eval_releases: int, delta: float = 1e-5) -> dict:
    """The user's guarantee against the server that receives the obfuscated images, in the one report schema
    (``metadp.report.Report``: unit ``image``, relation ``m_pixels``) plus the run's own fields.

    One released test image: epsilon-DP for m-pixel neighbours under DP-Pix, none otherwise (the report's
    headline, certified at ``delta`` by the PLD accountant). Images released several times (a training image
    drawn into n episodes, each re-obfuscated; the same test image sent n times) compose:
    ``dp_pix_event(eps, n)`` through the PLD accountant, an upper bound at ``delta``, and n eps at delta 0
    (``composed_epsilon``; the most-released training and evaluation images are the ``other_units``).
    """
    delta = check_delta("delta", delta)
    name = config.obfuscation
    run = {"obfuscation": name, "adversary": _ADVERSARY,
           "releases_per_image": {"user_test_image": 1, "training_max": train_releases,
                                  "evaluation_max": eval_releases}}
    title = f"metadp train protonet, obfuscation {name}"
    if name == "none":
        why = "none: images are sent unobfuscated"
        return {**no_guarantee(title, why, unit="image", relation="m_pixels"), **run, "guarantee": why,
                "formal": False, "per_image_epsilon": None, "m": None, "composed_epsilon": None}
    m = (config.m or 1) if name == "dp_pix" else None
    text = obfuscations.guarantee(name, epsilon=config.epsilon, m=m) if m else obfuscations.guarantee(name)
    run.update(guarantee=text, formal=obfuscations.FORMAL_GUARANTEE[name], m=m,
               per_image_epsilon=config.epsilon if name == "dp_pix" else None, composed_epsilon=None)
    if name != "dp_pix":
        return {**no_guarantee(title, text, unit="image", relation="m_pixels"), **run}
    composed = {"one_test_image": _composed(config.epsilon, 1, delta),
                "training_image_max": _composed(config.epsilon, max(train_releases, 1), delta),
                "evaluation_image_max": _composed(config.epsilon, max(eval_releases, 1), delta),
                "note": ("each obfuscation of an image is a release; the training images are the server's own (it "
                         "holds them in the clear), so their composed epsilon is what the guarantee would be had "
                         "users sent them re-obfuscated that often")}
    return {**_dp_pix_report(title, text, config.epsilon, composed, delta).to_dict(), **run,
            "composed_epsilon": composed}


def _dp_pix_report(title: str, text: str, epsilon: float, composed: dict, delta: float) -> Report:
    """The DP-Pix guarantee of one released image, the most-released images beside it."""
    event = dp_pix_event(epsilon, 1)
    cert = certify(event, delta, accountant="pld").tightest
    others = tuple({"unit": key.replace("_max", "").replace("_", " "), "relation": "m_pixels",
                    "epsilon": c["epsilon_at_delta"], "epsilon_lower": None, "accountant": "pld",
                    "how": f"the most-released such image: {c['releases']:,} DP-Pix releases composed (PLD); basic composition: "
                           f"{c['epsilon_pure']:g} at delta 0", "notes": []}
                   for key, c in composed.items() if key in ("training_image_max", "evaluation_image_max"))
    return Report(name=title, epsilon=cert.epsilon, delta=delta, unit="image", relation="m_pixels", sampling=None,
                  noise=None, steps=None, accountant=cert.accountant, order=cert.order, conversion=cert.conversion,
                  assumptions=(text, f"the adversary: {_ADVERSARY}", "each image is obfuscated on the user's side "
                               "before it is sent; everything the server computes from it is post-processing")
                  + cert.assumptions, citations=("fan2018image",) + cert.citations, epsilon_lower=cert.epsilon_lower,
                  other_units=others, event=event.describe())
