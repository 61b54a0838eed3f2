"""Tasks: what a run trains on. A task is a `Task`: its rows, the reward that judges an answer, its prompt template.

The built-in tasks (TASKS) are Tasks; so is a user's own, `task = "PATH.py:NAME"` (docs/data.md), a source's
(`task = "PREFIX:NAME"`, SOURCES), and a dataset (a .jsonl / .parquet path, a Hub id), its rows judged by what they
are (rewards.by_row). Also here: the benchmarks eval.py knows (benchmarks.py) and the code-data converters (convert.py).
"""

from __future__ import annotations

import difflib
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from nanogrpo import data, rewards, usercode
from nanogrpo import ConfigError
from nanogrpo.tasks.arithmetic import arithmetic_rows
from nanogrpo.tasks.multiply import multiply_rows
from nanogrpo.tasks.word_problems import large_word_problem_rows, word_problem_rows


@dataclass(frozen=True)
class Task:
    """A task: where its rows come from, how an answer is judged, how a prompt is written."""

    rows: Callable[[str, int, int], list[dict]] | None  # rows(split, n, seed): split "train", or "test" (held
    # out); None: a dataset, whose file or Hub id data.load_rows reads
    reward: Callable[..., list]  # reward(completions, **columns) -> [1.0 right, 0.0 wrong, None: not judged]; rewards.py
    template: str = "chat"  # raw | chat | math_eval; "" = by row (math_eval for math rows, chat for code rows)
    heldout: bool = True  # rows("test", ...) is a split no training row is in (eval_every measures it)


TASKS = {
    "arithmetic": Task(arithmetic_rows, rewards.exact, "raw"),
    "multiply": Task(multiply_rows, rewards.exact, "raw"),
    # GSM8K-style: the number itself (math-verify would accept a boxed expression: rewards.number)
    "word_problems": Task(word_problem_rows, rewards.number, "math_eval"),
    "word_problems_large": Task(large_word_problem_rows, rewards.number, "math_eval"),
}
# "PREFIX:NAME" task sources: prefix -> source(NAME) -> Task (a ValueError naming a bad NAME)
SOURCES: dict[str, Callable[[str], Task]] = {}
from nanogrpo.tasks import reasoning_gym  # noqa: E402  (its package is imported only when a spec names it)

SOURCES["reasoning_gym"] = lambda name: Task(*reasoning_gym.task(name))


def get(spec: str, key: str = "task") -> Task:
    """The Task a config value names (`key` names the config key in errors): a built-in name, PATH.py:NAME, a
    PREFIX:NAME of SOURCES, or a dataset (a .jsonl / .parquet path or a Hub id owner/name)."""
    if spec in TASKS:
        return TASKS[spec]
    if usercode.is_spec(spec):
        obj = usercode.load(spec, key)
        if _USER.get(spec, (None,))[0] is not obj:  # each object made into a Task once (its rows checked once)
            _USER[spec] = obj, from_user(obj, spec, key)
        return _USER[spec][1]
    prefix, sep, name = spec.partition(":")
    if sep and prefix in SOURCES:
        try:
            return SOURCES[prefix](name)
        except ValueError as e:
            raise ConfigError(f"config key '{key}': {e}") from None
    if spec.endswith(".py"):
        raise ConfigError(f"config key '{key}': {spec!r} is a Python file: name what in it is the task, {spec}:NAME")
    if "/" not in spec and not Path(spec).suffix and not Path(spec).exists():  # a name, not a path or an id
        near = difflib.get_close_matches(spec, [*TASKS, *SOURCES], n=1)
        raise ConfigError(f"config key '{key}': unknown task {spec!r}{f' (did you mean {near[0]!r}?)' if near else ''}: "
                          f"the built-in tasks are {', '.join(TASKS)}; or PATH.py:NAME (your own), a .jsonl / "
                          f".parquet path or a Hub dataset id (owner/name)")
    return Task(None, rewards.by_row, "", heldout=False)  # a dataset: load_rows reads it


_USER: dict[str, tuple] = {}  # PATH.py:NAME -> (the object, its Task)


