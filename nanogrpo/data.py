"""Prompts: load rows, normalise them to the row schemas (docs/data.md), format them, shard them per rank.

Math row: {"problem": str, "answer": str}. Code rows (the unified code schema) pass through untouched.
A row that cannot be normalised stops the run before any compute, naming the file, line and field; so does a
gold that `gold_check` refuses (train.py and eval.py pass `answer.gold_error` where the math reward scores).

The built-in tasks (arithmetic, word_problems, word_problems_large, multiply: nanogrpo/tasks/) need no files.
"""

from __future__ import annotations

import math
import random
import re
from collections import Counter
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Callable

from nanogrpo import files, hub  # hub imports huggingface_hub / datasets only when a Hub id is used
from nanogrpo.answer import closing_brace


# ---- loading files and normalising rows


class DataError(ValueError):
    """A dataset that cannot be used as it is: the message names the file, the line and the field."""


def _read_jsonl(path: Path) -> list[tuple[str, dict]]:
    out = []
    with open(path, "rb") as f:  # bytes: a line that is not UTF-8 (UTF-16, binary) is named by its number
        for i, raw in enumerate(f, 1):
            try:
                line = raw.decode("utf-8-sig" if i == 1 else "utf-8")
            except UnicodeDecodeError as e:
                raise DataError(f"{path}:{i}: not UTF-8 text (byte {e.start} is {raw[e.start:e.start + 1]!r}); "
                                "JSONL must be UTF-8 (re-encode UTF-16 files, e.g. with iconv)") from None
            if not line.strip():
                continue
            try:
                row = files.loads(line)
            except files.JSONError as e:  # broken, nested too deep, a 5,000-digit integer
                raise DataError(f"{path}:{i}: {e}") from None
            if not isinstance(row, dict):
                raise DataError(f"{path}:{i}: expected a JSON object, got {type(row).__name__}")
            out.append((f"{path}:{i}", row))
    return out


def _read_parquet(path: Path) -> list[tuple[str, dict]]:
    try:  # pyarrow comes with `datasets` (requirements.txt); pandas reads parquet only through it (or fastparquet)
        import pyarrow.parquet as pq
    except ImportError:
        raise DataError(f"{path}: reading parquet needs pyarrow (pip install pyarrow)") from None
    try:
        records = pq.read_table(path).to_pylist()
    except (OSError, ValueError) as e:  # pyarrow's ArrowInvalid / ArrowIOError are these
        first = (str(e).strip().splitlines() or [""])[0]
        raise DataError(f"{path}: not a readable parquet file ({type(e).__name__}: {first})") from None
    return [(f"{path}:row {i}", dict(r)) for i, r in enumerate(records, 1)]


def last_boxed(text: str) -> str | None:
    """Content of the last \\boxed{...} (or \\fbox{...}) in text, braces balanced; None if there is none (or it is
    unbalanced: the caller reports the row)."""
    starts = [m.end() for m in re.finditer(r"\\(?:boxed|fbox)\s*\{", text)]
    end = closing_brace(text, starts[-1], len(text)) if starts else None
    return None if end is None else text[starts[-1] : end].strip()


def gold_type_problem(value) -> str:
    """Why a row's `answer` cannot be a gold by its type ("" if it can): text or a finite number only. NaN and
    Infinity (JSON allows neither, Python's reader both), an object or a list would become the text "nan" or
    "{'a': 1}", which no answer should match."""
    if isinstance(value, (str, bool, int)):
        return ""
    if isinstance(value, (float, Decimal)):
        return "" if math.isfinite(value) else f"the number {value} is no answer (a gold is text or a finite number)"
    return f"a gold is text or a finite number, not {type(value).__name__} {str(value)[:60]!r}"


def _answer_text(value) -> str:
    # AMC-style answers are JSON numbers (27.0): write integral floats as integers.
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value).strip()


