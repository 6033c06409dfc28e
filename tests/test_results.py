"""``python -m eval.results`` on a tiny fixture (two tables, rows over one to four seeds) with statistics worked out
by hand, and the repository's own ``results/paper_numbers.json`` / ``docs/results.md``."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from eval.results import (INSIDE, NOT_REPORTED, NOT_RUN, OUTSIDE, Column, format_interval, format_value,
                          load_paper_numbers, main, reduce_runs, render_document, top_k_mean_std)
from eval.stats import seed_statistics, t_quantile

REPO = Path(__file__).resolve().parents[1]

FIXTURE = {
    "column_sets": {
        "sts2": [{"name": "STS-B", "key": "STSBenchmark"}, {"name": "Avg.", "key": "avg"}],
        "seeds": [{"name": "Avg. (all seeds)", "key": "avg"},
                  {"name": "Avg. (top 3)", "key": "avg", "reduce": "top_k_mean_std"},
                  {"name": "Max", "key": "avg", "reduce": "max"}],
    },
    "tables": {
        "paper_a_table1": {
            "title": "Paper A, main", "paper": "Paper A", "table": "Table 1", "columns": "sts2", "fidelity": "paper",
            "metric": "STS test", "note": "A note.",
            "rows": {
                "done": {"label": "Method-done", "paper": {"STS-B": 80.0, "Avg.": 76.25}, "source": "Paper A Table 1"},
                "todo": {"label": "Method-todo", "paper": {"STS-B": 81.0}, "source": "Paper A Table 1"},
                "alias": {"label": "Same run", "paper": {"STS-B": 79.0}, "source": "Paper A Table 1", "result": "done"},
                "three": {"label": "Three seeds", "paper": {"STS-B": 80.0, "Avg.": 80.0}, "source": "Paper A Table 1"},
                "uneven": {"label": "Uneven seeds", "paper": {"STS-B": 90.0}, "source": "Paper A Table 1"},
            },
        },
        "paper_b_table1": {
            "title": "Paper B, seeds", "paper": "Paper B", "table": "Table 1", "columns": "seeds", "fidelity": "none",
            "metric": "avg over seeds", "aggregate": {"kind": "top_k", "k": 3, "key": "avg"},
            "rows": {"seeded": {"label": "Seeded", "paper": {"Avg. (top 3)": {"mean": 77.0, "std": 0.3}, "Max": 77.4},
                                "source": "Paper B Table 1"}},
        },
    },
}


def write_json(path: Path, payload: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(payload))


@pytest.fixture
def fixture_dirs(tmp_path: Path) -> tuple[Path, Path]:
    numbers = tmp_path / "paper_numbers.json"
    numbers.write_text(json.dumps(FIXTURE))
    results = tmp_path / "results"
    # one run in the layout before seeds (<row>.json), three seeds, and two seeds of which one lacks "avg"; the
    # three seeds record the preset "paper", the S-SimCSE-like row none (null), the others were written before
    # results recorded one
    write_json(results / "paper_a_table1" / "done.json", {"STSBenchmark": 79.5, "avg": 76.0, "STS12": 70.0})
    for seed, stsb, avg in ((42, 79.0, 75.0), (43, 80.0, 76.0), (44, 81.0, 77.5)):
        write_json(results / "paper_a_table1" / "three" / f"seed{seed}.json",
                   {"STSBenchmark": stsb, "avg": avg, "fidelity": "paper"})
    write_json(results / "paper_a_table1" / "uneven" / "seed1.json", {"STSBenchmark": 75.0, "avg": 70.0})
    write_json(results / "paper_a_table1" / "uneven" / "seed2.json", {"STSBenchmark": 76.5})
    for seed, avg in zip((42, 43, 44, 45), (76.0, 77.0, 75.0, 78.0)):
        write_json(results / "paper_b_table1" / "seeded" / f"seed{seed}.json", {"avg": avg, "fidelity": None})
    return numbers, results


def row_lines(document: str, label: str, count: int = 2) -> list[str]:
    """The paper line of a row and the ``count - 1`` lines after it (ours; the CI line)."""
    lines = document.splitlines()
    index = next(i for i, line in enumerate(lines) if line.startswith(f"| {label} |"))
    return lines[index:index + count]


def cells(line: str) -> list[str]:
    return [cell.strip() for cell in line.strip().strip("|").split("|")]


# ----------------------------------------------------------------------------------------------- statistics


def test_seed_statistics_by_hand() -> None:
    """Values, mean, sample std and t quantiles written out (t_{0.975, 2} = 4.3027, t_{0.975, 3} = 3.1824 from
    a t table), not recomputed with the code under test."""
    stats = seed_statistics([79.0, 80.0, 81.0])
    assert (stats.n, stats.mean, stats.std) == (3, pytest.approx(80.0), pytest.approx(1.0))
    # half width 4.3027 * 1.0 / sqrt(3) = 2.4841
    assert stats.ci_low == pytest.approx(77.5159, abs=1e-4) and stats.ci_high == pytest.approx(82.4841, abs=1e-4)
    stats = seed_statistics([76.0, 77.0, 75.0, 78.0])
    # deviations -0.5 0.5 -1.5 1.5: squares sum to 5, / (n - 1) = 5/3, std = 1.2910; half width 3.1824 * 1.2910 / 2
    assert stats.std == pytest.approx(1.29099, abs=1e-5)
    assert (stats.ci_low, stats.ci_high) == (pytest.approx(74.4457, abs=1e-4), pytest.approx(78.5543, abs=1e-4))
    assert stats.contains(78.5) is True and stats.contains(78.6) is False and stats.contains(None) is None


def test_one_seed_has_no_std_and_no_interval() -> None:
    stats = seed_statistics([76.25])
    assert (stats.n, stats.mean, stats.std, stats.ci_low, stats.ci_high) == (1, 76.25, None, None, None)
    assert stats.contains(76.25) is None  # not "inside": there is no interval
    assert format_value(stats, 76.0) == "76.25 (+0.25)" and format_interval(stats, 76.0) == ""
    with pytest.raises(ValueError):
        seed_statistics([])


def test_t_quantile_is_students() -> None:
    assert t_quantile(0.975, 1) == pytest.approx(12.7062, abs=1e-4)
    assert t_quantile(0.975, 2) == pytest.approx(4.3027, abs=1e-4)
    assert t_quantile(0.975, 49) == pytest.approx(2.0096, abs=1e-4)


def test_top_k_mean_std_takes_the_best_k() -> None:
    mean, std = top_k_mean_std([76.0, 77.0, 75.0, 78.0], 3)
    assert mean == pytest.approx(77.0)
    assert std == pytest.approx((2 / 3) ** 0.5)  # population std of 76, 77, 78
    assert top_k_mean_std([70.0], 3) == (70.0, 0.0)


def test_reduce_runs() -> None:
    runs = [{"avg": 1.0}, {"avg": 3.0}, {"other": 2.0}]
    assert reduce_runs(Column("Max", "avg", "max"), runs) == 3.0
    mean = reduce_runs(Column("A", "avg"), runs)  # the default: statistics over the runs that have the field
    assert (mean.n, mean.mean, mean.std) == (2, 2.0, pytest.approx(2 ** 0.5))
    assert reduce_runs(Column("A", "missing"), runs) is None
    with pytest.raises(ValueError, match="unknown reduce"):
        reduce_runs(Column("A", "avg", "median"), runs)


# ----------------------------------------------------------------------------------------------- rendering


def test_render_marks_run_and_not_run_rows(fixture_dirs: tuple[Path, Path]) -> None:
    numbers, results = fixture_dirs
    document = render_document(load_paper_numbers(numbers), results)
    paper, ours, after = row_lines(document, "Method-done", 3)
    assert "80.00" in paper and "76.25" in paper and "Paper A Table 1" in paper
    assert "| ours (n=1 seed, preset unrecorded) |" in ours and "79.50 (-0.50)" in ours and "76.00 (-0.25)" in ours
    assert "±" not in ours and "CI" not in after  # one run: no std, no interval line
    paper, ours = row_lines(document, "Method-todo")
    assert f"| {NOT_REPORTED} |" in paper  # the paper has no Avg. for this row
    assert "ours (not run)" in ours and ours.count(NOT_RUN) == 2
    _, ours = row_lines(document, "Same run")  # reads the result of row "done"
    assert "79.50 (+0.50)" in ours
    assert "Rows run: 5 of 6" in document
    assert "## Paper A" in document and "## Paper B" in document and "A note." in document
    assert "standin_results.md" in document and "stand-ins" in document and "seeds.md" in document


def test_render_three_seeds_mean_std_and_interval(fixture_dirs: tuple[Path, Path]) -> None:
    """STS-B over seeds 79, 80, 81: 80.00 ± 1.00, CI [77.52, 82.48] holds the paper's 80.00. Avg. over 75, 76,
    77.5: mean 76.17, std sqrt(((-7/6)^2 + (-1/6)^2 + (4/3)^2) / 2) = 1.26, CI 76.17 -+ 4.3027 * 1.2583 / sqrt(3)
    = [73.04, 79.29], which misses the paper's 80.00."""
    numbers, results = fixture_dirs
    document = render_document(load_paper_numbers(numbers), results)
    _, ours, ci = row_lines(document, "Three seeds", 3)
    assert cells(ours)[1:4] == ["ours (n=3 seeds, paper)", "80.00 ± 1.00 (+0.00)", "76.17 ± 1.26 (-3.83)"]
    assert cells(ci)[1:4] == ["95% CI", f"[77.52, 82.48] {INSIDE}", f"[73.04, 79.29] {OUTSIDE}"]
    assert "inside our 95% confidence interval in 1 of 3 cells" in document  # + the uneven row's STS-B


