"""What a reader reads to follow one default training step, counted honestly, by role.

    python scripts/bench/reading_path.py [--last] [key=value ...]

Runs the default run for three steps in a temporary directory, under sys.settrace, and counts what the middle one
enters: a step as 1,485 of the default run's 1,500 are, with no evaluation and no save. `--last` counts a one-step
run's step instead, with its evaluation and final save on, as the default run makes them at its end (only eval_size
is cut, to save time: the same code runs). It counts the source lines a reader reads to follow the loop, per file:

- the loop itself: train.py's `for step in range(` statement, every line of it (comments and blank lines too);
- every function of train.py and nanogrpo/ entered inside the loop: signature, docstring and body
  (inspect.getsourcelines); a nested function's lines are also its parent's, each line counted once;
- the data types the loop works with (a class of ours constructed inside it, dataclasses and NamedTuples included,
  one whose method runs inside it, or the type of a variable the loop starts with): its header, docstring and
  fields, up to its first method (a method counts when it runs);
- "read": a fast path that the library states plainly beside it, and that the tests hold to that plain reading,
  is read as the plain one (PLAIN_READINGS: the PyTorch sampler's engine as sampler.reference_generate,
  tests/test_sampler.py token for token; the chunked log-prob kernel as model.reference_logprobs,
  tests/test_model.py values and gradients). "run" counts what ran.

Each line read has a role: `core` (the loop, the algorithm, the sampler, the forward: what a reader follows), `checks`
(what stops a bad run: nanogrpo/checks/ and the functions in CHECKS), `metrics` (what the step reports: nanogrpo/log.py
and the functions in METRICS) or `save` (checkpoints and stop signals: nanogrpo/checkpoint.py). It prints a markdown
table (per file: what was read, lines run, lines read by role) with the totals, a table per role, then what it
leaves out, each with its size: the set-up before the loop (functions of the run entered only outside it), the
config's keys (looked up, one line each), the module docstrings and imports of the files read, and the fast paths
read plainly. Its last line: `core: F files, L lines read plainly | checks: ... | metrics: ... | save: ...`.
"""

from __future__ import annotations

import ast
import contextlib
import inspect
import re
import sys
import tempfile
import textwrap
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import train  # noqa: E402
from nanogrpo import dist, model, sampler, torch_sampler  # noqa: E402
from nanogrpo.config import Config  # noqa: E402

OURS = (str(ROOT / "train.py"), str(ROOT / "nanogrpo") + "/")
LOOP_LINE = "for step in range("

# file -> (the plain reading's functions, the fast path's functions it stands for)
PLAIN_READINGS = {
    str(ROOT / "nanogrpo/torch_sampler.py"): (
        [sampler.reference_generate, sampler._pick],
        {"sample_next", "_cdf_pick", "_nucleus_pick", "_kv_attention", "_PrefillCache.__init__", "_PrefillCache.update",
         "cpu_gemms", "_onednn_linear", "TorchSampler._forward", "TorchSampler._prefill", "TorchSampler._generate",
         "TorchSampler._hit_stop", "_Row.__init__"} | {f"KVCache.{m}" for m in vars(torch_sampler.KVCache)
                                         if callable(vars(torch_sampler.KVCache)[m])}),
    str(ROOT / "nanogrpo/logprobs.py"): (
        [model.reference_logprobs],
        {"_HeadLogprobs.forward", "_HeadLogprobs.backward", "_head_logits", "chunked_logprobs", "_rowdot"}),
}


# Roles other than core, by file (a prefix of its path) and by function (file -> qualnames and data types).
ROLE_FILES = {str(ROOT / "nanogrpo/checks") + "/": "checks", str(ROOT / "nanogrpo/log.py"): "metrics",
              str(ROOT / "nanogrpo/checkpoint.py"): "save"}
