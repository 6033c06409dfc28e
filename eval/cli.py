"""``python -m eval``: evaluate a sentence encoder on SentEval's STS / transfer tasks and run analyses.

The counterpart of SimCSE's ``evaluation.py`` (Gao et al., 2021): ``--mode dev`` reports STS-B dev and SICK-R dev
(what training selects checkpoints on), ``--mode test``/``fasttest`` the seven STS test sets in the papers' column
order, STS12-16 in the "all" setting. ``fasttest`` only changes the transfer classifier's settings.

Example::

    python -m eval --model_name_or_path outputs/unsup-simcse --pooler cls_before_pooler \\
        --mode test --task_set sts --output_json results/simcse.json

The CLI parses, dispatches and prints; every metric is computed in :mod:`eval.sts` / :mod:`eval.transfer` and
every analysis in :mod:`eval.analysis` (imported only when asked for, so STS works without them).
"""
from __future__ import annotations

import argparse
import importlib
import json
import logging
import math
import numbers
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from eval.provenance import ProvenanceError, preset_of, training_record
from eval.senteval_sizes import SIZES_ENV, check_sizes_default
from eval.sts import (DEV_TASKS, STS_TASKS, SentEvalDataError, evaluate_sts, nan_spearman_note, resolve_senteval_dir,
                      table_average)
from models.poolers import POOLER_TYPES

logger = logging.getLogger(__name__)

STS_COLUMNS: dict[str, str] = {
    "STS12": "STS12", "STS13": "STS13", "STS14": "STS14", "STS15": "STS15", "STS16": "STS16",
    "STSBenchmark": "STSB", "SICKRelatedness": "SICKR", "avg": "Avg.",
}
"""Result key -> table header, in the papers' column order."""
#: ``--tasks`` names the printed table uses for STS tasks whose result key differs (``STSB``, ``SICKR``).
TASK_ALIASES: dict[str, str] = {header: key for key, header in STS_COLUMNS.items() if header != key and key != "avg"}


class MissingComponentError(RuntimeError):
    """An optional evaluation module (transfer, analyses) is not available in this checkout."""


@dataclass(frozen=True)
class Analysis:
    """One ``--flag`` that runs ``eval.analysis.<function>(encoder, senteval_dir, [query,] out_dir) -> dict``."""

    flag: str
    function: str
    help: str
    takes_query: bool = False
    #: The sets it reads, whatever ``--mode`` (``eval.analysis``): said in ``--help``, the record and, under
    #: ``--mode dev``, a warning.
    reads: str = "STS-B test"


ANALYSES: tuple[Analysis, ...] = (
    Analysis("align_uniform", "run_align_uniform", "alignment and uniformity (Wang & Isola, 2020)"),
    Analysis("retrieval", "run_retrieval", "retrieval of paraphrases among STS-B sentences"),
    Analysis("cosine_dist", "run_cosine_distribution", "cosine distribution of STS-B pairs by gold score"),
    Analysis("length_bias", "run_length_bias", "similarity vs. sentence-length difference",
             reads="the seven STS test sets"),
    Analysis("nn_query", "run_nearest_neighbours", "nearest neighbours of TEXT in STS-B", takes_query=True),
)
#: The ``--suite mteb`` run reads none of these flags (``eval.mteb_suite.run_mteb``: the folder's own
#: sentence-transformers pipeline on MTEB's seven English STS test sets); given there, they are refused.
SENTEVAL_ONLY_FLAGS = ("pooler", "mode", "task_set", "tasks", "no_check_senteval_sizes", "max_tokens", "no_packing",
                       "max_length", "seed", "analysis_dir", *(analysis.flag for analysis in ANALYSES))
#: The flags that store into another name (``--no_packing`` sets ``packing``).
NEGATED_FLAGS = {"no_check_senteval_sizes": "check_senteval_sizes", "no_packing": "packing"}


# ----------------------------------------------------------------------------------------------- arguments


