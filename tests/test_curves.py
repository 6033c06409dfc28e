"""Training curves: the log history split into curves (eval/curves.py), the pictures (eval/plots.py), the
end-of-training callback (trainers/curves.py) through the real entry point, and the stand-in figures of
``python -m eval.results``."""
from __future__ import annotations

import json
import logging
import struct
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from eval.curves import (curves_from_history, find_standin_runs, history_note, is_method_term, load_run_history,
                         parse_run_name)
from eval.figure_record import Figure, FigureRefused, read_record, write_record
from eval.plots import plot_seed_spread, plot_training_curves

pytestmark = pytest.mark.draws_curves  # the training runs here draw their picture (tests/conftest.py)

REPO = Path(__file__).resolve().parents[1]
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"

# A DiffCSE-like history as the Trainer keeps it: the "before" evaluation, training lines every step with the
# model's terms, evaluations every 2 steps (step 4 ties step 2's best), the final evaluate() of the reloaded best
# model repeating step 4, and the end-of-training summary.
HISTORY = [
    {"before_stsb_spearman": 70.0, "before_sickr_spearman": 60.0, "epoch": 0, "step": 0},
    {"loss": 1.0, "contrastive_loss": 0.9, "rtd_loss": 0.7, "rtd_acc": 0.5, "learning_rate": 1e-5, "grad_norm": 2.0,
     "sentences_per_second": 10.0, "epoch": 0.1, "step": 1},
    {"loss": 0.8, "contrastive_loss": 0.7, "rtd_loss": 0.6, "rtd_acc": 0.6, "learning_rate": 1e-5, "grad_norm": 1.5,
     "epoch": 0.2, "step": 2},
    {"eval_stsb_spearman": 75.0, "eval_sickr_spearman": 65.0, "eval_runtime": 1.0, "epoch": 0.2, "step": 2},
    {"loss": 0.6, "contrastive_loss": 0.5, "rtd_loss": 0.55, "rtd_acc": 0.7, "epoch": 0.3, "step": 3},
    {"loss": 0.5, "contrastive_loss": 0.45, "rtd_loss": 0.5, "rtd_acc": 0.8, "epoch": 0.4, "step": 4},
    {"eval_stsb_spearman": 75.0, "eval_sickr_spearman": 66.0, "epoch": 0.4, "step": 4},
    {"eval_stsb_spearman": 74.0, "epoch": 0.4, "step": 4},
    {"train_runtime": 12.0, "train_loss": 0.72, "train_samples_per_second": 3.0, "epoch": 0.4, "step": 4},
]


def png_size(path: Path) -> tuple[int, int]:
    """Width and height from a PNG's IHDR chunk; fails unless the file is a PNG."""
    data = Path(path).read_bytes()
    assert data[:8] == PNG_SIGNATURE, f"{path} is not a PNG"
    assert data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


def assert_drawn_png(path: Path) -> None:
    """A PNG of a real figure: some size, and more than a blank canvas (several distinct colours)."""
    import matplotlib.image

    width, height = png_size(path)
    assert width > 300 and height > 200
    pixels = matplotlib.image.imread(str(path))
    assert len({tuple(p) for p in pixels.reshape(-1, pixels.shape[-1])[::37].round(2).tolist()}) > 5


# ----------------------------------------------------------------------------------------------- curves


def test_curves_from_history() -> None:
    curves = curves_from_history(HISTORY)
    assert curves.loss == [(1, 1.0), (2, 0.8), (3, 0.6), (4, 0.5)]
    assert set(curves.terms) == {"contrastive_loss", "rtd_loss", "rtd_acc"}  # no lr / grad norm / throughput
    assert curves.terms["rtd_acc"] == [(1, 0.5), (2, 0.6), (3, 0.7), (4, 0.8)]
    assert curves.dev == [(0, 70.0), (2, 75.0), (4, 75.0)]  # before training at 0; step 4's repeat counted once
    assert curves.best == (2, 75.0)  # the first of equal scores, as the Trainer keeps it
    assert curves_from_history(HISTORY, best_step=4).best == (4, 75.0)  # the Trainer's best_global_step
    assert curves.same_as_loss == []


def test_a_nan_dev_score_is_drawn_but_never_best() -> None:
    """A model whose embeddings give every dev pair the same cosine scores nan (Spearman undefined): drawing the
    curves stopped on StopIteration (``max`` of a list led by nan is nan, equal to no score)."""
    nan = float("nan")
    history = [{"eval_stsb_spearman": nan, "step": 2}, {"eval_stsb_spearman": 40.0, "step": 4},
               {"eval_stsb_spearman": 50.0, "step": 6}, {"eval_stsb_spearman": nan, "step": 8}]
    curves = curves_from_history(history)
    assert curves.best == (6, 50.0) and len(curves.dev) == 4
    assert curves_from_history([history[0], history[3]]).best is None


