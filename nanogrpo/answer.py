"""The answer judge: what a completion's final answer is, and whether it equals the gold.

The math and number rewards (nanogrpo/rewards.py) and eval.py's benchmarks all come here, so training and
evaluation judge one way. A verdict is 1.0 / 0.0, or None when it could not be computed (the gold cannot be
read, the checker itself broke): an infrastructure verdict, never the model's fault.

- `judge_number`  GSM8K-style: the final answer is the number itself (the last \\boxed{}, else the last number).
- `judge_math`    math-verify, run in worker processes with a hard per-item timeout (batched).
- `read_gold`, `gold_error`, `number_gold_error`: the gold as each reads it, checked at load time.

Why worker processes for math-verify: its own timeouts use SIGALRM, which only works in the main
thread, and SIGALRM cannot interrupt sympy while it sits in one long C-level operation (a huge power,
say). A worker we can SIGKILL handles both: the parent waits at most `timeout_s` per item, then kills
that worker and starts a fresh one. Timeout policy (decided here, tested in tests/test_rewards.py):
  - the item ran past `timeout_s`  -> 0.0: the model wrote an expression too costly to check; that is
    its fault, and scoring it 0 keeps it from learning to stall the checker;
  - the worker died or the pool could not start -> None: infrastructure, not the model.
"""

from __future__ import annotations

import atexit
import os
import re
import subprocess
import sys
import threading
import time
from decimal import Decimal
from multiprocessing.connection import wait as wait_ready

# ---------------------------------------------------------------- number

_NUMBER = r"-?\d+(?:,\d{3})*(?:\.\d+)?"
_NUMBERS = re.compile(_NUMBER)
# "1,056", "$42", "\\$42", "7.", matched on stripped text: one `\s*` on each side of the number, never two in a
# row (`\s*\$?\s*` on 4,000 spaces and a letter backtracked for 118 s)
_ONLY_NUMBER = re.compile(rf"\\?\$?\s*({_NUMBER})(?:\s*\$)?\.?")


def final_text(completion: str) -> str:
    """The part of a completion that answers: after the last `</think>` when a think block closes (a box
    inside the thinking is a draft, not the answer), else all of it."""
    cut = completion.rfind("</think>")
    return completion if cut < 0 else completion[cut + len("</think>") :]


def _boxed(text: str) -> str | None:
    """The content of the last \\boxed{...}, braces balanced; None when there is none."""
    span = _last_box_span(text)
    return None if span is None else text[span[0] : span[1]]


def _last_box_span(text: str) -> tuple[int, int] | None:
    """(start, end) of the content of the last \\boxed{...}, braces balanced; None when there is none."""
    start = text.rfind("\\boxed{")
    if start < 0:
        return None
    depth, i = 0, start + len("\\boxed")
    for j in range(i, len(text)):
        depth += {"{": 1, "}": -1}.get(text[j], 0)
        if depth == 0:
            return i + 1, j
    return None


def _number_gold(answer) -> re.Match | None:
    """The gold as the number reward reads it (thousands separators in any spelling joined)."""
    return _ONLY_NUMBER.fullmatch(_THOUSANDS.sub("", str(answer)).strip())


def number_gold_error(answer) -> str | None:
    """Why the number reward cannot read this gold (a sentence), or None when it can."""
    if _number_gold(answer) is None:
        return "the number reward needs a number (digits, optionally thousands commas and decimals)"
    return None


def _as_number(text: str) -> Decimal:
    return Decimal(text.replace(",", ""))


def judge_number(completion: str, answer: str) -> float | None:
    """1.0 when the final answer is the gold number: the last \\boxed{} must hold a number and nothing else
    (thousands commas, a $ and a final period allowed); without a box, the last number in the text counts (as
    GSM8K's graders read answers). None when the gold is not a number.

    Why not math-verify for number answers: it evaluates what it parses, so \\boxed{22 * 46 - 844} scores as 168.
    A run without tools on "word_problems_large" learned to box the expression instead of computing it in 7 steps
    (sampled accuracy 6% -> 92%): sympy did the arithmetic the task is about (docs/results.md "Tools on a chat model").
    Read after `</think>` when a think block closes (`final_text`)."""
    try:
        gold = _number_gold(answer)
        if gold is None:
            return None
        text = _THOUSANDS.sub("", final_text(str(completion)))  # `1\,000`, `1{,}000`: one number
        box = _boxed(text)
        if box is not None:
            got = _ONLY_NUMBER.fullmatch(box.strip())
            return float(got is not None and _as_number(got.group(1)) == _as_number(gold.group(1)))
        found = _NUMBERS.findall(text)
        return float(bool(found) and _as_number(found[-1]) == _as_number(gold.group(1)))
    except Exception:  # rewards never raise
        return 0.0



