"""``python -m eval --suite mteb``: score a sentence-transformers export on MTEB's English STS tasks (STS12-16,
STSBenchmark, SICK-R) through mteb's own evaluator (``mteb.evaluate``; Muennighoff et al., 2023, "MTEB: Massive
Text Embedding Benchmark"). ``mteb`` is optional (``pip install 'mteb>=2.26,<2.27'``); without it the command
ends with a one-line message saying so.

Data: online, mteb's own Hub datasets. Offline (``HF_HUB_OFFLINE=1``, or the Hub not reachable), the same tasks
are built from SentEval's files (``--senteval_dir``), and the output says so:

- STS12-16 and STS-B: the SentEval test sets, which MTEB hosts with the same pairs (counts, characters and
  scores compared with the statistics mteb ships for each task, printed per task);
- SICK-R: MTEB's task scores all 9,927 SICK pairs (train + trial + test), not SentEval's 4,927 test pairs, so
  the offline task pools SentEval's three SICK files.

The scores are mteb's ``main_score`` for STS (Spearman correlation of cosine similarities), x 100 as everywhere
in this repo; ``avg`` is their mean. Why they differ from ``--suite senteval`` (SICK-R's pairs, text
normalisation): docs/evaluation.md, "MTEB".
"""
from __future__ import annotations

import argparse
import logging
import socket
from pathlib import Path
from typing import Any, Mapping

from eval.sts import STS_TASKS, STSPairs, load_sts, resolve_senteval_dir

logger = logging.getLogger(__name__)

MTEB_NAMES: dict[str, str] = {"STS12": "STS12", "STS13": "STS13", "STS14": "STS14", "STS15": "STS15",
                              "STS16": "STS16", "STSBenchmark": "STSBenchmark", "SICKRelatedness": "SICK-R"}
"""Our STS task names (result keys) -> MTEB's task names, in the papers' column order."""
SENTEVAL_SPLITS: dict[str, tuple[str, ...]] = {"SICKRelatedness": ("train", "dev", "test")}
"""SentEval files pooled into one offline MTEB test set (default: the task's test split)."""
INSTALL = "pip install 'mteb>=2.26,<2.27'"
MISSING_MTEB = (f"--suite mteb needs the optional package mteb, which is not installed here: {INSTALL} "
                "(docs/evaluation.md, \"MTEB\")")


class MTEBSuiteError(RuntimeError):
    """A problem the user fixes (mteb missing, not a sentence-transformers folder); one line, exit status 1."""


def import_mteb() -> Any:
    """``mteb``, or :class:`MTEBSuiteError` with the install command."""
    try:
        import mteb
    except ImportError:
        raise MTEBSuiteError(MISSING_MTEB) from None
    return mteb


def hub_reachable(timeout: float = 3.0) -> bool:
    """False when ``HF_HUB_OFFLINE`` is set or huggingface.co:443 does not answer within ``timeout`` seconds."""
    from huggingface_hub import constants

    if constants.HF_HUB_OFFLINE:
        return False
    try:
        socket.create_connection(("huggingface.co", 443), timeout=timeout).close()
    except OSError:
        return False
    return True


def sentence_transformers_folder(path: str | Path) -> Path:
    """The sentence-transformers folder to score: ``path`` itself (it has ``modules.json``), the
    ``sentence-transformers/`` folder of an export (``<run>/export``) or of a run (``<run>``), or the one beside an
    export's plain ``hf/`` folder (``<run>/export/hf``, the folder the README's SentEval example evaluates). A run's
    folder and an export's resolve as the SentEval suite resolves them (:func:`eval.backbone.resolve_run_folder`)."""
    from eval.backbone import resolve_run_folder

    path = Path(resolve_run_folder(str(path)))
    beside_hf = [path.parent / "sentence-transformers"] if path.name == "hf" else []
    for candidate in (path, *beside_hf):
        if (candidate / "modules.json").is_file():
            return candidate
    raise MTEBSuiteError(f"{path}: no sentence-transformers folder (modules.json) here or in "
                         f"{path}/sentence-transformers; --suite mteb scores an export's sentence-transformers/ "
                         "folder (run_unsup.py writes <output_dir>/export/sentence-transformers)")


def senteval_pairs(task: str, senteval_dir: Path) -> STSPairs:
    """One MTEB task's test pairs from SentEval's files (SICK-R: all three SICK files, as MTEB)."""
    return STSPairs.concatenate([load_sts(task, senteval_dir, split) for split in SENTEVAL_SPLITS.get(task, ("test",))])


def senteval_task(mteb_task: Any, pairs: STSPairs) -> Any:
    """Give an mteb STS task ``pairs`` as its (already loaded) test split."""
    from datasets import Dataset, DatasetDict

    mteb_task.dataset = DatasetDict({"test": Dataset.from_dict(
        {"sentence1": list(pairs.sent1), "sentence2": list(pairs.sent2), "score": pairs.scores.tolist()})})
    mteb_task.data_loaded = True
    return mteb_task