def test_a_term_equal_to_the_loss_is_not_drawn_twice() -> None:
    history = [{"loss": 0.5, "contrastive_loss": 0.5, "dcl_loss": 3.0, "step": 1},
               {"loss": 0.25, "contrastive_loss": 0.25001, "dcl_loss": 2.0, "step": 2}]
    curves = curves_from_history(history)
    assert curves.same_as_loss == ["contrastive_loss"] and list(curves.terms) == ["dcl_loss"]
    assert curves.dev == [] and curves.best is None


def test_method_terms() -> None:
    assert [key for key in ("loss", "queue_fill", "eval_stsb_spearman", "train_loss", "grad_norm", "barlow_loss")
            if is_method_term(key)] == ["queue_fill", "barlow_loss"]


# ----------------------------------------------------------------------------------------------- pictures


def test_plot_training_curves_writes_a_png(tmp_path: Path) -> None:
    path = plot_training_curves({"run": curves_from_history(HISTORY)}, tmp_path / "a" / "curves.png", "a run")
    assert_drawn_png(path)
    width, height = png_size(path)
    assert width > height  # loss, dev and three terms: 3 panels wide, 2 high


def test_plot_seed_spread_writes_a_png(tmp_path: Path) -> None:
    path = plot_seed_spread({"SimCSE": {42: 76.7, 43: 75.9, 44: 76.2}, "DiffCSE": {42: 76.1}},
                            tmp_path / "spread.png", "STS avg.")
    assert_drawn_png(path)


# ----------------------------------------------------------------------------------------------- callback


def test_training_writes_its_curves(tmp_path: Path, backbone: Path, sts_fixture_dir: Path) -> None:
    """Through the real entry point: run_unsup.py trains, evaluates every 2 steps and leaves its picture and full
    log history beside its outputs."""
    import run_unsup
    from tests.tiny import FAST_TRAINING_ARGS, tiny_corpus

    out = tmp_path / "run"
    run_unsup.main(["--method", "simcse", "--model_name_or_path", str(backbone), "--train_file",
                    str(tiny_corpus(tmp_path / "c.txt")), "--senteval_dir", str(sts_fixture_dir), "--max_steps", "4",
                    "--eval_steps", "2", "--output_dir", str(out)] + FAST_TRAINING_ARGS)
    assert_drawn_png(out / "training_curves.png")
    state = json.loads((out / "trainer_state.json").read_text())
    assert state["global_step"] == 4
    curves = curves_from_history(state["log_history"], state["best_global_step"])
    assert [step for step, _ in curves.loss] == [1, 2, 3, 4]
    assert [step for step, _ in curves.dev] == [0, 2, 4] and curves.best[0] in (2, 4)
    assert load_run_history(out).source == out / "trainer_state.json"


def fake_end_of_training(output_dir: Path, process_zero: bool = True):
    from transformers import TrainerState

    state = TrainerState(global_step=4, max_steps=4, log_history=HISTORY, best_global_step=2)
    state.is_world_process_zero = process_zero
    return SimpleNamespace(output_dir=str(output_dir)), state


def test_without_matplotlib_training_ends_with_a_warning(tmp_path: Path, monkeypatch, caplog) -> None:
    from trainers.curves import TrainingCurvesCallback

    monkeypatch.setitem(sys.modules, "eval.plots", None)  # `import eval.plots` now raises ImportError
    args, state = fake_end_of_training(tmp_path)
    with caplog.at_level(logging.WARNING, logger="trainers.curves"):
        TrainingCurvesCallback().on_train_end(args, state, None)
    assert "training_curves.png not written" in caplog.text and "pip install matplotlib" in caplog.text
    assert not (tmp_path / "training_curves.png").exists()
    assert json.loads((tmp_path / "trainer_state.json").read_text())["log_history"] == HISTORY


def test_a_drawing_failure_is_a_warning(tmp_path: Path, monkeypatch, caplog) -> None:
    import eval.plots
    from trainers.curves import TrainingCurvesCallback

    def broken(*args, **kwargs):
        raise RuntimeError("no canvas")

    monkeypatch.setattr(eval.plots, "plot_training_curves", broken)
    args, state = fake_end_of_training(tmp_path)
    with caplog.at_level(logging.WARNING, logger="trainers.curves"):
        TrainingCurvesCallback().on_train_end(args, state, None)
    assert "could not draw" in caplog.text and "no canvas" in caplog.text


