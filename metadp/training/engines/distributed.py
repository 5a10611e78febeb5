"""Data-parallel meta-training over processes with ``torch.distributed`` (gloo on CPU, NCCL on CUDA).

Every process calls ``trainer.train`` with the same arguments (SPMD, as under ``torchrun``; ``metadp train
--nproc N`` starts them: ``metadp.training.run.processes``). Rank 0 runs the trainer's loop unchanged: it
samples the tasks, keeps the clipping policy, draws the Gaussian noise, writes every ledger, checkpoint and
report. The other ranks hold no run state and write nothing: they serve (:func:`serve`). For each chunk of
a step's tasks (``chunk_size`` of them, or the whole lot), rank 0 broadcasts the chunk (its rows and
weights, or the fresh episodes' indices), the parameters (once a step) and the state of its noise
generator; every rank computes the clipped contributions of its contiguous share of the chunk and sums
them, and the sums are reduced to rank 0 (``torch.distributed.reduce``, SUM); the contributions' norms and
losses are gathered there.

Why the released mechanism is exactly the single-process one:

* the tasks are rank 0's sampler's, so the sampling (and its fidelity) is one process's;
* the central Gaussian noise is drawn once per release, by rank 0, from the run's noise generator, after
  the reduce: no rank adds noise of its own;
* inner noise (DP-Reptile, sample-level DP-MAML, DP-AGRLR): every rank sets a generator to rank 0's state
  at the chunk's start and draws the noise of the *whole* chunk, keeping its share's rows
  (``contributions`` ``part``); rank 0 draws the same from the run's generator, so after the chunk its
  generator is where one process's would be. Each task's inner noise is the one a single process draws for
  it: no two tasks share noise, and no rank's draw is another's;
* each rank clips each of its tasks' contributions before summing, so the sum's sensitivity is the same C.

Only the order of the floating-point additions differs (rank partial sums, then their sum), so one and N
processes give the same parameters up to float rounding (``tests/training/test_distributed.py``). The
accounting is therefore the plan's, unchanged; the report adds ``processes`` and ``backend``. A killed
rank stops the run (the collective fails, the launcher stops the others): every release made is on rank
0's ledgers before it is used, so ``--resume`` continues without losing one.
"""

from __future__ import annotations

import dataclasses
import hashlib
import inspect
import re
from dataclasses import dataclass
from typing import Any, Dict, Optional

import torch
import torch.distributed as dist

from metadp.training.algorithms import functional as F
from metadp.training.algorithms.contributions import resolve as contribution_of
from metadp.training.data.tasks import FreshEpisodes
from metadp.training.engines.local import chunked, clip_or_measure

__all__ = ["World", "world", "share", "Leader", "serve", "RankStopped", "RankLost"]


@dataclass(frozen=True)
class World:
    rank: int
    size: int
    backend: str


def world() -> Optional[World]:
    """This process's place in an initialised process group of more than one process, else None."""
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() < 2:
        return None
    return World(dist.get_rank(), dist.get_world_size(), str(dist.get_backend()))


def share(n: int, size: int, rank: int) -> slice:
    """The contiguous part of ``n`` tasks that ``rank`` of ``size`` computes (earlier ranks one more when
    ``size`` does not divide ``n``; rank 0's part is empty only when ``n`` is 0)."""
    base, extra = divmod(n, size)
    start = rank * base + min(rank, extra)
    return slice(start, start + base + (1 if rank < extra else 0))


class RankStopped(RuntimeError):
    """Rank 0 stopped the run with an error (it reported it); raised on the other ranks."""


class RankLost(RuntimeError):
    """A collective failed: another process of the run is gone (killed, crashed) or unreachable."""


def _collective(fn, *args, **kwargs):
    """``fn`` (a torch.distributed collective); its failure as ``RankLost``, said in one line."""
    try:
        return fn(*args, **kwargs)
    except RuntimeError as err:
        first = next((line for line in str(err).splitlines() if line.strip()), type(err).__name__)
        first = re.sub(r"^\[[^\]]*\]\s*", "", first.strip())  # gloo's "[path/to/pair.cc:537] " prefix
        said = first.split(". ")[0].rstrip(".")
        raise RankLost(f"a process of this run is gone ({said[:200]})") from None