def positive_int(text: str) -> int:
    """An argparse type: a whole number of at least 1 (a count of sentences or tokens)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected at least 1, got {value}")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m eval",
        description="Evaluate a sentence encoder on SentEval STS / transfer tasks (SimCSE's protocol).",
    )
    parser.add_argument("--model_name_or_path", required=True,
                        help="this repo's checkpoint, a sentence-transformers folder, or a Hugging Face model")
    parser.add_argument("--pooler", choices=POOLER_TYPES, default=None,
                        help="default: the checkpoint's own embedding / the sentence-transformers pipeline / "
                             "the run's own for this repo's hf/ export / pooler_output ('cls') for another plain "
                             "Hugging Face model")
    parser.add_argument("--suite", choices=("senteval", "mteb"), default="senteval",
                        help="senteval (default): this repo's SentEval protocol; mteb: MTEB's English STS tasks "
                             "through mteb's evaluator (optional package; eval/mteb_suite.py)")
    parser.add_argument("--mteb_data", choices=("auto", "hub", "senteval"), default="auto",
                        help="--suite mteb: mteb's Hub datasets, or the same tasks built from the SentEval files "
                             "(auto: SentEval when the Hub is offline or unreachable)")
    parser.add_argument("--mode", choices=("dev", "test", "fasttest"), default="test",
                        help="dev: STS-B dev + SICK-R dev; test/fasttest: the 7 STS test sets")
    parser.add_argument("--task_set", choices=("sts", "transfer", "full"), default="sts")
    parser.add_argument("--tasks", nargs="+", default=None,
                        help="explicit task list (overrides --task_set); STS names go to STS, others to transfer")
    parser.add_argument("--senteval_dir", default=os.environ.get("SENTEVAL_DIR", "data/senteval"),
                        help="SentEval's data/downstream folder (default: $SENTEVAL_DIR, else data/senteval)")
    parser.add_argument("--no_check_senteval_sizes", dest="check_senteval_sizes", action="store_false",
                        default=None, help="evaluate your own STS-format files: skip the check that every STS file "
                                           "has SentEval's line count (also: SENTEVAL_CHECK_SIZES=0)")
    parser.add_argument("--output_json", type=Path, default=None)
    parser.add_argument("--training_run", type=Path, default=None, metavar="DIR",
                        help="the training run's --output_dir: its --fidelity preset, command line and resolved "
                             "settings (DIR/run_arguments.json) are recorded in --output_json (eval/provenance.py; "
                             "the table scripts pass it)")
    parser.add_argument("--batch_size", type=positive_int, default=128, help="sentences per forward pass")
    parser.add_argument("--max_tokens", type=positive_int, default=None,
                        help="tokens per forward pass instead of --batch_size sentences: packed side by side in "
                             "rows where the backbone allows (eval/packing.py), else length-sorted and cut where "
                             "padding is fewest; the scores agree up to float rounding")
    parser.add_argument("--no_packing", dest="packing", action="store_false",
                        help="with --max_tokens: padded passes, never packed rows")
    parser.add_argument("--max_length", type=positive_int, default=None,
                        help="truncation length in tokens (default: the tokenizer's model_max_length)")
    parser.add_argument("--device", default=None, help="default: cuda when available, else cpu")
    parser.add_argument("--eval_dtype", choices=("fp32", "bf16"), default="fp32",
                        help="fp32 (default: autocast and TF32 off, as the papers evaluated) or bf16 autocast; "
                             "recorded in --output_json")
    parser.add_argument("--seed", type=int, default=1111,
                        help="transfer tasks' seed: the classifiers' and the cross-validation folds' (SentEval's "
                             "1111; SentEval keeps its folds at 1111 whatever its seed)")
    parser.add_argument("--analysis_dir", type=Path, default=None,
                        help="where analyses write (default: the --output_json folder, else outputs/analysis)")
    for analysis in ANALYSES:
        if analysis.takes_query:
            parser.add_argument(f"--{analysis.flag}", metavar="TEXT", default=None,
                                help=f"{analysis.help} (reads {analysis.reads}, whatever --mode)")
        else:
            parser.add_argument(f"--{analysis.flag}", action="store_true",
                                help=f"{analysis.help} (reads {analysis.reads}, whatever --mode)")
    return parser


def check_suite_flags(args: argparse.Namespace, parser: argparse.ArgumentParser) -> None:
    """Refuse, before anything loads, a flag the chosen ``--suite`` does not read: ``--suite mteb`` scores the
    folder's own pipeline on MTEB's seven English STS test sets (:data:`SENTEVAL_ONLY_FLAGS` were dropped silently,
    and the printout's header repeated ``--pooler`` and ``--mode`` as if they applied); ``--mteb_data`` is mteb's."""
    if args.suite == "mteb":
        destinations = {flag: NEGATED_FLAGS.get(flag, flag) for flag in SENTEVAL_ONLY_FLAGS}
        given = [f"--{flag}" for flag, dest in destinations.items() if getattr(args, dest) != parser.get_default(dest)]
        if given:
            parser.error(f"--suite mteb scores the folder's own sentence-transformers pipeline on MTEB's seven "
                         f"English STS test sets and reads no {' / '.join(given)}: drop "
                         f"{'it' if len(given) == 1 else 'them'}, or evaluate with --suite senteval (the default)")
    elif args.mteb_data != parser.get_default("mteb_data"):
        parser.error(f"--mteb_data {args.mteb_data} chooses --suite mteb's data: pass --suite mteb, or drop it")


@dataclass(frozen=True)
class Plan:
    """Which tasks run: STS tasks (and their split) and transfer tasks (``None`` = the transfer module's set)."""

    sts_tasks: tuple[str, ...]
    sts_split: str
    run_transfer: bool
    transfer_tasks: tuple[str, ...] | None


def plan_tasks(args: argparse.Namespace, parser: argparse.ArgumentParser) -> Plan:
    """Resolve ``--tasks`` / ``--task_set`` / ``--mode`` into the tasks to run."""
    split = "dev" if args.mode == "dev" else "test"
    if args.tasks:
        named = [TASK_ALIASES.get(task, task) for task in args.tasks]  # the table's headers name tasks too
        tasks = list(dict.fromkeys(named))  # each task once, first order: a repeat would weigh twice in "avg"
        if len(tasks) < len(named):
            repeats = [f"{given} ({task})" if given != task else task
                       for index, (given, task) in enumerate(zip(args.tasks, named)) if task in named[:index]]
            logger.info("--tasks names %s more than once: evaluating each task once", ", ".join(repeats))
        try:
            from eval.transfer import TRANSFER_TASKS
        except ImportError:  # the optional transfer module is absent: its run says so (MissingComponentError)
            TRANSFER_TASKS = None
        unknown = [task for task in tasks if task not in STS_TASKS and TRANSFER_TASKS is not None
                   and task not in TRANSFER_TASKS]
        if unknown:
            parser.error(f"--tasks {' '.join(unknown)}: not a task; STS: {', '.join(STS_TASKS)} (or the table's "
                         f"{', '.join(TASK_ALIASES)}); transfer: {', '.join(TRANSFER_TASKS)}")
        sts = tuple(task for task in tasks if task in STS_TASKS)
        transfer = tuple(task for task in tasks if task not in STS_TASKS)
        plan = Plan(sts, split, bool(transfer), transfer or None)
    else:
        sts = (DEV_TASKS if split == "dev" else STS_TASKS) if args.task_set in ("sts", "full") else ()
        plan = Plan(sts, split, args.task_set in ("transfer", "full"), None)
    without_dev = [task for task in plan.sts_tasks if split == "dev" and task not in DEV_TASKS]
    if without_dev:
        parser.error(f"{', '.join(without_dev)} have only a test split; --mode dev evaluates {' and '.join(DEV_TASKS)}")
    return plan


def check_one_process(parser: argparse.ArgumentParser, environ: Mapping[str, str] | None = None) -> None:
    """Refuse, before anything loads, a launch that started several processes (``torchrun --nproc_per_node N -m
    eval``, ``accelerate launch -m eval`` under a multi-GPU config: ``WORLD_SIZE`` above 1). The evaluation is one
    process's job: each process would run all of it on the same device (``--device``'s default, ``cuda`` = GPU 0)
    and write the same ``--output_json`` and analysis files at once."""
    env = os.environ if environ is None else environ
    processes = int(env.get("WORLD_SIZE", "1") or 1)
    if processes > 1:
        parser.error(f"this launch started {processes} processes (WORLD_SIZE={processes}), and each would run the "
                     f"whole evaluation on the same device and write the same files; the evaluation runs in one "
                     f"process: python -m eval ... (--device cuda:N picks a GPU)")


def check_device_and_output(args: argparse.Namespace, parser: argparse.ArgumentParser) -> None:
    """Refuse, before anything loads, a ``--device`` torch does not know or does not have here (a CUDA device on a
    CPU build: an AssertionError traceback once the model moved), and an ``--output_json`` whose folder cannot be
    written (a traceback after the whole evaluation)."""
    from eval.writable import creatable_problem

    if args.device is not None:
        import torch

        try:
            device = torch.device(args.device)
        except RuntimeError:
            parser.error(f"--device {args.device}: not a device; pass cpu, cuda or cuda:N (or leave it out: CUDA "
                         "when available, else the CPU)")
        present = torch.cuda.is_available() and (device.index or 0) < torch.cuda.device_count()
        if device.type == "cuda" and not present:
            found = (f"{torch.cuda.device_count()} CUDA device(s)" if torch.cuda.is_available() else
                     "no CUDA device" + ("" if torch.version.cuda else " (this torch is a CPU build)"))
            parser.error(f"--device {args.device}: torch sees {found} here; pass --device cpu, or leave --device out")
    if args.output_json is not None:
        problem = creatable_problem(args.output_json.parent)
        if problem:
            parser.error(f"--output_json {args.output_json}: {problem}; choose a folder you can write to")


# ----------------------------------------------------------------------------------------------- running


def _import(module: str, attribute: str, purpose: str) -> Callable[..., Any]:
    try:
        return getattr(importlib.import_module(module), attribute)
    except (ModuleNotFoundError, AttributeError) as exc:
        raise MissingComponentError(f"{purpose} needs {module}.{attribute}, which is not available: {exc}") from exc


def run_transfer(encoder: Any, senteval_dir: Path, args: argparse.Namespace, plan: Plan) -> dict[str, Any]:
    """SentEval transfer tasks through :func:`eval.transfer.evaluate_transfer`; its ``avg`` becomes ``transfer_avg``."""
    evaluate_transfer = _import("eval.transfer", "evaluate_transfer", "--task_set transfer/full")
    results = dict(evaluate_transfer(encoder, senteval_dir, mode=args.mode, tasks=plan.transfer_tasks, seed=args.seed))
    if "avg" in results:
        results["transfer_avg"] = results.pop("avg")
    return results


def analysis_dir(args: argparse.Namespace) -> Path:
    if args.analysis_dir is not None:
        return args.analysis_dir
    return args.output_json.parent if args.output_json is not None else Path("outputs/analysis")


def selected_analyses(args: argparse.Namespace) -> list[Analysis]:
    """The analyses of :data:`ANALYSES` whose flag ``args`` sets."""
    return [analysis for analysis in ANALYSES if getattr(args, analysis.flag) not in (None, False)]


def run_analyses(encoder: Any, senteval_dir: Path, args: argparse.Namespace) -> dict[str, Any]:
    """Run every requested analysis of :data:`ANALYSES`; their result dicts are merged."""
    selected = selected_analyses(args)
    merged: dict[str, Any] = {}
    if not selected:
        return merged
    out_dir = analysis_dir(args)
    out_dir.mkdir(parents=True, exist_ok=True)
    if args.mode == "dev":
        logger.warning("--mode dev scores the dev sets, but %s", "; ".join(
            f"--{analysis.flag} reads {analysis.reads}" for analysis in selected))
    for analysis in selected:
        function = _import("eval.analysis", analysis.function, f"--{analysis.flag}")
        query = (getattr(args, analysis.flag),) if analysis.takes_query else ()
        merged.update(function(encoder, senteval_dir, *query, out_dir))
    return merged


def _is_number(value: Any) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


#: The decimals the analyses' numbers keep (alignment 0.2514: two decimals hid gaps under 0.005 between models, and
#: their own files under ``--analysis_dir`` keep them all).
ANALYSIS_DIGITS = 4


def round_results(results: Mapping[str, Any], digits: int = 2) -> dict[str, Any]:
    """Round every number (recursively) to ``digits`` decimals, the ``analysis`` section's to
    :data:`ANALYSIS_DIGITS`; NaN/inf (e.g. a constant prediction's Spearman) become ``None`` so the JSON stays valid;
    other values pass through."""
    def _round(value: Any, places: int) -> Any:
        if isinstance(value, Mapping):
            return {key: _round(item, places) for key, item in value.items()}
        if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
            return int(value)  # counts stay integers
        if _is_number(value):
            return round(float(value), places) if math.isfinite(value) else None
        return value

    return {key: _round(value, ANALYSIS_DIGITS if key == "analysis" else digits) for key, value in results.items()}


def format_table(results: Mapping[str, Any], columns: Mapping[str, str]) -> str:
    """A two-line table (headers, values) of the ``columns`` present in ``results``, in ``columns`` order."""
    keys = [key for key in columns if key in results and not isinstance(results[key], Mapping)]
    cells = [(columns[key], f"{results[key]:.2f}" if _is_number(results[key]) else "n/a") for key in keys]
    widths = [max(len(header), len(value)) for header, value in cells]
    return "\n".join(
        " | ".join(cell[row].rjust(width) for cell, width in zip(cells, widths)) for row in (0, 1)
    )


def evaluate(args: argparse.Namespace, plan: Plan) -> dict[str, Any]:
    """Load the encoder, run the planned tasks and analyses, and return the (unrounded) results."""
    from eval.loading import load_encoder

    if args.check_senteval_sizes is False:  # every loader (STS, analyses) reads its default from the environment
        os.environ[SIZES_ENV] = "0"
    senteval_dir = resolve_senteval_dir(args.senteval_dir)
    encoder = load_encoder(args.model_name_or_path, args.pooler, device=args.device,
                           batch_size=args.batch_size, max_tokens=args.max_tokens, max_length=args.max_length,
                           eval_dtype=args.eval_dtype, packing=args.packing)
    results: dict[str, Any] = {}
    if plan.sts_tasks:
        scores = evaluate_sts(encoder, senteval_dir, tasks=plan.sts_tasks, split=plan.sts_split)
        results.update(scores, avg=table_average(scores, plan.sts_tasks))
    if plan.run_transfer:
        results.update(run_transfer(encoder, senteval_dir, args, plan))
    analyses = run_analyses(encoder, senteval_dir, args)
    if analyses:
        results["analysis"] = analyses
    results[EVALUATION_RECORD] = evaluation_record(args, plan, encoder)
    results["eval_dtype"] = args.eval_dtype  # the precision every score above was computed at
    return results


#: The results JSON's record of how its scores were computed (:func:`evaluation_record`).
EVALUATION_RECORD = "evaluation"


def evaluation_record(args: argparse.Namespace, plan: Plan, encoder: Any) -> dict[str, Any]:
    """How the scores of a results JSON were computed, which its numbers alone do not say: the model and its
    sentence embedding as loaded (the pooler the folder's config chose where ``--pooler`` was left out), the mode
    and the split of the STS tasks (STS-B and SICK-R have a dev and a test split: a dev score reads as a test one),
    the tasks run (the ``avg`` is theirs), the truncation length, whether the STS files were checked to be
    SentEval's (size checks; the transfer files always are: ``transfer_size_checks``) and the transfer seed."""
    record = {"model_name_or_path": str(args.model_name_or_path), "embedding": encoder.embedding,
              "mode": args.mode, "sts_split": plan.sts_split if plan.sts_tasks else None,
              "sts_tasks": list(plan.sts_tasks), "transfer_tasks": [], "max_length": encoder.max_length,
              "check_senteval_sizes": check_sizes_default()}
    if plan.run_transfer:
        tasks = plan.transfer_tasks or _import("eval.transfer", "TRANSFER_TASKS", "--task_set transfer/full")
        # the transfer files are checked against SentEval's sizes whatever --no_check_senteval_sizes (STS's only)
        record.update(transfer_tasks=list(tasks), transfer_seed=args.seed, transfer_size_checks=True)
    analyses = {analysis.flag: analysis.reads for analysis in selected_analyses(args)}
    if analyses:
        record["analyses"] = analyses  # the sets each read, whatever --mode
    return record


def _report(results: Mapping[str, Any], wall_time: float, args: argparse.Namespace) -> None:
    print(f"\n{args.model_name_or_path} (suite: {args.suite}, pooler: {args.pooler or 'default'}, mode: {args.mode}, "
          f"precision: {args.eval_dtype})")
    if any(key in results for key in STS_TASKS):
        print(format_table(results, STS_COLUMNS))
        undefined = [STS_COLUMNS[key] for key in STS_TASKS if key in results and results[key] is None]  # nan
        if undefined:
            print(f"n/a ({', '.join(undefined)}): {nan_spearman_note('pair of the set')}")
    transfer_keys = [key for key in results
                     if key not in STS_COLUMNS and key not in ("analysis", "eval_dtype", "mteb_data", "mteb_version",
                                                               "fidelity", "training", EVALUATION_RECORD)
                     and not key.endswith("_dev")]
    if transfer_keys:
        print(format_table(results, {key: "Avg." if key == "transfer_avg" else key for key in transfer_keys}))
    if "training" in results:
        print(f"trained with --fidelity {preset_of(results)} (recorded from {results['training']['run_arguments']})")
    print(f"wall time: {wall_time:.1f} s")


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """Parse ``argv``, evaluate, print the table, write ``--output_json``; returns the rounded results.

    Data and model-loading problems (and an unreadable ``--training_run``) exit with a one-line ``error: ...``
    message and status 1.
    """
    parser = build_parser()
    args = parser.parse_args(argv)
    check_one_process(parser)
    check_suite_flags(args, parser)
    plan = plan_tasks(args, parser)
    check_device_and_output(args, parser)
    if not logging.getLogger().handlers:
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    from eval.loading import ModelLoadingError  # torch/transformers: imported after argument errors are reported

    from eval.mteb_suite import MTEBSuiteError, describe, run_mteb

    start = time.perf_counter()
    try:  # the training record first: a wrong --training_run fails before minutes of evaluation
        record = training_record(args.training_run) if args.training_run is not None else {}
        # the record goes first, after rounding (the recorded settings keep their exact values)
        results = {**record, **round_results(run_mteb(args) if args.suite == "mteb" else evaluate(args, plan))}
    except (SentEvalDataError, ModelLoadingError, MissingComponentError, MTEBSuiteError, ProvenanceError) as exc:
        print(f"error: {' '.join(str(exc).split())}", file=sys.stderr)
        raise SystemExit(1) from None
    _report(results, time.perf_counter() - start, args)
    if args.suite == "mteb":
        print(describe(results))
    if args.output_json is not None:
        args.output_json.parent.mkdir(parents=True, exist_ok=True)
        args.output_json.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
        logger.info("results written to %s", args.output_json)
    return results
