"""`info_nce` against a written-out loop over SimCSE's Eq. 1 (unsupervised) and Eq. 5 (supervised)."""
import math

import pytest
import torch

from models.losses import info_nce


def cos(a, b):
    dot = sum(x * y for x, y in zip(a, b))
    return dot / (math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b)))


def eq1_loop(z1, z2, tau):
    """l_i = -log exp(sim(h_i,h_i+)/tau) / sum_j exp(sim(h_i,h_j+)/tau), mean over i."""
    z1, z2 = z1.tolist(), z2.tolist()
    n, total = len(z1), 0.0
    for i in range(n):
        numerator = math.exp(cos(z1[i], z2[i]) / tau)
        denominator = sum(math.exp(cos(z1[i], z2[j]) / tau) for j in range(n))
        total += -math.log(numerator / denominator)
    return total / n


def eq5_loop(z1, z2, z3, tau, w):
    """Denominator adds sum_j alpha^[i=j] exp(sim(h_i,h_j-)/tau) with alpha = e^w."""
    z1, z2, z3 = z1.tolist(), z2.tolist(), z3.tolist()
    n, total = len(z1), 0.0
    for i in range(n):
        numerator = math.exp(cos(z1[i], z2[i]) / tau)
        denominator = sum(math.exp(cos(z1[i], z2[j]) / tau) for j in range(n))
        denominator += sum((math.exp(w) if i == j else 1.0) * math.exp(cos(z1[i], z3[j]) / tau) for j in range(n))
        total += -math.log(numerator / denominator)
    return total / n


@pytest.mark.parametrize("tau", [0.05, 0.5, 1.0])
def test_info_nce_matches_eq1(tau):
    g = torch.Generator().manual_seed(0)
    z1, z2 = torch.randn(5, 7, generator=g, dtype=torch.float64), torch.randn(5, 7, generator=g, dtype=torch.float64)
    assert info_nce(z1, z2, tau).item() == pytest.approx(eq1_loop(z1, z2, tau), abs=1e-6)


@pytest.mark.parametrize("w", [0.0, 0.7, -1.3])
def test_info_nce_matches_eq5_with_hard_negatives(w):
    g = torch.Generator().manual_seed(1)
    z1, z2, z3 = (torch.randn(4, 6, generator=g, dtype=torch.float64) for _ in range(3))
    got = info_nce(z1, z2, 0.1, hard_negatives=z3, hard_negative_weight=w).item()
    assert got == pytest.approx(eq5_loop(z1, z2, z3, 0.1, w), abs=1e-6)


def test_info_nce_is_scale_invariant_and_unnormalised_inputs_ok():
    """Cosine similarity: raw (unnormalised) inputs and rescaled inputs give the same loss."""
    g = torch.Generator().manual_seed(2)
    z1, z2 = torch.randn(6, 5, generator=g), torch.randn(6, 5, generator=g)
    assert info_nce(3.0 * z1, 0.2 * z2, 0.05).item() == pytest.approx(info_nce(z1, z2, 0.05).item(), rel=1e-5)


def test_perfect_alignment_gives_low_loss_and_gradients_flow():
    z = torch.eye(4, requires_grad=True)
    loss = info_nce(z, z.detach().clone(), 0.05)
    assert loss.item() < 1e-6
    z2 = torch.randn(4, 4, requires_grad=True)
    info_nce(z, z2, 0.05).backward()
    assert z.grad is not None and z2.grad is not None