def fingerprint(pool) -> str:
    """A digest of the tensors a task source holds (every rank must hold the same tasks)."""
    digest = hashlib.sha256(type(pool).__name__.encode())
    for name, value in sorted(vars(pool).items()):
        if isinstance(value, torch.Tensor):
            digest.update(name.encode())
            digest.update(value.detach().cpu().contiguous().numpy().tobytes())
        elif isinstance(value, (int, float, str, bool)):
            digest.update(f"{name}={value!r}".encode())
    return digest.hexdigest()


def _send(obj) -> Any:
    box = [obj]
    _collective(dist.broadcast_object_list, box, src=0)
    return box[0]


def _tasks_spec(tasks, pool):
    """What a rank needs to rebuild this step's tasks: the pool every rank holds, or the fresh episodes' indices."""
    if tasks is pool:
        return ("pool",)
    if isinstance(tasks, FreshEpisodes):
        return ("fresh", tasks.classes.cpu(), tasks.drawings.cpu(), tasks.k_shot)
    raise ValueError(f"the distributed engine cannot send tasks of type {type(tasks).__name__}")


def _tasks_of(spec, pool, device):
    if spec[0] == "pool":
        return pool
    _, classes, drawings, k_shot = spec
    return FreshEpisodes(pool.images, classes.to(device), drawings.to(device), k_shot)


def _part_sum(alg, model, params, tasks, rows, weights, loss_fn, c, gen, contribution, threshold, raw_norms, part):
    """This rank's share ``part`` of a chunk: (sum of its weighted clipped contributions or None where the part is
    empty, their norms or None, their losses)."""
    if part.stop <= part.start and rows.numel() > 0:  # nothing to compute (a worker's empty share)
        return None, None, torch.zeros(0)
    contributions, task_losses = contribution(alg, model, params, tasks, rows, loss_fn, c, gen,
                                              part=part if rows.numel() else None)
    contributions, found = clip_or_measure(contributions, threshold, c.clip_mode, raw_norms)
    return F.masked_sum(contributions, weights[part]), found, task_losses


def _flat(tensors) -> torch.Tensor:
    """One buffer of the tensors (one collective instead of one per parameter); they share one dtype."""
    tensors = list(tensors)
    if len({t.dtype for t in tensors}) > 1:
        raise ValueError("a run over several processes needs the model's parameters in one dtype, got "
                         f"{sorted({str(t.dtype) for t in tensors})}")
    return torch.cat([t.reshape(-1) for t in tensors])


def _unflat(flat: torch.Tensor, like: Dict[str, torch.Tensor]) -> Dict[str, torch.Tensor]:
    out, start = {}, 0
    for name, p in like.items():
        out[name] = flat[start:start + p.numel()].view_as(p)
        start += p.numel()
    return out


def _reduced(partial, params) -> Dict[str, torch.Tensor]:
    """The partial sums reduced (SUM) to rank 0 in one collective, each tensor shaped as its parameter (zeros for
    an empty part)."""
    flat = _flat(partial[k] if partial is not None else torch.zeros_like(p) for k, p in params.items())
    _collective(dist.reduce, flat, dst=0, op=dist.ReduceOp.SUM)
    return _unflat(flat, params)


def _broadcast_params(params: Dict[str, torch.Tensor]) -> None:
    """Rank 0's parameters into every rank's ``params`` (in place), in one collective."""
    flat = _flat(params.values())
    _collective(dist.broadcast, flat, src=0)
    for name, value in _unflat(flat, params).items():
        params[name].copy_(value)


def _gathered(norms, losses, size: int):
    """Every rank's norms and losses, in rank order (so in the chunk's order)."""
    box = [None] * size
    payload = (None if norms is None else norms.detach().cpu(), losses.detach().cpu())
    _collective(dist.all_gather_object, box, payload)
    return box


def accepts_part(contribution) -> bool:
    try:
        return "part" in inspect.signature(contribution).parameters
    except (TypeError, ValueError):
        return False


