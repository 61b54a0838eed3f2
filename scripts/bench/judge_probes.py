"""The answer judge on the blind probes (data/judge/probes.jsonl): labelled completions written without reading the
judge, its docs or its tests, each probe against the judge as it then was (docs/judge.md, "Measured").

    python scripts/bench/judge_probes.py            # the table: per probe and reward, right -> 0 and wrong -> 1.0 / None
    python scripts/bench/judge_probes.py --misses   # and every row the judge gets wrong

A row is {"probe", "cls" (the probe's own class number), "answer" (the whole completion), "gold", "label" (1: a
careful grader accepts the final answer; 0: wrong, a hedge, no answer, a gaming attempt), "ambiguous" (graders
would disagree: left out of the counts)}; from probe 15 on also "problem" (the question, verbatim from
data/benchmarks/; for 46 rows of probe 17, written with the row), which the judge reads as training does. Every row
is scored by the math reward, and by the number reward where its gold is a number. Once a probe's misses were fixed
it is tuning data, not a measure of unseen text: the figures a probe found before its fixes are in docs/judge.md;
tests/test_judge_probes.py holds the counts after.
"""
from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path

import judge_corpus

PROBES = Path(__file__).resolve().parents[2] / "data" / "judge" / "probes.jsonl"


def scored_rows() -> list[dict]:
    """The probes' rows that have a label graders agree on, once per reward that can read the gold."""
    from nanogrpo.answer import number_gold_error

    rows = []
    for line in PROBES.read_text().splitlines():
        row = json.loads(line)
        if row["ambiguous"]:
            continue
        rows.append({**row, "reward": "math"})
        if number_gold_error(row["gold"]) is None:
            rows.append({**row, "reward": "number"})
    return rows


def misses(rows: list[dict], verdicts: list) -> dict[tuple, dict[str, list]]:
    """(probe, reward) -> {"right": right answers not scored 1.0, "wrong": wrong ones not scored 0.0, "rows",
    "labelled right": how many rows, how many of them right}."""
    out: dict[tuple, dict] = defaultdict(lambda: {"right": [], "wrong": [], "rows": 0, "labelled right": 0})
    for row, v in zip(rows, verdicts):
        cell = out[(row["probe"], row["reward"])]
        cell["rows"] += 1
        cell["labelled right"] += row["label"] == 1
        if row["label"] == 1 and v != 1.0:
            cell["right"].append((row, v))
        elif row["label"] == 0 and v != 0.0:
            cell["wrong"].append((row, v))
    return out


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--misses", action="store_true", help="print every row the judge gets wrong")
    args = ap.parse_args(argv)
    rows = scored_rows()
    found = misses(rows, judge_corpus.strict_verdicts(rows))
    print("| probe | reward | rows | right | right -> not 1.0 | wrong | wrong -> 1.0 or None |")
    print("| ---: | --- | ---: | ---: | ---: | ---: | ---: |")
    for (probe, reward), cell in sorted(found.items()):
        right, wrong = cell["labelled right"], cell["rows"] - cell["labelled right"]
        print(f"| {probe} | {reward} | {cell['rows']} | {right} | {len(cell['right'])} | {wrong} | {len(cell['wrong'])} |")
    if args.misses:
        for key, cell in sorted(found.items()):
            for kind in ("right", "wrong"):
                for row, v in cell[kind]:
                    print(f"{key} {kind} -> {v}: gold {row['gold']!r}: ...{row['answer'][-160:]!r}")


if __name__ == "__main__":
    main()
