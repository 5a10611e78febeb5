"""Checks of ``metadp train``'s flags, before anything is loaded or written (``metadp.training.run.command``).

Every flag either takes effect or is refused: a flag given to an algorithm (or data set) that does not
read it is an error naming the flag, never silently dropped. Flags whose default depends on the
algorithm are ``None`` in the parser and filled in here (``DEFAULTS``). Each refusal is a ValueError
naming the flag, the value and what is allowed; the command prints it on one line and exits with 2.
"""

from __future__ import annotations

import importlib.util
import math
import os

from metadp.sampling import of_lot
from metadp.training.algorithms.clipping import clip_rule
from metadp.training import algorithms
from metadp.training.data import datasets
from metadp.training.engines.federated import deployment_refusal, flower_refusal
from metadp.training.run.plan_command import PLAN_FLAGS

__all__ = ["DEFAULTS", "check_train_args", "check_device"]

_META = {"meta_loop": True}
_PRIVATE = {"meta_loop": True, "private": True}
# flag -> (the registry fields of the algorithms that read it, in words; None: the names)
_READERS = {
    "unit": (_PRIVATE, "the private algorithms"),
    "sampler": (_META, "the MAML and Reptile family"),
    "noise": (_PRIVATE, "the private algorithms"),
    "clip": ({"reads_clip": True}, None),
    "clip_mode": ({"reads_clip": True}, None),
    "clip_policy": ({"central_clip": True}, "{} (their per-task clip)"),
    "count_noise": ({"central_clip": True}, "{} with --clip-policy quantile"),
    "inner_clip": ({"inner_dp": True}, None),
    "inner_noise": ({"inner_dp": True}, None),
    "meta_batch": (_META, "the MAML and Reptile family"),
    "pool": (_META, "the MAML and Reptile family"),
    "inner_steps": (_META, "the MAML and Reptile family"),
    "inner_lr": (_META, "the MAML and Reptile family"),
    "outer_optimizer": (_META, "the MAML and Reptile family"),
    "outer_momentum": (_META, "the MAML and Reptile family"),
    "first_order": ({"meta_loop": True, "reads_first_order": True}, "{} (Reptile is first order by construction)"),
    "chunk_size": (_META, "the MAML and Reptile family"),
    "checkpoint_every": (_META, "the MAML and Reptile family"),
    "resume": (_META, "the MAML and Reptile family (protonet runs cannot be resumed)"),
    "resume_changed": (_META, "the MAML and Reptile family, with --resume"),
    "plan": (_META, "the MAML and Reptile family"),
    "save_plan": (_META, "the MAML and Reptile family"),
    "engine": (_META, "the MAML and Reptile family"),
}
# the flags of the privacy mechanism, refused at once for a non-private algorithm
_MECHANISM = ("unit", "noise", "clip", "clip_mode", "clip_policy", "count_noise", "inner_clip", "inner_noise")
_PROTONET_ONLY = ("obfuscation", "cell", "m", "radius", "sigma", "denoiser", "denoise_weight", "ways", "shots", "query")

# flag defaults that depend on the algorithm or the data are None in the parser and set here
DEFAULTS = {"delta": 1e-5, "clip": 1.0, "clip_mode": "flat", "clip_policy": "fixed", "inner_clip": 1.0,
            "meta_batch": 32.0, "pool": 10000, "inner_steps": 1, "norm": "batch", "checkpoint_every": 50,
            "steps": 1000}

_MAX_SEED = 2**63 - 1


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def _given(args, name: str) -> bool:
    value = getattr(args, name)
    return value is not None and value is not False


# the smallest positive noise multiplier a run accepts: the PLD accountant's floor (metadp.accounting._pld_pairs);
# at 1e-50 one step's RDP epsilon is ~1e100 at every order, already no guarantee, but a finite number
_MIN_NOISE = 1e-50


_MAX_LR = 1e4  # --inner-lr, --outer-lr
_MAX_RADIUS = 256  # --radius: wider than any image metadp trains on


def _real(args, name: str, *, low: float, low_open: bool, high: float = math.inf, high_open: bool = False) -> None:
    value = getattr(args, name)
    if value is None:
        return
    left, right = "(" if low_open else "[", ")" if high_open or math.isinf(high) else "]"
    ok = math.isfinite(value) and (value > low if low_open else value >= low) and (
        value < high if high_open else value <= high)
    if not ok:
        allowed = (f"a finite number > {low:g}" if low_open else f"a finite number >= {low:g}") if math.isinf(high) \
            else f"a number in {left}{low:g}, {high:g}{right}"
        raise ValueError(f"{_flag(name)} must be {allowed}, got {value:g}")