# ---------------------------------------------------------------- math (golds and answers, as written)
#
# math-verify reads a gold the way it reads a model's answer: it looks for `\boxed{}` / `$..$` / `\[..\]` and
# parses what it finds. A dataset's `answer` field is usually bare LaTeX (`1 - \frac{1}{\mathrm{e}}`), sometimes
# delimited (`$x = \frac{1}{2}, x = \frac{-1 \pm \sqrt{13}}{4}$`), sometimes prose (`no`, `forty two`).
# `read_gold` turns each into what it means; the few rewrites below run on both sides (the gold, and the
# model's text or its last `\boxed{}`), so a right answer written like the gold always matches it. All of them
# are single regex passes or one scan: linear in the text, whatever the policy writes.

# A thousands separator between digit groups, in every LaTeX spelling: `1{,}000`, `1,\!000` (MATH), `1\,000`,
# `1\ 000`, `1~000`, `1\!000`, `1\;000`, `1\:000`, and the Unicode thin / no-break spaces. Unambiguous: it
# must sit between a digit and exactly three digits. (A plain `1,000` is math-verify's own call: it reads
# it as 1000.)
_THOUSANDS = re.compile(r"(?<=\d)(?:\{,\}|,\\!|\\,|\\!|\\;|\\:|\\ |~|[\u00a0\u2009\u202f])(?=\d{3}(?!\d))")
# `\mathrm{e}` / `\mathrm{i}`: the constants. math-verify turns `\mathrm{..}` into `\text{..}`, and inside a
# `\frac` that breaks its parse (`1 - \frac{1}{\mathrm{e}}` came back as the string `1 - \frac{1}{`).
_UPRIGHT_CONST = re.compile(r"\\(?:mathrm|mathit|operatorname|text)\s*\{\s*([ei])\s*\}")
# A gold that is delimited as a whole: `$..$`, `$$..$$`, `\(..\)`, `\[..\]` -> its content.
_MATH_DELIMITER = re.compile(r"(?<!\\)\$|\\\(|\\\[")  # `$` (not the dollar sign `\$`), `\(`, `\[`
_DELIMITED = re.compile(r"\$\$([^$]+)\$\$|\$([^$]+)\$|\\\[(.+)\\\]|\\\((.+)\\\)", re.S)
# Text wrappers, and prose: words of letters (no digits, no LaTeX, no operators), with at least one word
# that is not a math name, so `no` is the word "no", never the product n*o.
_TEXT_WRAP = re.compile(r"\\(?:text|textbf|textit|textrm|mathrm|mbox)\s*\{([^{}\\$]*)\}")
_PROSE = re.compile(r"[A-Za-z]+(?:[ ,']+[A-Za-z]+)*[.!]?")
_MATH_WORDS = frozenset("sin cos tan cot sec csc log ln exp sqrt pi inf infty max min gcd lcm arcsin arccos "
                        "arctan sinh cosh tanh det mod".split())
# Separators between solutions, read as commas where several solutions are rewritten.
_OR = re.compile(r"\\text\s*\{\s*(?:or|and)\s*\}|\\q?quad\b|(?<![A-Za-z\\])(?:or|and)(?![A-Za-z])|;")
_PM = re.compile(r"\\(pm|mp)(?![A-Za-z])")
_ONE_UNKNOWN = re.compile(r"\s*([A-Za-z](?:_\{?[A-Za-z0-9]+\}?)?)\s*=([^=<>]+)", re.S)  # `x = ..`, `x_1 = ..`
_PLAIN_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")
_MAX_REWRITE = 2000  # characters: a longer box is left as written (bounded work on policy text)


def _normalise_latex(text: str) -> str:
    """The rewrites that hold anywhere in a text: thousands separators joined, upright e and i."""
    return _UPRIGHT_CONST.sub(r"\1", _THOUSANDS.sub("", text))