def test_render_uneven_seeds(fixture_dirs: tuple[Path, Path]) -> None:
    """Two seeds of STS-B (75.0, 76.5: mean 75.75, std 1.06, CI 75.75 -+ 12.7062 * 1.0607 / sqrt(2) = [66.22,
    85.28], without the paper's 90.00) but one of Avg. (70.00, no interval)."""
    numbers, results = fixture_dirs
    _, ours, ci = row_lines(render_document(load_paper_numbers(numbers), results), "Uneven seeds", 3)
    assert cells(ours)[1:4] == ["ours (n=1-2 seeds, preset unrecorded)", "75.75 ± 1.06 (-14.25)", "70.00"]
    assert cells(ci)[1:4] == ["95% CI", f"[66.22, 85.28] {OUTSIDE}", ""]


def test_render_keeps_the_papers_top_k_reduction(fixture_dirs: tuple[Path, Path]) -> None:
    """S-SimCSE-style table: the mean of all 4 seeds (76, 77, 75, 78: 76.50 ± 1.29, CI [74.45, 78.55], no paper
    number so no mark) beside the paper's top-3 mean ± population std and max."""
    numbers, results = fixture_dirs
    document = render_document(load_paper_numbers(numbers), results)
    paper, ours, ci = row_lines(document, "Seeded", 3)
    assert cells(paper)[2:5] == [NOT_REPORTED, "77.00 ± 0.30", "77.40"]
    assert cells(ours)[1:5] == ["ours (n=4 seeds, no preset)", "76.50 ± 1.29", "77.00 ± 0.82 (+0.00)",
                                "78.00 (+0.60)"]
    assert cells(ci)[1:5] == ["95% CI", "[74.45, 78.55]", "", ""]


