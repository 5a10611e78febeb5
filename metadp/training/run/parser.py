"""The flags of ``metadp train`` (argparse only: no torch, so ``metadp --help`` and every other command
work without it). The checks that need no data are in ``metadp.training.run.arguments``; the run itself
is ``metadp.training.run.command`` (torch)."""

from __future__ import annotations

from metadp.sampling import RUN_SCHEMES
from metadp.training import algorithms
from metadp.training.data import datasets
from metadp.training.algorithms.clipping import POLICIES
from metadp.training.engines.federated import DEPLOYMENTS, ENGINES

__all__ = ["add_train_parser", "CLI_OBFUSCATIONS"]

_EXAMPLES = ("examples:\n  metadp train dp-maml --data sinusoid --epsilon 1 --delta 1e-5 --steps 2000 --out runs/sin\n"
             "  metadp train maml --data glyphs --steps 300 --out runs/glyphs\n"
             "  metadp train dp-agr --data glyphs --epsilon 2 --clip-policy quantile --out runs/agr\n"
             "  metadp train dp-agr --engine flower --plan plan.toml --data sinusoid --out runs/fed\n"
             "  metadp train dp-maml --data omniglot --epsilon 8 --delta 1e-5 --steps 500 --out runs/omni --resume\n"
             "  metadp train dp-maml --data omniglot --epsilon 12 --delta 1e-5 --steps 800 --out runs/omni --resume "
             "--resume-changed\n"
             "  metadp train protonet --data omniglot --obfuscation dp-pix --epsilon 3 --cell 4 --m 1 --denoiser "
             "--steps 1000 --out runs/proto")


def add_train_parser(sub, number, formatter) -> None:
    t = sub.add_parser("train", help="train MAML, Reptile, DP-MAML, DP-Reptile or DP-FedMeta within a privacy budget "
                       "(needs torch)", epilog=_EXAMPLES, formatter_class=formatter)
    for add in (_what_and_where, _privacy_arguments, _optimisation_arguments, _run_folder_arguments,
                _protonet_arguments):
        add(t, number)


def _what_and_where(t, number) -> None:
    """The algorithm, its data, a plan file, the engine."""
    t.add_argument("algorithm", choices=tuple(algorithms.REGISTRY),
                   help="; ".join(f"{a.name}: {a.description}" for a in algorithms.REGISTRY.values()))
    t.add_argument("--data", choices=tuple(datasets.REGISTRY), default=next(iter(datasets.REGISTRY)),
                   help="; ".join(f"{d.name}: {d.description}" for d in datasets.REGISTRY.values()))
    t.add_argument("--data-dir", metavar="DIR",
                   help="--data omniglot: the folder holding images_background_small1.zip, "
                        "images_background_small2.zip and one_shot_runs.zip. Searched in order: --data-dir, "
                        "$METADP_DATA, then ../shared/data/omniglot beside the metadp checkout (a folder whose "
                        "pyproject.toml names metadp) that holds the current folder, or the package's own "
                        "checkout (editable installs). Nothing is ever downloaded")
    t.add_argument("--plan", metavar="FILE",
                   help="run a plan file (docs/plan-format.md): its unit, delta, sampling (episodes included), noise "
                        "and steps are the run's, and privacy_report.json is its `metadp plan FILE --json` report. "
                        "Flags the plan sets must agree with it; --epsilon calibrates its noise multiplier")
    t.add_argument("--engine", choices=ENGINES,
                   help="where the clients' updates are computed (default local): flower runs the --plan as a Flower "
                        "App with flwr run, one client per task of its population, with the same sampling, noise, "
                        "ledgers and report (needs pip install 'metadp[federated]')")
    t.add_argument("--deployment", choices=DEPLOYMENTS,
                   help="--engine flower: simulation (default; Flower's simulation engine on a SuperLink this command "
                        "starts) or local (a deployment on loopback: a SuperLink and one SuperNode process per client, "
                        "all stopped when the run ends)")
    t.add_argument("--clients", type=number("--clients", int),
                   help="--deployment local: the SuperNodes to start (the plan's sampling.population; default that)")
    t.add_argument("--superlink", metavar="ADDRESS",
                   help="--engine flower: run on an existing federation's SuperLink (host:port) whose SuperNodes were "
                        "started with --node-config \"partition-id=<i>\" for i in 0..population-1; the run folder is "
                        "written on the SuperLink's machine")
    t.add_argument("--root-certificates", metavar="PEM",
                   help="--superlink: the CA certificate for TLS to the SuperLink (without it the connection is "
                        "unencrypted, as on loopback)")
    t.add_argument("--client-timeout", type=number("--client-timeout", float),
                   help="--engine flower: seconds the server waits for a round's replies (default 600); a client that "
                        "has not answered by then counts as a zero update")
    t.add_argument("--save-plan", metavar="FILE",
                   help="write the plan this run executes (with --plan: its calibrated form; else the plan the flags "
                        "describe) as a TOML plan file; never overwrites")