def _split_top(s: str) -> list[str] | None:
    """`s` split at the commas outside any bracket; None when its brackets do not balance."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(s):
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
            if depth < 0:
                return None
        elif ch == "," and depth == 0:
            parts.append(s[start:i])
            start = i + 1
    if depth != 0:
        return None
    return parts + [s[start:]]


def _solutions(s: str) -> str:
    """Several solutions as the set of their values: `x = \\frac{1}{2}, x = \\frac{-1 \\pm \\sqrt{13}}{4}` ->
    `\\frac{1}{2}, \\frac{-1 + \\sqrt{13}}{4}, \\frac{-1 - \\sqrt{13}}{4}`. `\\pm` / `\\mp` give two solutions (the
    signs of one solution move together); `x = a, x = b` (the same unknown in every part) gives `a, b`.
    Anything else comes back unchanged."""
    if len(s) > _MAX_REWRITE or ("=" not in s and not _PM.search(s)):
        return s
    parts = _split_top(_OR.sub(",", s))
    if not parts or any(not p.strip() for p in parts):
        return s
    out, changed = [], False
    for p in parts:
        signs = len(_PM.findall(p))
        if 1 <= signs <= 3:
            out += [_PM.sub(lambda m: "+" if m.group(1) == "pm" else "-", p),
                    _PM.sub(lambda m: "-" if m.group(1) == "pm" else "+", p)]
            changed = True
        else:
            out.append(p)
    if len(out) >= 2:
        eqs = [_ONE_UNKNOWN.fullmatch(p) for p in out]
        if all(eqs) and len({m.group(1) for m in eqs}) == 1:
            out, changed = [m.group(2) for m in eqs], True
    return ", ".join(p.strip() for p in out) if changed else s


def _answer_latex(text: str) -> str:
    """A model's text (or a gold written with `\\boxed`) as math-verify should read it: `_normalise_latex`
    everywhere, and the last box's solutions as a set (`_solutions`)."""
    text = _normalise_latex(text)
    span = _last_box_span(text)
    if span is None:
        return text
    return text[: span[0]] + _solutions(text[span[0] : span[1]]) + text[span[1] :]


def _prose_key(text: str) -> str:
    """Prose compared as words: text wrappers dropped, case and spacing ignored, a final period dropped."""
    text = text.replace("\\ ", " ").replace("~", " ")
    for _ in range(3):  # `\textbf{\text{No}}`: one wrapper per pass, inside out
        text = _TEXT_WRAP.sub(r"\1", text)
    return " ".join(text.lower().split()).rstrip(".!").strip()


def _gold_text(answer: str) -> tuple[str, str]:
    """("prose", words) or ("latex", the string math-verify parses) for a gold as written:

    - with `\\boxed`, or inline math inside text (`the answer is $5$`): read as math-verify reads any text;
    - delimited as a whole (`$..$`, `$$..$$`, `\\(..\\)`, `\\[..\\]`): its content, as bare LaTeX below;
    - prose (`no`, `forty two`, `\\text{Evelyn}`): words, compared as words (`_prose_key`);
    - bare LaTeX: one expression (`\\left( 3, \\frac{\\pi}{2} \\right)` is a tuple, not `3`), several solutions
      as a set (`_solutions`).
    """
    s = _normalise_latex(str(answer).strip())
    whole = _DELIMITED.fullmatch(s)
    if whole:
        s = next(g for g in whole.groups() if g is not None).strip()
    if "\\boxed" in s or _MATH_DELIMITER.search(s):
        return "latex", _answer_latex(s)
    words = _TEXT_WRAP.fullmatch(s)
    words = (words.group(1) if words else s).strip()
    if _PROSE.fullmatch(words) and any(len(w) > 1 and w.lower() not in _MATH_WORDS
                                       for w in re.findall(r"[A-Za-z]+", words)):
        return "prose", _prose_key(words)
    return "latex", "$\\boxed{" + _solutions(s) + "}$"


_CONFIG = None  # built on first use: math-verify is imported only where it runs


