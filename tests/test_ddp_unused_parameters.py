"""DDP's ``find_unused_parameters`` is decided from the model (trainers/unused_parameters.py): off where every backbone
parameter reaches the output (no per-step graph search, no warning on every process), on where one does not
(XLNet's ``mask_emb``), and a ``false`` from the command line that would stop DDP at the second step is refused at
the start. Every method's own modules are covered by tests/test_ddp.py, whose runs all train with the decided value."""
from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from tests.launch import ENTRY_POINTS_WORKER, run_torchrun
from tests.test_unusable_backbones import tiny_xlnet
from tests.tiny import FAST_TRAINING_ARGS, save_tiny_backbone, tiny_corpus
from trainers.errors import UsageError
from trainers.methods import build_model
from trainers.unused_parameters import (choose_find_unused_parameters, describe, parameters_without_gradient,
                                        unused_backbone_parameters)

#: What torch prints on every process when the search found nothing.
TORCH_WARNING = "did not find any unused parameters in the forward pass"


def test_the_probe_lists_exactly_the_parameters_a_forward_leaves_without_gradient(tmp_path):
    """BERT: none. XLNet: ``mask_emb`` (read only with a permutation mask), and without ``token_type_ids`` also its
    segment parameters (``r_s_bias`` and ``seg_embed`` of each of the 2 layers), as a backward of the output shows."""
    bert = build_model("simcse", str(save_tiny_backbone(tmp_path / "bert")), attn_implementation="eager").encoder
    assert parameters_without_gradient(bert) == []
    xlnet = build_model("simcse", str(tiny_xlnet(tmp_path / "xlnet")), attn_implementation="eager",
                        pooler_type="avg").encoder
    assert parameters_without_gradient(xlnet, token_type_ids=True) == ["mask_emb"]
    segment = [f"layer.{i}.rel_attn.{name}" for i in range(2) for name in ("r_s_bias", "seg_embed")]
    assert parameters_without_gradient(xlnet) == ["mask_emb", *segment]
    # the same, written out: which parameters one backward of the output reaches
    ids = torch.tensor([[1, 2, 3, 4]])
    xlnet.eval()
    xlnet(input_ids=ids, attention_mask=torch.ones_like(ids), token_type_ids=torch.zeros_like(ids))[0].sum().backward()
    assert [name for name, param in xlnet.named_parameters() if param.grad is None] == ["mask_emb"]


def test_the_probe_leaves_no_trace(tmp_path):
    """Training mode restored, no ``.grad`` written, no random number drawn."""
    model = build_model("esimcse", str(save_tiny_backbone(tmp_path / "bert")), attn_implementation="eager")
    model.train()
    rng = torch.get_rng_state()
    assert unused_backbone_parameters(model, token_type_ids=True) == []
    assert model.training and model.encoder.training
    assert all(param.grad is None for param in model.parameters())
    assert torch.equal(torch.get_rng_state(), rng)


def test_only_trainable_backbones_are_probed(tmp_path):
    """ESimCSE's momentum encoder is frozen (never in DDP's reduction): only the encoder is probed."""
    model = build_model("esimcse", str(save_tiny_backbone(tmp_path / "bert")), attn_implementation="eager")
    assert list(model.trainable_backbones()) == ["encoder"]


def args(world_size: int, given: bool | None = None, checkpointing: bool = False) -> SimpleNamespace:
    return SimpleNamespace(world_size=world_size, ddp_find_unused_parameters=given,
                           gradient_checkpointing=checkpointing, should_log=True)


@pytest.fixture(scope="module")
def tokenizer():
    """What the decision reads of a BERT-style tokenizer: its inputs include ``token_type_ids``."""
    return SimpleNamespace(model_input_names=["input_ids", "token_type_ids", "attention_mask"])