def normalise_math_row(row: dict, where: str = "row") -> tuple[dict, str]:
    """-> ({"problem", "answer"}, name of the mapping used). Raises DataError naming `where` and the field."""
    if isinstance(row.get("problem"), str):
        problem, p_map = row["problem"], "problem"
    elif isinstance(row.get("question"), str):
        problem, p_map = row["question"], "problem<-question"
    else:
        raise DataError(f"{where}: math row has no 'problem' (or 'question') text field; keys: {sorted(row)}")
    if not problem.strip():
        raise DataError(f"{where}: math row has an empty 'problem'")

    ans = row.get("answer")
    if gold_type_problem(ans) and ans is not None:
        raise DataError(f"{where}: math row's 'answer': {gold_type_problem(ans)}")
    if isinstance(ans, str) and "####" in ans:
        # GSM8K: the worked solution, then "#### 1,234".
        answer, a_map = ans.rsplit("####", 1)[1].strip().replace(",", ""), "answer<-text after '####'"
    elif ans is not None and not (isinstance(ans, str) and not ans.strip()):
        answer, a_map = _answer_text(ans), "answer"
    elif isinstance(row.get("solution"), str):
        answer, a_map = last_boxed(row["solution"]), "answer<-last \\boxed{} of solution"
        if answer is None:
            raise DataError(f"{where}: math row has no 'answer' and its 'solution' has no balanced \\boxed{{...}}")
    else:
        raise DataError(f"{where}: math row has no 'answer' field (nor a 'solution' with \\boxed{{...}}); keys: {sorted(row)}")
    if not answer:
        raise DataError(f"{where}: math row has an empty 'answer' after normalisation")
    return {"problem": problem, "answer": answer}, f"{p_map}, {a_map}"


def normalise_rows(records: list[tuple[str, dict]], kind: str, source: str, verbose: bool = True,
                   gold_check: Callable[[str], str | None] | None = None) -> list[dict]:
    if not records:
        raise DataError(f"{source}: the dataset is empty")
    if kind == "code":  # the sandbox's one schema check (a row it cannot score would only ever give None)
        from nanogrpo.sandbox.judge import validate_problem

        for where, rec in records:
            if not isinstance(rec.get("problem"), str) or not rec["problem"].strip():  # the prompt is made of it
                raise DataError(f"{where}: code row has no 'problem' text (the prompt); keys: {sorted(rec)}")
            try:
                validate_problem(rec)
            except (ValueError, RecursionError) as e:  # RecursionError: a test's JSON nested too deep
                raise DataError(f"{where}: not a code row the sandbox can score ({e}); convert dataset forms "
                                "with nanogrpo.tasks.convert.to_schema") from None
        return [r for _, r in records]
    if kind != "math":
        raise DataError(f"unknown dataset kind {kind!r} (expected 'math' or 'code')")
    normalised = [normalise_math_row(rec, where) for where, rec in records]
    rows, mappings = [row for row, _ in normalised], Counter(mapping for _, mapping in normalised)
    if gold_check is not None:
        check_golds([(where, row) for (where, _), row in zip(records, rows)], gold_check)
    if verbose:  # say once per file which spellings were mapped
        used = "; ".join(f"{m} ({c} rows)" for m, c in mappings.items())
        print(f"data: {source}: {len(rows)} math rows; fields: {used}", flush=True)
    return rows


def check_golds(rows: list[tuple[str, dict]], gold_check: Callable[[str], str | None]) -> None:
    """Stop at the first row whose 'answer' the reward cannot read (`gold_check(answer)`: why, or None when it
    can), naming it by `where`; each distinct gold is read once (golds repeat: GSM8K's numbers)."""
    why_not: dict = {}
    for where, row in rows:
        if row.get("answer") is None:
            continue
        gold = str(row["answer"])
        if gold not in why_not:
            why_not[gold] = gold_check(gold)
        if why_not[gold]:
            shown = gold if len(gold) <= 120 else gold[:120] + "..."
            raise DataError(f"{where}: the math reward cannot read the 'answer' {shown!r} ({why_not[gold]}); "
                            "write it as LaTeX (`\\frac{1}{2}`, `$x = 1, x = 2$`, `\\boxed{..}`) or as plain words")


def check_answers(rows: list[tuple[str, dict]], verifier: str) -> None:
    """Stop at the first row without a gold (none, an empty one, or one not text or a finite number) when the run's
    verdict `verifier` reads it (a file's math rows are held to this by `normalise_math_row`; a task's come here)."""
    for where, row in rows:
        ans = row.get("answer")
        why = ("has no 'answer'" if ans is None else "has an empty 'answer'" if isinstance(ans, str) and not ans.strip()
               else gold_type_problem(ans) and f"'answer': {gold_type_problem(ans)}")
        if why:
            raise DataError(f"{where} {why}, and the {verifier} verdict compares each completion with the row's 'answer' "
                            "(a row without one is never judged: no reward, nothing learned); give every row an "
                            "'answer', or judge by a reward of your own (`rewards = [\"PATH.py:FN\"]`, a Task's reward: "
                            "docs/data.md)")


