"""Shaping rewards: the open-r1 / TRL / DAPO / Kimi 1.5 terms added to a verifier's reward (`rewards = [...]`).

Each is a pure function of one completion (and, for `cosine` and `length`, the run's verifier's verdict, already
computed: None there gives None here) that never raises and reads the text in linear time. rewards.Scoring weighs them
with `reward_weights`; each is logged as `reward/NAME`. Definitions, and where they differ from the published code on
purpose: docs/grpo.md, 'Shaping rewards: the definitions'.
"""

from __future__ import annotations

import math
import re

import numpy as np

THINK, END_THINK, ANSWER, END_ANSWER = "<think>", "</think>", "<answer>", "</answer>"
MAX_CHARS = 1 << 20  # longer text is judged on its first MiB: every function here stays bounded


def _layout(text: str, prefilled_think: bool) -> str | None:
    """The answer A of `<think>R</think><answer>A</answer>` (R, A not blank; each tag once; whitespace only
    around and between the two blocks), else None."""
    text = ((THINK + "\n") if prefilled_think else "") + text[:MAX_CHARS]
    if any(text.count(tag) != 1 for tag in (THINK, END_THINK, ANSWER, END_ANSWER)):
        return None
    body = text.strip()
    if not (body.startswith(THINK) and body.endswith(END_ANSWER)):
        return None
    reasoning, _, rest = body[len(THINK) :].partition(END_THINK)
    between, _, answer = rest[: -len(END_ANSWER)].partition(ANSWER)
    return answer if reasoning.strip() and answer.strip() and not between.strip() else None


def format_reward(text: str, prefilled_think: bool = False) -> float:
    return float(_layout(text, prefilled_think) is not None)


# special-token spellings of common chat templates (Qwen/ChatML `<|im_end|>`, DeepSeek `<｜end▁of▁sentence｜>`)
_JUNK = re.compile(r"<\|[^|>]*\|>|<｜[^｜>]*｜>")


def think_format_reward(text: str, prefilled_think: bool = False) -> float:
    """`prefilled_think`: the chat template ended the prompt with `<think>` (DeepSeek-R1-Distill), so the text is
    checked as if it began with it: the model is judged on what it wrote."""
    text = (((THINK + "\n") if prefilled_think else "") + text[:MAX_CHARS]).lstrip()
    if not text.startswith(THINK) or text.count(THINK) != 1 or text.count(END_THINK) != 1:
        return 0.0
    thinking, answer = text[len(THINK) :].split(END_THINK)
    return float(bool(thinking.strip() and answer.strip()) and not _JUNK.search(answer))


def code_format_reward(text: str, language: str = "python", prefilled_think: bool = False) -> float:
    answer = _layout(text, prefilled_think)
    if answer is None:
        return 0.0
    start = answer.find("```" + (language or "python"))
    return float(start >= 0 and answer.find("```", start + 3 + len(language or "python")) >= 0)


def tag_count_reward(text: str, prefilled_think: bool = False) -> float:
    text = ((THINK + "\n") if prefilled_think else "") + text[:MAX_CHARS]
    tags = (THINK + "\n", "\n" + END_THINK + "\n", "\n" + ANSWER + "\n", "\n" + END_ANSWER)
    return sum(0.25 for t in tags if text.count(t) == 1)


_STEP = re.compile(r"Step \d+:|^\d+\.|^[-*]|First,|Second,|Next,|Finally,", re.M)  # no nested quantifiers: linear


def reasoning_steps_reward(text: str) -> float:
    return min(1.0, len(_STEP.findall(text[:MAX_CHARS])) / 3)


def cosine_reward(n_chars: int, correct: float | None, cfg) -> float | None:
    if correct is None:
        return None
    progress = min(n_chars / cfg.cosine_max_len, 1.0)
    if correct == 1.0:  # short correct answers best
        at_zero, at_max = cfg.cosine_max_value_correct, cfg.cosine_min_value_correct
    else:  # short wrong answers worst: the model is pushed to think longer when it is wrong
        at_zero, at_max = cfg.cosine_min_value_wrong, cfg.cosine_max_value_wrong
    return at_max + 0.5 * (at_zero - at_max) * (1.0 + math.cos(progress * math.pi))


