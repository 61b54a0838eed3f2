"""Tasks: the built-in ones (no files, each with a held-out split), the benchmarks eval.py knows
(benchmarks.py) and the converters of public code datasets into the code schema (convert.py).

A built-in task brings the reward that judges it and its prompt template, so `task = NAME` alone trains on
the right signal (`rewards = []` is its verifier, `template = ""` its template). A dataset file's rows
bring theirs the same way: math rows math-verify and eval.py's math prompt, code rows the sandbox and the
chat template (nanogrpo/rollout.py `task_template`, rewards.py `verifier_of`)."""

from pathlib import Path
from typing import Callable, NamedTuple

from nanogrpo import data
from nanogrpo.rewards import VERIFIERS
from nanogrpo.tasks.arithmetic import arithmetic_rows
from nanogrpo.tasks.multiply import multiply_rows
from nanogrpo.tasks.word_problems import large_word_problem_rows, word_problem_rows


class Task(NamedTuple):
    rows: Callable  # rows(split, n, seed)
    verifier: str  # the reward that judges an answer: exact | number | math | code
    template: str  # raw | chat | math_eval (chat templates fall back to raw on a model without one)

    def check(self, name: str) -> "Task":
        if self.verifier not in VERIFIERS:  # no silent default: a task says how it is judged
            raise ValueError(f"task {name!r} has no reward of its own (verifier={self.verifier!r})")
        return self


TASKS = {name: task.check(name) for name, task in {
    "arithmetic": Task(arithmetic_rows, "exact", "raw"),
    "multiply": Task(multiply_rows, "exact", "raw"),
    # GSM8K-style: the number itself (math-verify would accept a boxed expression: rewards.number_reward)
    "word_problems": Task(word_problem_rows, "number", "math_eval"),
    "word_problems_large": Task(large_word_problem_rows, "number", "math_eval"),
}.items()}


def load_rows(source: str, kind: str = "math", split: str = "train", n: int | None = None, seed: int = 0,
              **kw) -> list[dict]:
    """Rows of a built-in task (split, n and seed pick them), else `data.load_rows` (a file or a Hub dataset)."""
    if source in TASKS:
        return TASKS[source].rows(split, n if n is not None else (20_000 if split == "train" else 500), seed)
    if "/" not in source and not Path(source).suffix and not Path(source).exists():  # a name, not a path or an id
        raise data.DataError(f"unknown task {source!r}: the built-in tasks are {', '.join(TASKS)}; or give a "
                             ".jsonl / .parquet path or a Hub dataset id (owner/name)")
    return data.load_rows(source, kind, split, n, seed, **kw)
