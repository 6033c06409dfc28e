"""Shared pytest fixtures: the real SentEval folder (optional), a tiny random BERT, a small SentEval-layout folder.

Tests never download: the hub is switched offline before transformers is imported.
"""
from __future__ import annotations

import os
import random
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


def _share_the_cores_between_workers() -> None:
    """Under pytest-xdist, each worker's torch (and every process it starts) gets its share of the cores as intra-op
    threads, set before torch is imported (an ``OMP_NUM_THREADS`` the caller set is kept): with torch's default, as
    many threads as cores in every worker, 2 workers on 2 cores run 4 threads that wait on each other. Measured on a
    2-core AMD EPYC, tests/test_step_graph.py + test_cached_step.py in 2 workers: 105 s -> 86 s. The tests that
    start processes already gave them one thread (tests/launch.py, tests/cli.py)."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "0"))
    if workers > 1 and "OMP_NUM_THREADS" not in os.environ:
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
        os.environ["OMP_NUM_THREADS"] = str(max(1, cores // workers))


_share_the_cores_between_workers()

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

import pytest  # noqa: E402

from tiny import WORDS, save_tiny_backbone  # noqa: E402  (tests/tiny.py: tiny backbones built in code)

from eval import fp32_precision as _fp32_precision  # noqa: E402


def pytest_collection_finish(session: pytest.Session) -> None:
    """Moves what every worker holds for good (the imported libraries, the heavy ones the tests load lazily imported
    now, and the collected tests) out of the garbage collector's reach (``gc.freeze``): each training run starts
    with the Trainer's ``gc.collect()`` (``accelerator.free_memory()``), which otherwise walks those ~600,000
    objects every time. Measured on tests/test_training.py, test_resume.py and test_divergence.py in one process:
    57 s -> 39 s (the collections' time 12.9 s -> 1.9 s). Nothing frozen is garbage: it lives until the process
    ends; what the tests create later is collected as before."""
    import gc

    import matplotlib.backends.backend_agg  # noqa: F401  (eval/plots.py's canvas)
    import matplotlib.figure  # noqa: F401
    import scipy.stats  # noqa: F401
    import sentence_transformers  # noqa: F401
    import sklearn.linear_model  # noqa: F401
    import torch._dynamo  # noqa: F401
    import torch._inductor.compile_fx  # noqa: F401

    gc.collect()
    gc.freeze()


@pytest.fixture(scope="module", autouse=True)
def what_a_test_module_leaves_frozen():
    """After each test module, what outlives it (torch.compile's graphs, guards and sympy caches, the session's
    fixtures) joins the objects frozen at collection (:func:`pytest_collection_finish`): the Trainer's
    ``gc.collect()`` at every training run otherwise walks all the modules before have left, more with every compiled
    test (0.23 s a collection late in a worker). Torn down after the module's own fixtures (an autouse fixture is set
    up first), so what they held is collected first."""
    import gc

    yield
    gc.collect()
    gc.freeze()


@pytest.fixture(autouse=True)
def training_curves_not_drawn(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch):
    """A training run in a test leaves its picture undrawn: ``eval.plots.plot_training_curves`` returns its path and
    writes nothing (matplotlib takes about 0.5 s a run: 130 s of the suite's 1,434 s of tests, 269 runs, measured
    2026-11-29). The tests of the picture are marked ``draws_curves`` and draw it; everything else the callback does
    (``trainer_state.json``) is unchanged. The torchrun worker of the two-process runs does the same
    (tests/workers/entry_point_runs.py); the scripts run as commands (tests/cli.py) draw theirs."""
    if request.node.get_closest_marker("draws_curves") is None:
        monkeypatch.setattr("eval.plots.plot_training_curves", lambda runs, path, title: Path(path))


#: torch's fp32 precision settings as a fresh process has them (read before any test ran), for the tests that must
#: start from that state (tests/test_tf32_state.py: transformers' enable_tf32 sets only the generic value, which a
#: backend leaf set explicitly by an earlier test, e.g. through the legacy setter, would override).
PRISTINE_FP32_STATE = (_fp32_precision.snapshot(), _fp32_precision.legacy_settings())


@pytest.fixture(scope="session")
def pristine_fp32_state():
    """:data:`PRISTINE_FP32_STATE`: (per-backend snapshot, legacy settings) of a fresh process."""
    return PRISTINE_FP32_STATE


@pytest.fixture(scope="session")
def senteval_dir() -> Path:
    """The real SentEval ``data/downstream`` folder from ``$SENTEVAL_DIR``; skips the test when it is not there."""
    value = os.environ.get("SENTEVAL_DIR")
    if not value:
        pytest.skip("SENTEVAL_DIR is not set (point it at SentEval's data/downstream folder to run real-data tests)")
    path = Path(value)
    if not path.is_dir():
        pytest.skip(f"SENTEVAL_DIR={value} is not a directory")
    return path


@pytest.fixture(scope="session")
def tiny_bert_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A saved tiny random ``BertModel`` (hidden 32, 2 layers, 2 heads, intermediate 37) + ``BertTokenizerFast``
    over a small word-list vocabulary; loadable with ``AutoModel``/``AutoTokenizer.from_pretrained``."""
    return save_tiny_backbone(tmp_path_factory.mktemp("tiny_bert"), arch="bert", seed=0)


