"""Worker for tests/test_simcse_pp.py and tests/test_esimcse.py: a few DDP training steps (SGD) on half of a global
batch, for each case in ``$DDP_CASES`` (JSON list of {"name", "method", "config", "steps"}), under torchrun/gloo.

Writes, per case, this rank's per-step losses, the final (DDP-averaged) gradients and the model's state to
``$DDP_OUT/<name>.rank<r>.pt``. The single-process reference in the tests runs the same steps on the whole batch.
"""
import json
import os
import sys
from pathlib import Path

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from trainers.errors import exit_distributed_run  # noqa: E402

from trainers.methods import build_model  # noqa: E402



def run_steps(model, forward, batches, steps: int, lr: float = 0.5):
    """``steps`` SGD steps; returns the losses and the gradients of the last step (before its update)."""
    optimizer = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=lr)
    losses, grads = [], {}
    for step in range(steps):
        optimizer.zero_grad()
        loss = forward(**batches[step % len(batches)]).loss
        loss.backward()
        losses.append(loss.detach())
        grads = {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}
        optimizer.step()
        model.on_optimizer_step()
    return torch.stack(losses), grads


def main() -> None:
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    batches = torch.load(os.environ["DDP_BATCH"], weights_only=True)
    for case in json.loads(os.environ["DDP_CASES"]):
        local = []
        for batch in batches:
            per_rank = batch["input_ids"].size(0) // world
            local.append({k: v[rank * per_rank:(rank + 1) * per_rank] for k, v in batch.items()})
        torch.manual_seed(0)  # same projector initialisation as the single-process reference
        model = build_model(case["method"], os.environ["DDP_MODEL_DIR"], **case["config"])
        model.train()
        ddp = DistributedDataParallel(model)
        losses, grads = run_steps(model, ddp, local, case["steps"])
        state = {k: v.detach().clone() for k, v in model.state_dict().items()}
        torch.save({"losses": losses, "grads": grads, "state": state},
                   Path(os.environ["DDP_OUT"]) / f"{case['name']}.rank{rank}.pt")
    exit_distributed_run()  # barrier, then exit without destroying the group (as the training scripts end)


if __name__ == "__main__":
    main()