def _privacy_arguments(t, number) -> None:
    """The guarantee: its unit, sampling, budget, noise and clipping."""
    t.add_argument("--unit", choices=("task", "record", "record-vs-server"),
                   help="the guarantee whose budget stops the run (default: task; record for "
                        f"{' and '.join(algorithms.names(private=True, default_unit='record'))}); every other one is "
                        "reported too")
    t.add_argument("--sampler", choices=tuple(RUN_SCHEMES),
                   help="task sampling (default poisson; one-pass for "
                        f"{', '.join(algorithms.names(default_sampler='one-pass'))})")
    t.add_argument("--epsilon", type=number("--epsilon", float),
                   help="budget of --unit at --delta; protonet: the DP-Pix epsilon per released image")
    t.add_argument("--delta", type=number("--delta", float), help="delta of the budget and the report (default 1e-5)")
    t.add_argument("--noise", type=number("--noise", float),
                   help="noise multiplier z of the released sum (default: calibrated to the budget)")
    t.add_argument("--clip", type=number("--clip", float),
                   help="C: per-task clip (dp-maml, dp-agr*) or per-example query clip (dp-maml-sample); default 1")
    t.add_argument("--clip-mode", choices=("flat", "per_layer"), help="default flat")
    t.add_argument("--clip-policy", choices=POLICIES,
                   help="threshold updates (default fixed): noisy-window (post-processing), quantile (Andrew et al., "
                        "accounted), raw-percentile (NOT private; refused with --epsilon)")
    t.add_argument("--count-noise", type=number("--count-noise", float),
                   help="quantile policy: noise std on the unclipped count (default meta-batch / 20)")
    t.add_argument("--inner-clip", type=number("--inner-clip", float),
                   help=f"per-example clip inside tasks ({', '.join(algorithms.names(inner_dp=True))}; default 1)")
    t.add_argument("--inner-noise", type=number("--inner-noise", float),
                   help="z_in inside tasks (default: --noise; calibrated for dp-reptile and record-vs-server)")


def _optimisation_arguments(t, number) -> None:
    """Steps, tasks, learning rates, memory, seed and device."""
    t.add_argument("--steps", type=number("--steps", int), help="steps (default 1000)")
    t.add_argument("--meta-batch", type=number("--meta-batch", float),
                   help="expected tasks per step, at most --pool (default 32; a whole number with --sampler fixed)")
    t.add_argument("--pool", type=number("--pool", int), help="fixed pool of training tasks (default 10000)")
    t.add_argument("--inner-steps", type=number("--inner-steps", int), help="inner SGD steps per task (default 1)")
    t.add_argument("--inner-lr", type=number("--inner-lr", float))
    t.add_argument("--outer-lr", type=number("--outer-lr", float),
                   help="Adam learning rate (MAML family, default 1e-3) or Reptile step size (default 1.0)")
    t.add_argument("--outer-optimizer", choices=("adam", "sgd"),
                   help="the outer optimiser (default: the algorithm's: Adam for the MAML family, SGD for Reptile's)")
    t.add_argument("--outer-momentum", type=number("--outer-momentum", float),
                   help="heavy-ball momentum of --outer-optimizer sgd, in [0, 1) (default 0)")
    t.add_argument("--first-order", action="store_true")
    t.add_argument("--chunk-size", type=number("--chunk-size", int), help="tasks per vmap chunk (bounds memory)")
    t.add_argument("--checkpoint-every", type=number("--checkpoint-every", int),
                   help="steps between checkpoints and metrics lines (default 50; may change on --resume)")
    t.add_argument("--seed", type=number("--seed", int), default=0)
    t.add_argument("--device", default="cpu", help="cpu, cuda, cuda:N or mps (where available)")
    t.add_argument("--nproc", type=number("--nproc", int),
                   help="train with N processes (torch.distributed: gloo on CPU, NCCL with --device cuda, one GPU "
                        "each): a step's tasks are split across them, the noise is drawn once, by rank 0, which "
                        "writes the run; the same release as one process. Under torchrun, leave it out (or give "
                        "torchrun's --nproc-per-node)")


