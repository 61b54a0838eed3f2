"""Rewards: what a completion earns. Every reward has one signature, TRL's (`reward_funcs`):

    reward(completions: list[str], **columns) -> list[float | None]

`columns` are the completions' rows field by field, each a list (`answer=[...]`, `tests=[...]`), so a reward names
the fields it reads. A reward never raises: None means it could not be computed (a gold it cannot read, a sandbox
that failed), and the trainer leaves that completion out of its group, never a silent 0; a wrong answer is 0.

`Scoring` is the entry point: a run's reward list resolved once (`scoring`: `rewards`, `reward_weights` and the task's
own reward), then called on each batch for the weighted total and every part. One reward judges the answer, the
verdict: the task's own (`accuracy`) or a verifier the list names; verdict == 1 is `correct` (docs/grpo.md, "Rewards").
The others are nanogrpo/shaping.py's terms and a user's own functions (`rewards = ["PATH.py:FN"]`).

The verifiers: `exact` (the arithmetic task), `number` (GSM8K-style) and `math` (math-verify in worker
processes), both through nanogrpo/answer.py, the answer judge; `code` (tests run in nanogrpo/sandbox); `by_row` (a
dataset's own: code rows by `code`, the others by `math`).
"""

from __future__ import annotations

import inspect
import sys
from collections.abc import Callable
from dataclasses import dataclass, field

from nanogrpo import answer as _answer
from nanogrpo import shaping, usercode
from nanogrpo.checks import RewardError, reward_total, reward_values  # noqa: F401 (rewards.RewardError: train.py and eval.py name it)
from nanogrpo.data import is_code_row


@dataclass
class Batch:
    """What a reward may read, for a batch of completions (consecutive groups of group_size)."""
    texts: list[str]  # whole completions
    answers: list[str]  # what the verdict reads: with tools the text after the last tool output, else the text
    rows: list[dict]
    token_counts: list[int] = field(default_factory=list)
    group_size: int = 1
    prefilled_think: bool = False  # the chat template ended the prompt with <think>
    cfg: object = None  # the Config: the shaping knobs (cosine_*, repetition_*, ...)
    verdicts: list[float | None] = field(default_factory=list)  # the verdict's, per completion (Scoring)


@dataclass
class Scoring:
    """A run's rewards, resolved once (each function's call too: `caller`): the verdict, and the weighted terms summed
    into each completion's reward."""

    verdict: Callable  # judges the answer (a verifier below, or the task's own reward)
    terms: list[tuple[str, float, Callable]]  # (name, weight, fn(Batch) -> one value per completion)
    judge: Callable = None  # the verdict's settled call: (completions, rows) -> its checked values

    def __call__(self, batch: Batch) -> tuple[list[float | None], dict[str, list[float | None]]]:
        """(the total per completion, None where any term is None; each part by name, "accuracy" the verdict). The
        verdict reads batch.answers (with tools: the text after the last tool output), the terms what they want."""
        if not len(batch.texts) == len(batch.answers) == len(batch.rows):
            raise ValueError(f"{len(batch.texts)} completions, {len(batch.answers)} answers and {len(batch.rows)} rows")
        batch.verdicts = self.judge(batch.answers, batch.rows)
        parts = {"accuracy": batch.verdicts}
        for name, _, fn in self.terms:
            parts.setdefault(name, reward_values(name, fn(batch), batch.rows))
        values = [[parts[n][i] for n, _, _ in self.terms] for i in range(len(batch.rows))]  # per completion
        total = [None if None in v else sum(w * t for (_, w, _), t in zip(self.terms, v)) for v in values]
        return reward_total(total, parts, self.terms, batch.rows), parts


def scoring(names: list[str], weights: list[float], task_reward: Callable) -> Scoring:
    """The Scoring of a reward list (`rewards`; [] = ["accuracy"]) and its `reward_weights` ([] = 1.0 each) on a
    task judged by `task_reward`: a verifier the list names judges instead of the task's own reward."""
    names, weights = names or ["accuracy"], weights or [1.0] * len(names or ["accuracy"])
    if len(weights) != len(names):
        raise ValueError(f"{len(weights)} weights for {len(names)} rewards {names}")
    named = [VERIFIERS[n] for n in names if n in VERIFIERS]
    verdict = named[0] if named else task_reward
    key = "config key 'rewards':" if named else "config key 'task':"  # what an error of the verdict names
    name = getattr(verdict, "__name__", "verdict")
    call = caller(name, verdict, key)
    return Scoring(verdict, [(label(n), w, term(n)) for n, w in zip(names, weights)],
                   lambda completions, rows: reward_values(name, call(completions, rows), rows, key))


