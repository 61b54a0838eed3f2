"""What a reader must read to follow one training step: the functions of train.py and nanogrpo/ that run.

    python scripts/reading_path.py [key=value ...]

Runs one default step (steps=1, no eval, no checkpoint, in a temporary directory) under sys.settrace
and prints a markdown table: per file, the functions that ran and the source lines of each
(inspect.getsourcelines: signature, docstring and body). Two columns: the whole run (set-up included)
and the step alone (functions entered once train.py reaches its `for step in range(` line). A nested
function's lines are also its parent's: the totals count each source line once.
"""

from __future__ import annotations

import contextlib
import inspect
import sys
import tempfile
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import train  # noqa: E402
from nanogrpo import dist  # noqa: E402

OURS = (str(ROOT / "train.py"), str(ROOT / "nanogrpo") + "/")
LOOP_LINE = "for step in range("


def trace(argv: list[str]) -> tuple[set, set]:
    """(code objects run in the whole run, code objects entered once the step loop began)."""
    run, step, in_loop = set(), set(), [False]
    train_py = OURS[0]
    source = Path(train_py).read_text().splitlines()

    def local(frame, event, arg):  # line events of train.py only: spot the loop's first line
        if event == "line" and not in_loop[0] and source[frame.f_lineno - 1].strip().startswith(LOOP_LINE):
            in_loop[0] = True
        return local

    def on_call(frame, event, arg):
        code = frame.f_code
        if event != "call" or not code.co_filename.startswith(OURS) or code.co_name.startswith("<"):
            return None  # module bodies, lambdas and comprehensions are read with their enclosing code
        run.add(code)
        if in_loop[0]:
            step.add(code)
        return local if code.co_filename == train_py else None

    threading.settrace(on_call)
    sys.settrace(on_call)
    try:
        with tempfile.TemporaryDirectory() as tmp, contextlib.redirect_stdout(sys.stderr):  # stdout: the table only
            train.main(["steps=1", "eval_every=0", "save_final=false", f"out_dir={tmp}/run", *argv])
    finally:
        sys.settrace(None)
        threading.settrace(None)
        dist.close()
    return run, step


def lines_of(code) -> set[int]:
    src, first = inspect.getsourcelines(code)
    return set(range(first, first + len(src)))


def column(codes: set, path: str) -> tuple[str, int]:
    """'name (n), ...' for the functions of `path`, and the file's distinct source lines among them."""
    mine = sorted((c for c in codes if c.co_filename == path), key=lambda c: c.co_firstlineno)
    names = ", ".join(f"{c.co_qualname} ({len(lines_of(c))})" for c in mine)
    return names, len(set().union(*(lines_of(c) for c in mine))) if mine else 0


def main(argv: list[str]) -> None:
    run, step = trace(argv)
    files = sorted({c.co_filename for c in run}, key=lambda f: (not f.endswith("train.py"), f))
    print("| file | whole run: functions (lines) | lines | the step: functions (lines) | lines |")
    print("| --- | --- | ---: | --- | ---: |")
    totals = [0, 0, 0, 0]  # files, lines: whole run; files, lines: the step
    for f in files:
        (run_names, run_lines), (step_names, step_lines) = column(run, f), column(step, f)
        print(f"| {Path(f).relative_to(ROOT)} | {run_names} | {run_lines} | {step_names or '-'} | {step_lines} |")
        totals = [totals[0] + 1, totals[1] + run_lines, totals[2] + bool(step_lines), totals[3] + step_lines]
    print(f"| **total** | {totals[0]} files, {len(run)} functions | {totals[1]} | "
          f"{totals[2]} files, {len(step)} functions | {totals[3]} |")


if __name__ == "__main__":
    main(sys.argv[1:])