def test_both_result_layouts_at_once_are_refused(fixture_dirs: tuple[Path, Path]) -> None:
    numbers, results = fixture_dirs
    write_json(results / "paper_a_table1" / "done" / "seed42.json", {"STSBenchmark": 79.5})
    with pytest.raises(SystemExit, match=r"done.json and .*done/seed\*.json both exist: move done.json"):
        render_document(load_paper_numbers(numbers), results)


@pytest.mark.parametrize("name, message", [
    ("seed42 (old).json", "{folder}/seed42 (old).json: not a seed<digits>.json name, and it would be pooled as one "
                          "more seed: rename it seed<N>.json if it is a seed's run, else move it out of {folder}"),
    ("seed042.json", "{folder}/seed042.json and {folder}/seed42.json are both seed 42, which would count one run "
                     "twice: move one of them out of {folder}"),
])
def test_a_stray_or_repeated_seed_file_is_refused_not_pooled(fixture_dirs: tuple[Path, Path], name: str,
                                                             message: str) -> None:
    """A copy named 'seed42 (old).json' beside seed42-44.json was pooled as a fourth seed (n=4); 'seed042.json'
    beside 'seed42.json' counted seed 42 twice."""
    numbers, results = fixture_dirs
    folder = results / "paper_a_table1" / "three"
    write_json(folder / name, {"STSBenchmark": 60.0, "avg": 60.0, "fidelity": "paper"})
    with pytest.raises(SystemExit) as info:
        render_document(load_paper_numbers(numbers), results)
    assert str(info.value) == message.format(folder=folder)


