"""The one place that leans on ``transformers.Trainer`` internals, for what its public API cannot express. Written
against transformers 5.23.0 (:data:`WRITTEN_FOR`); ``tests/test_trainer_adapter.py`` fails with a message naming the
member when the installed library changes one of them (:data:`RELIED_ON`).

- ``Trainer._save_checkpoint(model, trial)``: the only point that runs before every checkpoint is written. The public
  ``on_save`` callback runs after the folder exists, and with ``save_strategy="best"`` the decision to save is taken
  inside the loop after the evaluation, where no callback sees it; :meth:`TrainerAdapter.before_checkpoint` runs
  there (the divergence check of the weights: a non-finite checkpoint is never written). It is also the only point
  that runs after every file of a checkpoint is written (model, optimizer, scheduler, each process's RNG state,
  ``trainer_state.json``): there the main process writes the completion marker
  (:func:`trainers.checkpoints.write_completion_marker`) that a resume checks.
- ``Trainer._clip_grad_norm(model)`` and ``Trainer._get_grad_norm(model, grad_norm)``: the gradient clipping
  (``--max_grad_norm``) and the logged ``grad_norm``. The Trainer hands ``model.parameters()`` to ``accelerate``, which
  walks every module and parameter of the model at every step and scans the list again for DTensors before torch's
  ``clip_grad_norm_``: on a GPU, where the fast path's step waits on the host, a fifth of the step (3.1 of 15.6 ms on an
  H100, docs/benchmarks.md). :meth:`TrainerAdapter._clip_grad_norm` gives torch's ``clip_grad_norm_`` the same
  parameters, listed by one walk and re-checked in a flat pass (``models.module_lists``): the same norm and the same
  clipped gradients, bit for bit (``tests/test_trainer_adapter.py``). Runs the Trainer treats apart (DeepSpeed, FSDP,
  XLA, SageMaker, gradients on several device meshes) take its own route.
  A step that computed (and clipped with) its norm itself, the step graph's (:mod:`trainers.step_graph`), hands it
  over in :attr:`TrainerAdapter.step_grad_norm`: both hooks return it once instead of computing their own.
- ``Trainer._prepare_inputs(inputs)``: the batch moved to the device as the stock step moves it
  (:meth:`TrainerAdapter.prepare_batch`), for a step that runs without the stock ``training_step``.
- ``Trainer._save_checkpoint`` also rotates the checkpoints (``--save_total_limit``) right after the main process's
  own files, before the other processes have written theirs: a kill then can leave no complete checkpoint at all.
  The adapter saves with the limit off and rotates (``transformers.trainer_utils.rotate_checkpoints``) once the new
  checkpoint's marker is written. Each checkpoint also holds the run's ``run_arguments.json``
  (:attr:`TrainerAdapter.run_arguments`), which a resume compares with its own (:mod:`trainers.resume_settings`).
- ``Trainer._load_rng_state(checkpoint)``: a resume on another number of processes than the run's takes the first
  process's RNG state on every process (:meth:`TrainerAdapter._load_rng_state`), where the Trainer found no file.
- ``Trainer._load_from_checkpoint(resume_from_checkpoint, model)`` and ``Trainer._load_best_model()``: a resume of a
  run's last checkpoint loads it, and the best one, without training (:meth:`TrainerAdapter.load_finished_run`):
  ``train()`` would take one step past ``max_steps`` from there.
- ``DistributedDataParallel._set_params_and_buffers_to_ignore_for_model(module, names)`` (torch's way, private
  until https://github.com/pytorch/pytorch/issues/43690 settles an API): buffers a model names as each process's own
  (ESimCSE's per-process queue) are left out of DDP's broadcasts from rank 0 (:func:`exclude_from_ddp`). Each process
  writes its own into every checkpoint (:meth:`TrainerAdapter.write_process_files`, before the processes meet) and
  a resume loads them back (:meth:`TrainerAdapter.after_checkpoint_load`, after ``Trainer._load_from_checkpoint``).
- ``Trainer._tr_loss``, ``Trainer._globalstep_last_logged`` and ``Trainer._total_loss_scalar`` (attributes set by
  ``_inner_training_loop``, transformers 5.20 to 5.25): the open logging window (the losses summed since the last
  training log, and its step), which no checkpoint holds; :meth:`TrainerAdapter.logging_window` reads it for a
  checkpoint and :meth:`TrainerAdapter.reopen_logging_window` puts it back in a resumed run
  (:mod:`trainers.logging_window`; ``tests/test_resume.py`` and ``tests/test_ddp.py`` compare a resumed run's log
  with the uninterrupted run's, which fails if they change).
- ``TensorBoardCallback.logging_dir`` and ``transformers.integrations.integration_utils.default_logdir``: the
  callback picks its folder at ``on_train_begin``, but a run's 'before training' evaluation logs earlier;
  :func:`pin_tensorboard_dir` gives it the folder the Trainer would, up front.

Everything else the training core uses is public: ``compute_loss`` and ``training_step`` overrides, callbacks,
``accelerator.autocast`` (the cached step is a loss whose backward replays the chunks, ``trainers/cached_step.py``,
so the stock step scales and backpropagates it). Not ``accelerator.unwrap_model``: :func:`model_inside_wrappers`.
"""
from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