def read_records(source: str, split: str = "train", subset: str | None = None) -> list[tuple[str, dict]]:
    """(where, raw row) from a .jsonl / .parquet file, or from a Hub dataset id (nanogrpo/hub.py; `split`
    and `subset` apply to Hub datasets only)."""
    path = Path(source)
    if not path.is_file():
        if hub.is_hub_id(source):
            return hub.dataset_records(source, split, subset)
        raise DataError(f"dataset {source!r}: no such file, not a Hub id (owner/name), and not a built-in task "
                        "(nanogrpo/tasks)")
    if path.suffix == ".jsonl":
        return _read_jsonl(path)
    if path.suffix == ".parquet":
        return _read_parquet(path)
    raise DataError(f"dataset {source!r}: unknown file type {path.suffix!r} (expected .jsonl or .parquet)")


def parse_columns(spec: str) -> dict[str, str]:
    """"problem=question,answer=gold" -> {"problem": "question", "answer": "gold"} (field <- column)."""
    out = {}
    for part in filter(None, (p.strip() for p in spec.split(","))):
        field_name, sep, column = (s.strip() for s in part.partition("="))
        if not sep or not field_name or not column:
            raise DataError(f"column mapping {part!r}: expected FIELD=COLUMN (e.g. problem=question)")
        out[field_name] = column
    return out


def map_columns(records: list[tuple[str, dict]], columns: dict[str, str]) -> list[tuple[str, dict]]:
    """Each row with `field` set from `column`, for every field=column of the mapping (other keys kept)."""
    if not columns:
        return records
    out = []
    for where, rec in records:
        missing = [c for c in columns.values() if c not in rec]
        if missing:
            raise DataError(f"{where}: column(s) {missing} of the column mapping not in the row; keys: {sorted(rec)}")
        out.append((where, {**rec, **{f: rec[c] for f, c in columns.items()}}))
    return out


def load_rows(source: str, kind: str = "math", split: str = "train", n: int | None = None, seed: int = 0,
              verbose: bool = True, subset: str | None = None, columns: dict[str, str] | None = None,
              gold_check: Callable[[str], str | None] | None = None) -> list[dict]:
    """Rows from a .jsonl / .parquet file, or a Hub dataset id (split, subset), with `columns` ({field: column})
    renamed first; every row is normalised, and its gold read by `gold_check` (check_golds), before anything else
    runs, so a bad row stops the run at once. (Built-in task names: nanogrpo.tasks.load_rows.)"""
    records = map_columns(read_records(source, split, subset), columns or {})
    if kind == "auto":  # the rows say which they are
        kind = "code" if records and is_code_row(records[0][1]) else "math"
    rows = normalise_rows(records, kind, source, verbose, gold_check)
    return rows[:n] if n is not None else rows


# ---- prompt text

DEFAULT_MATH_INSTRUCTION = "Please reason step by step, and put your final answer within \\boxed{}."
# code rows (they have tests): the reward runs the last fenced block of the row's language
DEFAULT_CODE_INSTRUCTION = "Write your complete solution in {language}, in one ```{language} code block at the end of your answer."


def is_code_row(row) -> bool:
    """A code row carries its tests (the code schema, docs/data.md); a math row an answer."""
    return isinstance(row, dict) and "tests" in row


def default_instruction(row: dict) -> str:
    """The instruction appended to a chat prompt: the row's own ("": none, a Reasoning Gym question says what it
    wants), else the math one, or the code one for a code row."""
    if "instruction" in row:
        return row["instruction"]
    if is_code_row(row):
        return DEFAULT_CODE_INSTRUCTION.format(language=row.get("language") or "python")
    return DEFAULT_MATH_INSTRUCTION

# eval.py's math prompt (aime24, math500, amc23, gsm8k; nanogrpo/tasks/benchmarks.py takes it from here), word for
# word. Source: lighteval's MATH query template (its `math_500` / `aime24` tasks); why GSM8K and AMC too: docs/eval.md.
MATH_TEMPLATE = (
    "Solve the following math problem efficiently and clearly.  The last line of your response should be "
    "of the following format: 'Therefore, the final answer is: $\\boxed{ANSWER}$. I hope it is correct' "
    "(without quotes) where ANSWER is just the final number or expression that solves the problem. "
    "Think step by step before answering.\n\n{problem}"
)


