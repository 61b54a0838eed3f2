"""Judging one program against one problem (the code schema, docs/data.md), on one sandbox session.

A test passes only if the program finishes within its limits, exits 0 and its output matches (stdio, call and
assert, each compared outside the sandbox: docs/sandbox.md, "Verdicts"). Output that cannot be decoded or compared
is a wrong answer (0); None is only for the sandbox failing. Each test is judged on its whole output, in time
linear in it; the Verdict keeps an excerpt (`kept_output_chars`).
"""
import asyncio
import hashlib
import json
import math
import os
from collections import OrderedDict
from dataclasses import dataclass, replace
from decimal import Decimal, InvalidOperation

from .harness import MARK
from .types import ExecResult, ExecSpec, Limits, Verdict

with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "harness.py")) as _f:
    HARNESS_SRC = _f.read()
LANGUAGES = ("python", "javascript", "cpp")
MODES = ("stdio", "call", "assert")


@dataclass
class JudgeOptions:
    python: str = "/usr/bin/python3"
    node: str = "/usr/bin/node"
    cxx: str = "/usr/bin/g++"
    binary: bool = False           # reward 1/0 (all tests pass) instead of the fraction passed
    stop_at_first_failure: bool = False
    wall_factor: float = 5.0       # wall-clock backstop = wall_factor * time limit + 1 s (CPU time decides)
    compile_time_s: float = 30.0
    compile_mem_mb: int = 2048
    out_bytes: int = 8 << 20
    node_extra_address_space_mb: int = 4096  # V8 reserves address space it never touches
    kept_output_chars: int = 4096  # of each test's stdout and stderr, kept in the Verdict for logs (head + tail)


# Ranges a row's limits must lie in (a negative memory limit used to switch the limit off).
TIME_LIMIT_S = (0.0, 600.0)
MEMORY_LIMIT_MB = (16, 1 << 20)


def _problem_defects(p: dict) -> list[str]:
    defects = []
    lang, mode = p.get("language", "python"), p.get("mode", "stdio")
    if lang not in LANGUAGES:
        defects.append(f"language {lang!r} not in {LANGUAGES}")
    if mode not in MODES:
        defects.append(f"mode {mode!r} not in {MODES}")
    elif mode != "stdio" and lang != "python":
        defects.append(f"mode {mode!r} is Python-only, language is {lang!r}")
    if mode in ("call", "assert") and not (isinstance(p.get("fn_name"), str) and p.get("fn_name")):
        defects.append(f"mode {mode!r} needs 'fn_name'" + (" (the entry point)" if mode == "assert" else ""))
    for key, (lo, hi) in (("time_limit_s", TIME_LIMIT_S), ("memory_limit_mb", MEMORY_LIMIT_MB)):
        v = p.get(key)
        if v is not None and not (isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
                                  and lo < v <= hi):
            defects.append(f"'{key}' must be a number in ({lo:g}, {hi:g}], got {p[key]!r}")
    tests = p.get("tests")
    if not isinstance(tests, list) or not tests:
        return defects + ["'tests' must be a non-empty list"]
    for i, t in enumerate(tests):
        if not isinstance(t, dict) or not isinstance(t.get("input"), str) or not isinstance(t.get("output"), str):
            defects.append(f"test {i} must be {{'input': str, 'output': str}}")
        elif mode == "call":  # the argument list and the expected value are JSON
            try:
                if not isinstance(json.loads(t["input"]), list):
                    raise ValueError
            except ValueError:
                defects.append(f"test {i} 'input' must be a JSON array of arguments, got {t['input'][:40]!r}")
            try:
                json.loads(t["output"])
            except ValueError:
                defects.append(f"test {i} 'output' must be JSON (the expected value), got {t['output'][:40]!r}")
    return defects


def validate_problem(p: dict) -> None:
    """Raise ValueError naming every invalid field of a code problem row (the one schema check)."""
    if not isinstance(p, dict):
        raise ValueError(f"code problem must be a dict, got {type(p).__name__}")
    defects = _problem_defects(p)
    if defects:
        raise ValueError(f"problem {p.get('id', '?')}: " + "; ".join(defects))


# -- comparison ------------------------------------------------------------------------------
def _decimals(line: str):
    try:
        ds = [Decimal(tok) for tok in line.split()]
    except (InvalidOperation, ValueError):
        return None
    # NaN never equals anything, and comparing a signalling NaN raises: such a line compares as text only.
    return None if any(d.is_nan() for d in ds) else ds