CHECKS = {  # what validates or checks, in files the core also reads
    "nanogrpo/sampler.py": {"SamplingParams.check", "check_request", "Used"},
    "nanogrpo/torch_sampler.py": {"TorchSampler.held_weights"},
    "nanogrpo/grpo.py": {"Rollout.__post_init__"},
    "nanogrpo/logprobs.py": {"sampling_moments", "logp_moments"},
    "nanogrpo/rewards.py": {"check_user_calls"},
    "nanogrpo/rollout.py": {"StepRollouts.for_check"},
}
METRICS = {  # what the step reports, in files the core also reads
    "train.py": {"evaluates", "rank_rollouts", "step_metrics", "async_metrics"},
    "nanogrpo/grpo.py": {"group_stats", "loss_stats", "record", "step_metrics"},
    "nanogrpo/rollout.py": {"mean_valid", "tally"},
    "nanogrpo/files.py": {"echo"},  # the printed line (dist.print0 prints through it)
}
ROLES = ("core", "checks", "metrics", "save")
LOOP_SECTIONS = {"6": "metrics", "7": "save"}  # the loop's numbered sections (`# 6. ...`) that are not core
SECTION = re.compile(r"^\s*# (\d+)(-\d+)?\. ")
TIMING = re.compile(r"^\s*(t0|t_step) = time\.time\(\)|^\s*times(\[.*\])? = ")  # the loop's timing lines: metrics


def loop_roles(source: list[str], first: int, last: int) -> dict[int, str]:
    """The role of each line of the loop (1-based `first`..`last` of train.py): its section's (LOOP_SECTIONS, else
    core), but checks for a line that reaches the checks layer (`run.checks.`) and metrics for a timing line."""
    out, section = {}, "core"
    for n in range(first, last + 1):
        line = source[n - 1]
        if m := SECTION.match(line):
            section = LOOP_SECTIONS.get(m.group(1), "core")
        out[n] = "checks" if "run.checks." in line else "metrics" if TIMING.match(line) else section
    return out


def role(path: str, qualname: str) -> str:
    """The role of a function or data type (its qualname) of `path`."""
    for prefix, r in ROLE_FILES.items():
        if path.startswith(prefix):
            return r
    rel = str(Path(path).relative_to(ROOT))
    top = qualname.split(".<locals>")[0]
    for r, table in (("checks", CHECKS), ("metrics", METRICS)):
        if top in table.get(rel, ()) or top.split(".")[0] in table.get(rel, ()):
            return r
    return "core"


def ours(path: str | None) -> bool:
    return bool(path) and path.startswith(OURS)


def trace(argv: list[str], last: bool = False) -> tuple[set, set, set, tuple[int, int]]:
    """(code objects run in the whole run, those entered inside the counted step, our classes constructed inside it,
    the loop's first and last line in train.py). The counted step: the middle of three, or (`last`) a one-step run's."""
    run, step, types, in_loop, loop = set(), set(), set(), [False], []  # loop: (the code holding it, its indent, line)
    counted, seen = (1 if last else 2), [0]  # the iteration counted, and how many began
    train_py = OURS[0]
    source = Path(train_py).read_text().splitlines()
    indent = lambda line: len(line) - len(line.lstrip())  # noqa: E731

    def local(frame, event, arg):  # line events of train.py only: spot the loop's first line, and its end
        if event != "line":
            return local
        line = source[frame.f_lineno - 1]
        if line.strip().startswith(LOOP_LINE) and (not loop or frame.f_code is loop[0][0]):
            seen[0] += 1  # the `for` line runs as each iteration begins (and once more as the loop ends)
            in_loop[0] = seen[0] == counted
            if not loop:
                loop.append((frame.f_code, indent(line), frame.f_lineno))
                types.update(type(v) for v in frame.f_locals.values())  # what the loop starts with (`run`: the Run)
        elif in_loop[0] and frame.f_code is loop[0][0] and line.strip() and indent(line) <= loop[0][1] \
                and not line.strip().startswith(LOOP_LINE):
            in_loop[0] = False  # a line of the loop's function past its body
        return local

    def on_call(frame, event, arg):
        code = frame.f_code
        if event != "call":
            return None
        if in_loop[0] and code.co_name in ("__init__", "__new__", "__post_init__") and code.co_varnames:
            first = frame.f_locals.get(code.co_varnames[0])  # self, or the class of a __new__
            cls = first if isinstance(first, type) else type(first)
            types.add(cls)
        if not ours(code.co_filename) or code.co_name.startswith("<"):
            return None  # module bodies, lambdas and comprehensions are read with their enclosing code
        run.add(code)
        if in_loop[0]:
            step.add(code)
            if "." in code.co_qualname and code.co_varnames and code.co_varnames[0] == "self":  # a method: its class
                types.add(type(frame.f_locals["self"]))
        return local if code.co_filename == train_py else None

    threading.settrace(on_call)
    sys.settrace(on_call)
    try:
        with tempfile.TemporaryDirectory() as tmp, contextlib.redirect_stdout(sys.stderr):  # stdout: the table only
            train.main((["steps=1"] if last else ["steps=3"]) + ["eval_size=16", f"out_dir={tmp}/run", *argv])
    finally:
        sys.settrace(None)
        threading.settrace(None)
        dist.close()
    first = loop[0][2]
    last = first
    for i in range(first, len(source)):  # the loop's block: every line up to the first one indented as the `for`
        if source[i].strip() and indent(source[i]) <= loop[0][1]:
            break
        last = i + 1
    return run, step, {t for t in types if ours(source_file(t)) and t is not Config}, (first, last)