def format_prompt(row: dict, tokenizer, template: str = "raw", system_prompt: str | None = None,
                  instruction: str | None = "auto") -> str:
    """The prompt text for one row. "raw": the problem text as it is (the tiny model continues "347+589=").
    "chat": the tokenizer's chat template with an optional system message, the problem followed by `instruction`
    ("auto": default_instruction(row); None: none) as the user turn, and the assistant header appended.
    "math_eval": as "chat", with eval.py's math prompt (lighteval's MATH template, nanogrpo/tasks/benchmarks.py) as
    the user turn, so a run trains on the prompt that eval.py scores it with."""
    if template == "raw":
        return row["problem"]
    if template not in ("chat", "math_eval"):
        raise ValueError(f"unknown prompt template {template!r} (expected 'raw', 'chat' or 'math_eval')")
    if getattr(tokenizer, "chat_template", None) is None:  # DataError: a bad input, named before any compute
        raise DataError(f"config key 'template': {template!r} needs a tokenizer with a chat template, and this "
                        "model's tokenizer has none: use template=raw (or \"\" for the task's own)")
    messages = prompt_messages(row, template, system_prompt, instruction)
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)


def prompt_messages(row: dict, template: str = "chat", system_prompt: str | None = None,
                    instruction: str | None = "auto") -> list[dict]:
    """The chat messages of a "chat" / "math_eval" prompt (see format_prompt); sft.py appends the answer."""
    user = row["problem"]
    if instruction == "auto":
        instruction = default_instruction(row)
    if template == "math_eval":
        user, instruction = MATH_TEMPLATE.replace("{problem}", user), None
    if row.get("starter_code"):
        user += f"\n\nStart from this code:\n```\n{row['starter_code']}\n```"
    if instruction:
        user += "\n" + instruction
    system_prompt = system_prompt or row.get("system_prompt")  # `system_prompt`, else the row's own (Reasoning Gym)
    return ([{"role": "system", "content": system_prompt}] if system_prompt else []) + [
        {"role": "user", "content": user}
    ]


def encode_prompt(row: dict, tokenizer, template: str = "raw", **kw) -> list[int]:
    """Token ids of format_prompt(row, ...). The chat template already holds any BOS token."""
    text = format_prompt(row, tokenizer, template, **kw)
    return tokenizer(text, add_special_tokens=(template == "raw"))["input_ids"]


# ---- per-step, per-rank prompt batches that resume exactly


@dataclass
class PromptStream:
    """Yields this rank's slice of each step's global batch of `prompts_per_step` rows.

    The global order is an endless sequence of epochs, each a permutation of the rows seeded by (seed, epoch); every
    rank takes its own contiguous slice of the same global batch. The only state is how many global rows were
    consumed, so a resumed run sees exactly the rows an uninterrupted run would (also at another world size)."""

    rows: list[dict] = field(repr=False)
    prompts_per_step: int
    rank: int = 0
    world_size: int = 1
    seed: int = 0
    consumed: int = 0  # global rows handed out so far, across all ranks

    def __post_init__(self):
        if not self.rows:
            raise DataError("PromptStream: the dataset is empty")
        if self.prompts_per_step % self.world_size:
            raise ValueError(f"prompts_per_step={self.prompts_per_step} is not divisible by world size "
                             f"{self.world_size}: each rank must get the same number of prompts")
        self._perm_epoch, self._perm = -1, []

    def _order(self, epoch: int) -> list[int]:
        if epoch != self._perm_epoch:
            self._perm = list(range(len(self.rows)))
            random.Random(f"prompts-{self.seed}-{epoch}").shuffle(self._perm)
            self._perm_epoch = epoch
        return self._perm

    def global_batch(self, size: int | None = None) -> list[dict]:
        """The next `size` rows of the global order (default: a step's, prompts_per_step); advances the stream."""
        size, n = self.prompts_per_step if size is None else size, len(self.rows)
        out = [self.rows[self._order(k // n)[k % n]] for k in range(self.consumed, self.consumed + size)]
        self.consumed += size
        return out

    def next_batch(self, count: int | None = None) -> list[dict]:
        """This rank's rows for the next step, or its next `count` rows (dynamic sampling's later rounds: a
        global batch of count x world rows, this rank's slice of it)."""
        per_rank = self.prompts_per_step // self.world_size if count is None else count
        return self.global_batch(per_rank * self.world_size)[self.rank * per_rank : (self.rank + 1) * per_rank]

    def state_dict(self) -> dict:
        return {"consumed": self.consumed, "seed": self.seed, "num_rows": len(self.rows)}

    def load_state_dict(self, state: dict) -> None:
        if state["num_rows"] != len(self.rows) or state["seed"] != self.seed:
            raise DataError(f"cannot resume the prompt stream: checkpoint has {state['num_rows']} rows / seed "
                            f"{state['seed']}, this run has {len(self.rows)} rows / seed {self.seed}")
        self.consumed = int(state["consumed"])
