"""Worker for tests/test_cached_step.py: per case, one cached step (trainers/cached_step.py, chunk 3) and one
uncached DDP step on this rank's half of the batch (run under torchrun, gloo), float64.

Writes ``$CACHED_OUT/<case>.rank<r>.pt``: the cached step's loss and (averaged) gradients, and the uncached DDP
step's.
"""
import copy
import json
import os
import random
import sys
from pathlib import Path

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from trainers.errors import exit_distributed_run  # noqa: E402
from trainers.methods import build_model  # noqa: E402
from trainers.cached_step import cached_forward_backward  # noqa: E402
from trainers.keyed_dropout import keyed_step  # noqa: E402


def build(paths: dict, method: str, config: dict):
    torch.manual_seed(0)  # the single-process reference's initialisation
    if method == "diffcse":
        config = {**config, "generator_name": paths["generator"]}
    model = build_model(method, paths[os.environ.get("CACHED_ENCODER", "quiet")], **config).double()
    model.train()
    return model


def grads(model):
    return {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}


def main() -> None:
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    paths = json.loads(os.environ["CACHED_PATHS"])
    batches = torch.load(os.environ["CACHED_BATCHES"], weights_only=False)
    for case, (method, config) in json.loads(os.environ["CACHED_CASES"]).items():
        batch = batches[case]
        model = build(paths, method, config)
        if getattr(model, "queue", None) is not None:  # the reference's warm-up enqueue, gathered across ranks
            per_rank = batch["input_ids"].size(0) // world
            with torch.no_grad(), keyed_step(model, per_rank):
                torch.manual_seed(11)
                model(**{k: v[rank * per_rank:(rank + 1) * per_rank] for k, v in batch.items()})
        twin = copy.deepcopy(model)
        from trainers.cached_step import slice_rows

        local = slice_rows(batch, rank * 4, rank * 4 + 4, batch["input_ids"].size(0))
        torch.manual_seed(7)
        random.seed(7)
        loss, _ = cached_forward_backward(model, local, 3, average_gradients_over=world)
        torch.manual_seed(7)
        random.seed(7)
        ddp = DistributedDataParallel(twin)
        with keyed_step(twin, local["input_ids"].size(0)):
            ddp_loss = ddp(**local).loss
            ddp_loss.backward()
        torch.save({"loss": loss, "grads": grads(model), "ddp_loss": ddp_loss.detach(), "ddp_grads": grads(twin)},
                   Path(os.environ["CACHED_OUT"]) / f"{case}.rank{rank}.pt")
    exit_distributed_run()  # barrier, then exit without destroying the group (as the training scripts end)


if __name__ == "__main__":
    main()