def source_file(cls) -> str | None:
    try:
        return inspect.getsourcefile(cls)
    except TypeError:  # a builtin
        return None


def lines_of(code) -> set[int]:
    src, first = inspect.getsourcelines(code)
    return set(range(first, first + len(src)))


def type_lines(cls) -> tuple[str, set[int]]:
    """(file, lines of the class up to its first method: decorators, header, docstring, fields)."""
    src, first = inspect.getsourcelines(cls)
    node = ast.parse(textwrap.dedent("".join(src))).body[0]
    starts = [min([n.lineno] + [d.lineno for d in n.decorator_list]) for n in node.body
              if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    end = min(starts, default=len(src) + 1) - 1  # the last line before the first method (1-based in src)
    while end > 1 and not src[end - 1].strip():
        end -= 1
    return inspect.getsourcefile(cls), set(range(first, first + end))


def by_file(codes: set, types: set, loop: tuple[int, int]) -> dict[str, dict[str, set[int]]]:
    """file -> role -> the source lines read (a line is read once: a nested function's lines are its parent's)."""
    out: dict[str, dict[str, set[int]]] = {}
    for c in sorted(codes, key=lambda c: (c.co_filename, c.co_firstlineno)):
        out.setdefault(c.co_filename, {}).setdefault(role(c.co_filename, c.co_qualname), set()).update(lines_of(c))
    for cls in types:
        path, got = type_lines(cls)
        out.setdefault(path, {}).setdefault(role(path, cls.__qualname__), set()).update(got)
    source = Path(OURS[0]).read_text().splitlines()
    for n, r in loop_roles(source, *loop).items() if loop[1] >= loop[0] else ():
        out.setdefault(OURS[0], {}).setdefault(r, set()).add(n)
    for roles in out.values():  # a line two roles claim counts once, for the first of ROLES
        for r in ROLES:
            for other in ROLES[ROLES.index(r) + 1:]:
                if r in roles and other in roles:
                    roles[other] -= roles[r]
    return out


def count(table: dict[str, dict[str, set[int]]], r: str | None = None) -> int:
    return sum(len(lines) for roles in table.values() for k, lines in roles.items() if r in (None, k))


def read_plainly(codes: set, types: set) -> tuple[set, set, dict[str, int]]:
    """`codes` and `types` with each fast path that ran replaced by its plain reading (PLAIN_READINGS; a class is part
    of a fast path when its methods are), and the lines each file's fast path had."""
    out, kept, replaced = set(codes), set(types), {}
    for path, (plain, fast) in PLAIN_READINGS.items():
        ran = {c for c in codes if c.co_filename == path and c.co_qualname in fast}
        gone = {t for t in types if source_file(t) == path and any(f.startswith(t.__qualname__ + ".") for f in fast)}
        if ran:
            out = (out - ran) | {inspect.unwrap(f).__code__ for f in plain}
            kept -= gone
            replaced[path] = len(set().union(*(lines_of(c) for c in ran), *(type_lines(t)[1] for t in gone)))
    return out, kept, replaced


def names(codes: set, types: set, path: str) -> str:
    mine = sorted((c for c in codes if c.co_filename == path), key=lambda c: c.co_firstlineno)
    kinds = sorted(cls.__name__ for cls in types if source_file(cls) == path)
    return ", ".join([f"{c.co_qualname} ({len(lines_of(c))})" for c in mine] + [f"type {k}" for k in kinds])


def module_overhead(path: str) -> tuple[int, int]:
    """(module docstring lines, import lines) of a file: what a reader skims on opening it."""
    tree = ast.parse(Path(path).read_text())
    doc = tree.body[0] if tree.body and isinstance(tree.body[0], ast.Expr) and isinstance(
        getattr(tree.body[0], "value", None), ast.Constant) and isinstance(tree.body[0].value.value, str) else None
    imports = sum(n.end_lineno - n.lineno + 1 for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom)))
    return (doc.end_lineno - doc.lineno + 1 if doc else 0), imports