def _whole(args, name: str, minimum: int, maximum: int = _MAX_SEED) -> None:
    value = getattr(args, name)
    if value is not None and not (minimum <= value <= maximum):
        raise ValueError(f"{_flag(name)} must be a whole number >= {minimum}"
                         f"{f' and <= {maximum}' if maximum < _MAX_SEED else ''}, got {value}")


def check_device(text: str) -> None:
    """Refuses a ``--device`` torch cannot use here: cpu, cuda or cuda:N (with CUDA), mps (where present)."""
    import torch

    allowed = "cpu, cuda, cuda:N or mps"
    try:
        device = torch.device(text)
    except (RuntimeError, ValueError):
        raise ValueError(f"--device must be {allowed}, got {text!r}") from None
    if device.type == "cpu":
        return
    if device.type == "cuda":
        if not torch.cuda.is_available():
            why = "this torch was built without CUDA" if torch.version.cuda is None else "torch sees no CUDA GPU"
            raise ValueError(f"--device {text}: CUDA is not available here ({why}); use --device cpu")
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise ValueError(f"--device {text}: there are {torch.cuda.device_count()} CUDA devices (cuda:0 to "
                             f"cuda:{torch.cuda.device_count() - 1})")
        return
    if device.type == "mps":
        if not (hasattr(torch.backends, "mps") and torch.backends.mps.is_available()):
            raise ValueError(f"--device {text}: MPS (Apple GPU) is not available here; use --device cpu")
        return
    raise ValueError(f"--device must be {allowed}, got {text!r}")


def check_train_args(args) -> None:
    """Validates ``metadp train``'s flags in place (and fills in ``DEFAULTS``); reads nothing from disk.

    Raises:
        ValueError: the first flag that is out of range, does not apply to the algorithm or the data, or
            conflicts with another; the message names it and what is allowed.
    """
    algorithm, protonet = args.algorithm, not algorithms.get(args.algorithm).meta_loop
    _check_numbers(args)
    _check_save_plan(args)
    dataset, local = datasets.get(args.data), " or ".join(datasets.names(local_folder=True))
    if args.data_dir is not None and not dataset.local_folder:
        raise ValueError(f"--data-dir applies to --data {local}, not --data {args.data}; drop it")
    if args.rotations and not dataset.local_folder:
        raise ValueError(f"--rotations applies to --data {local}, not --data {args.data}; drop it")
    if args.norm is not None and not dataset.images:
        raise ValueError(f"--norm applies to image data (--data {' or '.join(datasets.names(images=True))}); "
                         f"{args.data} uses an MLP: drop it")
    check_processes(args, protonet)
    why = deployment_refusal(args, None)
    if why is not None:
        raise ValueError(why)
    if protonet:
        _check_protonet(args)
    else:
        plan = getattr(args, "plan", None)
        given = [_flag(n) for n in _PROTONET_ONLY if _given(args, n) and not (n == "shots" and plan)]
        if given:
            raise ValueError(f"{', '.join(given)} apply to protonet only, not {algorithm}; drop them")
        _check_readers(args)
        if getattr(args, "engine", None) == "flower" and not plan:
            raise ValueError(flower_refusal(algorithms.get(algorithm), None))
        if plan:  # the plan decides its flags' values (metadp.training.run.plan_command checks them against it)
            if args.resume_changed and not args.resume:
                raise ValueError("--resume-changed applies with --resume (it lets a resumed run change its settings)")
        else:
            _check_maml_family(args)
    for name, value in DEFAULTS.items():
        if getattr(args, "plan", None) and (name in PLAN_FLAGS or name == "inner_steps"):
            continue  # the plan decides (a plan's [release] sets inner_steps; the command fills it in otherwise)
        if getattr(args, name, None) is None:
            setattr(args, name, value)


def _check_save_plan(args) -> None:
    if getattr(args, "save_plan", None) and importlib.util.find_spec("tomli_w") is None:
        raise ValueError("--save-plan writes TOML with tomli-w, which is not installed: pip install 'metadp[train]'")