def test_seeds_of_one_preset_are_pooled_and_show_it(fixture_dirs: tuple[Path, Path]) -> None:
    numbers, results = fixture_dirs
    for seed, stsb in ((42, 81.0), (43, 83.0)):
        write_json(results / "paper_a_table1" / "todo" / f"seed{seed}.json",
                   {"STSBenchmark": stsb, "fidelity": "official_code"})
    _, ours, ci = row_lines(render_document(load_paper_numbers(numbers), results), "Method-todo", 3)
    assert cells(ours)[1:3] == ["ours (n=2 seeds, official_code)", "82.00 ± 1.41 (+1.00)"]


def add_mixed_presets(results: Path) -> None:
    """A fourth seed of "three" (seeds 42-44: "paper") under official_code, and a third seed of "uneven" (seeds 1-2
    record no preset) under paper."""
    write_json(results / "paper_a_table1" / "three" / "seed45.json",
               {"STSBenchmark": 90.0, "fidelity": "official_code"})
    write_json(results / "paper_a_table1" / "uneven" / "seed3.json", {"STSBenchmark": 77.0, "fidelity": "paper"})


MIXED = ("refusing to pool seeds trained under different --fidelity presets: paper_a_table1/three (paper: seed42, "
         "seed43, seed44; official_code: seed45); paper_a_table1/uneven (unrecorded: seed1, seed2; paper: seed3). "
         "Rerun the odd seeds under one preset")


def test_seeds_of_different_presets_are_refused_in_one_line(fixture_dirs: tuple[Path, Path]) -> None:
    """Two presets in one row, and a row mixing results that record no preset with one that does: both named, in
    one line, and nothing is rendered."""
    numbers, results = fixture_dirs
    add_mixed_presets(results)
    with pytest.raises(SystemExit) as refused:
        render_document(load_paper_numbers(numbers), results)
    message = str(refused.value)
    assert MIXED in message and "\n" not in message
    assert "paper_b_table1" not in message and "/done" not in message  # rows of one preset are not named
    render_document(load_paper_numbers(numbers), results, ["paper_b_table1"])  # another table still renders


def test_seeds_evaluated_differently_are_refused_and_seeds_of_other_models_pooled(fixture_dirs) -> None:
    """``python -m eval`` records how it scored (its ``evaluation`` record): a seed scored with another pooler or on
    the dev split was pooled with the others, its mean a mix of two measurements. Refused in one line naming the
    differing entries; the model's path, each seed's own, and a seed written before the record are not compared."""
    numbers, results = fixture_dirs

    def evaluation(seed: int, **changes) -> dict:
        return {"model_name_or_path": f"outputs/todo/seed{seed}/export/hf", "embedding": "pooler cls_before_pooler",
                "mode": "test", "sts_split": "test", "sts_tasks": ["STSBenchmark"], "transfer_tasks": [],
                "max_length": 32, "check_senteval_sizes": True, **changes}

    folder = results / "paper_a_table1" / "todo"
    for seed, stsb in ((42, 81.0), (43, 83.0)):
        write_json(folder / f"seed{seed}.json", {"STSBenchmark": stsb, "fidelity": "paper",
                                                 "evaluation": evaluation(seed)})
    write_json(folder / "seed44.json", {"STSBenchmark": 82.0, "fidelity": "paper"})
    _, ours = row_lines(render_document(load_paper_numbers(numbers), results), "Method-todo")
    assert cells(ours)[1] == "ours (n=3 seeds, paper)"
    write_json(folder / "seed45.json", {"STSBenchmark": 90.0, "fidelity": "paper",
                                        "evaluation": evaluation(45, embedding="pooler avg", sts_split="dev")})
    with pytest.raises(SystemExit) as refused:
        render_document(load_paper_numbers(numbers), results)
    assert str(refused.value) == (
        f"{results}: refusing to pool seeds evaluated differently (their results JSON's evaluation records): "
        "paper_a_table1/todo (embedding 'pooler cls_before_pooler', sts_split 'test': seed42, seed43; embedding "
        "'pooler avg', sts_split 'dev': seed45). Evaluate the odd seeds again as the others were (python -m eval "
        f"with the same flags) or move them out of {results}")


