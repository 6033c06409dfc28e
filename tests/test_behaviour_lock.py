"""Behaviour lock: the loss and gradient norm of the first 3 training steps of every method (and of the composed
variants) through the command line, on a tiny model with a fixed seed, equal the values recorded before the
architecture redesign (issue 12): bit-identical with ``CSE_LOCK_EXACT=1`` (on the machine type that recorded them),
elsewhere to float32's reordering error (:func:`float32_tolerance`).

The values live in ``tests/data/behaviour_lock.json``. They were recorded on the code *before* the redesign and must
never be re-recorded to make a refactoring pass: a change that moves them is a change of behaviour. (To record them
for a new case only: ``CSE_RECORD_BEHAVIOUR_LOCK=1 python -m pytest tests/test_behaviour_lock.py -k NEW_CASE``.)

Another CPU computes the same sums in another order: ATen's kernels for its capability (``ATEN_CPU_CAPABILITY``
default / avx2 / avx512: 1, 8 or 16 float32 lanes) and the thread count (partial sums per thread) reorder float32
additions, never what is added. ``.ci/run`` runs this file under each capability with 1 and 2 threads
(``CSE_LOCK_THREADS``); the last two tests show that the tolerance still catches a behaviour change as small as
``--temp 0.0501`` for 0.05 or one dropout-mask element flipped.
"""
from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pytest
import torch

import run_diffcse
import run_unsup
from bench.backbone_sweep import recorded_trainer_logs
from tests.tiny import FAST_TRAINING_ARGS, WORDS, save_tiny_backbone, save_tiny_generator, tiny_corpus

LOCK_FILE = Path(__file__).parent / "data" / "behaviour_lock.json"
RECORD = os.environ.get("CSE_RECORD_BEHAVIOUR_LOCK") == "1"
#: ``CSE_LOCK_EXACT=1``: demand bit-identical values (on the machine type that recorded them).
EXACT = os.environ.get("CSE_LOCK_EXACT") == "1"
#: Intra-op threads of the runs (``CSE_LOCK_THREADS``, default 1): the thread count splits sums into partial sums.
THREADS = int(os.environ.get("CSE_LOCK_THREADS", "1"))
#: float32's unit roundoff: the relative error of one rounding (2^-24).
UNIT_ROUNDOFF = 2.0 ** -24
STEPS = 3