def check_processes(args, protonet: bool) -> None:
    """``--nproc``: meta-loop algorithms on the local engine; under torchrun, the number it started."""
    nproc = getattr(args, "nproc", None)
    if nproc is None or nproc == 1:
        return
    if protonet:
        raise ValueError(f"--nproc applies to the meta-learning algorithms, not {args.algorithm}; drop it")
    if getattr(args, "engine", None) == "flower":
        raise ValueError("--nproc splits a step's tasks across local processes; --engine flower computes them on "
                         "Flower clients: choose one")
    if str(getattr(args, "device", "cpu")).startswith("cuda"):
        import torch

        if torch.cuda.device_count() < nproc:
            raise ValueError(f"--nproc {nproc} with --device {args.device}: one GPU a process, and torch sees "
                             f"{torch.cuda.device_count()}")
    started = os.environ.get("WORLD_SIZE")
    if started is not None and started != str(nproc):
        raise ValueError(f"--nproc {nproc}, but this process is one of {started} (WORLD_SIZE, e.g. from torchrun): "
                         "drop --nproc under torchrun, or give the same number")


def _check_numbers(args) -> None:
    _real(args, "epsilon", low=0.0, low_open=True)
    _real(args, "delta", low=0.0, low_open=True, high=1.0, high_open=True)
    _real(args, "noise", low=0.0, low_open=False)
    _real(args, "clip", low=0.0, low_open=True)
    _real(args, "count_noise", low=0.0, low_open=True)
    _real(args, "inner_clip", low=0.0, low_open=True)
    _real(args, "inner_noise", low=0.0, low_open=False)
    for name in ("noise", "inner_noise", "count_noise"):
        value = getattr(args, name, None)
        if value is not None and 0.0 <= value < _MIN_NOISE:
            # no noise (or a vanishing one) releases the clipped sums as they are: no finite epsilon, which a
            # private algorithm would only find out after spending its data (issue 28, class 1)
            raise ValueError(f"{_flag(name)} must be at least {_MIN_NOISE:g} for {args.algorithm}, got {value:g}: below "
                             "it no finite epsilon can be certified (the privacy losses overflow float64; at 0 the "
                             "clipped sums are released as they are); give a larger value or --epsilon to calibrate "
                             "it, or train a non-private algorithm (maml, reptile) if no guarantee is wanted")
    _real(args, "meta_batch", low=0.0, low_open=True)
    # a learning rate above this is no step size (1e300 overflowed torch's float32 and raised after training began)
    _real(args, "inner_lr", low=0.0, low_open=True, high=_MAX_LR)
    _real(args, "outer_lr", low=0.0, low_open=True, high=_MAX_LR)
    _real(args, "outer_momentum", low=0.0, low_open=False, high=1.0, high_open=True)
    if _given(args, "outer_momentum") and args.outer_momentum and (
            args.outer_optimizer or algorithms.get(args.algorithm).optimizer) != "sgd":
        raise ValueError("--outer-momentum is SGD's heavy-ball momentum: give --outer-optimizer sgd with it")
    _real(args, "denoise_weight", low=0.0, low_open=False)
    _whole(args, "steps", 1)
    _whole(args, "pool", 1)
    _whole(args, "inner_steps", algorithms.get(args.algorithm).min_inner_steps)
    _whole(args, "chunk_size", 1)
    _whole(args, "nproc", 1)
    _whole(args, "checkpoint_every", 1)
    _whole(args, "seed", 0)
    _whole(args, "eval_tasks", 1)
    _whole(args, "cell", 1)
    _whole(args, "m", 1)
    _whole(args, "radius", 0, _MAX_RADIUS)  # a (2r+1)^2 kernel; 10^9 was accepted and ran out of memory
    _whole(args, "ways", 2)
    _whole(args, "shots", 1)
    _whole(args, "query", 1)


def _check_readers(args) -> None:
    algorithm, alg = args.algorithm, algorithms.get(args.algorithm)
    for name, (where, who) in _READERS.items():
        readers = algorithms.names(**where)
        if _given(args, name) and algorithm not in readers:
            if not alg.private and name in _MECHANISM:
                continue  # the non-private case below names every private flag at once
            who = ", ".join(readers) if who is None else who.format(", ".join(readers))
            raise ValueError(f"{_flag(name)} applies to {who}, not {algorithm}; drop it")
    if not alg.private:
        private = [_flag(n) for n in ("epsilon", "delta") + _MECHANISM if _given(args, n)]
        if private:
            raise ValueError(f"{', '.join(private)} set a privacy budget or mechanism, but {algorithm} is "
                             f"non-private and would ignore them: drop them, or train {alg.private_form}")