def compare_with_mteb_statistics(mteb_task: Any, pairs: STSPairs) -> str:
    """``3108 pairs (mteb: 3108), 402118 characters (mteb: 402118)``: the offline set beside the statistics mteb
    ships for its own copy of the task (``None`` fields when mteb has none)."""
    try:
        stats = (mteb_task.metadata.descriptive_stats or {}).get("test") or {}
    except (OSError, ValueError):
        stats = {}
    characters = sum(len(a) + len(b) for a, b in zip(pairs.sent1, pairs.sent2))
    return (f"{len(pairs)} pairs (mteb: {stats.get('num_samples', 'n/a')}), {characters} characters "
            f"(mteb: {stats.get('number_of_characters', 'n/a')})")


def mteb_tasks(mteb: Any, offline: bool, senteval_dir: Path | None) -> tuple[list[Any], dict[str, str]]:
    """The seven tasks, built from SentEval's files when ``offline``; also returns a note per task."""
    tasks = {task.metadata.name: task for task in mteb.get_tasks(tasks=list(MTEB_NAMES.values()))}
    notes: dict[str, str] = {}
    if offline:
        assert senteval_dir is not None
        for ours, name in MTEB_NAMES.items():
            pairs = senteval_pairs(ours, senteval_dir)
            senteval_task(tasks[name], pairs)
            notes[name] = compare_with_mteb_statistics(tasks[name], pairs)
    return [tasks[name] for name in MTEB_NAMES.values()], notes


def scores_of(model_result: Any) -> dict[str, float]:
    """``{our task name: main_score x 100}`` plus ``avg``, from an ``mteb.evaluate`` result."""
    ours = {name: task for task, name in MTEB_NAMES.items()}
    results = {}
    for task_result in model_result.task_results:
        (score,) = task_result.scores["test"]  # one subset ("default") per English STS task
        results[ours[task_result.task_name]] = float(score["main_score"]) * 100.0
    results = {task: results[task] for task in STS_TASKS if task in results}
    results["avg"] = sum(results.values()) / len(results)
    return results


def run_mteb(args: argparse.Namespace) -> dict[str, Any]:
    """Score ``args.model_name_or_path`` on MTEB's English STS tasks; prints where the data came from."""
    mteb = import_mteb()
    folder = sentence_transformers_folder(args.model_name_or_path)
    if folder != Path(args.model_name_or_path):
        print(f"scoring {folder}: the sentence-transformers folder of --model_name_or_path {args.model_name_or_path} "
              "(--suite mteb needs the pooling built in)")
    if args.eval_dtype != "fp32":
        raise MTEBSuiteError("--suite mteb evaluates in fp32 only (mteb's sentence-transformers wrapper); drop "
                             "--eval_dtype bf16")
    reachable = args.mteb_data != "senteval" and hub_reachable()
    if args.mteb_data == "hub" and not reachable:
        raise MTEBSuiteError("--mteb_data hub: the Hugging Face Hub is not reachable here (HF_HUB_OFFLINE=1 or no "
                             "network); --mteb_data senteval (or auto) builds the same tasks from the SentEval files")
    offline = not reachable
    senteval_dir = resolve_senteval_dir(args.senteval_dir) if offline else None
    if offline:
        print(f"MTEB data: built from the SentEval files in {senteval_dir} (offline: "
              f"{'--mteb_data senteval' if args.mteb_data == 'senteval' else 'the Hugging Face Hub is not reachable'})"
              "; STS12-16 and STS-B are the same test sets, SICK-R pools SentEval's train + trial + test as MTEB's "
              "SICK-R does")
    else:
        print("MTEB data: mteb's own datasets from the Hugging Face Hub")
    tasks, notes = mteb_tasks(mteb, offline, senteval_dir)
    for name, note in notes.items():
        print(f"  {name}: {note}")
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(folder), device=args.device or None)
    result = mteb.evaluate(model, tasks, cache=None, encode_kwargs={"batch_size": args.batch_size},
                           show_progress_bar=False)
    results: dict[str, Any] = scores_of(result)
    results.update({"mteb_data": "senteval" if offline else "hub", "mteb_version": mteb.__version__,
                    "eval_dtype": args.eval_dtype})
    return results


def describe(results: Mapping[str, Any]) -> str:
    """The line under the table: mteb's version and where its data came from."""
    source = ("SentEval files (offline)" if results.get("mteb_data") == "senteval" else "mteb's Hub datasets")
    return f"mteb {results.get('mteb_version')}: main_score (cosine Spearman) x 100 on {source}"


__all__ = ["MISSING_MTEB", "MTEBSuiteError", "MTEB_NAMES", "compare_with_mteb_statistics", "describe",
           "hub_reachable", "import_mteb", "mteb_tasks", "run_mteb", "scores_of", "senteval_pairs",
           "sentence_transformers_folder"]