#: case -> (script, flags). Every method with its paper defaults, each fidelity preset, and the compositions the
#: config allows (SimCSE++'s parts on ESimCSE and DiffCSE, the noise study, BarlowTwins, S-SimCSE's "w/o sd").
CASES: dict[str, tuple[str, list[str]]] = {
    "simcse": ("unsup", ["--method", "simcse"]),
    "sup_simcse": ("sup", ["--method", "sup_simcse", "--hard_negative_weight", "0.5"]),
    "esimcse": ("unsup", ["--method", "esimcse", "--queue_size", "12"]),
    "esimcse_official_code": ("unsup", ["--method", "esimcse", "--queue_size", "12", "--fidelity", "official_code"]),
    "esimcse_plus_simcse_pp": ("unsup", ["--method", "esimcse", "--queue_size", "12", "--off_dropout", "true",
                                         "--dcl_weight", "0.1"]),
    "simcse_pp": ("unsup", ["--method", "simcse_pp"]),
    "simcse_pp_paper": ("unsup", ["--method", "simcse_pp", "--fidelity", "paper"]),
    "s_simcse": ("unsup", ["--method", "s_simcse"]),
    "s_simcse_per_pass": ("unsup", ["--method", "s_simcse", "--sentence_wise_dropout", "false",
                                    "--dropout_sample_per_op", "false", "--dropout_dist", "normal"]),
    "simcse_noise_neg_minus": ("unsup", ["--method", "simcse", "--noise_study", "neg_minus", "--noise_samples", "3"]),
    "simcse_noise_pos_plus": ("unsup", ["--method", "simcse", "--noise_study", "pos_plus"]),
    "simcse_barlow": ("unsup", ["--method", "simcse", "--barlow_weight", "0.1", "--barlow_pad", "4"]),
    "simcse_avg_temp": ("unsup", ["--method", "simcse", "--pooler_type", "avg", "--temp", "0.07"]),
    "diffcse": ("diffcse", []),
    "diffcse_official_code": ("diffcse", ["--fidelity", "official_code", "--condition_before_projector", "true"]),
    "diffcse_insert": ("diffcse", ["--rtd_edit", "insert", "--masking_ratio", "0.2"]),
    "diffcse_plus_simcse_pp": ("diffcse", ["--off_dropout", "true", "--dcl_weight", "0.1", "--lambda_weight", "0.05"]),
    # Issue 15 (recorded when added): row-seeded masks, and the cached step (--cache_chunk_size 3 in a batch of 8,
    # which turns row-seeded masks on), which must log what the uncached row-seeded step logs (the test below).
    "simcse_row_seeded": ("unsup", ["--method", "simcse", "--dropout_masks", "row_seeded"]),
    "simcse_cached": ("unsup", ["--method", "simcse", "--cache_chunk_size", "3"]),
    "s_simcse_row_seeded": ("unsup", ["--method", "s_simcse", "--dropout_masks", "row_seeded"]),
    "s_simcse_cached": ("unsup", ["--method", "s_simcse", "--cache_chunk_size", "3"]),
    "diffcse_row_seeded": ("diffcse", ["--dropout_masks", "row_seeded"]),
    "diffcse_cached": ("diffcse", ["--cache_chunk_size", "3"]),
    # Issue 23 (recorded when added): PromptBERT, its official-code preset, row-seeded masks and the cached step
    "promptbert": ("unsup", ["--method", "promptbert"]),
    "promptbert_official_code": ("unsup", ["--method", "promptbert", "--fidelity", "official_code"]),
    "promptbert_row_seeded": ("unsup", ["--method", "promptbert", "--dropout_masks", "row_seeded"]),
    "promptbert_cached": ("unsup", ["--method", "promptbert", "--cache_chunk_size", "3"]),
}
#: cached case -> the uncached case whose steps it must reproduce (to float rounding: the chunks sum in another order)
CACHED_TWINS = {"simcse_cached": "simcse_row_seeded", "s_simcse_cached": "s_simcse_row_seeded",
                "diffcse_cached": "diffcse_row_seeded", "promptbert_cached": "promptbert_row_seeded"}


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    root = tmp_path_factory.mktemp("lock")
    encoder = save_tiny_backbone(root / "encoder", seed=0)
    generator = save_tiny_generator(root / "generator")
    import random

    rng = random.Random(0)
    sentence = lambda: " ".join(rng.choices(WORDS, k=rng.randint(4, 9)))  # noqa: E731
    sup = root / "nli.csv"
    sup.write_text("sent0,sent1,hard_neg\n" + "".join(f"{sentence()},{sentence()},{sentence()}\n" for _ in range(32)))
    return {"encoder": encoder, "generator": generator, "unsup": tiny_corpus(root / "corpus.txt"), "sup": sup}


def float32_tolerance(parameters: int) -> float:
    """Relative tolerance of a case's recorded loss and gradient norm on another CPU: ``sqrt(n) * u`` for a model of
    ``n`` trainable parameters (0 with ``CSE_LOCK_EXACT=1``).

    Rounding errors of a float32 sum of ``n`` terms add like a random walk, so summing them in another order moves
    the sum by about ``sqrt(n) * u`` of its size (u = 2^-24). The longest sums of a step run over its ``n``
    trainable parameters (the gradient norm, and through the optimizer's update every later loss depends on all of
    them), hence ``sqrt(n) * u``: 8.4e-6 for the tiny BERT of every unsupervised case (n = 19,658), 1.2e-5 for
    DiffCSE's encoder and discriminator (n = 41,494). Measured (issue 21) under default / avx2 / avx512 with 1 and 2
    threads: the largest deviation of any recorded value is 0.16 of its tolerance (2.0e-6, DiffCSE's cached run).
    It is an estimate, not a worst-case bound (``n * u`` would hide real changes); the last two tests show that a
    0.2% temperature change and one flipped dropout-mask element move values by 2.7 to 530 times it.
    """
    return 0.0 if EXACT else math.sqrt(parameters) * UNIT_ROUNDOFF


def first_steps(case: str, inputs, tmp_path, extra: tuple[str, ...] = ()) -> dict[str, list[float]]:
    """Run the case's script (with ``extra`` flags) for 3 steps; the logged loss and grad_norm of each step, and
    the number of trainable parameters (``parameters``)."""
    script, flags = CASES[case]
    corpus = inputs["sup"] if script == "sup" else inputs["unsup"]
    common = ["--model_name_or_path", str(inputs["encoder"]), "--train_file", str(corpus), "--max_steps", str(STEPS),
              "--eval_strategy", "no", "--output_dir", str(tmp_path / "run"), "--seed", "7",
              "--max_seq_length", "16"]
    previous_threads = torch.get_num_threads()
    torch.set_num_threads(THREADS)
    try:
        with recorded_trainer_logs() as (logged, trainers):
            if script == "diffcse":
                run_diffcse.main(common + ["--generator_name", str(inputs["generator"])] + flags + FAST_TRAINING_ARGS
                                 + list(extra))
            else:
                run_unsup.main(common + flags + FAST_TRAINING_ARGS + list(extra))
    finally:
        torch.set_num_threads(previous_threads)
    assert len(logged) == STEPS, logged
    return {"loss": [row["loss"] for row in logged], "grad_norm": [row["grad_norm"] for row in logged],
            "parameters": sum(p.numel() for p in trainers[0].model.parameters() if p.requires_grad)}