@pytest.fixture(scope="session")
def backbone(tiny_bert_dir: Path) -> Path:
    """The tiny random BERT + tokenizer that method tests train from (read-only: copy it before changing it)."""
    return tiny_bert_dir


@pytest.fixture(autouse=True)
def torch_threads_as_found():
    """Every test ends with the intra-op thread count it began with: a test that runs a benchmark's ``main`` with
    ``--threads`` (which sets the process's count, as a command should) left it for the tests after it in the same
    worker (seen in CI: tests/test_bench.py's ``--threads 1`` run left a worker single-threaded, and a later DiffCSE
    run there drew other tokens than the same run with two threads)."""
    import torch

    threads = torch.get_num_threads()
    yield
    if torch.get_num_threads() != threads:
        torch.set_num_threads(threads)


@pytest.fixture
def torch_single_thread(torch_threads_as_found):
    """Run a test with one intra-op thread (restored afterwards by :func:`torch_threads_as_found`): on a small shared
    CPU box, tiny models are many times faster single-threaded than with threads that fight other processes for the
    cores."""
    import torch

    torch.set_num_threads(1)


# ----------------------------------------------------------------------------------------------- SentEval fixture

STS_FIXTURE_SUBSETS = {
    "STS12": ("MSRpar", "MSRvid", "SMTeuroparl", "surprise.OnWN", "surprise.SMTnews"),
    "STS13": ("FNWN", "headlines", "OnWN"),
    "STS14": ("deft-forum", "deft-news", "headlines", "images", "OnWN", "tweet-news"),
    "STS15": ("answers-forums", "answers-students", "belief", "headlines", "images"),
    "STS16": ("answer-answer", "headlines", "plagiarism", "postediting", "question-question"),
}
"""Subsets per year (SentEval's lists, written out independently of eval.sts so the loader is checked)."""

MSRPAR_INPUT = (
    "the cat sits on the  table .\tthe cat sits on a table .\n"
    "  a man plays the guitar  \ta man plays a piano .\n"
    "the dog runs in the park .\tthe dog runs .\n"
    "an old king reads a book .\tthe old king reads .\n"
)
MSRPAR_GOLD = "4.5\n1.2\n\n3.0\n"  # the third pair is unscored and must be dropped
"""STS12 MSRpar, hand-written: double/leading/trailing spaces (SentEval's split/join round trip), a blank gold."""


def _sentence(rng: random.Random) -> str:
    return " ".join(rng.choices(WORDS, k=rng.randint(3, 9))) + " ."


def _pairs(rng: random.Random, n: int) -> list[tuple[str, str, float]]:
    return [(_sentence(rng), _sentence(rng), round(rng.uniform(0, 5), 2)) for _ in range(n)]


def write_sts_fixture(root: Path, pairs_per_file: int = 4, seed: int = 0) -> Path:
    """Write a small SentEval ``downstream`` folder (STS12-16, STS-B, SICK) of random tiny-vocabulary pairs."""
    rng = random.Random(seed)
    for year, subsets in STS_FIXTURE_SUBSETS.items():
        folder = root / "STS" / f"{year}-en-test"
        folder.mkdir(parents=True)
        for subset in subsets:
            if (year, subset) == ("STS12", "MSRpar"):
                inputs, golds = MSRPAR_INPUT, MSRPAR_GOLD
            else:
                rows = _pairs(rng, pairs_per_file)
                inputs = "".join(f"{a}\t{b}\n" for a, b, _ in rows)
                golds = "".join(f"{score}\n" for *_, score in rows)
            (folder / f"STS.input.{subset}.txt").write_text(inputs, encoding="utf-8")
            (folder / f"STS.gs.{subset}.txt").write_text(golds, encoding="utf-8")
    stsb = root / "STS" / "STSBenchmark"
    stsb.mkdir(parents=True)
    for split in ("train", "dev", "test"):
        rows = _pairs(rng, pairs_per_file + 2)
        (stsb / f"sts-{split}.csv").write_text(
            "".join(f"main-captions\tMSRvid\t2012{split}\t{i:04d}\t{score}\t{a}\t{b}\n"
                    for i, (a, b, score) in enumerate(rows)), encoding="utf-8")
    sick = root / "SICK"
    sick.mkdir()
    for split, name in (("train", "SICK_train.txt"), ("dev", "SICK_trial.txt"), ("test", "SICK_test_annotated.txt")):
        rows = _pairs(rng, pairs_per_file + 1)
        header = "pair_ID\tsentence_A\tsentence_B\trelatedness_score\tentailment_judgment\r\n"
        (sick / name).write_text(header + "".join(f"{i}\t{a}\t{b}\t{score}\tNEUTRAL\r\n"
                                                  for i, (a, b, score) in enumerate(rows)), encoding="utf-8")
    return root


