"""Worker for tests/test_ddp.py: one DDP training step on half of a global batch (run under torchrun, gloo; or
NCCL with one GPU per rank when ``$DDP_BACKEND=nccl``, tests/test_cuda.py).

Writes this rank's loss and the (DDP-averaged) gradients to ``$DDP_OUT/rank<r>.pt``.
"""
import os
import sys
from pathlib import Path

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from trainers.errors import exit_distributed_run  # noqa: E402

from trainers.methods import build_model  # noqa: E402



def main() -> None:
    backend = os.environ.get("DDP_BACKEND", "gloo")
    device = torch.device("cpu")
    if backend == "nccl":
        device = torch.device("cuda", int(os.environ["LOCAL_RANK"]))
        torch.cuda.set_device(device)
    dist.init_process_group(backend)
    rank, world = dist.get_rank(), dist.get_world_size()
    model_dir, method = os.environ["DDP_MODEL_DIR"], os.environ.get("DDP_METHOD", "simcse")
    batch = torch.load(os.environ["DDP_BATCH"], weights_only=True)
    per_rank = batch["input_ids"].size(0) // world
    local = {k: v[rank * per_rank:(rank + 1) * per_rank].to(device) for k, v in batch.items()}
    torch.manual_seed(0)  # same projector initialisation as the single-process reference
    model = build_model(method, model_dir, attn_implementation="eager").to(device)
    model.train()
    ddp = DistributedDataParallel(model)
    loss = ddp(**local).loss
    loss.backward()
    grads = {n: p.grad.detach().cpu() for n, p in model.named_parameters() if p.grad is not None}
    torch.save({"loss": loss.detach().cpu(), "grads": grads}, Path(os.environ["DDP_OUT"]) / f"rank{rank}.pt")
    exit_distributed_run()  # barrier, then exit without destroying the group (as the training scripts end)


if __name__ == "__main__":
    main()
