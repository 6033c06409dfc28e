"""`CLTrainer`: the stock ``Trainer`` loop; only ``evaluate()`` (STS-B / SICK-R dev) and logging are ours.

The trainer never knows which method it trains: the model returns its loss and the metrics it wants logged, and
per-step method work (ESimCSE's momentum update) runs through :class:`OptimizerStepHook` calling the model's
``on_optimizer_step``. Training logs carry the model's metrics (averaged over steps and processes) and
``sentences_per_second``. Best-checkpoint selection is the Trainer's own (``metric_for_best_model="stsb_spearman"``,
``load_best_model_at_end``), fed by the metrics :meth:`CLTrainer.evaluate` returns.

``--torch_compile`` runs the fast path (:mod:`trainers.fast_path`): fixed-shape batches, the backbone compiled and
swapped in for each training step (:meth:`CLTrainer.fast_step`), no host-device sync in the loop. ``--step_graph``
(by default on wherever the fast path is on and nothing refuses it) captures the whole step (forward, backward,
clipping) as one CUDA graph and replays it (:mod:`trainers.step_graph`; :meth:`CLTrainer.graph_step`).

Divergence (NaN/inf) is caught without a host-device sync in the step: :meth:`CLTrainer.compute_loss` records the
first step with a non-finite loss in a device tensor (:class:`trainers.divergence.DivergenceMonitor`), which is read
where the Trainer synchronises anyway (every log, every evaluation) and before anything is written (every
checkpoint, together with a check of the weights). Training then stops with :class:`trainers.errors.TrainingDiverged`
before a non-finite checkpoint or export exists.
"""
from __future__ import annotations

import logging
import time
from contextlib import nullcontext
from typing import Any, ClassVar

import torch
from torch.nn.parallel import DistributedDataParallel
from transformers import TrainerCallback

from models.distributed import world_size
from models.module_lists import listed_parameters

from .cached_step import cached_loss, refuse_unsupported
from .curves import TrainingCurvesCallback
from .divergence import DivergenceMonitor
from .errors import UsageError
from .fast_path import (CompiledBackbone, StepSnapshot, backbone_compile_refusal, compile_mode, fixed_shape_collator,
                        regions_under, typed_checkpointing_flag)
from .keyed_dropout import keyed_step, step_draws
from .logging_window import LoggingWindow
from .process_state import first_process_values, load_process_state, process_state_files, save_process_state
from .step_graph import StepGraph, StepOutputs, step_graph_refusal, step_graph_wanted
from .trainer_adapter import TrainerAdapter, exclude_from_ddp, model_inside_wrappers, pin_tensorboard_dir

logger = logging.getLogger(__name__)


class OptimizerStepHook(TrainerCallback):
    """Calls ``model.on_optimizer_step()`` after every optimizer step (once per step under gradient accumulation)."""

    def on_optimizer_step(self, args, state, control, model=None, **kwargs):  # noqa: D102
        hook = getattr(model, "on_optimizer_step", None)
        if hook is not None:
            hook()


class CollatorEpochHook(TrainerCallback):
    """Tells a collator whose augmentations draw per epoch (``set_epoch(epoch, seed)``, e.g. ESimCSE's repetition)
    the run's seed and the epoch about to start, so the draws depend on neither the process count nor a resume."""

    def __init__(self, collator: Any) -> None:
        self.collator = collator

    def on_epoch_begin(self, args, state, control, **kwargs):  # noqa: D102
        # state.epoch is the float position in training (resumed mid-epoch: e.g. 0.5): its floor is the epoch.
        self.collator.set_epoch(int(state.epoch + 1e-6) if state.epoch else 0, args.seed)


def refuse_persistent_workers(args: Any) -> None:
    """A collator that draws per epoch (:class:`CollatorEpochHook`) cannot run in persistent worker processes: they
    keep the copy of the collator made when they started, so every later epoch would repeat the first epoch's draws
    (ESimCSE's repetitions, DiffCSE's edits). Non-persistent workers (the default) start after the epoch is set."""
    if args.dataloader_persistent_workers and args.dataloader_num_workers > 0:
        raise UsageError("--dataloader_persistent_workers true: the worker processes would keep the first epoch's "
                         "augmentation draws for every epoch (they never see the epoch change); leave it false")


