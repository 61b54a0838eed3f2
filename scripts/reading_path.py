"""What a reader must read to follow one training step: the functions of train.py and nanogrpo/ that run.

    python scripts/reading_path.py [key=value ...]

Runs one default step (steps=1, no eval, no checkpoint, in a temporary directory) under sys.settrace
and prints a markdown table: per file, the functions that ran and the source lines of each
(inspect.getsourcelines: signature, docstring and body). Two columns: the whole run (set-up included)
and the step alone (functions entered once train.py reaches its `for step in range(` line). The step ends
where the loop does (what runs after it, closing the run, is the whole run's). A nested function's lines are
also its parent's: the totals count each source line once.

A third column reads the step as a reader does: a fast path that the library states plainly beside it, and that
the tests hold to that plain reading, is read as the plain one (PLAIN_READINGS: the sampler's decode loop as
sampler.reference_generate, tests/test_sampler.py token for token; the chunked log-prob kernel as
logprobs.reference_logprobs, tests/test_model.py values and gradients).
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
from nanogrpo import dist, logprobs, sampler, torch_sampler  # noqa: E402

OURS = (str(ROOT / "train.py"), str(ROOT / "nanogrpo") + "/")
LOOP_LINE = "for step in range("

# file -> (the plain reading's functions, the fast path's functions it stands for)
PLAIN_READINGS = {
    str(ROOT / "nanogrpo/torch_sampler.py"): (
        [sampler.reference_generate, sampler._pick],
        {"sample_next", "_cdf_pick", "_nucleus_pick", "_kv_attention", "_PrefillCache.__init__", "_PrefillCache.update",
         "cpu_gemms", "_onednn_linear", "TorchSampler._forward", "TorchSampler._prefill", "TorchSampler._generate",
         "TorchSampler._hit_stop"} | {f"KVCache.{m}" for m in vars(torch_sampler.KVCache)
                                         if callable(vars(torch_sampler.KVCache)[m])}),
    str(ROOT / "nanogrpo/logprobs.py"): (
        [logprobs.reference_logprobs],
        {"_HeadLogprobs.forward", "_HeadLogprobs.backward", "_head_logits", "chunked_logprobs"}),
}


def trace(argv: list[str]) -> tuple[set, set]:
    """(code objects run in the whole run, code objects entered once the step loop began)."""
    run, step, in_loop, loop = set(), set(), [False], []  # loop: (the code holding the loop, its indent)
    train_py = OURS[0]
    source = Path(train_py).read_text().splitlines()
    indent = lambda line: len(line) - len(line.lstrip())  # noqa: E731

    def local(frame, event, arg):  # line events of train.py only: spot the loop's first line, and its end
        if event != "line":
            return local
        line = source[frame.f_lineno - 1]
        if not loop and line.strip().startswith(LOOP_LINE):
            in_loop[0] = True
            loop.append((frame.f_code, indent(line)))
        elif in_loop[0] and frame.f_code is loop[0][0] and line.strip() and indent(line) <= loop[0][1] \
                and not line.strip().startswith(LOOP_LINE):
            in_loop[0] = False  # a line of the loop's function past its body
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


def read_plainly(codes: set) -> set:
    """`codes` with each fast path that ran replaced by its plain reading (PLAIN_READINGS)."""
    out = set(codes)
    for path, (plain, fast) in PLAIN_READINGS.items():
        ran = {c for c in codes if c.co_filename == path and c.co_qualname in fast}
        if ran:
            out = (out - ran) | {inspect.unwrap(f).__code__ for f in plain}
    return out


def main(argv: list[str]) -> None:
    run, step = trace(argv)
    read = read_plainly(step)
    files = sorted({c.co_filename for c in run}, key=lambda f: (not f.endswith("train.py"), f))
    print("| file | whole run: functions (lines) | lines | the step: functions (lines) | lines | the step, read |")
    print("| --- | --- | ---: | --- | ---: | ---: |")
    totals = [0, 0, 0, 0, 0, 0]  # files, lines: whole run; files, lines: the step; files, lines: the step read
    for f in files:
        (run_names, run_lines), (step_names, step_lines) = column(run, f), column(step, f)
        read_lines = column(read, f)[1]
        print(f"| {Path(f).relative_to(ROOT)} | {run_names} | {run_lines} | {step_names or '-'} | {step_lines} | "
              f"{read_lines} |")
        this = (1, run_lines, bool(step_lines), step_lines, bool(read_lines), read_lines)
        totals = [a + b for a, b in zip(totals, this)]
    print(f"| **total** | {totals[0]} files, {len(run)} functions | {totals[1]} | "
          f"{totals[2]} files, {len(step)} functions | {totals[3]} | {totals[4]} files, {totals[5]} |")


if __name__ == "__main__":
    main(sys.argv[1:])