def repetition_penalty_reward(text: str, n: int, max_penalty: float) -> float:
    words = text[:MAX_CHARS].lower().split()
    if len(words) < n:
        return 0.0
    grams = len(words) - n + 1
    return max_penalty * (1.0 - distinct_ngrams(words, n) / grams) + 0.0  # + 0.0: no -0.0 for unrepeated text


def distinct_ngrams(words: list[str], n: int) -> int:
    """How many distinct n-grams (runs of n words) `words` holds, exactly, in O(len(words) · log n) whatever n:
    each n-gram gets an id from the ids of two shorter ones (the doubling of a suffix array's construction), never
    a tuple of n words (tuples made a 1 MiB completion cost O(len · n): 15.7 s at n = 1,000)."""

    def join(a: np.ndarray, la: int, b: np.ndarray) -> np.ndarray:  # ids of the grams a[i] (la words) + b[i + la]
        keys = a[: len(b) - la] * (int(b.max()) + 1) + b[la:]  # ids < len(words): no int64 overflow
        return np.unique(keys, return_inverse=True)[1].reshape(-1)

    if n > len(words):
        return 0
    vocab: dict[str, int] = {}
    power = np.array([vocab.setdefault(w, len(vocab)) for w in words], dtype=np.int64)
    length, got, have = 1, None, 0  # `power`: ids of the grams of `length` words; `got`: of `have` words (n's bits)
    while True:
        if n & length:
            got, have = (power, length) if got is None else (join(got, have, power), have + length)
        if 2 * length > n:
            return len(np.unique(got))
        power, length = join(power, length, power), 2 * length


def length_rewards(n_chars: list[int], correct: list[float | None]) -> list[float | None]:
    """Kimi 1.5's length reward for ONE group (the completions of one prompt)."""
    lo, hi = min(n_chars), max(n_chars)
    if hi == lo:
        return [None if c is None else 0.0 for c in correct]
    lam = [0.5 - (n - lo) / (hi - lo) for n in n_chars]
    return [None if c is None else (x if c == 1.0 else min(0.0, x)) for x, c in zip(lam, correct)]


def soft_overlong_reward(n_tokens: int, max_len: int, cache: int) -> float:
    if n_tokens <= max_len - cache:
        return 0.0
    if n_tokens <= max_len:
        return (max_len - cache - n_tokens) / cache
    return -1.0


def overlong_limits(cfg) -> tuple[int, int]:
    """(L, cache) of soft_overlong_punishment: max_completion_len (0: max_new_tokens) and soft_punish_cache
    (-1: a quarter of L, DAPO's 4,096 of 16,384)."""
    limit = cfg.max_completion_len or cfg.max_new_tokens
    return limit, (limit // 4 if cfg.soft_punish_cache < 0 else min(cfg.soft_punish_cache, limit))


def _per_group(b) -> list[float | None]:
    if len(b.texts) % b.group_size:
        raise ValueError(f"length: {len(b.texts)} completions are not whole groups of {b.group_size}")
    g = b.group_size
    return [x for s in range(0, len(b.texts), g) for x in length_rewards([len(t) for t in b.texts[s : s + g]],
                                                                         b.verdicts[s : s + g])]


# name -> fn(rewards.Batch) -> one value per completion (None: could not be computed). `rewards = [...]` takes these names,
# and a reward of your own as PATH.py:FN (rewards.py; docs/architecture.md "Where a change goes").
SHAPING = {
    "think_format": lambda b: [think_format_reward(t, b.prefilled_think) for t in b.texts],
    "format": lambda b: [format_reward(t, b.prefilled_think) for t in b.texts],
    "tag_count": lambda b: [tag_count_reward(t, b.prefilled_think) for t in b.texts],
    "reasoning_steps": lambda b: [reasoning_steps_reward(t) for t in b.texts],
    "cosine": lambda b: [cosine_reward(len(t), v, b.cfg) for t, v in zip(b.texts, b.verdicts)],
    "repetition_penalty": lambda b: [repetition_penalty_reward(t, b.cfg.repetition_n_grams, b.cfg.repetition_max_penalty)
                                     for t in b.texts],
    "length": _per_group,
    "soft_overlong_punishment": lambda b: [soft_overlong_reward(n, *overlong_limits(b.cfg)) for n in b.token_counts],
    "code_format": lambda b: [code_format_reward(t, (r or {}).get("language") or "python", b.prefilled_think)
                              for t, r in zip(b.texts, b.rows)],
}