def term(name: str) -> Callable:
    """fn(Batch) -> values of the reward `name`: the verdict, a shaping term, or a user's function."""
    if name == "accuracy" or name in VERIFIERS:
        return lambda b: b.verdicts
    if usercode.is_spec(name):  # TRL's signature, on the whole completions
        call = caller(label(name), usercode.load(name, "rewards"))
        return lambda b: call(b.texts, b.rows)
    if name not in shaping.SHAPING:
        raise ValueError(f"unknown reward {name!r}: expected one of {', '.join(names())} or PATH.py:FN")
    return shaping.SHAPING[name]


def label(name: str) -> str:
    """The name a reward is logged under (reward/NAME): a user's function by its own name."""
    return name.rpartition(":")[2] if usercode.is_spec(name) else name


def names() -> tuple[str, ...]:
    """Every built-in name `rewards = [...]` takes (besides PATH.py:FN): "accuracy" (the task's own reward), the
    verifiers, and nanogrpo/shaping.py's terms."""
    return ("accuracy", *VERIFIERS, *shaping.SHAPING)


def judge(verdict: Callable, completions: list[str], rows: list[dict], key: str = "config key 'task':") -> list[float | None]:
    """The verdict of each completion on its row, checked (eval.py and the scripts come here; a run's Scoring holds
    the same call, settled once)."""
    name = getattr(verdict, "__name__", "verdict")
    return reward_values(name, caller(name, verdict, key)(completions, rows), rows, key)


def caller(name: str, fn: Callable, key: str = "config key 'rewards':") -> Callable:
    """fn's call, (completions, rows) -> its values, decided once: a reward that names TRL's `prompts` (one ported from
    TRL) is called TRL's way, every argument by keyword, `prompts` being each row's `problem` (the statement shown to
    the model) unless the rows have a column called so; any other as FN(completions, **columns). A reward that raises
    (a user's: ours never do) or exits is a RewardError naming it and `key`, the config key that named it."""
    trl = names_prompts(fn)

    def call(completions: list, rows: list[dict]):
        args, kwargs = arguments(trl, completions, rows)
        try:
            return fn(*args, **kwargs)
        except KeyboardInterrupt:  # a stop signal is the run's (saved, exit 75), not the reward's
            raise
        except BaseException as e:  # SystemExit too: a reward that exits would end the run with its code, unsaid
            raise RewardError(f"{key} reward {name!r} raised {type(e).__name__}: {str(e)[:200]} (a reward returns "
                              "None for a completion it cannot score)") from e
    return call


def names_prompts(fn: Callable) -> bool:
    """Whether a reward names TRL's `prompts` (no signature to read, a builtin: it does not)."""
    try:
        return "prompts" in inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False


def check_user_calls(names: list[str], verdict: Callable, rows: list[dict], task_key: str = "config key 'task':") -> None:
    """Before any compute: every reward of a user's (`rewards` PATH.py:FN, and the verdict unless it is nanogrpo's own)
    can be called with these rows' columns (`arguments`); a parameter nothing fills (TRL's `completion_ids`, a misspelt
    field) is a RewardError naming it, instead of a TypeError after the first generate."""
    fns = [(f"config key 'rewards': reward {n.rpartition(':')[2]!r}", usercode.load(n, "rewards"))
           for n in names if usercode.is_spec(n)]
    ours = (getattr(verdict, "__module__", None) or "").startswith("nanogrpo.")  # else a user's, wherever defined
    fns += [] if ours else [(f"{task_key} reward {getattr(verdict, '__name__', '')!r}", verdict)]
    for what, fn in fns:
        if isinstance(fn, type):  # a class: calling it makes an instance, not the values
            raise RewardError(f"{what} is a class ({fn.__name__}), not a function: a reward is FN(completions, "
                              "**columns) -> a list of floats (docs/data.md)")
        args, kwargs = arguments(names_prompts(fn), [], rows)
        try:
            inspect.signature(fn).bind(*args, **kwargs)
        except TypeError as e:
            raise RewardError(f"{what} cannot be called as FN(completions, **columns) with the task's columns "
                              f"({', '.join(columns_of(rows))}): {e} (a reward gets the completions, the rows' fields "
                              "and, if it names it, TRL's `prompts`; not TRL's completion_ids: docs/data.md)") from None
        except ValueError:
            pass  # no signature to read (a builtin): called as it is


def arguments(trl: bool, completions: list, rows: list[dict]) -> tuple[list, dict]:
    """(args, kwargs) of a reward's call: (completions,) and the rows' columns; TRL's way (`trl`: it names `prompts`)
    every argument by keyword, with each row's `problem` as its prompt."""
    if trl:
        return [], {"prompts": [r.get("problem") for r in rows], **columns_of(rows), "completions": completions}
    return [completions], columns_of(rows)


def columns_of(rows: list[dict]) -> dict[str, list]:
    """The rows field by field (TRL's reward columns): each field a list, None where a row lacks it."""
    keys = dict.fromkeys(k for r in rows for k in r if k != "completions")
    return {k: [r.get(k) for r in rows] for k in keys}


# ---------------------------------------------------------------- the verifiers