class CLTrainer(TrainerAdapter):
    """``Trainer`` whose evaluation is SentEval-style STS dev: encodes STS-B dev + SICK-R dev only (about 4k
    sentences instead of the ~37k of all STS sets) and returns ``eval_stsb_spearman``, ``eval_sickr_spearman``,
    ``eval_avg_sts`` (Spearman x 100), plus transfer dev accuracies when ``args.eval_transfer``.

    Args (besides the Trainer's): ``senteval_dir``: SentEval's data directory. ``processing_class`` must be the
    tokenizer (used to encode evaluation sentences).
    """

    #: What ``evaluate()`` reads, as the Trainer's ``eval_dataset`` (the Trainer requires one for step-wise
    #: evaluation; ours names the SentEval dev sets instead of holding tensors).
    DEV_SETS: ClassVar[dict[str, list[str]]] = {"task": ["STSBenchmark/dev", "SICKRelatedness/dev"]}

    def __init__(self, *args: Any, senteval_dir: str | None = None, **kwargs: Any) -> None:
        if kwargs.get("eval_dataset") is None:
            kwargs["eval_dataset"] = self.DEV_SETS
        fast_path = getattr(kwargs.get("args"), "fast_path", False)
        if fast_path and kwargs.get("data_collator") is not None:
            model = kwargs.get("model", args[0] if args else None)
            keys = model.fixed_width_keys() if hasattr(model, "fixed_width_keys") else ()
            kwargs["data_collator"] = fixed_shape_collator(kwargs["data_collator"], keys)
        super().__init__(*args, **kwargs)
        if self.args.world_size > 1 and (own := self.model.process_local_buffers()):
            exclude_from_ddp(self.model, own)  # each process's own (trainers/process_state.py), not rank 0's
        self.args.step_graph = self.wants_step_graph()  # resolved: the compile mode and the summary read it
        self.compiled_backbone = self.compile_backbone() if fast_path else None
        self.step_graph = StepGraph(self.model, listed_parameters(self.model)) if self.args.step_graph else None
        self._reported_warmup = 0.0
        self._dev_encoder = None
        self.senteval_dir = senteval_dir
        self._metric_sums: dict[str, torch.Tensor] = {}
        self._metric_count = 0
        self._throughput_mark: tuple[float, int] | None = None
        self._parameter_count: int | None = None  # floating_point_ops' (the model's parameters never change number)
        self.divergence = DivergenceMonitor()
        self.evaluation_seconds = 0.0  # spent in evaluate() inside train(): not training throughput
        self.add_callback(OptimizerStepHook())
        self.add_callback(TrainingCurvesCallback())  # <output_dir>/training_curves.png at the end of training
        self.add_callback(LoggingWindow())  # the open logging window, in every checkpoint (trainers/logging_window.py)
        self._resumed_window: LoggingWindow | None = None  # a resumed checkpoint's, restored at the first step
        if hasattr(self.data_collator, "set_epoch"):
            refuse_persistent_workers(self.args)
            self.add_callback(CollatorEpochHook(self.data_collator))
        pin_tensorboard_dir(self)

    # ---------------------------------------------------------------- each process's own state in checkpoints
    def write_process_files(self, folder: str) -> None:
        if process_state_files(self.model, self.args.world_size):
            save_process_state(self.model, folder, self.args.process_index)

    def after_checkpoint_load(self, folder: str) -> None:
        self._resumed_window = LoggingWindow.read(folder)
        if (process_state_files(self.model, self.args.world_size)
                and not load_process_state(self.model, folder, self.args.process_index) and self.args.should_log):
            logger.warning("%s holds no process_state_<rank>.safetensors (written before each process's own buffers "
                           "were kept): every process resumes with rank 0's %s", folder,
                           ", ".join(self.model.process_local_buffers()))

    # ---------------------------------------------------------------- the fast path
    def compile_backbone(self) -> CompiledBackbone | None:
        """The fast path's compiled backbone (:mod:`trainers.fast_path`), or ``None`` (logged) where the backbone
        must stay eager; the fixed shapes and the sync-free loop apply either way."""
        chunk_size = getattr(self.args, "cache_chunk_size", None)
        refusal = backbone_compile_refusal(self.checkpointing_flag(), bool(chunk_size),
                                           keyed_masks=step_draws(self.model) is not None)
        if refusal:
            logger.warning("fast path: the backbone stays eager because %s; batches still have fixed shapes", refusal)
            return None
        step_graph = bool(getattr(self.args, "step_graph", False))
        mode = compile_mode(self.args.fast_path_mode, self.args.device, self.args.world_size, bool(self.args.bf16),
                            cached_step=bool(chunk_size), accumulation_steps=self.args.gradient_accumulation_steps,
                            model_refusal=self.model.cuda_graph_refusal(), step_graph=step_graph)
        regions = regions_under(mode, getattr(self.args, "torch_compile_regions", None), step_graph)
        self.args.torch_compile_regions = regions  # resolved: the summary reads it
        return CompiledBackbone(self.model, mode, self.args.per_device_train_batch_size,
                                backend=self.args.fast_path_backend, chunk_size=chunk_size, regions=regions)

    def checkpointing_flag(self) -> str | None:
        """Gradient checkpointing's flag as the user typed it (``CLTrainingArguments.checkpointing_flag``:
        ``--gradient_checkpointing`` or transformers' newer ``--activation_checkpointing``), ``None`` when it is off:
        what the fast path's and the step graph's reasons name."""
        return typed_checkpointing_flag(self.args)

    def wants_step_graph(self) -> bool:
        """Whether the step is captured as one CUDA graph (:mod:`trainers.step_graph`): ``--step_graph``, by default
        wherever the fast path is on and nothing refuses it; asked for where it cannot hold, the run stops here with
        the reason."""
        args, fast_path = self.args, bool(getattr(self.args, "fast_path", False))
        refusal = step_graph_refusal(
            args.device, args.world_size, args.gradient_accumulation_steps,
            cached_step=bool(getattr(args, "cache_chunk_size", None)), keyed_masks=step_draws(self.model) is not None,
            checkpointing_flag=self.checkpointing_flag(), compile_mode=args.fast_path_mode,
            model_refusal=self.model.step_graph_refusal(), fp16=bool(args.fp16)) if fast_path else None
        return step_graph_wanted(getattr(args, "step_graph", False), fast_path, refusal,
                                 on_gpu=args.device.type == "cuda")

    def fast_step(self, inputs: dict[str, Any]):
        """The context of one training step: the compiled backbone swapped in on the fast path, else nothing."""
        return nullcontext() if self.compiled_backbone is None else self.compiled_backbone.step(inputs["input_ids"])

    # ---------------------------------------------------------------- training-time metrics
    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        """The model's loss; with ``--cache_chunk_size`` in training, the cached step's (:meth:`cached_step_loss`)."""
        if self.caches(model):
            loss, metrics = self.cached_step_loss(model, inputs)
            self.record_training_outputs(loss.detach(), metrics)
            return (loss, None) if return_outputs else loss
        outputs = model(**inputs)
        if model.training:
            self.record_training_outputs(outputs.loss, outputs.metrics)
        return (outputs.loss, outputs) if return_outputs else outputs.loss

    def caches(self, model) -> bool:
        """Whether this training step is the cached step (``--cache_chunk_size``)."""
        return bool(getattr(self.args, "cache_chunk_size", None)) and model.training

    def cached_step_loss(self, model, inputs, rng_states: bool = True) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """The cached step's loss and metrics (:func:`trainers.cached_step.cached_loss`: its backward, which the stock
        step runs, replays the chunks; ``rng_states=False`` in a step graph, with row-seeded masks)."""
        refuse_unsupported(self)
        return cached_loss(model_inside_wrappers(model), inputs, self.args.cache_chunk_size,
                           autocast=self.accelerator.autocast,
                           average_gradients_over=world_size() if isinstance(model, DistributedDataParallel) else 1,
                           rng_states=rng_states)

    def record_training_outputs(self, loss: torch.Tensor, metrics: dict[str, torch.Tensor] | None) -> None:
        """A training step's loss (divergence check) and metrics (logged means), kept on the device: no sync."""
        self.divergence.record(loss, step=self.state.global_step + 1)
        if metrics:
            for name, value in metrics.items():
                self._metric_sums[name] = self._metric_sums.get(name, 0) + value.detach().float()
            self._metric_count += 1

    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        self.check_finite()  # the Trainer has just synchronised (to read the loss or the evaluation's scores)
        if "loss" in logs:
            self._log_throughput(logs)
            self._log_compile_warmup(logs)
        if "loss" in logs and self._metric_count:
            names = sorted(self._metric_sums)
            stacked = torch.stack([self._metric_sums[n] for n in names]) / self._metric_count
            stacked = self.accelerator.reduce(stacked, reduction="mean")
            logs.update({name: round(value, 4) for name, value in zip(names, stacked.tolist())})
            self._metric_sums, self._metric_count = {}, 0
        super().log(logs, start_time)

    def _log_throughput(self, logs: dict[str, float]) -> None:
        """``sentences_per_second`` (global batch, all processes) since the previous training log line. Measured
        where the Trainer already synchronises to read the loss, so it adds no host-device sync to the step."""
        now, step = time.perf_counter(), self.state.global_step
        if self._throughput_mark is not None and step > self._throughput_mark[1]:
            then, last_step = self._throughput_mark
            args = self.args
            sentences = (step - last_step) * args.train_batch_size * args.gradient_accumulation_steps * args.world_size
            logs["sentences_per_second"] = round(sentences / max(now - then, 1e-9), 1)
        self._throughput_mark = (now, step)

    def _log_compile_warmup(self, logs: dict[str, float]) -> None:
        """``compile_warmup_seconds`` (the fast path's compile time so far) on the first log line after it grew, so
        a log's throughput windows can be read as warm-up and steady state."""
        warmup = 0.0 if self.compiled_backbone is None else self.compiled_backbone.warmup_seconds
        if warmup > self._reported_warmup:
            logs["compile_warmup_seconds"] = round(warmup, 2)
            self._reported_warmup = warmup

    def training_step(self, model, inputs, num_items_in_batch=None):
        """The stock step (``compute_loss``, then the backward, scaled for gradient accumulation), inside one
        :func:`trainers.keyed_dropout.keyed_step` (row-seeded masks: the step's seed, for its forward and backward).
        A fast-path warm-up step of one process is guarded: if it fails, the state before it is restored and it runs
        again eagerly (:mod:`trainers.fast_path`)."""
        if self._throughput_mark is None:
            self._throughput_mark = (time.perf_counter(), self.state.global_step)
        if self._resumed_window is not None:  # the Trainer has just set its window to zero at the checkpoint's step
            self._resumed_window.restore(self)
            self._resumed_window = None
        if self.graph_takes(inputs):
            inputs = self.prepare_batch(inputs)
            if not self.step_graph.captured or self.step_graph.fits(inputs):
                return self.graph_step(model, inputs)
        backbone = self.compiled_backbone
        if backbone is None or self.args.world_size > 1 or not backbone.warming_up(inputs["input_ids"]):
            return self._step(model, inputs, num_items_in_batch)
        snapshot = StepSnapshot.take(self.model)
        recorded = dict(self._metric_sums), self._metric_count, self.divergence.first_bad_step
        try:
            return self._step(model, inputs, num_items_in_batch)
        except Exception as error:  # noqa: BLE001 - any failure of the compiled step: the eager step decides
            snapshot.restore(self.model)
            self._metric_sums, self._metric_count, self.divergence.first_bad_step = recorded
            backbone.give_up(error, self.state.global_step + 1)
        # outside the handler: the failed step's traceback, and the activations its frames hold, are gone
        return self._step(model, inputs, num_items_in_batch)

    def _step(self, model, inputs, num_items_in_batch):
        """The stock step in the step's keyed draws and, on the fast path, with the compiled backbones."""
        with keyed_step(self.model, inputs["input_ids"].size(0)), self.fast_step(inputs):
            return super().training_step(model, inputs, num_items_in_batch)

    # ---------------------------------------------------------------- the step as one CUDA graph
    def graph_takes(self, inputs: dict[str, Any]) -> bool:
        """Whether the step graph runs this step: a full-size batch, the model's shapes settled and the compiled
        regions past their warm-up (so the capture records compiled kernels, not a compilation)."""
        graph, backbone, input_ids = self.step_graph, self.compiled_backbone, inputs["input_ids"]
        return (graph is not None and graph.failure is None
                and input_ids.size(0) == self.args.per_device_train_batch_size
                and self.model.step_shapes_settled() and not (backbone is not None and backbone.warming_up(input_ids)))

    def graph_step(self, model, inputs: dict[str, Any]) -> torch.Tensor:
        """The step replayed from its graph, or run and captured (the first time); the loss, the model's metrics
        and the gradient norm are the graph's outputs (recorded here, outside it)."""
        graph = self.step_graph
        with keyed_step(self.model, inputs["input_ids"].size(0)) as draws:
            if draws is not None:  # row-seeded masks: the step's key, staged before the graph that reads it
                draws.stage(inputs["input_ids"].device)
            if graph.captured:
                outputs = graph.replay(inputs)
            else:
                outputs = graph.capture(inputs, lambda batch: self.step_body(model, batch))
        self.record_training_outputs(outputs.loss, outputs.metrics)
        self.step_grad_norm = outputs.grad_norm  # clipped with in the step: the Trainer's clipping returns it
        return outputs.loss

    def step_body(self, model, inputs: dict[str, Any]) -> StepOutputs:
        """What the step graph captures: the forward (with the compiled regions), the backward and the clipping to
        ``max_grad_norm`` (with clipping off, the norm alone: what the Trainer logs). Host state changes here are
        not replayed: nothing is recorded on the trainer."""
        model.train()
        with self.fast_step(inputs):
            with self.compute_loss_context_manager():
                if self.caches(model):  # row-seeded (the step graph refuses stream masks here): no RNG states
                    loss, metrics = self.cached_step_loss(model, inputs, rng_states=False)
                else:
                    outputs = model(**inputs)
                    loss, metrics = outputs.loss, outputs.metrics
            self.accelerator.backward(loss)
        parameters = self.step_graph.parameters
        max_norm = self.args.max_grad_norm if self.args.max_grad_norm > 0 else float("inf")
        grad_norm = torch.nn.utils.clip_grad_norm_(parameters, max_norm)
        metrics = {name: value.detach() for name, value in (metrics or {}).items()}
        return StepOutputs(loss.detach(), metrics, grad_norm, [param.grad for param in parameters])

    def floating_point_ops(self, inputs: dict[str, Any]) -> int:
        """The Trainer's estimate (6 x input tokens x non-embedding parameters, for ``total_flos``), with the parameter
        count taken once: the Trainer's own walks every module and parameter of the model at every step (on a GPU the
        step waits on the host)."""
        if self._parameter_count is None:
            self._parameter_count = self.model.num_parameters(exclude_embeddings=True)
        return 6 * inputs["input_ids"].numel() * self._parameter_count

    # ---------------------------------------------------------------- divergence
    def check_finite(self, weights: bool = False, before: str | None = None) -> None:
        """Raise :class:`trainers.errors.TrainingDiverged` if a step's loss was NaN/inf (or, with ``weights``, a
        parameter is): every process calls it at the same points, so all stop together."""
        self.divergence.check(self, weights=weights, before=before)

    def before_checkpoint(self) -> None:
        self.check_finite(weights=True, before=f"writing checkpoint-{self.state.global_step}")
        for callback in self.callback_handler.callbacks:  # the Trainer's restore of callbacks may have replaced it
            if isinstance(callback, LoggingWindow):
                callback.capture(self)

    # ---------------------------------------------------------------- evaluation
    def sentence_encoder(self):
        """A :class:`eval.encoder.SentenceEncoder` over the model's dev embedding (``model.dev_embed``: the test-time
        ``model.embed``, except PromptBERT's, which denoises as its code's dev evaluation did), at the run's
        ``eval_dtype`` (fp32 by default, also inside a bf16/TF32 training run: model selection ranks checkpoints by
        the same numbers the final report gives), in batches of ``eval_max_tokens`` padded tokens (0: of
        ``per_device_eval_batch_size`` x 16 sentences; the scores agree up to float rounding either way), packed
        (``eval_packing``, :mod:`eval.packing`) where the model's dev embedding hands the sentences to a backbone that
        takes packed rows and packing runs fewer tokens (the log says which)."""
        from eval.encoder import DEV_MAX_TOKENS, SentenceEncoder

        if self._dev_encoder is None:  # one per run: it keeps the dev sentences' batches between evaluations
            max_tokens = getattr(self.args, "eval_max_tokens", DEV_MAX_TOKENS)  # 0: sentence batches
            self._dev_encoder = SentenceEncoder(lambda **batch: self.model.dev_embed(**batch), self.processing_class,
                                                device=self.args.device,
                                                batch_size=self.args.per_device_eval_batch_size * 16,
                                                max_tokens=max_tokens or None,
                                                eval_dtype=getattr(self.args, "eval_dtype", "fp32"),
                                                backbone=self.model.embedding_backbone(),
                                                packing=getattr(self.args, "eval_packing", True))
        return self._dev_encoder

    def evaluate(self, eval_dataset=None, ignore_keys=None, metric_key_prefix: str = "eval") -> dict[str, float]:
        """STS-B dev (+ SICK-R dev) Spearman x 100. Every process computes it (4k sentences; a missing file stops
        them all alike), then takes the first process's values (:func:`first_process_values`): a test-time embedding
        can read process-local state (the running statistics of ``--projector batchnorm --mlp_only_train false``,
        which each process updates with its own batch), and processes that scored apart chose different best
        checkpoints, then stopped on a collective mismatch; the first process's are the scores of the weights its
        checkpoints hold."""
        from eval.sts import evaluate_sts_dev

        self.check_finite(before=f"the evaluation at step {self.state.global_step}" if self.is_in_train else None)
        model, was_training = self.model, self.model.training
        model.eval()
        started = time.perf_counter()
        try:
            encoder = self.sentence_encoder()
            show_progress = not self.args.disable_tqdm and self.is_world_process_zero()
            metrics = evaluate_sts_dev(encoder, self.senteval_dir, show_progress=show_progress,
                                       check_sizes=getattr(self.args, "check_senteval_sizes", None))
            if getattr(self.args, "eval_transfer", False):
                from eval.transfer import evaluate_transfer_dev

                metrics.update(evaluate_transfer_dev(encoder, self.senteval_dir))
        finally:
            model.train(was_training)
        metrics = first_process_values({f"{metric_key_prefix}_{name}": round(float(value), 4)
                                        for name, value in metrics.items()}, self.args.world_size)
        metrics[f"{metric_key_prefix}_runtime"] = round(time.perf_counter() - started, 2)
        if self.is_in_train:
            self.evaluation_seconds += time.perf_counter() - started
        self.log(metrics)
        self.control = self.callback_handler.on_evaluate(self.args, self.state, self.control, metrics)
        self._throughput_mark = None  # evaluation time is not training throughput
        return metrics