@pytest.mark.parametrize("backbone, processes, given, checkpointing, decided", [
    ("bert", 2, None, False, False),   # nothing unused: no search
    ("xlnet", 2, None, False, True),   # mask_emb: the search stays on
    ("bert", 1, None, False, None),    # one process: no DDP, left alone
    ("xlnet", 2, True, False, True),   # the command line's value
    ("bert", 2, False, False, False),
    ("bert", 2, True, False, True),
    ("xlnet", 2, None, True, None),    # gradient checkpointing: the Trainer's own False
])
def test_the_decision(tmp_path, tokenizer, backbone, processes, given, checkpointing, decided):
    folder = save_tiny_backbone(tmp_path / "bert") if backbone == "bert" else tiny_xlnet(tmp_path / "xlnet")
    model = build_model("simcse", str(folder), attn_implementation="eager", pooler_type="avg")
    training_args = args(processes, given, checkpointing)
    choose_find_unused_parameters(model, training_args, tokenizer)
    assert training_args.ddp_find_unused_parameters is decided


def test_false_from_the_command_line_is_refused_where_a_parameter_is_unused(tmp_path, tokenizer):
    model = build_model("simcse", str(tiny_xlnet(tmp_path / "xlnet")), attn_implementation="eager",
                        pooler_type="avg")
    with pytest.raises(UsageError, match=r"--ddp_find_unused_parameters false: 1 backbone parameter receives no "
                                         r"gradient \(encoder\.mask_emb\), so DDP would stop at the second step"):
        choose_find_unused_parameters(model, args(2, False), tokenizer)


def test_describe():
    assert describe(["a"]) == "1 backbone parameter receives no gradient (a)"
    assert describe(list("abcde")) == "5 backbone parameters receive no gradient (a, b, c and 2 more)"


def test_two_processes_search_for_unused_parameters_only_where_there_are_some(tmp_path):
    """Through run_unsup.py under torchrun: a BERT run trains without the search (torch's warning, printed by every
    process when the search finds nothing, is gone); an XLNet run keeps it, saying why once; an XLNet run with
    ``--ddp_find_unused_parameters false`` stops at the start with the reason, not at the second step."""
    corpus = tiny_corpus(tmp_path / "corpus.txt", n=32)

    def argv(backbone: Path, run: str, *extra: str) -> list[str]:
        return ["--model_name_or_path", str(backbone), "--train_file", str(corpus), "--max_steps", "3",
                "--eval_strategy", "no", "--save_strategy", "no", "--load_best_model_at_end", "false",
                "--pooler_type", "avg", "--log_level", "info", "--output_dir", str(tmp_path / run),
                *FAST_TRAINING_ARGS, "--per_device_train_batch_size", "4", *extra]

    bert, xlnet = save_tiny_backbone(tmp_path / "bert"), tiny_xlnet(tmp_path / "xlnet")
    decided = "DDP looks for unused parameters at every step"
    runs = [["run_unsup", argv(bert, "bert")], ["run_unsup", argv(xlnet, "xlnet")]]  # one launch, BERT first
    output = run_torchrun([str(ENTRY_POINTS_WORKER)], env={"ENTRY_POINT_RUNS": json.dumps(runs)})
    # XLNet's tokenizer gives no token_type_ids, so its segment parameters are unused too
    unused = ("5 backbone parameters receive no gradient (encoder.mask_emb, encoder.layer.0.rel_attn.r_s_bias, "
              "encoder.layer.0.rel_attn.seg_embed and 2 more)")
    assert TORCH_WARNING not in output and output.count(decided) == 1, output[-3000:]
    assert output.count(f"{decided}: {unused}") == 1, output[-3000:]
    for run in ("bert", "xlnet"):
        assert (tmp_path / run / "export" / "hf" / "model.safetensors").is_file()
    refused = run_torchrun(["run_unsup.py", *argv(xlnet, "refused", "--ddp_find_unused_parameters", "false")],
                           returncode=1)
    assert (f"run_unsup.py: error: --ddp_find_unused_parameters false: {unused}, so DDP would stop at the second "
            "step") in refused
    # no worker's traceback (torchrun prints its own)
    assert "[rank0]: Traceback" not in refused and "RuntimeError" not in refused