def from_user(obj, spec: str, key: str) -> Task:
    """A user's NAME as a Task: a Task as it is; a function rows(split, n, seed), or a list of rows (or a function
    returning one), judged as a dataset's rows are (a row without an answer has no verdict)."""
    if isinstance(obj, Task):
        if not callable(obj.reward):  # a name such as "number" would be a reward nobody registered: never a fallback
            raise ConfigError(f"config key '{key}': {spec}: its reward {obj.reward!r} is not a function "
                              "reward(completions, **columns) -> values (nanogrpo/rewards.py)")
        return obj
    if callable(obj) and any(p.default is p.empty for p in inspect.signature(obj).parameters.values()):
        return Task(obj, rewards.by_row, "")  # rows(split, n, seed), its own "test" split held out
    with usercode.contained(f"config key '{key}': {spec}()"):  # an exception, an exit: named
        rows = obj() if callable(obj) else obj
    if not isinstance(rows, list) or not rows:
        raise ConfigError(f"config key '{key}': {spec} is not a Task, a function rows(split, n, seed), or a non-empty "
                          f"list of rows or a function returning one (got {type(rows).__name__})")
    checked(rows, spec)
    return Task(lambda split, n, seed: rows[:n], rewards.by_row, "", heldout=False)


def checked(rows: list, source: str) -> list[dict]:
    """A user's rows, checked as a file's are (docs/data.md); every other field is kept, for the rewards."""
    if not isinstance(rows, list) or not rows:
        raise data.DataError(f"{source}: its rows are not a non-empty list (got {type(rows).__name__})")
    for i, row in enumerate(rows):
        if not isinstance(row, dict) or not isinstance(row.get("problem"), str) or not row["problem"].strip():
            raise data.DataError(f"{source} row {i}: a row is a dict with a non-empty 'problem' text (docs/data.md); "
                                 f"got {str(row)[:200]}")
    code = [(f"{source} row {i}", r) for i, r in enumerate(rows) if data.is_code_row(r)]
    if code:
        data.normalise_rows(code, "code", source)
    return rows


def load_rows(source: str, kind: str | None = None, split: str = "train", n: int | None = None, seed: int = 0,
              **kw) -> list[dict]:
    """Rows of a task (split, n and seed pick them), else `data.load_rows` (a file or a Hub dataset; `kind` and
    `kw`: its schema, gold check, subset and column mapping). `kind` as rollout.row_kind says for the run's verdict
    (None: "math" for a file, and nothing known of the verdict for a task's rows)."""
    task = get(source)
    if task.rows is None:
        return data.load_rows(source, kind or "math", split, n, seed, **kw)
    n = n if n is not None else (20_000 if split == "train" else 500)
    if split not in ("train", "test") or n < 1:  # what every task's rows(split, n, seed) takes
        raise data.DataError(f"{source}: a task's rows are split 'train' or 'test', n >= 1; got {split!r}, n = {n}")
    if source in TASKS:  # a built-in's errors are its own
        rows = task.rows(split, n, seed)
    else:  # a user's rows function that breaks (an exception, an exit) is named
        with usercode.contained(f"{source}: its rows({split!r}, {n}, {seed})", data.DataError):
            rows = task.rows(split, n, seed)
        checked(rows, source)
    named = [(f"{source} {split} row {i}", r) for i, r in enumerate(rows)]
    # the verdict is known from kind only where the caller says what it reads (rollout.row_kind's gold_check, None too)
    verifier = answer_verifier(task, kind if "gold_check" in kw else None, kw.get("gold_check"))
    if verifier:  # it compares with each row's answer: a row without one is named now, not after steps of None
        data.check_answers(named, verifier)
    if kw.get("gold_check"):  # its golds read as the run's verdict reads them, as a file's are
        data.check_golds(named, kw["gold_check"])
    return rows


def answer_verifier(task: Task, kind: str | None, gold_check) -> str:
    """The name of the verifier (exact, number, math) that judges a task's rows by their 'answer', "" if none does:
    the task's own reward when it is one, else the one the config names, read from what rollout.row_kind asks of the
    rows (`kind`: "auto" for by_row, whose rows may lack an answer; "code"; else "math", with number's or math's
    gold reader as `gold_check`; exact has none)."""
    own = {fn: name for name, fn in rewards.VERIFIERS.items() if name != "code"}
    if task.reward in own and kind != "code":
        return own[task.reward]
    if kind != "math":
        return ""
    if gold_check is not None:
        readers = {check: fn.__name__ for fn, check in rewards.GOLD_CHECKS.items() if fn is not rewards.by_row}
        return readers.get(gold_check, "math")
    # a task judged by_row whose rows load as "math" without a gold reader: the config names exact (with a task
    # reward of the user's own, a named exact cannot be told from that reward here: rewards.GOLD_CHECKS has no exact)
    return "exact" if task.reward is rewards.by_row else ""