def _extraction_config() -> list:
    """What math-verify looks for, in golds and answers alike: `\\boxed{}` first, then LaTeX, then plain
    expressions ("the answer is" anchors beat a bare trailing expression)."""
    global _CONFIG
    if _CONFIG is None:
        from math_verify import ExprExtractionConfig, LatexExtractionConfig

        _CONFIG = [LatexExtractionConfig(boxed_match_priority=0), ExprExtractionConfig()]
    return _CONFIG


def read_gold(answer, timeout: int | None = 5):
    """The gold as the math reward compares it: ("prose", words) or ("math", math-verify's parse of it), or
    None when it cannot be read (no sympy expression comes out). The data loader calls it once per row, so a
    gold that cannot be read stops the run at load time (nanogrpo/data.py); the reward calls it per item.
    `timeout`: math-verify's SIGALRM timeout in seconds (None off: SIGALRM works only in the main thread)."""
    kind, text = _gold_text(answer)
    if kind == "prose":
        return ("prose", text) if text else None
    from math_verify import parse

    gold = parse(text, extraction_config=_extraction_config(), parsing_timeout=timeout)
    # parse() also returns the raw string as a fallback; a gold with no parsed (sympy) part is unusable.
    if not any(not isinstance(g, str) for g in gold):
        return None
    return "math", gold


def gold_error(answer) -> str | None:
    """Why the math reward cannot read this gold (a sentence), or None when it can. For the data loader:
    plain numbers and prose answer at once, without math-verify; the rest is parsed (main thread: with
    math-verify's own timeout)."""
    text = str(answer).strip()
    if _PLAIN_NUMBER.fullmatch(text):
        return None
    try:
        import math_verify  # noqa: F401
    except ImportError:  # not installed: nothing here can tell (a math run then stops on its all-None rewards)
        return None
    try:
        main = threading.current_thread() is threading.main_thread()
        if read_gold(text, timeout=5 if main else None) is not None:
            return None
    except BaseException as e:  # math-verify's TimeoutException is a BaseException
        if isinstance(e, (KeyboardInterrupt, SystemExit)):
            raise
        return f"math-verify could not parse it ({type(e).__name__})"
    return "math-verify finds no expression in it"


# What math-verify would credit but is no answer to the gold (`_not_an_answer`): each a single regex pass.
_ARROW = re.compile(r"\\(?:to|rightarrow|Rightarrow|longrightarrow|Longrightarrow|implies|mapsto|iff)(?![A-Za-z])|->|=>")
_PERCENT = re.compile(r"%")
_RADIANS = re.compile(r"radian", re.I)
_DEGREES = re.compile(r"\\circ|\u00b0|degree", re.I)
_NAMED = re.compile(r"\s*[A-Za-z](?:_\{?[A-Za-z0-9]+\}?)?(?:\([^()=]*\))?\s*=[^=]+")  # `x = ..`, `f(x) = ..`
_DECIMAL = re.compile(r"-?\d+\.\d+")
_INTEGER = re.compile(r"-?\d+")
_FRACTION = re.compile(r"(-?)\\[dt]?frac\{(-?\d+)\}\{(\d+)\}|(-?\d+)/(\d+)")


def _not_an_answer(box: str, gold: str) -> bool:
    """True when the last box says something the gold does not, whatever math-verify would make of it:
    - an equation whose left side is not one named unknown (`203 = 204` holds two answers; `x = 5`, `f(x) = 2x`
      are answers), or an arrow (`205 \\to 204`), unless the gold is written that way too;
    - a percent where the gold is none (math-verify reads `18\\%` as both 18 and 0.18);
    - radians where the gold has none, or degrees where the gold is in radians;
    - a decimal against a gold that is not a decimal: exact against an integer or a fraction (`0.5` is 1/2,
      `0.333333` is not 1/3), never against anything else (`1.414214` is not `\\sqrt{2}`)."""
    gold = _boxed(gold) if "\\boxed{" in gold else gold
    b, g = (_normalise_latex(t).replace("\\$", "").replace("$", "").strip() for t in (box, gold or ""))
    if _ARROW.search(b) and not _ARROW.search(g):
        return True
    if "=" in b and "=" not in g and not all(_NAMED.fullmatch(p) for p in (_split_top(b) or [b])):
        return True
    if _PERCENT.search(b) and not _PERCENT.search(g):
        return True
    if (_RADIANS.search(b) and not _RADIANS.search(g)) or (_DEGREES.search(b) and _RADIANS.search(g)):
        return True
    plain = g.replace(",", "")  # a gold `1,000.5` is a decimal
    if _DECIMAL.fullmatch(b) and not _DECIMAL.fullmatch(plain):
        from fractions import Fraction

        frac = _FRACTION.fullmatch(g)
        if _INTEGER.fullmatch(plain):
            return Fraction(b) != int(plain)
        if frac:
            sign, num, den = (frac.group(1), frac.group(2), frac.group(3)) if frac.group(2) else ("", *frac.group(4, 5))
            return int(den) == 0 or Fraction(b) != (-1 if sign else 1) * Fraction(int(num), int(den))
        return True
    return False


