"""Rewards: pure functions of (completion, row) that never raise.

A reward is a float, or `None` when it could not be computed (the gold answer cannot be parsed, the
checker or sandbox itself broke). `None` is an infrastructure verdict, never the model's fault: the
trainer leaves such completions out of the group instead of scoring them 0.

- `exact_reward`   string match after stripping (the built-in arithmetic task).
- `number_reward`  GSM8K-style: the final answer is the number itself (nanogrpo/answer.py, the answer judge).
- `math_reward`    the answer judged equal to the gold (nanogrpo/answer.py: math-verify in worker processes).
- `format_reward`  the R1 layout `<think>reasoning</think>answer`.
- `code_reward`    tests run in the sandbox pool (`nanogrpo.sandbox`, imported lazily).
- `score_batch`    the weighted sum of a reward list (`rewards`, `reward_weights`: these and nanogrpo/shaping.py's
                   open-r1 / DAPO / Kimi terms) for a batch, plus every component for the metrics.
"""

from __future__ import annotations

import math
import numbers
import re
import sys

from nanogrpo import answer as _answer
from nanogrpo import shaping
from nanogrpo.data import is_code_row


class RewardError(ValueError):
    """A reward function returned what no reward is (not a finite number or None), or the weighted sum overflowed:
    the reward (a user's, most likely) or `reward_weights` is wrong. train.py exits 2 naming it, before the update."""

# ---------------------------------------------------------------- exact


def exact_reward(completion: str, answer: str) -> float:
    """1.0 when the completion, stripped of surrounding whitespace, equals the answer (the arithmetic task)."""
    try:
        return float(str(completion).strip() == str(answer).strip())
    except Exception:  # rewards never raise; a str() that fails is a broken row, not a model error
        return 0.0


# ---------------------------------------------------------------- number


def number_reward(completion: str, answer: str) -> float | None:
    """GSM8K-style: 1.0 when the final answer is the gold number, 0.0 when not, None when the gold is not a
    number (nanogrpo/answer.py `judge_number`)."""
    return _answer.judge_number(completion, answer)


# ---------------------------------------------------------------- format

_THINK_OPEN, _THINK_CLOSE = "<think>", "</think>"


def format_reward(completion: str, prefilled_think: bool = False) -> float:
    """1.0 for the R1 layout: `<think>` reasoning `</think>` answer, else 0.0.

    Strict: the completion (after leading whitespace) starts with `<think>`; there is exactly one
    `<think>` and one `</think>`; both the reasoning and the answer are non-blank; the answer holds no
    further tags or template tokens (`<think>`, `</think>`, `<|...|>`, `<｜...｜>`), which is the
    trailing junk of a model that keeps going after its answer.

    `prefilled_think=True` is for chat templates that end the prompt with `<think>` (DeepSeek-R1-Distill):
    the completion is checked as if it began with `<think>`, so the model is judged on what it wrote.
    """
    try:
        text = (_THINK_OPEN + "\n" + completion) if prefilled_think else completion
        text = text.lstrip()
        if not text.startswith(_THINK_OPEN):
            return 0.0
        if text.count(_THINK_OPEN) != 1 or text.count(_THINK_CLOSE) != 1:
            return 0.0
        thinking, answer = text[len(_THINK_OPEN) :].split(_THINK_CLOSE)
        if not thinking.strip() or not answer.strip():
            return 0.0
        if _JUNK.search(answer):
            return 0.0
        return 1.0
    except Exception:
        return 0.0


# special-token spellings of common chat templates (Qwen/ChatML `<|im_end|>`, DeepSeek `<｜end▁of▁sentence｜>`)
_JUNK = re.compile(r"<\|[^|>]*\|>|<｜[^｜>]*｜>")


# ---------------------------------------------------------------- math


def math_rewards(completions: list[str], answers: list[str],
                 timeout_s: float = _answer.DEFAULT_TIMEOUT_S) -> list[float | None]:
    """Batched `math_reward`: the items run in parallel over the judge's worker processes."""
    return _answer.judge_math(completions, answers, timeout_s)


def math_reward(completion: str, answer: str, timeout_s: float = _answer.DEFAULT_TIMEOUT_S) -> float | None:
    """1.0 if the completion's answer equals the gold, 0.0 if not, None if the gold cannot be read or the
    checker broke (nanogrpo/answer.py `judge_math`: math-verify in a worker process with a hard timeout)."""
    return math_rewards([completion], [answer], timeout_s)[0]


# ---------------------------------------------------------------- code


def code_reward(completion: str, problem: dict) -> float | None:
    """Fraction of tests passed in the sandbox (see nanogrpo.sandbox); None if the sandbox failed."""
    return code_rewards([completion], [problem])[0]


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


# ---------------------------------------------------------------- batches

VERIFIERS = ("exact", "number", "math", "code")  # the rewards that judge the answer: `correct` is theirs == 1


def reward_names() -> tuple[str, ...]:
    """Every name `rewards = [...]` takes: "accuracy" (the task's own verifier: tasks.TASKS, or each row's),
    the verifiers, "think_format" (the R1 layout above), and shaping.SHAPING (with any the user added)."""
    return ("accuracy", *VERIFIERS, "think_format", *shaping.SHAPING)


def verifier_of(names: list[str], default: str | None) -> str | None:
    """The verifier a reward list uses: the one it names, else the task's (`default`; None: by row)."""
    named = [n for n in names if n in VERIFIERS]
    return named[0] if named else default


def _row_verifier(row, verifier: str | None) -> str:
    return verifier or ("code" if is_code_row(row) else "math")