def _run_folder_arguments(t, number) -> None:
    """The run's folder, resuming, and the data's shape and evaluation."""
    t.add_argument("--out", default="metadp-run",
                   help="the run's folder (default metadp-run), created if missing; a folder that holds a run "
                        "needs --resume. A run holds an flock on OUT/run.lock while it writes, so a second run "
                        "into OUT is refused; the OS releases the lock when the process exits (a run.lock left "
                        "behind is never stale)")
    t.add_argument("--force-long", action="store_true",
                   help="run a plan whose steps x tasks a step would take over 24 hours even at the trainer's "
                        "fastest (20 microseconds a task-step); without it such a run is refused before any data "
                        "is loaded")
    t.add_argument("--resume", action="store_true",
                   help="continue the run in --out (start one if it holds none): every release on its ledgers "
                        "stays charged. Its settings are kept in OUT/run.json and must not change; its noise is "
                        "reused unless --noise is given; the learning rates and --chunk-size may change. A lost "
                        "checkpoint.pt restarts training from step 0 (said on stderr) with the spent budget kept")
    t.add_argument("--resume-changed", action="store_true",
                   help="with --resume: accept changed settings (e.g. a larger --epsilon or more --steps); the "
                        "budget spent so far stays charged. Settings that change what a release is (the noise, "
                        "sampling, pool, data, algorithm) are refused even so: use another --out")
    t.add_argument("--norm", choices=("batch", "group"),
                   help="Conv-4 normalisation for image data (default batch): batch statistics of the current "
                        "batch only (MAML's setting; per-example gradients use each example alone) or group norm")
    t.add_argument("--rotations", action="store_true",
                   help="Omniglot: characters rotated by 90, 180, 270 degrees are new classes (augmentation)")
    t.add_argument("--eval-tasks", type=number("--eval-tasks", int), default=600,
                   help="held-out tasks for the final evaluation (default 600; Omniglot uses its 20 one-shot runs)")


def _protonet_arguments(t, number) -> None:
    """Prototypical networks on obfuscated images (their own group)."""
    p = t.add_argument_group("protonet (obfuscated images; the options above that apply: --data glyphs|omniglot, "
                             "--epsilon, --delta, --steps, --outer-lr, --seed, --out, --device, --norm, --rotations, "
                             "--eval-tasks)")
    p.add_argument("--obfuscation", choices=CLI_OBFUSCATIONS,
                   help="applied to support and query images (default none); only dp-pix has a formal guarantee")
    p.add_argument("--cell", type=number("--cell", int), help="dp-pix, pixelize: the cell side b in pixels")
    p.add_argument("--m", type=number("--m", int),
                   help="dp-pix: neighbouring images differ in at most m pixel values (default 1)")
    p.add_argument("--radius", type=number("--radius", int), help="blur: kernel half-width r ((2r+1)^2 kernel)")
    p.add_argument("--sigma", type=number("--sigma", float),
                   help="blur: kernel std in pixels (default r); gaussian: noise std in [0, 1] units (paper / 255)")
    p.add_argument("--denoiser", action="store_true", help="train a residual (DnCNN-style) denoiser jointly")
    p.add_argument("--denoise-weight", type=number("--denoise-weight", float),
                   help="lambda in loss = classification + lambda * denoising MSE (default 1, the paper's)")
    p.add_argument("--ways", type=number("--ways", int),
                   help="N of N-way episodes, training and evaluation (default 5)")
    p.add_argument("--shots", type=number("--shots", int),
                   help="support images per class (protonet: default 5; a plan's fresh episodes: default 1, the rest "
                        "of each class's drawn examples are its query)")
    p.add_argument("--query", type=number("--query", int), help="query images per class (default 5)")


CLI_OBFUSCATIONS = {"none": "none", "dp-pix": "dp_pix", "pixelize": "pixelize", "blur": "gaussian_blur",
                 "gaussian": "gaussian_noise"}