import torch
from accelerate.utils import DistributedType, is_compiled_module
from torch.nn.parallel import DistributedDataParallel
from transformers import Trainer
from transformers.integrations import TensorBoardCallback
from transformers.integrations.integration_utils import default_logdir
from transformers.trainer_callback import TrainerState
from transformers.trainer_pt_utils import safe_globals
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR, rotate_checkpoints
from transformers.training_args import ParallelMode

from models.module_lists import listed_parameters

from .checkpoints import TRAINER_STATE, rng_state_files, write_completion_marker, written_processes
from .resume_settings import write_run_arguments

WRITTEN_FOR = "5.23.0"
#: (owner, member, its parameters) this module relies on; checked by tests/test_trainer_adapter.py.
RELIED_ON: tuple[tuple[Any, str, tuple[str, ...]], ...] = (
    (Trainer, "_save_checkpoint", ("self", "model", "trial")),
    (TensorBoardCallback, "__init__", ("self", "tb_writer")),
    (Trainer, "_clip_grad_norm", ("self", "model")),
    (Trainer, "_get_grad_norm", ("self", "model", "grad_norm")),
    (Trainer, "_has_mixed_mesh_grads", ("self", "model")),
    (Trainer, "_prepare_inputs", ("self", "inputs")),
    (Trainer, "_load_from_checkpoint", ("self", "resume_from_checkpoint", "model")),
    (Trainer, "_load_best_model", ("self",)),
    (Trainer, "_load_rng_state", ("self", "checkpoint")),
    (DistributedDataParallel, "_set_params_and_buffers_to_ignore_for_model",
     ("module", "params_and_buffers_to_ignore")),
)
#: Where ``accelerate``'s ``clip_grad_norm_`` is torch's ``clip_grad_norm_`` over ``list(model.parameters())`` after
#: ``unscale_gradients()`` (one process, DDP): the runs :meth:`TrainerAdapter._clip_grad_norm` lists once.
PLAIN_GRADIENTS = (DistributedType.NO, DistributedType.MULTI_GPU, DistributedType.MULTI_CPU)


def rng_state_for_layout(state: dict[str, Any], distributed: bool) -> dict[str, Any]:
    """The first process's RNG state (a Trainer ``rng_state*.pth``) as a restore in another layout reads it: the
    Trainer saves a multi-process run's CUDA states as a list, one per visible device (``get_rng_state_all``), and
    a one-process run's as one tensor (``get_rng_state``), and restores each with its twin, so the other form failed
    there ("Didn't manage to set back the RNG states of the CUDA"). The first process's device state (device 0's),
    as one tensor, or for every visible device under several processes."""
    cuda = state.get("cuda")
    if cuda is None:
        return state
    first = cuda[0] if isinstance(cuda, (list, tuple)) else cuda
    return {**state, "cuda": [first] * max(torch.cuda.device_count(), 1) if distributed else first}