@pytest.fixture
def sts_fixture_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh small SentEval-layout folder (tests may corrupt it). Pair counts: STS12 3 (MSRpar) + 4x4 = 19,
    STS13 12, STS14 24, STS15 20, STS16 20, STS-B 6 per split, SICK 5 per split (CRLF line ends, a header).

    Its files are "your own STS-format files", not SentEval's: the test runs with ``SENTEVAL_CHECK_SIZES=0`` (the
    documented way to evaluate them; subprocesses inherit it)."""
    own_sts_format_files(monkeypatch)
    return write_sts_fixture(tmp_path / "senteval")


@pytest.fixture
def wide_sts_fixture_dir(sts_fixture_dir: Path) -> Path:
    """:func:`sts_fixture_dir` with STS-B dev and SICK-R dev of 40 pairs each, sentences of 1 to 24 words: lengths
    spread as the real dev sets' are, so that packing (eval/packing.py) runs fewer tokens than padding."""
    rng = random.Random(1)

    def sentence() -> str:
        return " ".join(rng.choices(WORDS, k=rng.randint(1, 24)))

    rows = [(sentence(), sentence(), round(rng.uniform(0, 5), 2)) for _ in range(80)]
    (sts_fixture_dir / "STS" / "STSBenchmark" / "sts-dev.csv").write_text(
        "".join(f"main-captions\tMSRvid\t2012dev\t{i:04d}\t{score}\t{a}\t{b}\n"
                for i, (a, b, score) in enumerate(rows[:40])), encoding="utf-8")
    (sts_fixture_dir / "SICK" / "SICK_trial.txt").write_text(
        "pair_ID\tsentence_A\tsentence_B\trelatedness_score\tentailment_judgment\r\n"
        + "".join(f"{i}\t{a}\t{b}\t{score}\tNEUTRAL\r\n" for i, (a, b, score) in enumerate(rows[40:])),
        encoding="utf-8")
    return sts_fixture_dir


def own_sts_format_files(monkeypatch: pytest.MonkeyPatch) -> None:
    """Turn off the check that STS files have SentEval's line counts (eval/senteval_sizes.py) for this test."""
    monkeypatch.setenv("SENTEVAL_CHECK_SIZES", "0")


#: Frames dynamo may compile in one pytest process before its cache is emptied (:func:`room_in_dynamos_cache`).
FRAMES_BEFORE_RESET = 32
_frames_at_reset = [0]


@pytest.fixture(scope="session", autouse=True)
def many_compiled_models():
    """Room in dynamo's cache for the tests' compiled backbones: dynamo keeps a test's graphs on the code they
    compiled (every HF model's ``forward`` is one code object), and a later test whose model has the same structure
    reuses them (the suite's compile time, once), but it runs that code eagerly, silently, past ``recompile_limit``
    graphs (8; ``trainers.fast_path.recompile_limit`` raises it for a step's own graphs). The tests get 64."""
    import torch

    with torch._dynamo.config.patch(recompile_limit=64):
        yield


@pytest.fixture(autouse=True)
def room_in_dynamos_cache():
    """Empties dynamo's cache after a test once the process has compiled :data:`FRAMES_BEFORE_RESET` frames since it
    was last emptied, so no code object reaches the 64 graphs (32 + one test's own: at most 13, ESimCSE's cached step).
    Without it, in CI's worker the graphs of earlier tests used the room up and later tests' "compiled" steps ran
    eagerly (ESimCSE's graph counts came out short; on an H100 a fast-path test's backbone read its mask on the
    host). Emptying it after every test instead costs the reuse: 12 % more time on the compile-heavy test files."""
    yield
    dynamo = sys.modules.get("torch._dynamo")
    if dynamo is None:
        return
    compiled = dynamo.utils.counters["frames"]["ok"]
    if compiled - _frames_at_reset[0] >= FRAMES_BEFORE_RESET:
        dynamo.reset()
        _frames_at_reset[0] = compiled