def main(argv: list[str]) -> None:
    last = "--last" in argv
    run, step, types, loop = trace([a for a in argv if a != "--last"], last)
    plain, plain_types, replaced = read_plainly(step, types)
    ran, read = by_file(step, types, loop), by_file(plain, plain_types, loop)
    rel = lambda f: str(Path(f).relative_to(ROOT))  # noqa: E731
    files = sorted(read, key=lambda f: (not f.endswith("train.py"), f))
    print(f"The {'last step of a one-step run (its evaluation and final save on)' if last else 'middle step of three'}"
          " of the default run.\n")
    print("| file | read: functions (lines) and data types | lines run | " + " | ".join(ROLES) + " |")
    print("| --- | --- | ---: | " + " | ".join("---:" for _ in ROLES) + " |")
    for f in files:
        loop_note = [f"the loop ({loop[1] - loop[0] + 1})"] if f == OURS[0] else []
        what = ", ".join(loop_note + [names(plain, plain_types, f)]).strip(", ")
        cells = " | ".join(str(len(read[f].get(r, ()))) for r in ROLES)
        print(f"| {rel(f)} | {what} | {sum(map(len, ran.get(f, {}).values()))} | {cells} |")
    print(f"| **total** | {len(files)} files, {len(plain)} functions, {len(plain_types)} data types | {count(ran)} | "
          + " | ".join(str(count(read, r)) for r in ROLES) + " |")
    by_role = {r: [f for f in files if read[f].get(r)] for r in ROLES}
    print("\n| role | files | lines read plainly |")
    print("| --- | --- | ---: |")
    for r in ROLES:
        print(f"| {r} | {len(by_role[r])}: {', '.join(rel(f) for f in by_role[r])} | {count(read, r)} |")
    outside = {c for c in run if c not in step}
    setup_lines = count(by_file(outside, set(), (0, -1))) - (0 if outside else 0)
    docs = [module_overhead(f) for f in files]
    print("\nLeft out of the count:")
    print(f"- the set-up before the loop and the close after it: {len(outside)} functions, {setup_lines} lines "
          f"(in {len({c.co_filename for c in outside})} files)")
    keys = len(type_lines(Config)[1])
    print(f"- nanogrpo/config.py's Config ({keys} lines): the loop looks its keys up there, each one line with its comment")
    print(f"- the module docstrings ({sum(d for d, _ in docs)} lines) and imports ({sum(i for _, i in docs)} lines) "
          f"of the {len(files)} files read")
    for path, n in replaced.items():
        print(f"- {rel(path)}: {n} lines of fast path, read as its plain reading")
    print("\n" + " | ".join(f"{r}: {len(by_role[r])} files, {count(read, r)} lines" + (" read plainly" if r == "core" else "")
                            for r in ROLES))


if __name__ == "__main__":
    main(sys.argv[1:])