def _check_maml_family(args) -> None:
    alg = algorithms.get(args.algorithm)
    algorithm, private = args.algorithm, alg.private
    if args.resume_changed and not args.resume:
        raise ValueError("--resume-changed applies with --resume (it lets a resumed run change its settings)")
    if private and args.epsilon is None and args.noise is None and args.inner_noise is None:
        raise ValueError(f"{algorithm} needs --epsilon (the budget) or --noise (then the budget is unlimited)")
    pool = args.pool if args.pool is not None else DEFAULTS["pool"]
    meta_batch = args.meta_batch if args.meta_batch is not None else DEFAULTS["meta_batch"]
    if meta_batch > pool:
        raise ValueError(f"--meta-batch must be <= --pool ({pool:,} tasks), got {meta_batch:g}: tasks are sampled "
                         "from the pool (a Poisson rate meta-batch / pool above 1 does not exist)")
    sampler = args.sampler or alg.default_sampler
    try:
        scheme = of_lot(sampler, pool, meta_batch)  # the run's metadp.sampling scheme: it refuses what it cannot draw
    except ValueError as err:
        raise ValueError(f"--meta-batch {meta_batch:g} with --sampler {sampler}: {err}") from None
    unit = args.unit or alg.default_unit
    refusal = alg.unit_refusal(unit) if private else None
    if refusal is not None:
        raise ValueError(refusal)
    if unit == "record" and private and alg.central_noise and scheme.pooled_record(1.0, 1)[1] is None:
        raise ValueError(f"--sampler {sampler}: {algorithm} has no record-level bound for {scheme.pooled_words} "
                         "(records are shared between tasks), so --unit record cannot be budgeted; use --unit "
                         "task or --sampler poisson")
    visit_charged = alg.charged_per_visit(unit)
    if visit_charged and args.epsilon is not None and args.noise is None and args.inner_noise is None \
            and scheme.charge != "pass":  # per-visit charges are counted per pass only where each task is in one
        raise ValueError(f"--epsilon without --inner-noise: the {unit} view of {algorithm} is charged per visit, "
                         f"and visits are random under --sampler {sampler}, so the noise cannot be calibrated; "
                         "give --inner-noise, or use --sampler one-pass")
    policy = args.clip_policy or "fixed"
    if clip_rule(policy).reads_raw_norms and args.epsilon is not None:
        raise ValueError("--clip-policy raw-percentile computes clipping thresholds from raw gradient norms: the run "
                         "has no privacy guarantee, so --epsilon cannot be its budget; drop --epsilon (give --noise)")
    if args.count_noise is not None and not clip_rule(policy).releases_count:
        raise ValueError(f"--count-noise applies to --clip-policy quantile, not {policy}; drop it")


def _check_protonet(args) -> None:
    ignored = [_flag(n) for n in _READERS if _given(args, n)]
    if ignored:
        raise ValueError(f"{', '.join(ignored)} do not apply to protonet (it reads --data, --obfuscation and its "
                         "options, --epsilon and --delta with dp-pix, --steps, --outer-lr, --seed, --device, --norm, "
                         "--rotations, --eval-tasks, --out); drop them")
    if not datasets.get(args.data).images:
        raise ValueError(f"--data {args.data}: protonet classifies images; use "
                         f"{' or '.join('--data ' + n for n in datasets.names(images=True))}")
    obfuscation = args.obfuscation or "none"
    reads = {"none": (), "dp-pix": ("epsilon", "cell", "m", "delta"), "pixelize": ("cell",),
             "blur": ("radius", "sigma"), "gaussian": ("sigma",)}[obfuscation]
    needs = {"dp-pix": ("epsilon", "cell"), "pixelize": ("cell",), "blur": ("radius",),
             "gaussian": ("sigma",)}.get(obfuscation, ())
    for name in ("epsilon", "delta", "cell", "m", "radius", "sigma"):
        if name in needs and getattr(args, name) is None:
            raise ValueError(f"--obfuscation {obfuscation} needs {_flag(name)}")
        if name not in reads and getattr(args, name) is not None:
            raise ValueError(f"{_flag(name)} does not apply to --obfuscation {obfuscation} (it reads "
                             f"{', '.join(_flag(n) for n in reads) or 'no option'}); drop it")
    if obfuscation == "blur" and args.sigma is not None and not (math.isfinite(args.sigma) and args.sigma > 0):
        raise ValueError(f"--sigma (blur kernel std in pixels) must be a finite number > 0, got {args.sigma:g}")
    if obfuscation == "gaussian" and not (math.isfinite(args.sigma) and 0 <= args.sigma <= 1):
        raise ValueError(f"--sigma (noise std in [0, 1] pixel units) must be in [0, 1], got {args.sigma:g}")
    if args.denoise_weight is not None and not args.denoiser:
        raise ValueError("--denoise-weight applies with --denoiser; add --denoiser or drop it")