# A stdio line longer than this against its expected line is wrong unread: tokenising an 8 MB line against a
# one-token answer took 1.5-3.9 s and over 500 MB of the trainer. Only tokens padded with hundreds of zeros are lost.
LINE_FACTOR, LINE_SLACK = 8, 256


def stdio_match(output: str, expected: str) -> bool:
    """LiveCodeBench: strip all, split lines, strip each, same count, each equal as text or Decimals."""
    got, want = output.strip(), expected.strip()
    if got.count("\n") != want.count("\n"):  # counted before splitting: millions of empty lines are not split
        return False
    for g, w in zip(got.split("\n"), want.split("\n")):
        g, w = g.strip(), w.strip()
        if g == w:
            continue
        if len(g) > LINE_FACTOR * len(w) + LINE_SLACK:
            return False
        dg, dw = _decimals(g), _decimals(w)
        if dg is None or dw is None or dg != dw:
            return False
    return True


def _numbers_equal(got, want) -> bool:
    if type(want) is int:  # exact (int against float too): a tolerance passed 123456789013.0 for 123456789012
        return got == want
    try:  # an expected float keeps a tolerance (0.1 + 0.2 is 0.3)
        return got == want or math.isclose(got, want, rel_tol=1e-9, abs_tol=1e-9)
    except OverflowError:  # an int past the float range (2**1100) is close to no float
        return False


def values_equal(got, want) -> bool:
    """`got`, the harness's tagged JSON (harness.encode), equals `want`, the expected JSON value. Walked side by side
    without decoding `got` (no set or dict is built of the program's values) and no deeper than `want`; tuples compare
    as lists, `True` is not `1`, a set, bytes or complex is simply wrong (why each: docs/sandbox.md, "Verdicts")."""
    if isinstance(got, dict):  # a tagged value
        tag, got = got.get("__t"), got.get("v")
        if tag == "dict":
            return isinstance(want, dict) and _items_equal(got, want)
        if tag == "float":  # inf / nan, as a string
            got = float(got) if isinstance(got, str) else None
        elif tag != "tuple":
            return False
    if isinstance(want, list):
        return isinstance(got, list) and len(got) == len(want) and all(map(values_equal, got, want))
    if type(got) in (int, float) and type(want) in (int, float):  # bool excluded on purpose
        return _numbers_equal(got, want)
    return not isinstance(want, dict) and type(got) is type(want) and got == want


def _items_equal(pairs, want: dict) -> bool:
    """Encoded [[key, value], ...] against a JSON object: each key once, each looked up in `want` only."""
    if not isinstance(pairs, list) or len(pairs) != len(want):
        return False
    seen = dict.fromkeys(want, False)
    for pair in pairs:
        if not (isinstance(pair, list) and len(pair) == 2 and isinstance(pair[0], str)) or seen.get(pair[0], True):
            return False
        seen[pair[0]] = True
        if not values_equal(pair[1], want[pair[0]]):
            return False
    return True


def harness_payload(res: ExecResult):
    """The harness's JSON line (after the last marker), or None if the program never got there."""
    if res.status != "ok" or MARK not in res.stdout:
        return None
    try:
        payload = json.loads(res.stdout.rsplit(MARK, 1)[1])
    except (ValueError, RecursionError):  # the program controls this line: deep or broken JSON is its loss
        return None
    return payload if isinstance(payload, dict) else None


def _value_matches(payload, expected: str) -> bool:
    """The harness's value equals the expected JSON; a malformed (forged) payload is simply wrong."""
    return _compares(lambda: values_equal(payload["value"], json.loads(expected)))


def _compares(compare) -> bool:
    """compare(), where the program's output is on one side: any failure to decode or compare it (KeyError,
    a value nested thousands deep, OverflowError from complex(10**400, 0), ...) is the program's loss, a
    wrong answer, never an exception (which the pool would turn into None, "could not judge")."""
    try:
        return bool(compare())
    except Exception:  # noqa: BLE001  untrusted output: no error of decoding or comparing it is the sandbox's
        return False


def excerpt(text: str, limit: int) -> str:
    """At most `limit` characters of `text`: its head and tail around a line saying how long it was. A Verdict
    keeps this much of each output, for logs: the full output (up to out_bytes each) lives only while its
    test is judged, so trainer memory does not grow with what programs print."""
    if len(text) <= limit:
        return text
    cut = f"\n[... {len(text)} characters; the middle is left out ...]\n"
    half = max(limit - len(cut), 0) // 2
    return (text[:half] + cut + text[len(text) - half:])[:limit]