def _check_math(completion: str, answer: str, inner_timeout: int) -> float | None:
    """Runs inside a worker. None = gold unparseable; else 1.0/0.0 from verify(gold, prediction), on the text
    after `</think>` (`final_text`), 0.0 when the last box is no answer to the gold (`_not_an_answer`)."""
    from math_verify import parse, verify

    gold = read_gold(answer, inner_timeout)
    if gold is None:
        return None
    completion = final_text(completion)
    span = _last_box_span(completion)
    if span is not None and gold[0] == "math" and _not_an_answer(completion[span[0] : span[1]], str(answer)):
        return 0.0
    if gold[0] == "prose":  # words: against the last box's words; without a box, math-verify on `\text{words}`
        if span is not None:
            return float(_prose_key(completion[span[0] : span[1]]) == gold[1])
        gold = ("math", parse("$\\text{" + gold[1] + "}$", _extraction_config(), parsing_timeout=inner_timeout))
    pred = parse(_answer_latex(completion), _extraction_config(), parsing_timeout=inner_timeout)
    if not pred:
        return 0.0
    # Order matters: verify is not symmetric (the gold decides how equations/intervals are read).
    return float(verify(gold[1], pred, timeout_seconds=inner_timeout))

# ---------------------------------------------------------------- math (worker side)


def _worker_main() -> None:
    """`python -m nanogrpo.answer --math-worker INNER_TIMEOUT`: one JSON line in, one JSON line out."""
    import json
    import logging
    import sys

    import math_verify  # noqa: F401  (import before saying ready: a slow import must not eat an item's timeout)

    inner_timeout = int(sys.argv[2])
    logging.getLogger("math_verify").setLevel(logging.ERROR)  # its timeout warnings would flood the logs
    out = os.fdopen(os.dup(1), "w")  # the protocol channel; stray prints go to stderr instead
    sys.stdout = sys.stderr
    out.write('"ready"\n')
    out.flush()
    for line in sys.stdin:
        try:
            completion, answer = json.loads(line)
            reply = {"ok": _check_math(completion, answer, inner_timeout)}
        except BaseException as e:  # math-verify's TimeoutException is a BaseException
            reply = {"error": repr(e)[:200]}
        out.write(json.dumps(reply) + "\n")
        out.flush()


# ---------------------------------------------------------------- math (parent side: the pool)