def test_only_process_zero_writes(tmp_path: Path) -> None:
    from trainers.curves import TrainingCurvesCallback

    args, state = fake_end_of_training(tmp_path / "out", process_zero=False)
    TrainingCurvesCallback().on_train_end(args, state, None)
    assert not (tmp_path / "out").exists()


# ----------------------------------------------------------------------------------------------- run folders


def write_state(path: Path, log_history: list[dict], global_step: int, max_steps: int = 4,
                best_global_step: int | None = None) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"log_history": log_history, "global_step": global_step, "max_steps": max_steps,
                                "best_global_step": best_global_step}))


def test_run_history_prefers_the_full_history(tmp_path: Path) -> None:
    run = tmp_path / "simcse"
    write_state(run / "checkpoint-2" / "trainer_state.json", HISTORY[:4], 2)
    write_state(run / "checkpoint-10" / "trainer_state.json", HISTORY[:6], 3)  # newest by step, not by name
    history = load_run_history(run)
    assert history.source.parent.name == "checkpoint-10" and not history.complete
    assert history_note(history, tmp_path) == "to step 3 of 4 only (from simcse/checkpoint-10/trainer_state.json)"
    write_state(run / "trainer_state.json", HISTORY, 4, best_global_step=2)
    history = load_run_history(run)
    assert history.complete and history.best_step == 2 and len(history.log_history) == len(HISTORY)
    assert load_run_history(tmp_path / "nothing") is None


def test_an_old_runs_before_score_comes_from_all_results(tmp_path: Path) -> None:
    """Runs from before the callback lost the untrained model's STS-B dev from their history (a fresh TrainerState
    in train()); command_line/pipeline.py's all_results.json kept it."""
    run = tmp_path / "esimcse"
    write_state(run / "checkpoint-4" / "trainer_state.json", HISTORY[1:], 4)
    (run / "all_results.json").write_text(json.dumps({"before_stsb_spearman": 79.73, "eval_stsb_spearman": 85.6}))
    history = load_run_history(run)
    assert history.log_history[0] == {"before_stsb_spearman": 79.73, "step": 0}
    assert curves_from_history(history.log_history).dev == [(0, 79.73), (2, 75.0), (4, 75.0)]


@pytest.mark.parametrize(("name", "expected"), [("simcse", ("simcse", 42)), ("simcse_seed43", ("simcse", 43)),
                                                ("simcse_pp", ("simcse_pp", 42)), ("s_simcse_seed7", ("s_simcse", 7))])
def test_parse_run_name(name: str, expected: tuple[str, int]) -> None:
    assert parse_run_name(name) == expected


def standin_folder(root: Path) -> Path:
    """Two SimCSE seeds and one DiffCSE run, as scripts/standin.sh leaves them (the seed-43 run predates the
    callback: only its best checkpoint's history)."""
    write_state(root / "simcse" / "trainer_state.json", HISTORY, 4, best_global_step=2)
    write_state(root / "simcse_seed43" / "checkpoint-2" / "trainer_state.json", HISTORY[:4], 2)
    write_state(root / "diffcse" / "trainer_state.json", HISTORY, 4)
    for run, avg in (("simcse", 76.69), ("simcse_seed43", 76.1), ("diffcse", 76.10)):
        (root / f"{run}_test.json").write_text(json.dumps({"STS12": 70.0, "avg": avg}))
    (root / "simcse.log").write_text("not a run")
    return root


def test_find_standin_runs(tmp_path: Path) -> None:
    runs = find_standin_runs(standin_folder(tmp_path / "standin"))
    assert {method: sorted(seeds) for method, seeds in runs.histories.items()} == {"simcse": [42, 43], "diffcse": [42]}
    assert runs.tests["simcse"][43]["avg"] == 76.1 and list(runs.tests["diffcse"]) == [42]


def test_eval_results_draws_the_standin_figures(tmp_path: Path, capsys) -> None:
    from eval.results import main

    standin, img = standin_folder(tmp_path / "standin"), tmp_path / "img"
    main(["--output", str(tmp_path / "results.md"), "--standin_dir", str(standin), "--img_dir", str(img)])
    assert sorted(path.name for path in img.iterdir()) == [
        "standin_curves_diffcse.png", "standin_curves_simcse.png", "standin_seed_spread.png"]
    for path in img.iterdir():
        assert_drawn_png(path)
    assert f"wrote {img / 'standin_seed_spread.png'}" in capsys.readouterr().out


# ----------------------------------------------------------------------------------------------- no silent rewrites