def _kept(res: ExecResult, opts: JudgeOptions) -> ExecResult:
    return replace(res, stdout=excerpt(res.stdout, opts.kept_output_chars),
                   stderr=excerpt(res.stderr, opts.kept_output_chars))


# -- running ---------------------------------------------------------------------------------
def _graded(res: ExecResult, ok: bool) -> ExecResult:
    if res.status != "ok":
        return res
    return replace(res, status="passed" if ok else "wrong_answer")


async def _prepare(session, code: str, problem: dict, opts: JudgeOptions, lim: Limits):
    """Returns (argv, files) to run one stdio test, or an ExecResult for a failed compile."""
    lang = problem.get("language", "python")
    if lang == "python":
        return [opts.python, "-I", "main.py"], {"main.py": code}
    if lang == "javascript":
        # V8 reserves far more address space than it uses, so RLIMIT_AS cannot be the memory limit:
        # node's own heap limit is, with a roomy address-space backstop (see _prepare's caller).
        return [opts.node, f"--max-old-space-size={lim.mem_mb}", "main.js"], {"main.js": code}
    clim = replace(lim, cpu_s=opts.compile_time_s, wall_s=opts.compile_time_s * 2, mem_mb=opts.compile_mem_mb)
    res = await session.exec(ExecSpec([opts.cxx, "-O2", "-std=c++17", "-o", "main", "main.cpp"],
                                      {"main.cpp": code}, "", clim))
    if res.status != "ok":
        return replace(res, status="compile_error")
    return ["./main"], {}


def _reward(results: list[ExecResult], n_tests: int, opts: JudgeOptions) -> Verdict:
    passed = sum(r.status == "passed" for r in results)
    first_bad = next((r.status for r in results if r.status != "passed"), "passed")
    return Verdict(float(passed == n_tests) if opts.binary else passed / n_tests, results, first_bad)


async def judge(session, code: str | None, problem: dict, opts: JudgeOptions | None = None) -> Verdict:
    """Run `code` against `problem` on a sandbox session. InfraError propagates (the pool retries)."""
    opts = opts or JudgeOptions()
    tests = problem["tests"]
    if not code:  # no code block in the completion: a real 0
        return Verdict(0.0, [], "no_code")
    tl = float(problem.get("time_limit_s") or 6)
    lim = Limits(cpu_s=tl, wall_s=opts.wall_factor * tl + 1, mem_mb=int(problem.get("memory_limit_mb") or 1024),
                 out_bytes=opts.out_bytes)
    mode = problem.get("mode", "stdio")
    results: list[ExecResult] = []
    if mode == "assert":
        return _reward([_kept(await _judge_assert(session, code, problem, lim, opts), opts)], 1, opts)
    if mode == "stdio":
        prep = await _prepare(session, code, problem, opts, lim)
        if isinstance(prep, ExecResult):
            return _reward([_kept(prep, opts)], len(tests), opts)
        argv, files = prep
        if problem.get("language") == "javascript":
            lim = replace(lim, mem_mb=lim.mem_mb + opts.node_extra_address_space_mb)
    for i, t in enumerate(tests):
        if mode == "stdio":
            res = await session.exec(ExecSpec(argv, files if i == 0 else {}, t["input"], lim))
            res = _graded(res, res.status == "ok" and _compares(lambda: stdio_match(res.stdout, t["output"])))
        else:  # call: the argument list goes in, the value comes out and is compared here
            call = {"fn_name": problem["fn_name"], "args": json.loads(t["input"])}
            files = {"call.json": json.dumps(call), "harness.py": HARNESS_SRC}
            if i == 0:
                files["solution.py"] = code
            res = await session.exec(ExecSpec([opts.python, "-I", "harness.py", "call"], files, "", lim))
            payload = harness_payload(res)
            ok = payload is not None and _value_matches(payload, t["output"])
            if res.status == "ok" and payload is None:
                res = replace(res, status="runtime_error")  # exited 0 before the harness answered
            res = _graded(res, ok)
        results.append(_kept(res, opts))  # judged on the whole output; an excerpt is kept
        if opts.stop_at_first_failure and res.status != "passed":
            break
    return _reward(results, len(tests), opts)


# -- assert mode: the program and the checks take turns, in separate executions (harness.py) ----------------
MAX_ROUNDS = 16  # program / checks turns (a call that depends on an earlier answer needs one more);
                 # each of HumanEval's reference solutions needs one
FIRST_CALLS_BYTES = 32 << 20  # what the judge keeps of the checks' first calls, over all problems
_first_calls: "OrderedDict[str, str]" = OrderedDict()  # digest of the checks -> JSON list of their first calls
_first_calls_bytes = [0]
_finding: dict = {}  # (event loop, digest) -> a future done when a turn looking for the first calls ends