class MathPool:
    """A few worker processes, each with its own pipes, so that one stuck item can be killed alone.

    Started lazily on first use and reused. Workers are plain subprocesses (`python -m nanogrpo.answer`),
    not multiprocessing: no fork of a parent holding CUDA or threads, and no re-import of the caller's
    `__main__` (multiprocessing's spawn would re-run an unguarded script).
    """

    def __init__(self, workers: int, inner_timeout: int = 5):
        self.n, self.inner_timeout = workers, inner_timeout
        self.procs: list[subprocess.Popen | None] = [None] * workers
        self.lock = threading.Lock()  # one batch at a time; callers may share the pool across threads

    def _start(self, i: int) -> None:
        root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the dir holding nanogrpo/
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([root, os.environ.get("PYTHONPATH", "")]))
        env["OMP_NUM_THREADS"] = "1"
        self.procs[i] = subprocess.Popen(
            [sys.executable, "-m", "nanogrpo.answer", "--math-worker", str(self.inner_timeout)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
            text=True, bufsize=1, env=env,
        )

    def _ensure_started(self) -> None:
        """(Re)start every dead worker, all at once, and wait until each has imported math-verify."""
        fresh = []
        for i in range(self.n):
            if self.procs[i] is None or self.procs[i].poll() is not None:
                self._kill(i)
                try:
                    self._start(i)
                    fresh.append(i)
                except Exception:  # no process could be made: those slots stay empty (items -> None)
                    pass
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        for i in fresh:
            ready = wait_ready([self.procs[i].stdout], timeout=max(0.0, deadline - time.monotonic()))
            if not ready or self.procs[i].stdout.readline().strip() != '"ready"':
                self._kill(i)

    def _kill(self, i: int) -> None:
        p, self.procs[i] = self.procs[i], None
        if p is None:
            return
        if p.poll() is None:
            p.kill()
        for f in (p.stdin, p.stdout):
            try:
                f.close()
            except Exception:
                pass
        try:
            p.wait(timeout=5)
        except Exception:
            pass

    def close(self) -> None:
        for i in range(self.n):
            self._kill(i)

    def map(self, items: list[tuple[str, str]], timeout_s: float) -> list[float | None]:
        """Score (completion, answer) pairs; order kept. See the module docstring for the timeout policy."""
        with self.lock:
            return self._map(items, timeout_s)

    def _map(self, items, timeout_s):
        import json

        results: list[float | None] = [None] * len(items)
        todo = list(range(len(items)))[::-1]  # pop() from the end gives items in order
        busy: dict[int, tuple[int, float]] = {}  # worker -> (item, deadline)
        while todo or busy:
            if todo and len(busy) < self.n:
                self._ensure_started()
                if not busy and all(p is None for p in self.procs):
                    return results  # no worker could start: the rest stay None (infrastructure)
            for w in range(self.n):
                if not todo:
                    break
                if w in busy or self.procs[w] is None:
                    continue
                i = todo.pop()
                try:
                    self.procs[w].stdin.write(json.dumps(items[i]) + "\n")
                    self.procs[w].stdin.flush()
                    busy[w] = (i, time.monotonic() + timeout_s)
                except Exception:  # broken pipe: the worker died between items
                    results[i] = None
                    self._kill(w)
            if not busy:
                continue
            first_deadline = min(d for _, d in busy.values())
            pipes = {self.procs[w].stdout: w for w in busy}
            ready = wait_ready(list(pipes), timeout=max(0.0, first_deadline - time.monotonic()))
            ready_workers = {pipes[r] for r in ready}
            now = time.monotonic()
            for w in list(busy):
                i, deadline = busy[w]
                if w in ready_workers:
                    try:
                        reply = json.loads(self.procs[w].stdout.readline())
                        results[i] = reply.get("ok")  # an "error" reply is the checker's failure: None
                    except Exception:  # EOF: the worker died mid-item (crash, OOM kill)
                        results[i] = None
                        self._kill(w)
                    del busy[w]
                elif now >= deadline:
                    results[i] = 0.0  # too costly to check: the model's fault (module docstring)
                    self._kill(w)
                    del busy[w]
        return results


_POOL: MathPool | None = None
_POOL_LOCK = threading.Lock()
DEFAULT_TIMEOUT_S = 10.0
STARTUP_TIMEOUT_S = 120.0  # a worker importing sympy on a loaded machine can take many seconds


def _pool() -> MathPool:
    global _POOL
    with _POOL_LOCK:
        if _POOL is None:
            workers = int(os.environ.get("NANOGRPO_MATH_WORKERS", min(4, os.cpu_count() or 1)))
            _POOL = MathPool(max(1, workers))
            atexit.register(_POOL.close)
        return _POOL


def judge_math(
    completions: list[str], answers: list[str], timeout_s: float = DEFAULT_TIMEOUT_S
) -> list[float | None]:
    """1.0 where the completion's answer (boxed first) equals the gold under math-verify, 0.0 where not,
    None where the gold cannot be parsed or the checker broke; the items run in parallel over the pool's
    workers, each with a hard timeout."""
    if len(completions) != len(answers):
        raise ValueError(f"judge_math: {len(completions)} completions but {len(answers)} answers")
    items = [(str(c), str(a)) for c, a in zip(completions, answers)]
    try:
        return _pool().map(items, timeout_s)
    except Exception:  # the pool itself broke: infrastructure
        return [None] * len(items)



if __name__ == "__main__" and sys.argv[1:2] == ["--math-worker"]:
    _worker_main()