def deviations(measured: dict, recorded: dict) -> list[str]:
    """Every logged value of ``measured`` farther from ``recorded`` than :func:`float32_tolerance` allows."""
    tolerance = float32_tolerance(measured["parameters"])
    return [f"{key}[step {step + 1}] {value!r} vs recorded {locked!r}: relative "
            f"{abs(value - locked) / abs(locked):.2e} > {tolerance:.2e}" for key in ("loss", "grad_norm")
            for step, (value, locked) in enumerate(zip(measured[key], recorded[key]))
            if abs(value - locked) > tolerance * abs(locked)]


@pytest.fixture(scope="module")
def lock() -> dict:
    return json.loads(LOCK_FILE.read_text()) if LOCK_FILE.exists() else {}


@pytest.mark.parametrize("case", list(CASES))
def test_first_three_steps_are_unchanged(case, inputs, lock, tmp_path):
    measured = first_steps(case, inputs, tmp_path)
    if RECORD:
        stored = json.loads(LOCK_FILE.read_text()) if LOCK_FILE.exists() else {}
        stored[case] = {key: measured[key] for key in ("loss", "grad_norm")}
        LOCK_FILE.parent.mkdir(parents=True, exist_ok=True)
        LOCK_FILE.write_text(json.dumps(stored, indent=1, sort_keys=True) + "\n")
        pytest.skip(f"recorded {case}")
    assert case in lock, f"no recorded values for {case!r} in {LOCK_FILE}"
    assert deviations(measured, lock[case]) == [], case
    assert all(v > 0 for v in measured["grad_norm"]), "a step without gradient locks nothing"


@pytest.mark.parametrize("cached_case", list(CACHED_TWINS))
def test_cached_runs_log_the_uncached_runs_steps(cached_case, lock):
    """Through the command line, 3 optimizer steps: ``--cache_chunk_size 3`` logs the losses and gradient norms of
    the uncached run with ``--dropout_masks row_seeded`` (recorded values, each checked against the code above)."""
    cached, uncached = lock[cached_case], lock[CACHED_TWINS[cached_case]]
    for key in ("loss", "grad_norm"):
        assert cached[key] == pytest.approx(uncached[key], rel=1e-5, abs=0), (cached_case, key)
    assert cached["loss"] != pytest.approx(lock[cached_case.replace("_cached", "")]["loss"], rel=1e-3), \
        "row-seeded masks must differ from the stream masks' run (else the comparison proves nothing)"


# ---------------------------------------------------------------------- the tolerance still sees behaviour changes
def test_a_temperature_of_0_0501_instead_of_0_05_fails_the_lock(inputs, lock, tmp_path):
    measured = first_steps("simcse", inputs, tmp_path, extra=("--temp", "0.0501"))
    assert deviations(measured, lock["simcse"]), "a 0.2% temperature change went unseen"


def test_one_flipped_dropout_mask_element_fails_the_lock(inputs, lock, tmp_path, monkeypatch):
    """The first dropout of the run (the embeddings' dropout in step 1) with ONE element's mask flipped: kept
    becomes dropped (or dropped becomes kept, rescaled by 1/(1-p)); every other mask and draw is unchanged."""
    original = torch.nn.Dropout.forward
    flipped: list[int] = []

    def flip_once(self, x: torch.Tensor) -> torch.Tensor:
        out = original(self, x)
        if not self.training or self.p == 0 or flipped:
            return out
        out = out.clone()
        first = out.view(-1)
        first[0] = 0.0 if first[0] != 0 else x.reshape(-1)[0] / (1 - self.p)
        flipped.append(1)
        return out

    monkeypatch.setattr(torch.nn.Dropout, "forward", flip_once)
    measured = first_steps("simcse", inputs, tmp_path)
    assert flipped == [1]
    assert deviations(measured, lock["simcse"]), "a flipped dropout mask element went unseen"