def exact(completions: list[str], answer: list | None = None, **_) -> list[float | None]:
    """1.0 where the completion, stripped, equals the answer (the arithmetic task); None where a row has none."""
    return [None if a is None else exact_reward(c, a) for c, a in zip(completions, answer or [None] * len(completions))]


def number(completions: list[str], answer: list | None = None, problem: list | None = None, **_) -> list[float | None]:
    """GSM8K-style: the final answer is the gold number itself (nanogrpo/answer.py `judge_number`); the row's
    `problem`, where it has one, is read too (docs/judge.md, "The question restated")."""
    n = len(completions)
    return [None if a is None else number_reward(c, a, q) for c, a, q in zip(completions, answer or [None] * n, problem or [None] * n)]


def math(completions: list[str], answer: list | None = None, problem: list | None = None, **_) -> list[float | None]:
    """The answer equals the gold under math-verify (nanogrpo/answer.py `judge_math`, worker processes); the row's
    `problem`, where it has one, is read too (docs/judge.md, "The question restated")."""
    answer, problem = answer or [None] * len(completions), problem or [None] * len(completions)
    have = [i for i, a in enumerate(answer) if a is not None]
    out: list[float | None] = [None] * len(completions)
    for i, r in zip(have, math_rewards([completions[i] for i in have], [answer[i] for i in have],
                                       problems=[problem[i] for i in have])):
        out[i] = r
    return out


def code(completions: list[str], **columns) -> list[float | None]:
    """The fraction of the row's tests the program passes in the sandbox (SANDBOX: the run's options); None where
    the sandbox failed."""
    return code_rewards(completions, rows_of(columns, len(completions)), **SANDBOX)


def by_row(completions: list[str], **columns) -> list[float | None]:
    """A dataset's own verdict: its code rows (they carry tests) by `code`, the others by `math`."""
    rows = rows_of(columns, len(completions))
    out: list[float | None] = [None] * len(completions)
    for verdict in (code, math):
        todo = [i for i, r in enumerate(rows) if is_code_row(r) == (verdict is code)]
        got = verdict([completions[i] for i in todo], **columns_of([rows[i] for i in todo])) if todo else []
        for i, r in zip(todo, got):
            out[i] = r
    return out


def rows_of(columns: dict[str, list], n: int) -> list[dict]:
    """The rows back from their columns (a field None in a row is left out of it)."""
    return [{k: v[i] for k, v in columns.items() if v[i] is not None} for i in range(n)]


VERIFIERS = {"exact": exact, "number": number, "math": math, "code": code}  # rewards = [NAME] judges with it
SANDBOX: dict = {}  # the code verifier's sandbox options (backend, concurrency, binary, ...): the run sets its own
# the gold reader of a verifier: a gold it cannot read stops the load naming the row (data.normalise_rows)
GOLD_CHECKS = {number: _answer.number_gold_error, math: _answer.gold_error, by_row: _answer.gold_error}


# ---------------------------------------------------------------- one completion at a time


def exact_reward(completion: str, answer: str) -> float:
    """1.0 when the completion, stripped of surrounding whitespace, equals the answer (the arithmetic task)."""
    try:
        return float(str(completion).strip() == str(answer).strip())
    except Exception:  # rewards never raise; a str() that fails is a broken row, not a model error
        return 0.0


def number_reward(completion: str, answer: str, problem: str | None = None) -> float | None:
    """GSM8K-style: 1.0 when the final answer is the gold number, 0.0 when not, None when the gold is not a
    number (nanogrpo/answer.py `judge_number`)."""
    return _answer.judge_number(completion, answer, problem)


def math_rewards(completions: list[str], answers: list[str], timeout_s: float = _answer.DEFAULT_TIMEOUT_S,
                 problems: list[str | None] | None = None) -> list[float | None]:
    """Batched `math_reward`: the items run in parallel over the judge's worker processes."""
    return _answer.judge_math(completions, answers, timeout_s, problems)


def math_reward(completion: str, answer: str, timeout_s: float = _answer.DEFAULT_TIMEOUT_S,
                problem: str | None = None) -> float | None:
    """1.0 if the completion's answer equals the gold, 0.0 if not, None if the gold cannot be read or the
    checker broke (nanogrpo/answer.py `judge_math`: math-verify in a worker process with a hard timeout)."""
    return math_rewards([completion], [answer], timeout_s, [problem])[0]


def code_rewards(completions: list[str], problems: list[dict], **opts) -> list[float | None]:
    try:
        from nanogrpo.sandbox import code_rewards as sandbox_code_rewards  # lazy: optional sub-package
    except ImportError:
        return [None] * len(completions)
    try:
        return list(sandbox_code_rewards(completions, problems, **opts))
    except Exception as e:  # infrastructure: None (left out), never 0; but say so, loudly
        print(f"WARNING: code rewards could not be computed ({type(e).__name__}: {e}); "
              f"{len(completions)} completions left out", file=sys.stderr, flush=True)
        return [None] * len(completions)