def test_the_cli_refuses_mixed_presets_with_one_line_and_a_non_zero_exit(fixture_dirs: tuple[Path, Path]) -> None:
    numbers, results = fixture_dirs
    add_mixed_presets(results)
    completed = subprocess.run([sys.executable, "-m", "eval.results", "--paper_numbers", str(numbers), "--results_dir",
                                str(results), "--stdout"], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert completed.returncode == 1 and completed.stdout == ""
    assert completed.stderr.count("\n") == 1 and MIXED in completed.stderr and "Traceback" not in completed.stderr


def test_cli_writes_and_checks(fixture_dirs: tuple[Path, Path], tmp_path: Path) -> None:
    numbers, results = fixture_dirs
    out = tmp_path / "docs" / "results.md"
    args = ["--paper_numbers", str(numbers), "--results_dir", str(results), "--output", str(out),
            "--standin_dir", str(tmp_path / "no_standin_runs"), "--img_dir", str(tmp_path / "img")]
    main(args)
    assert not (tmp_path / "img").exists()  # no stand-in runs: no figures
    assert "Method-done" in out.read_text()
    main([*args, "--check"])
    write_json(results / "paper_a_table1" / "todo.json", {"STSBenchmark": 81.0})
    with pytest.raises(SystemExit, match="out of date"):
        main([*args, "--check"])
    assert "Method-done" not in main([*args, "--stdout", "--tables", "paper_b_table1"])


def test_repository_paper_numbers_cite_every_number() -> None:
    """Every row of results/paper_numbers.json cites its source, names only known columns, and its table has a
    script."""
    numbers = load_paper_numbers(REPO / "results" / "paper_numbers.json")
    for table_id, spec in numbers["tables"].items():
        assert (REPO / "scripts" / f"{table_id}.sh").is_file(), table_id
        columns = spec["columns"] if isinstance(spec["columns"], list) else numbers["column_sets"][spec["columns"]]
        names = {column["name"] for column in columns}
        for row_id, row in spec["rows"].items():
            assert row["source"] and row["label"], (table_id, row_id)
            assert set(row["paper"]) <= names, (table_id, row_id, set(row["paper"]) - names)
            assert row.get("result", row_id) in spec["rows"], (table_id, row_id)


def test_docs_results_is_up_to_date() -> None:
    """docs/results.md is the rendering of the committed paper numbers and results."""
    rendered = render_document(load_paper_numbers(REPO / "results" / "paper_numbers.json"), REPO / "results")
    current = (REPO / "docs" / "results.md").read_text(encoding="utf-8")
    assert current == rendered, "docs/results.md is out of date: run `python -m eval.results --update_docs`"


def test_paper_sts_averages_are_the_mean_of_their_seven_tasks() -> None:
    """A typo in a transcribed number shows as an average that is not the mean of its row (the papers round each
    cell to 2 decimals, so they agree to 0.01); SimCSE Table 5's supervised rows were transcribed for issue 25."""
    numbers = load_paper_numbers(REPO / "results" / "paper_numbers.json")
    tasks = ["STS12", "STS13", "STS14", "STS15", "STS16", "STS-B", "SICK-R"]
    checked = []
    for table_id, spec in numbers["tables"].items():
        for row_id, row in spec["rows"].items():
            paper = row["paper"]
            if "avg_not_mean" in row:  # a published average that is not the mean of its cells, said where it is
                continue
            if spec["columns"] == "sts" and all(isinstance(paper.get(task), (int, float)) for task in [*tasks, "Avg."]):
                mean = sum(paper[task] for task in tasks) / len(tasks)
                assert abs(mean - paper["Avg."]) <= 0.011, (table_id, row_id, mean, paper["Avg."])
                checked.append((table_id, row_id))
    assert {("simcse_table_sup", row) for row in ("bert-base-uncased", "roberta-base", "roberta-large")} <= set(checked)
