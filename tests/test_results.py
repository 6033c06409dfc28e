"""``python -m eval.results`` on a tiny fixture (two tables, one over seeds), and the repository's own
``results/paper_numbers.json`` / ``docs/results.md``."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from eval.results import (NOT_REPORTED, NOT_RUN, Column, load_paper_numbers, main, reduce_runs, render_document,
                          top_k_mean_std)

REPO = Path(__file__).resolve().parents[1]

FIXTURE = {
    "column_sets": {
        "sts2": [{"name": "STS-B", "key": "STSBenchmark"}, {"name": "Avg.", "key": "avg"}],
        "seeds": [{"name": "Avg.", "key": "avg", "reduce": "top_k_mean_std"}, {"name": "Max", "key": "avg", "reduce": "max"}],
    },
    "tables": {
        "paper_a_table1": {
            "title": "Paper A, main", "paper": "Paper A", "table": "Table 1", "columns": "sts2", "fidelity": "paper",
            "metric": "STS test", "note": "A note.",
            "rows": {
                "done": {"label": "Method-done", "paper": {"STS-B": 80.0, "Avg.": 76.25}, "source": "Paper A Table 1"},
                "todo": {"label": "Method-todo", "paper": {"STS-B": 81.0}, "source": "Paper A Table 1"},
                "alias": {"label": "Same run", "paper": {"STS-B": 79.0}, "source": "Paper A Table 1", "result": "done"},
            },
        },
        "paper_b_table1": {
            "title": "Paper B, seeds", "paper": "Paper B", "table": "Table 1", "columns": "seeds", "fidelity": "none",
            "metric": "avg over seeds", "aggregate": {"kind": "top_k", "k": 3, "key": "avg"},
            "rows": {"seeded": {"label": "Seeded", "paper": {"Avg.": {"mean": 77.0, "std": 0.3}, "Max": 77.4},
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
    write_json(results / "paper_a_table1" / "done.json", {"STSBenchmark": 79.5, "avg": 76.0, "STS12": 70.0})
    for seed, avg in zip((42, 43, 44, 45), (76.0, 77.0, 75.0, 78.0)):
        write_json(results / "paper_b_table1" / "seeded" / f"seed{seed}.json", {"avg": avg})
    return numbers, results


def row_lines(document: str, label: str) -> tuple[str, str]:
    """The paper line of a row and the 'ours' line after it."""
    lines = document.splitlines()
    index = next(i for i, line in enumerate(lines) if line.startswith(f"| {label} |"))
    return lines[index], lines[index + 1]


def test_top_k_mean_std_takes_the_best_k() -> None:
    mean, std = top_k_mean_std([76.0, 77.0, 75.0, 78.0], 3)
    assert mean == pytest.approx(77.0)
    assert std == pytest.approx((2 / 3) ** 0.5)  # population std of 76, 77, 78
    assert top_k_mean_std([70.0], 3) == (70.0, 0.0)


def test_reduce_runs() -> None:
    runs = [{"avg": 1.0}, {"avg": 3.0}, {"other": 2.0}]
    assert reduce_runs(Column("Max", "avg", "max"), runs) == 3.0
    assert reduce_runs(Column("A", "avg"), runs) == 1.0
    assert reduce_runs(Column("A", "missing"), runs) is None


def test_render_marks_run_and_not_run_rows(fixture_dirs: tuple[Path, Path]) -> None:
    numbers, results = fixture_dirs
    document = render_document(load_paper_numbers(numbers), results)
    paper, ours = row_lines(document, "Method-done")
    assert "80.00" in paper and "76.25" in paper and "Paper A Table 1" in paper
    assert "| ours |" in ours and "79.50 (-0.50)" in ours and "76.00 (-0.25)" in ours
    paper, ours = row_lines(document, "Method-todo")
    assert f"| {NOT_REPORTED} |" in paper  # the paper has no Avg. for this row
    assert "ours (not run)" in ours and ours.count(NOT_RUN) == 2
    _, ours = row_lines(document, "Same run")  # reads the result of row "done"
    assert "79.50 (+0.50)" in ours
    assert "Rows run: 3 of 4" in document
    assert "## Paper A" in document and "## Paper B" in document and "A note." in document
    assert "standin_results.md" in document and "stand-ins" in document


def test_render_aggregates_seeds_like_the_paper(fixture_dirs: tuple[Path, Path]) -> None:
    numbers, results = fixture_dirs
    document = render_document(load_paper_numbers(numbers), results)
    paper, ours = row_lines(document, "Seeded")
    assert "77.00 ± 0.30" in paper and "77.40" in paper
    assert "ours (4 seeds)" in ours
    assert "77.00 ± 0.82 (+0.00)" in ours  # top 3 of 76, 77, 75, 78
    assert "78.00 (+0.60)" in ours


def test_cli_writes_and_checks(fixture_dirs: tuple[Path, Path], tmp_path: Path) -> None:
    numbers, results = fixture_dirs
    out = tmp_path / "docs" / "results.md"
    args = ["--paper_numbers", str(numbers), "--results_dir", str(results), "--output", str(out)]
    main(args)
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
    assert current == rendered, "docs/results.md is out of date: run `python -m eval.results`"