class TrainerAdapter(Trainer):
    """``Trainer`` with a hook before every checkpoint is written (:meth:`before_checkpoint`), whose checkpoints end
    with a completion marker once every process has written its part."""

    #: The current step's gradient norm before clipping when the step computed it and clipped with it itself (the
    #: step graph's), or ``None``: the clipping hooks return it once, then it is ``None`` again.
    step_grad_norm: torch.Tensor | None = None
    #: The run's parsed arguments (``command_line.pipeline.describe_arguments``), written into every checkpoint.
    run_arguments: dict[str, Any] | None = None

    def prepare_batch(self, inputs: dict[str, Any]) -> dict[str, Any]:
        """``inputs`` on the device, as the stock ``training_step`` prepares them."""
        return self._prepare_inputs(inputs)

    def take_step_grad_norm(self) -> torch.Tensor | None:
        grad_norm, self.step_grad_norm = self.step_grad_norm, None
        return grad_norm

    def before_checkpoint(self) -> None:
        """Hook: runs before every checkpoint is written (``checkpoint-<global_step>``). Does nothing here."""

    def write_process_files(self, folder: str) -> None:
        """Hook: runs on every process once the Trainer wrote its files into the checkpoint ``folder``, before the
        processes meet and the marker is written. Does nothing here."""

    def after_checkpoint_load(self, folder: str) -> None:
        """Hook: runs on every process after a checkpoint's weights were loaded for a resume. Does nothing here."""

    def logging_window(self) -> tuple[int, torch.Tensor]:
        """The Trainer's open logging window: the step of its last training log and the sum of the losses since, on
        the device (this process's)."""
        return self._globalstep_last_logged, self._tr_loss

    def reopen_logging_window(self, last_logged_step: int, loss_sum: float) -> None:
        """Put a checkpoint's open logging window back into a resumed run, whose Trainer set it to zero at the
        checkpoint's step: its next log averages the losses since ``last_logged_step``, as the uninterrupted run's
        did; its ``train_loss`` stays the mean of the losses of the steps this process ran."""
        self._tr_loss.add_(loss_sum)
        self._total_loss_scalar -= loss_sum
        self._globalstep_last_logged = last_logged_step

    def _load_from_checkpoint(self, resume_from_checkpoint, model=None) -> None:
        super()._load_from_checkpoint(resume_from_checkpoint, model)
        self.after_checkpoint_load(resume_from_checkpoint)

    def _load_rng_state(self, checkpoint) -> None:
        """The Trainer's restore of the RNG states, each process its own file. A resume on another number of
        processes than the run's (the same global batch: ``trainers.checkpoints.processes_change_error``) finds no
        file under the name the Trainer looks for (``rng_state.pth`` on one process, ``rng_state_<rank>.pth`` on
        several) and restored nothing: the row-seeded masks' step seeds (Python's ``random``:
        ``trainers.keyed_dropout.keyed_step``) started over. There every process takes the first process's state
        instead: every process of a run is seeded alike and draws one step seed a step, so that is each process's
        state of those draws (the Trainer's own restore, from a temporary folder holding the first process's state
        under the name it looks for, its CUDA part in this layout's form: :func:`rng_state_for_layout`)."""
        run = written_processes(checkpoint) if checkpoint is not None else None
        if run is None or run == self.args.world_size:
            return super()._load_rng_state(checkpoint)
        first = Path(checkpoint) / rng_state_files(run)[0]
        with safe_globals():  # the Trainer's own allow-list for the numpy state inside
            state = torch.load(first, weights_only=True)
        distributed = self.args.parallel_mode == ParallelMode.DISTRIBUTED
        with tempfile.TemporaryDirectory() as folder:
            name = rng_state_files(self.args.world_size)[self.args.process_index]
            torch.save(rng_state_for_layout(state, distributed), Path(folder) / name)
            super()._load_rng_state(folder)

    def _lists_parameters(self, model) -> bool:
        """Whether the gradient norm can be torch's ``clip_grad_norm_`` over the listed parameters (what
        ``accelerate`` computes on these runs, after walking the model)."""
        return (self.accelerator.distributed_type in PLAIN_GRADIENTS and not self.is_fsdp_enabled
                and not self.is_deepspeed_enabled and not (self.args.fp16 and _sagemaker_mp())
                and not self._has_mixed_mesh_grads(model))

    def _clip_grad_norm(self, model):
        """The Trainer's clipping to ``max_grad_norm`` (returns the norm before clipping), over the parameters listed
        once instead of ``model.parameters()`` walked at every step; a norm the step clipped with itself as is."""
        if self.step_grad_norm is not None:
            return self.take_step_grad_norm()
        if not self._lists_parameters(model):
            return super()._clip_grad_norm(model)
        self.accelerator.unscale_gradients()  # fp16's loss scale (a no-op otherwise), as accelerate does first
        return torch.nn.utils.clip_grad_norm_(listed_parameters(model), self.args.max_grad_norm)

    def _get_grad_norm(self, model, grad_norm=None):
        """The logged ``grad_norm``: the clipping's, or with clipping off (``--max_grad_norm 0``) the norm alone, over
        the parameters listed once."""
        if grad_norm is None and self.step_grad_norm is not None:
            grad_norm = self.take_step_grad_norm()
        if grad_norm is None and self._lists_parameters(model):
            self.accelerator.unscale_gradients()
            grad_norm = torch.nn.utils.clip_grad_norm_(listed_parameters(model), float("inf"))
        return super()._get_grad_norm(model, grad_norm=grad_norm)

    def _save_checkpoint(self, model, trial) -> None:
        self.before_checkpoint()
        limit, self.args.save_total_limit = self.args.save_total_limit, None  # rotated below, once complete
        try:
            super()._save_checkpoint(model, trial)
        finally:
            self.args.save_total_limit = limit
        run_dir = self.args.output_dir
        folder = os.path.join(run_dir, f"{PREFIX_CHECKPOINT_DIR}-{self.state.global_step}")
        self.write_process_files(folder)
        self.accelerator.wait_for_everyone()  # every process's rng_state_<rank>.pth (and own files) are written
        if self.args.should_save:
            if self.run_arguments is not None:
                write_run_arguments(folder, self.run_arguments)
            write_completion_marker(folder, processes=self.args.world_size)
            rotate_checkpoints(output_dir=run_dir, save_total_limit=limit,
                               best_model_checkpoint=self.state.best_model_checkpoint, use_mtime=True)

    def load_finished_run(self, checkpoint: str) -> None:
        """Take the run of ``checkpoint``, its last step, as trained: its weights and state, then (with
        ``--load_best_model_at_end``) its best checkpoint's weights, as ``train()`` ends."""
        self._load_from_checkpoint(checkpoint)
        self.state = TrainerState.load_from_json(os.path.join(checkpoint, TRAINER_STATE))
        best = self.state.best_model_checkpoint
        if self.args.load_best_model_at_end and best and os.path.isdir(best):
            self._load_best_model()