async def _checks_turn(session, checks: dict, answers: str, lim: Limits, opts: JudgeOptions):
    """Run the trusted checks on the answers so far (JSON), without the program: (result, "passed" | [calls] |
    None: they failed)."""
    res = await session.exec(ExecSpec([opts.python, "-I", "harness.py", "checks"],
                                      {**checks, "answers.json": answers}, "", lim, clean=True))
    payload = harness_payload(res) or {}
    if payload.get("passed") is True:
        return res, "passed"
    need = payload.get("need")
    ok = isinstance(need, list) and need and all(isinstance(k, str) for k in need)
    return res, need if ok else None


async def _first_turn(session, checks: dict, lim: Limits, opts: JudgeOptions):
    """The calls the checks make before any answer: ([their execution], calls), or None for calls when the checks
    fail with no program at all. Found once per problem: they are the same for every program, and a group's
    programs arrive together (the first finds them, the others wait for it)."""
    digest = hashlib.sha256(json.dumps([checks["starter.py"], checks["test.py"], checks["entry.json"]]).encode()
                            ).hexdigest()
    key = (asyncio.get_running_loop(), digest)
    if key in _finding:
        await asyncio.shield(_finding[key])
    if digest in _first_calls:
        _first_calls.move_to_end(digest)
        return [], json.loads(_first_calls[digest])
    _finding[key] = mine = asyncio.get_running_loop().create_future()
    try:
        res, need = await _checks_turn(session, checks, '{"answers": []}', lim, opts)
    finally:
        if _finding.get(key) is mine:
            del _finding[key]
        mine.set_result(None)
    if need is None:
        return [res], None
    need = [] if need == "passed" else need  # no call at all: the program must still load
    text = json.dumps(need)
    _first_calls_bytes[0] += len(text) - len(_first_calls.pop(digest, ""))  # two may have looked at once
    _first_calls[digest] = text
    while _first_calls_bytes[0] > FIRST_CALLS_BYTES:
        _first_calls_bytes[0] -= len(_first_calls.popitem(last=False)[1])
    return [res], need


def _left(lim: Limits, used_s: float, opts: JudgeOptions) -> Limits:
    """What is left of the time limit after `used_s` CPU seconds in earlier turns."""
    left = lim.cpu_s - used_s
    return replace(lim, cpu_s=left, wall_s=opts.wall_factor * left + 1)


async def _judge_assert(session, code, problem, lim, opts) -> ExecResult:
    """The program and the checks take turns, each execution in an emptied directory; passed when the checks run to
    the end on answers alone. The program's turns share one time limit; so do the checks' (docs/sandbox.md)."""
    checks = {"harness.py": HARNESS_SRC, "starter.py": problem.get("starter_code") or "",
              "test.py": problem["tests"][0]["input"], "entry.json": json.dumps({"entry_point": problem["fn_name"]})}
    runs, need = await _first_turn(session, checks, lim, opts)
    answers: list = []
    status, prog, used = "wrong_answer", runs[0] if runs else None, [0.0, 0.0]  # CPU s: program, checks
    for _ in range(MAX_ROUNDS if need is not None else 0):
        if max(used) >= lim.cpu_s:
            status = "timeout"
            break
        calls = json.dumps({"entry_point": problem["fn_name"], "calls": need})
        prog = await session.exec(ExecSpec([opts.python, "-I", "harness.py", "calls"],
                                           {"harness.py": HARNESS_SRC, "solution.py": code, "calls.json": calls},
                                           "", _left(lim, used[0], opts), clean=True))
        runs.append(prog)
        used[0] += prog.cpu_s
        results = (harness_payload(prog) or {}).get("results")
        if not (isinstance(results, list) and len(results) == len(need) and all(isinstance(r, dict) for r in results)):
            status = prog.status if prog.status != "ok" else "runtime_error"  # exited 0 before the harness answered
            break
        answers += [[k, r] for k, r in zip(need, results)]
        try:
            text = json.dumps({"answers": answers})
        except (ValueError, RecursionError):  # the program shaped these values: ones that break are its loss
            status = "runtime_error"
            break
        res, need = await _checks_turn(session, checks, text, _left(lim, used[1], opts), opts)
        runs.append(res)
        used[1] += res.cpu_s
        if need in ("passed", None):
            status = "passed" if need == "passed" else "wrong_answer"
            break
    return replace(prog, status=status, time_s=sum(r.time_s for r in runs), cpu_s=sum(r.cpu_s for r in runs))