def report_args(standin: Path) -> list[str]:
    return ["--paper_numbers", str(REPO / "results" / "paper_numbers.json"), "--results_dir", str(REPO / "results"),
            "--standin_dir", str(standin)]


def test_by_default_the_report_goes_to_an_output_folder(tmp_path: Path, monkeypatch, capsys) -> None:
    from eval.results import main

    standin = standin_folder(tmp_path / "standin")
    monkeypatch.chdir(tmp_path)
    main(report_args(standin))
    report = tmp_path / "outputs" / "report"
    assert (report / "results.md").is_file() and not (tmp_path / "docs").exists()
    assert sorted(path.name for path in (report / "img").iterdir()) == [
        "standin_curves_diffcse.png", "standin_curves_simcse.png", "standin_seed_spread.png"]  # no record: unguarded
    out = capsys.readouterr().out
    assert "the committed docs/results.md and docs/img/ are unchanged (--update_docs writes them)" in out


def guarded_docs(root: Path, runs: list[str]) -> Path:
    """A docs/img folder whose seed-spread figure was drawn from ``runs``."""
    img = root / "docs" / "img"
    img.mkdir(parents=True)
    (img / "standin_seed_spread.png").write_bytes(b"committed figure")
    write_record(img, [Figure("standin_seed_spread.png", tuple(runs), lambda path: path)])
    return img


def test_update_docs_refuses_a_figure_drawn_from_fewer_runs(tmp_path: Path, monkeypatch) -> None:
    from eval.results import main

    standin = standin_folder(tmp_path / "standin")  # simcse seeds 42 and 43, diffcse seed 42
    img = guarded_docs(tmp_path, ["simcse_seed42", "simcse_seed43", "simcse_seed44", "diffcse_seed42"])
    monkeypatch.chdir(tmp_path)
    with pytest.raises(FigureRefused) as refused:
        main([*report_args(standin), "--update_docs"])
    message = str(refused.value)
    assert message == ("refusing to replace docs/img/standin_seed_spread.png (drawn from 4 runs) with one drawn "
                       "from 3: missing simcse_seed44; run them, point --standin_dir at the checkout that has them, or pass "
                       "--force")
    assert refused.value.code == message  # SystemExit: printed, exit status 1
    # nothing was written: not the figure, not the other figures, not the Markdown
    assert (img / "standin_seed_spread.png").read_bytes() == b"committed figure"
    assert sorted(path.name for path in img.iterdir()) == ["standin_figures.json", "standin_seed_spread.png"]
    assert not (tmp_path / "docs" / "results.md").exists()


def test_update_docs_with_force_replaces_and_records(tmp_path: Path, monkeypatch, capsys) -> None:
    from eval.results import main

    standin = standin_folder(tmp_path / "standin")
    img = guarded_docs(tmp_path, ["simcse_seed42", "simcse_seed44"])
    monkeypatch.chdir(tmp_path)
    main([*report_args(standin), "--update_docs", "--force"])
    assert_drawn_png(img / "standin_seed_spread.png")
    assert (tmp_path / "docs" / "results.md").is_file()
    assert "--force: replacing docs/img/standin_seed_spread.png" in capsys.readouterr().out
    assert read_record(img) == {"standin_seed_spread.png": ["diffcse_seed42", "simcse_seed42", "simcse_seed43"],
                                "standin_curves_simcse.png": ["simcse_seed42", "simcse_seed43"],
                                "standin_curves_diffcse.png": ["diffcse_seed42"]}
    main([*report_args(standin), "--update_docs"])  # the same runs again: nothing is missing, no --force needed


def test_update_docs_refuses_a_figure_whose_runs_were_never_recorded(tmp_path: Path, monkeypatch) -> None:
    from eval.results import main

    standin = standin_folder(tmp_path / "standin")
    img = guarded_docs(tmp_path, ["simcse_seed42"])
    (img / "standin_curves_diffcse.png").write_bytes(b"figure from before the record")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(FigureRefused, match=r"^refusing to replace docs/img/standin_curves_diffcse.png: the runs it "
                                            r"was drawn from are not recorded in docs/img/standin_figures.json"):
        main([*report_args(standin), "--update_docs"])


def test_every_committed_standin_figure_has_its_runs_recorded() -> None:
    img = REPO / "docs" / "img"
    record = read_record(img)
    assert record is not None, "docs/img/standin_figures.json is missing: docs/img would not be guarded"
    assert sorted(record) == sorted(path.name for path in img.glob("standin_*.png"))
    for runs in record.values():
        assert runs and all(parse_run_name(run)[1] >= 0 and "_seed" in run for run in runs)