def exclude_from_ddp(model: torch.nn.Module, names: list[str]) -> None:
    """Leave the parameters and buffers ``names`` of ``model`` (not yet wrapped) out of DDP's synchronisation: its
    broadcast from rank 0 when it wraps the model and at every forward."""
    DistributedDataParallel._set_params_and_buffers_to_ignore_for_model(model, names)


def _sagemaker_mp() -> bool:
    from transformers.utils import is_sagemaker_mp_enabled

    return is_sagemaker_mp_enabled()


def model_inside_wrappers(model: torch.nn.Module) -> torch.nn.Module:
    """The model inside the Trainer's wrappers: DDP's and ``DataParallel``'s ``.module``, a whole-model
    ``torch.compile``'s ``_orig_mod``. Not ``accelerator.unwrap_model``: before accelerate 1.13 it took a model holding
    compiled submodules (the fast path's layers, swapped in for the step) for one compiled by regions and read
    ``model.__dict__["_orig_mod"]``, a KeyError that turned the cached step's compiled warm-up into the eager step for
    the whole run (accelerate 1.10-1.12, ``utils/other.py`` ``extract_model_from_parallel``)."""
    while True:
        if isinstance(model, (DistributedDataParallel, torch.nn.DataParallel)):
            model = model.module
        elif is_compiled_module(model):
            model = model._orig_mod
        else:
            return model


def pin_tensorboard_dir(trainer: Trainer) -> None:
    """Give the TensorBoard callback its folder now (``<output_dir>/<default_logdir()>``, what the Trainer gives it
    at ``on_train_begin``): a writer opened by an earlier log would write every curve to ./runs."""
    for callback in trainer.callback_handler.callbacks:
        if isinstance(callback, TensorBoardCallback) and callback.logging_dir is None:
            callback.logging_dir = os.path.join(trainer.args.output_dir, default_logdir())


__all__ = ["PLAIN_GRADIENTS", "RELIED_ON", "TrainerAdapter", "WRITTEN_FOR", "model_inside_wrappers",
           "pin_tensorboard_dir"]