class Leader:
    """Rank 0's engine (``metadp.training.engines``): the step's clipped sum computed by every rank. A context
    manager: leaving it tells the other ranks to stop, with the run's result or rank 0's error."""

    name = "torch.distributed"

    def __init__(self, pool, device: str, here: World):
        self.pool, self.device, self.world = pool, device, here
        self.started, self.sent_params, self.result = False, False, None

    def check(self, c, engine=None, audit=None) -> None:
        """Refuses a run the ranks cannot share: different tasks on the ranks, a contribution without ``part``,
        another engine or an audit. First of all, the collective the other ranks wait in (``serve``)."""
        found = [None] * self.world.size
        _collective(dist.all_gather_object, found, fingerprint(self.pool))
        if engine is not None or audit is not None:
            raise ValueError("a run over several processes computes its steps with torch.distributed: it takes no "
                             "other engine and no audit")
        if len(set(found)) > 1:
            bad = [r for r, f in enumerate(found) if f != found[0]]
            raise ValueError(f"the processes hold different tasks (ranks {bad} differ from rank 0): every rank must "
                             "build the same task pool (the same data and seed)")
        if not accepts_part(contribution_of(c.family)):
            raise ValueError(f"{c.algorithm}: its contribution function takes no part= argument, so its tasks "
                             "cannot be split across processes")

    def clipped_sum(self, alg, model, params, tasks, rows, weights, loss_fn, c, run, contribution,
                    threshold: Optional[float], raw_norms: bool):
        spec = _tasks_spec(tasks, run.pool)

        def one_chunk(chunk, w):
            first = not self.sent_params
            _send({"kind": "chunk", "config": None if self.started else c, "params": first, "tasks": spec,
                   "rows": chunk.cpu(), "weights": w.cpu(), "generator": run.noise_gen.get_state(),
                   "threshold": threshold, "raw_norms": raw_norms})
            self.started = self.sent_params = True
            if first:
                _collective(dist.broadcast, _flat(params.values()), src=0)
            part = share(chunk.numel(), self.world.size, 0)
            summed, found, task_losses = _part_sum(alg, model, params, tasks, chunk, w, loss_fn, c, run.noise_gen,
                                                   contribution, threshold, raw_norms, part)
            summed = _reduced(summed, params)  # the collectives in serve's order: reduce, then gather
            parts = _gathered(found, task_losses, self.world.size)
            found = None if parts[0][0] is None else torch.cat([p[0] for p in parts if p[0] is not None])
            return summed, None if found is None else found.to(rows.device), torch.cat([p[1] for p in parts]).to(
                rows.device)

        self.sent_params = False  # the parameters travel with a step's first chunk
        return chunked(rows, weights, c.chunk_size, one_chunk)

    def report_fields(self) -> Dict[str, Any]:
        return {"engine": "local", "processes": self.world.size, "backend": self.world.backend}

    def __enter__(self) -> "Leader":
        return self

    def __exit__(self, kind, err, tb) -> None:
        message = None if err is None else (" ".join(str(err).split()) or type(err).__name__)
        result = None
        if err is None and self.result is not None:
            result = dataclasses.replace(self.result, params={k: v.detach().cpu() for k, v in self.result.params.items()})
        try:
            _send({"kind": "stop", "error": message, "result": result})
        except Exception:  # a rank is gone: the collective fails; the error being raised (if any) is the story
            if err is None:
                raise


def serve(model, pool, loss_fn, device: str, here: World):
    """A worker rank's part of ``train``: compute its share of every chunk rank 0 sends, until rank 0 stops.
    Returns the run's ``TrainResult`` (rank 0's); raises ``RankStopped`` when rank 0 stopped with an error."""
    _collective(dist.all_gather_object, [None] * here.size, fingerprint(pool))  # Leader.check's
    params = {k: v.to(device) for k, v in F.param_dict(model).items()}
    gen = torch.Generator(device=device)
    c = contribution = None
    while True:
        msg = _send(None)
        if msg["kind"] == "stop":
            if msg["error"] is not None:
                raise RankStopped(f"rank 0 stopped the run: {msg['error']}")
            if msg["result"] is None:
                return None
            r = msg["result"]
            return dataclasses.replace(r, params={k: v.to(device) for k, v in r.params.items()})
        if msg["config"] is not None:
            c = msg["config"]
            contribution = contribution_of(c.family)
        if msg["params"]:
            _broadcast_params(params)
        tasks = _tasks_of(msg["tasks"], pool, device)
        rows, weights = msg["rows"].to(device), msg["weights"].to(device)
        gen.set_state(msg["generator"])
        part = share(rows.numel(), here.size, here.rank)
        summed, found, task_losses = _part_sum(c.family, model, params, tasks, rows, weights, loss_fn, c, gen,
                                               contribution, msg["threshold"], msg["raw_norms"], part)
        _reduced(summed, params)
        _gathered(found, task_losses, here.size)