def verdicts(completions: list[str], rows: list[dict], verifier: str | None, timeout_s: float = _answer.DEFAULT_TIMEOUT_S,
             code_opts: dict | None = None) -> list[float | None]:
    """Each completion judged by `verifier` (None: its row's own; the trainer and eval.py both come here);
    None where it could not be judged."""
    kinds = [_row_verifier(r, verifier) for r in rows]
    acc: list[float | None] = [None] * len(completions)
    for kind in set(kinds):
        todo = [i for i, k in enumerate(kinds) if k == kind]
        if kind == "code":
            got = code_rewards([completions[i] for i in todo], [rows[i] for i in todo], **(code_opts or {}))
        else:
            answers = [rows[i].get("answer") if isinstance(rows[i], dict) else None for i in todo]
            if kind == "math":
                have = [j for j, a in enumerate(answers) if a is not None]
                scored = math_rewards([completions[todo[j]] for j in have], [answers[j] for j in have], timeout_s)
                got = [None] * len(todo)
                for j, r in zip(have, scored):
                    got[j] = r
            else:
                fn = exact_reward if kind == "exact" else number_reward
                got = [None if a is None else fn(completions[i], a) for i, a in zip(todo, answers)]
        for i, r in zip(todo, got):
            acc[i] = r
    return acc


def score_batch(
    completions: list[str],
    rows: list[dict],
    rewards: list[str],
    weights: list[float] | None = None,
    verifier: str | None = None,
    prefilled_think: bool = False,
    timeout_s: float = _answer.DEFAULT_TIMEOUT_S,
    code_opts: dict | None = None,
    answer_texts: list[str] | None = None,
    token_counts: list[int] | None = None,
    group_size: int = 1,
    shaping_cfg=None,
) -> tuple[list[float | None], dict[str, list[float | None]]]:
    """Total reward per completion, and each component for the metrics.

    total = sum(weight * reward) over `rewards` (weights default 1.0); None when any of them is None (the
    trainer leaves those completions out). Components: one list per reward named, plus "accuracy" (the
    verifier's verdict, whether weighted or not: `correct` and the held-out accuracy read it) and
    "think_format" (cheap; its rate is logged even with no weight). `verifier`: "exact" / "number" / "math" /
    "code", or None for each row's own (code rows: code, others math); a verifier in `rewards` wins.
    answer_texts: what the verifier reads when not the whole completion (tool rollouts: the text after the
    last tool output); every other reward reads the whole completion. token_counts: completion lengths in
    tokens (soft_overlong_punishment); group_size: consecutive completions of one prompt (length);
    shaping_cfg: the Config (or any object) holding the shaping knobs (cosine_*, repetition_*, ...).
    """
    unknown = [n for n in rewards if n not in reward_names()]
    if unknown or not rewards:
        raise ValueError(f"score_batch: unknown reward(s) {unknown or rewards!r}; expected names from {reward_names()}")
    weights = [1.0] * len(rewards) if weights is None else list(weights)
    if len(weights) != len(rewards):
        raise ValueError(f"score_batch: {len(weights)} weights for {len(rewards)} rewards")
    if len(completions) != len(rows):
        raise ValueError(f"score_batch: {len(completions)} completions but {len(rows)} rows")
    answers = completions if answer_texts is None else answer_texts
    if len(answers) != len(rows):
        raise ValueError(f"score_batch: {len(answers)} answer texts but {len(rows)} rows")
    acc = verdicts(answers, rows, verifier_of(rewards, verifier), timeout_s, code_opts)
    parts: dict[str, list[float | None]] = {"accuracy": acc,
                                            "think_format": [format_reward(c, prefilled_think) for c in completions]}
    batch = shaping.Batch(completions, rows, acc, token_counts or [], group_size, prefilled_think, shaping_cfg)
    for name in rewards:
        if name not in parts:
            parts[name] = acc if name in VERIFIERS else checked(name, shaping.SHAPING[name](batch), rows)
    total = []
    for i in range(len(completions)):
        terms = [parts[n][i] for n in rewards]
        total.append(None if any(t is None for t in terms) else sum(w * t for w, t in zip(weights, terms)))
        if total[-1] is not None and not math.isfinite(total[-1]):  # finite terms, weights that overflow the sum
            raise RewardError(f"config key 'reward_weights': the weighted sum of rewards {rewards} = {terms} with "
                              f"weights {weights} is {total[-1]} (row {_shown(rows[i])}): a reward must be finite")
    return total, parts


def checked(name: str, values, rows: list) -> list[float | None]:
    """A reward function's values, as the trainer may use them: one per completion, each None (could not be
    computed) or a finite real number. Anything else is a broken reward (a user's, most likely), not a verdict
    on the model: a RewardError naming the reward, the value and the row, raised before the step's update.
    Why not None: an inf, a NaN or a string would be dropped silently every step it appears, biasing what is
    learned towards the completions the reward can score; an error says where the reward is wrong."""
    values = list(values)
    if len(values) != len(rows):  # a user's reward that lost or gained items
        raise RewardError(f"config key 'rewards': reward {name!r} gave {len(values)} values for {len(rows)} completions")
    out = []
    for v, row in zip(values, rows):
        if v is not None and (not isinstance(v, numbers.Real) or not math.isfinite(v)):
            what = f"{v!r} ({type(v).__name__})" if not isinstance(v, numbers.Real) else f"{v}"
            raise RewardError(f"config key 'rewards': reward {name!r} returned {what[:80]} for row {_shown(row)}: a "
                              "reward is a finite number, or None when it cannot be computed")
        out.append(None if v is None else float(v))
    return out


def _shown(row) -> str:
    """A row, short, for an error message: its id or its problem's start."""
    if isinstance(row, dict):
        return repr(row.get("id") or str(row.get("problem", ""))[:60])
    return repr(str(row)[:60])
