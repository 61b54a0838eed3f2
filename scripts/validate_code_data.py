"""Run each row's reference `solution` against its tests in the sandbox; keep the rows that pass.

    python scripts/validate_code_data.py IN.jsonl --out OUT.jsonl [--concurrency N] [--convert]

Writes one JSON verdict line per row to stdout ({"line", "id", "verdict", "reward", "status"}) and a
summary to stderr. A row without a solution, or one that does not convert, is reported and dropped;
a row whose verdict is an infrastructure error is reported as such (and dropped: re-run to retry).
This is how Code-R1 cleaned TACO from 26K to 10K rows.
"""
import argparse
import collections
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from nanogrpo import files  # noqa: E402
from nanogrpo.sandbox import SandboxPool, SandboxUnavailable, judge_many  # noqa: E402
from nanogrpo.tasks.convert import to_schema  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("input", help="JSONL of code rows (the schema, or a form --convert understands)")
    ap.add_argument("--out", required=True, help="JSONL of the rows whose solution passes every test")
    ap.add_argument("--convert", action="store_true", help="convert open-r1 / Code-R1 / LCB / HumanEval rows first")
    ap.add_argument("--concurrency", type=int, default=None, help="sandbox slots (default: cores)")
    ap.add_argument("--batch", type=int, default=256, help="rows judged per pool call")
    ap.add_argument("--allow-unsandboxed", action="store_true")
    args = ap.parse_args(argv)
    if not os.path.isfile(args.input):
        ap.error(f"input {args.input!r} is not a file")
    if args.batch < 1 or (args.concurrency is not None and args.concurrency < 1):
        ap.error("--batch and --concurrency must be >= 1")
    # before a row is judged: --out can be written and is not the input (nothing is written yet)
    problem = files.output_problem(args.out, [args.input])
    if problem:
        ap.error(f"--out {args.out!r}: {problem} (nothing was written)")
    try:
        pool = SandboxPool(concurrency=args.concurrency, allow_unsandboxed=args.allow_unsandboxed).start()
    except SandboxUnavailable as e:
        ap.error(str(e))
    counts = collections.Counter()
    # the kept rows appear whole, once every row is judged (a temporary file renamed into place)
    with open(args.input, "rb") as f, files.atomic_open(args.out) as out:  # bytes: a non-UTF-8 line is reported
        batch = []
        for lineno, line in enumerate(f, 1):
            if line.strip():
                batch.append((lineno, line))
            if len(batch) >= args.batch:
                _judge_batch(batch, pool, args.convert, out, counts)
                batch = []
        if batch:
            _judge_batch(batch, pool, args.convert, out, counts)
    pool.close()
    total = sum(counts.values())
    print(f"validated {total} rows: kept {counts['passed']}, " +
          ", ".join(f"{k} {v}" for k, v in sorted(counts.items()) if k != "passed"), file=sys.stderr)
    return 0


def _judge_batch(batch, pool, convert, out, counts):
    rows, todo = {}, []
    for lineno, line in batch:
        try:
            raw = json.loads(line.decode("utf-8"))  # UnicodeDecodeError is a ValueError: reported as invalid
            row = to_schema(raw)  # converts other forms when asked; always validates the schema
            if not convert and "tests" not in raw:
                raise ValueError("not in the code schema (pass --convert for dataset forms)")
            if not row.get("solution"):
                raise ValueError("row has no reference 'solution'")
            todo.append((lineno, row))
        except (ValueError, KeyError, TypeError) as e:
            rows[lineno] = {"line": lineno, "id": None, "verdict": "invalid", "reward": None, "status": str(e)}
    verdicts = judge_many([r["solution"] for _, r in todo], [r for _, r in todo], pool=pool)
    for (lineno, row), v in zip(todo, verdicts):
        if v is None:
            verdict, reward, status = "infra_error", None, "infra_error"
        else:
            verdict = "passed" if v.reward == 1.0 else "failed"
            reward, status = v.reward, v.status
        rows[lineno] = {"line": lineno, "id": row.get("id"), "verdict": verdict, "reward": reward, "status": status}
        if verdict == "passed":
            out.write(json.dumps(row) + "\n")
    for lineno in sorted(rows):
        print(json.dumps(rows[lineno]), flush=True)
        counts[rows[lineno]["verdict"]] += 1


if __name__ == "__main__":
    sys.exit(main())
