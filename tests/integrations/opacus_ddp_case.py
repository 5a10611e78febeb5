"""Opacus data-parallel training over DistributedSampler shards, with metadp's accountant, for
``test_loader_accounting.py``: ``python opacus_ddp_case.py OUT NPROC`` starts NPROC processes (torch.multiprocessing,
gloo, a file rendezvous); each wraps a linear model in Opacus's DPDDP, makes it private with
``PrivacyEngine(accountant="metadp")`` and ``poisson_sampling=False`` over its ``DistributedSampler`` shard, and
trains two epochs; rank 0 writes ``result.json`` (the epsilon, the bounds and what the accountant read)."""

import json
import sys
import warnings
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

RECORDS, BATCH, Z, EPOCHS, DELTA = 720, 15, 1.3, 2, 1e-5


def _rank(rank: int, nproc: int, out: str) -> None:
    warnings.filterwarnings("ignore")
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{out}/rendezvous", rank=rank, world_size=nproc)
    import opacus
    from opacus.distributed import DifferentiallyPrivateDistributedDataParallel as DPDDP

    import metadp.integrations.opacus  # noqa: F401 - registers "metadp"

    generator = torch.Generator().manual_seed(0)  # the same data on every rank
    data = TensorDataset(torch.randn(RECORDS, 4, generator=generator), torch.randn(RECORDS, 1, generator=generator))
    sampler = DistributedSampler(data, num_replicas=nproc, rank=rank, shuffle=True, seed=1)
    loader = DataLoader(data, batch_size=BATCH, sampler=sampler)
    torch.manual_seed(0)
    model = DPDDP(nn.Linear(4, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    engine = opacus.PrivacyEngine(accountant="metadp")
    model, optimizer, loader = engine.make_private(module=model, optimizer=optimizer, data_loader=loader,
                                                   noise_multiplier=Z, max_grad_norm=1.0, poisson_sampling=False)
    steps = 0
    for epoch in range(EPOCHS):
        sampler.set_epoch(epoch)
        for x, y in loader:
            optimizer.zero_grad()
            nn.functional.mse_loss(model(x), y).backward()
            optimizer.step()
            steps += 1
    weights = [p.detach().clone() for p in model.parameters()]
    gathered = [None] * nproc
    dist.all_gather_object(gathered, [w.tolist() for w in weights])
    if rank == 0:
        bounds = engine.accountant.get_epsilon_bounds(DELTA)
        result = {"epsilon": engine.get_epsilon(DELTA), "lower": bounds.epsilon_lower, "scheme": bounds.scheme,
                  "loader": engine.accountant.loader.to_dict(), "steps": steps,
                  "same_model_on_every_rank": all(g == gathered[0] for g in gathered)}
        Path(out, "result.json").write_text(json.dumps(result), encoding="utf-8")
    dist.destroy_process_group()


if __name__ == "__main__":
    out, nproc = sys.argv[1], int(sys.argv[2])
    mp.spawn(_rank, args=(nproc, out), nprocs=nproc, join=True)
