"""Worker for tests/test_diffcse.py: DiffCSE's RTD accuracies on one process's share of a batch, under gloo.

Kept apart from the test module so that the spawned processes import only torch and models.diffcse."""
import torch
import torch.distributed as dist


def statistics_case():
    """Two processes with different token counts: a mean of per-process ratios would be wrong."""
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(3, 6, 2, generator=g)
    labels = torch.randint(0, 2, (3, 6), generator=g)
    mask = torch.tensor([[1, 1, 0, 0, 0, 0], [1, 1, 1, 1, 1, 1], [1, 1, 1, 1, 1, 0]])
    return logits, labels, mask


def worker(rank: int, world: int, init_file: str, out_dir: str) -> None:
    from models.diffcse import rtd_statistics
    from trainers.errors import exit_distributed_run

    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    logits, labels, mask = statistics_case()
    rows = slice(0, 1) if rank == 0 else slice(1, 3)
    stats = rtd_statistics(logits[rows], labels[rows], mask[rows])
    torch.save({k: v.item() for k, v in stats.items()}, f"{out_dir}/rank{rank}.pt")
    exit_distributed_run()  # barrier, then exit without destroying the group (as the training scripts end)
