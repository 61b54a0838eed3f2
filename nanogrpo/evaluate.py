"""Evaluation, one path: prompt a benchmark row, generate, score, pass@k; and the trainers' held-out accuracy.

eval.py, train.py's in-run evals, sft.py's and scripts/generate.py all run through this module, so their numbers
mean the same. Tasks, prompts, defaults and pass@k live in nanogrpo/tasks/benchmarks.py; the sampler, the prompt
encoding and the scoring are the trainer's own (nanogrpo/rollout.py). Over 500 lines because it is that one path
whole: the run, its resumable samples file, the strict and lenient scores, the held-out accuracy.
"""

from __future__ import annotations

import collections
import dataclasses
import glob
import hashlib
import json
import math
import os
import sys
import time
from pathlib import Path

import torch

from nanogrpo import answer, data, files, hub, rewards, shaping, tasks, tools
from nanogrpo.log import ProgressLine
from nanogrpo.tasks import benchmarks
from nanogrpo.rollout import encode_prompts, make_sampler, row_kind, run_scoring, score_rollouts
from nanogrpo import dist as ndist
from nanogrpo.tasks.benchmarks import Task
from nanogrpo.sampler import SamplingParams

MAX_NEW_TOKENS_CAP = 32768  # the reference evaluations' generation budget for reasoning models (the GPU default)
ROWS_PER_CALL = 256  # samples per generate call, about: max(1, ROWS_PER_CALL // n) problems (fixes the per-call seeds);
# a call's rows keep the sampler's batch full until its queue empties (continuous batching), so fewer, larger
# calls waste less at their ends; a stopped eval redoes at most one call
SHORTEN = "--limit, --n or --max-new-tokens"  # what the long-run warning suggests (eval.py's flags)


class ResumeMismatch(ValueError):
    """A resumed eval whose samples file was written with other arguments (or with unknown ones)."""


class ContextError(ValueError):
    """A task whose longest prompt leaves the model no room to answer (raised before the model is loaded)."""


# ---- the trainers' held-out accuracy (train.py, sft.py): a Config's prompts, rewards and sampler


def heldout_rows(cfg) -> list[dict]:
    """The rows `eval_every` measures held-out accuracy on: `eval_task`, else the task's own held-out split (the
    built-in tasks have one), else none; the first `eval_size` of them."""
    source = cfg.eval_task or (cfg.task if tasks.get(cfg.task).heldout else "")
    if not source:
        return []
    kind, gold_check = row_kind(cfg)
    n = cfg.eval_size if source.partition(":")[0] in tasks.SOURCES else None  # a source's set: exactly eval_size
    return tasks.load_rows(source, kind, split="test", n=n, seed=cfg.seed, gold_check=gold_check)[: cfg.eval_size]


def constant_answer(rows: list[dict]) -> tuple[str, float] | None:
    """The held-out golds' most common answer and the accuracy of always giving it: the bar a held-out gain is read
    against. GRPO on a small model can reach it by learning that one answer, not the task (letter counting's held-out
    set is 63% "1"; its first recipe ended at 0.63 in 3 seeds: docs/results.md). None: no row has an answer."""
    golds = [str(r["answer"]).strip() for r in rows if r.get("answer") is not None]
    if not golds:
        return None
    gold, count = collections.Counter(golds).most_common(1)[0]
    return gold, count / len(golds)


def heldout_accuracy(sampler, tokenizer, rows: list[dict], cfg, prefilled_think: bool = False,
                     scoring: rewards.Scoring | None = None) -> dict:
    """Accuracy on held-out rows (one sample per problem at eval_temperature, rows split over ranks) over the
    answers the verdict judged: NaN, undefined, when it judged none; the share of the answers that are the most
    common one, word for word (near 1.0: one answer whatever the question, a learned constant: read the accuracy
    against `constant_answer`). With tools, the share of answers that ran code."""
    mine = rows[ndist.rank() :: ndist.world_size()]
    prompts = encode_prompts(mine, tokenizer, cfg)
    params = SamplingParams(cfg.max_new_tokens, cfg.eval_temperature, cfg.top_p, tuple(cfg.stop), seed=cfg.seed + 12345)
    outs = sampler.generate(prompts, 1, params) if prompts else []
    _, _, correct = score_rollouts([o[0] for o in outs], mine, scoring or run_scoring(cfg), cfg, prefilled_think)
    judged = [c for c in correct if c is not None]
    counts = torch.tensor([sum(judged), len(judged), sum(o[0].calls > 0 for o in outs), len(outs)], dtype=torch.float64)
    ndist.all_reduce(counts)
    got = {"heldout_accuracy": (counts[0] / counts[1]).item() if counts[1] else math.nan}
    texts = [t for part in ndist.all_gather_object([o[0].answer_text.strip() for o in outs]) for t in part]
    got["heldout_top_answer"] = collections.Counter(texts).most_common(1)[0][1] / len(texts) if texts else math.nan
    return {**got, "heldout_tool_use": (counts[2] / counts[3].clamp(min=1)).item()} if cfg.tools else got


def prompt_ids(task: Task, row: dict, tokenizer, tool_cfg: tools.ToolConfig | None = None) -> tuple[list[int], bool]:
    """Token ids of the prompt, and whether the chat template ended it with `<think>` (R1-Distill).
    With tools, a chat model's system message also says how to run code (tools.system_prompt)."""
    chat = bool(getattr(tokenizer, "chat_template", None))
    if task.template:  # a training task: the trainer's prompt, in its template (raw without a chat template)
        template = task.template if chat else "raw"
        system = tools.system_prompt(tool_cfg) if tool_cfg is not None and template != "raw" else None
        text, special = data.format_prompt(row, tokenizer, template, system_prompt=system), template == "raw"
    else:  # the task's system message, if any, then the user prompt (a base model: one text after the other)
        system = task.system_prompt or ""
        if tool_cfg is not None and chat:
            system = tools.system_prompt(tool_cfg, system)
        messages = [{"role": "system", "content": system}] if system else []
        messages.append({"role": "user", "content": task.user_prompt(row)})
        text, special = (tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True) if chat
                         else "\n\n".join(m["content"] for m in messages)), not chat
    return tokenizer(text, add_special_tokens=special)["input_ids"], text.rstrip().endswith("<think>")


def context_length(model_dir: str) -> int:
    cfg = files.loads((Path(model_dir) / "config.json").read_bytes())
    cfg = cfg.get("text_config", cfg)
    return int(cfg.get("max_position_embeddings") or cfg.get("max_sequence_length") or 4096)


def task_budget(task: Task, requested: int | None, on_gpu: bool, context: int, longest: int) -> tuple[int, str]:
    """max_new_tokens for a task, and why: what was asked for, else the reference budget on GPU and the task's
    CPU default on CPU (nanogrpo/tasks/benchmarks.py); never past the context left after the longest prompt."""
    if requested:
        budget, why = requested, "as asked"
    elif on_gpu:
        budget, why = MAX_NEW_TOKENS_CAP, "the reference budget on GPU"
    else:
        budget, why = task.cpu_max_new_tokens or benchmarks.CUSTOM_CPU_MAX_NEW_TOKENS, f"{task.name}'s default on CPU"
    if context - longest < budget:
        budget, why = context - longest, f"the context ({context}) left after the longest prompt ({longest})"
    return budget, why


def task_calls(rows: int, n: int, rank: int, world: int) -> list[tuple[int, list[int]]]:
    """This rank's generate calls of a task: (offset in its share, the problems). Shares are strided (ranks get
    similar mixes of problems); the offset fixes the call's seed, so a resumed call draws what it drew before."""
    mine = list(range(rank, rows, world))
    per_call = max(1, ROWS_PER_CALL // n)
    return [(start, mine[start : start + per_call]) for start in range(0, len(mine), per_call)]


def score(task: Task, completions: list, rows: list[dict]) -> list[float | None]:
    """Verdicts of Completions: on the text after the last tool output (tools), None where the sandbox
    of a tool call failed (unscored, never wrong)."""
    verdicts = rewards.judge(task.reward, [c.answer_text for c in completions], rows)
    return [None if c.failed else v for c, v in zip(completions, verdicts)]


def score_lenient(task: Task, completions: list, rows: list[dict]) -> list[bool] | None:
    """Math-verify alone on the same answers (nanogrpo/answer.py `judge_lenient`): the lenient score, as open-r1
    and lighteval compute it, beside the strict one (docs/eval.md); None for the others (code, a task's own reward)."""
    if task.reward not in (rewards.math, rewards.number):
        return None
    got = answer.judge_lenient([c.answer_text for c in completions], [r.get("answer") for r in rows])
    return [v == 1.0 and not c.failed for c, v in zip(completions, got)]


def run_task(task, sampler, tokenizer, n, sampling, context, seed, rank, world, gather, *, encoded=None,
             recorded=None, show: ProgressLine | None = None, on_call=None):
    """Generate and score this rank's share of the task -> (per-problem results, sample records, token budget).
    `encoded`: {row index: prompt_ids} (made here when not given). `recorded`: {problem index: its n records} of
    calls an earlier run finished (complete_calls), not generated again. `show`: the progress hook and line.
    `on_call(records)`: each generated call's records, once scored (eval.py appends them to the samples file)."""
    calls = task_calls(len(task.rows), n, rank, world)
    mine = [i for _, idx in calls for i in idx]
    tool_cfg = sampler.cfg if isinstance(sampler, tools.ToolSampler) else None
    encoded = encoded or {i: prompt_ids(task, task.rows[i], tokenizer, tool_cfg) for i in mine}
    longest = max(gather(max((len(encoded[i][0]) for i in mine), default=0)))
    budget = min(sampling["max_new_tokens"] or MAX_NEW_TOKENS_CAP, context - longest)
    if budget < 1:
        raise ValueError(f"eval {task.name}: the longest prompt ({longest} tokens) fills the context ({context})")
    recorded = recorded or {}
    todo, records = [], {}  # records: problem index -> its n records
    for start, idx in calls:
        if all(i in recorded for i in idx):
            records.update({i: recorded[i] for i in idx})
        else:
            todo.append((start, idx))
    if show is not None:
        show.skip(len(records), n * len(records))
    for start, idx in todo:
        params = SamplingParams(max_new_tokens=budget, temperature=sampling["temperature"],
                                top_p=sampling["top_p"], seed=seed + 7919 * rank + start)  # reproducible per call
        if show is not None:
            show.start_call()
        outs = sampler.generate([encoded[i][0] for i in idx], n, params, progress=show)
        flat = [c for group in outs for c in group]
        which = [(i, j) for i in idx for j in range(n)]  # (problem, sample) of each completion
        rows = [task.rows[i] for i, _ in which]
        verdicts, lenient = score(task, flat, rows), score_lenient(task, flat, rows)
        new = [{"task": task.name, "index": i, "id": row.get("id", str(i)), "sample": j,
                "answer": row.get("answer"), "reward": v, "correct": v == 1.0,
                **({"lenient": lenient[m]} if lenient is not None else {}),
                "finish_reason": c.finish_reason, "num_tokens": len(c.token_ids),
                "completion": c.text, **({"tool_calls": c.calls} if tool_cfg else {})}
               for m, ((i, j), row, c, v) in enumerate(zip(which, rows, flat, verdicts))]
        records.update({i: new[k * n : (k + 1) * n] for k, i in enumerate(idx)})
        if on_call is not None:
            on_call(new)
        if show is not None:
            got = [r["correct"] for rs in records.values() for r in rs]
            show.call_done(len(idx), n * len(idx), f"pass@1 so far {sum(got) / max(1, len(got)):.3f}")
    problems = [problem_result(i, records[i], encoded[i][1]) for i in mine]
    return problems, [r for i in mine for r in records[i]], budget


def problem_result(index: int, records: list[dict], prefilled: bool) -> dict:
    """One problem's results from its sample records (so a resumed problem counts exactly as a generated one)."""
    return {"index": index, "correct": [r["correct"] for r in records],
            "lenient": [r.get("lenient") for r in records],  # None: a code task, or a record from before it
            "unscored": sum(r["reward"] is None for r in records),  # reward None: gold unparseable / sandbox failed
            "tokens": [r["num_tokens"] for r in records],
            "truncated": sum(r["finish_reason"] == "length" for r in records),
            "format": sum(shaping.think_format_reward(r["completion"], prefilled) for r in records),
            "tool_calls": [r.get("tool_calls", 0) for r in records]}


def evaluate(model_dir: str, tasks: list[str | Task], n: int | None = None, limit: int | None = None, sampler=None,
             sampler_kind: str = "auto", device: str | None = None, dtype: torch.dtype | None = None,
             temperature: float = 0.6, top_p: float = 0.95, max_new_tokens: int | None = None,
             data_dir: str | None = None, out: str | None = None, seed: int = 0,
             tool_cfg: tools.ToolConfig | None = None, sandbox: str = "local", resume: bool = False,
             exclusive: bool = False) -> dict:
    """Run the tasks and return the results dict (on every rank); rank 0 writes `out` and its samples.

    `tasks`: names / `name=PATH` specs (benchmarks.load_task) or ready `Task`s. `sampler`: the trainer's (weights
    synced; a tools.ToolSampler evaluates with its tools), else one is loaded. `tool_cfg`: the tool loop on the
    `sandbox` backend. `max_new_tokens` None: task_budget's. `resume`: keep the calls recorded in OUT's samples file
    (SampleFile; ResumeMismatch before the model loads); `exclusive`: the samples file and its arguments are created
    new, never over a file. docs/eval.md says what each file holds."""
    rank, world, gather = ndist.rank(), ndist.world_size(), ndist.all_gather_object
    model_dir = hub.model_dir(model_dir)  # a Hub id: its snapshot in the HF cache
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cuda" and world > 1:
        device = f"cuda:{torch.cuda.current_device()}"
    dtype = dtype or (torch.bfloat16 if str(device).startswith("cuda") else torch.float32)
    loaded = [t if isinstance(t, Task) else benchmarks.load_task(t, data_dir, limit) for t in tasks]
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    context = context_length(model_dir)
    # Each task's prompts, n and budget, before any model is loaded: the run's arguments must be known to
    # check a resumed samples file.
    prompt_tools = sampler.cfg if isinstance(sampler, tools.ToolSampler) else tool_cfg
    plans = []  # (task, n, {row index: prompt_ids}, budget, why)
    for task in loaded:
        encoded = {i: prompt_ids(task, row, tokenizer, prompt_tools) for i, row in enumerate(task.rows)}
        longest = max((len(ids) for ids, _ in encoded.values()), default=0)
        budget, why = task_budget(task, max_new_tokens, str(device).startswith("cuda"), context, longest)
        if budget < 1:
            raise ContextError(f"{task.name}: its longest prompt is {longest} tokens and {model_dir!r} has a context of "
                               f"{context} (max_position_embeddings): no room for an answer; evaluate a model with a "
                               "longer context, or fewer problems with --limit")
        plans.append((task, n or task.default_n, encoded, budget, why))
    args = run_args(model_dir, plans, temperature, top_p, seed, world, str(device).split(":")[0],
                    type(sampler).__name__ if sampler is not None else sampler_kind, prompt_tools)
    sample_file = SampleFile(Path(out), args, resume, rank, world, exclusive) if out else None  # ResumeMismatch
    if any(data.is_code_row(r) for t in loaded for r in t.rows[:1]):
        # Check the sandbox now (SandboxUnavailable says how to fix it), not after hours of generation,
        # when every code reward would come back None (unscored) and pass@1 would read as 0.
        from nanogrpo.sandbox import get_pool

        get_pool().start()
    if sampler is None:
        sampler = make_sampler(sampler_kind, model_dir, device, dtype)
    if tool_cfg is not None and not isinstance(sampler, tools.ToolSampler):
        sampler = tools.ToolSampler(sampler, tool_cfg, tools.make_cells(tool_cfg, sandbox))
    recorded = [complete_calls(task, task_n, rank, world, sample_file.recorded if sample_file else {})
                for task, task_n, *_ in plans]
    if sample_file is not None:  # every call recorded before is rewritten, the rest of the file dropped
        sample_file.start([r for got in recorded for recs in got.values() for r in recs])
    sampling = {"temperature": temperature, "top_p": top_p, "max_new_tokens": max_new_tokens}
    results = {"model": str(model_dir), "world_size": world, "seed": seed, "sampling": sampling, "tasks": {}}
    all_records, show = [], None
    t_start = time.monotonic()
    try:
        for (task, task_n, encoded, budget, why), got in zip(plans, recorded):
            t0 = time.monotonic()
            share = len(range(rank, len(task.rows), world))  # this rank's problems
            ndist.print0(f"eval {task.name}: {len(task.rows)} problems, n={task_n}, max_new_tokens {budget} ({why})",
                         file=sys.stderr)
            if rank == 0:  # only rank 0 prints: its share, which the other ranks' match within a problem
                label = f"eval {task.name}" + (f" (rank 0's share of {world} ranks)" if world > 1 else "")
                show = ProgressLine(label, share, share * task_n, budget, hint=SHORTEN)
            problems, records, budget = run_task(
                task, sampler, tokenizer, task_n, {**sampling, "max_new_tokens": budget}, context, seed, rank, world,
                gather, encoded=encoded, recorded=got, show=show, on_call=sample_file.append if sample_file else None)
            if show is not None:
                show.close()
                show = None
            problems = sorted((p for part in gather(problems) for p in part), key=lambda p: p["index"])
            records = sorted((r for part in gather(records) for r in part), key=lambda r: (r["index"], r["sample"]))
            samples = task_n * len(problems)
            tokens = [t for p in problems for t in p["tokens"]]
            results["tasks"][task.name] = {
                "metrics": benchmarks.task_metrics([p["correct"] for p in problems]),
                **lenient_metrics(problems),
                "problems": len(problems),
                "n": task_n,
                "max_new_tokens": budget,
                "unscored": sum(p["unscored"] for p in problems),  # reward None: gold unparseable / sandbox failed
                "truncated": sum(p["truncated"] for p in problems) / max(1, samples),
                "format": sum(p["format"] for p in problems) / max(1, samples),
                "mean_tokens": sum(tokens) / max(1, len(tokens)),
                **tool_summary(problems, samples, sampler),
                "seconds": round(time.monotonic() - t0, 1),
                **task.meta,
            }
            all_records += records
            unscored = results["tasks"][task.name]["unscored"]
            if unscored:
                ndist.print0(f"WARNING eval {task.name}: {unscored} of {samples} samples could not be scored (reward "
                             "None: unparseable gold or a sandbox failure); pass@1 counts them as wrong", file=sys.stderr)
    except BaseException:  # Ctrl-C, SIGTERM turned into an exception, a crash: say what is kept
        if show is not None:
            show.close()  # a terminal's line is ended
        if sample_file is not None:
            ndist.print0(f"eval stopped: the samples of every finished generate call are in {sample_file.path}; the "
                         "same command with --resume generates only the rest", file=sys.stderr)
        raise
    results["seconds"] = round(time.monotonic() - t_start, 1)
    if rank == 0 and out:
        # whole or not at all (tmp + rename): a crash never leaves half a results file
        files.write_atomic(out, json.dumps(results, indent=2) + "\n")
    if sample_file is not None:
        sample_file.finish(all_records)
    return results


def run_args(model_dir, plans, temperature, top_p, seed, world, device, sampler, tool_cfg) -> dict:
    """What a samples file's records depend on, by name (a resumed eval must match it): the model, each task's
    rows, n and budget, the sampling, the seed, the number of ranks (it fixes the calls and their seeds)."""
    args = {"model": str(model_dir), "tasks": ",".join(task.name for task, *_ in plans)}
    for task, n, _, budget, _ in plans:
        rows = json.dumps([[r.get("id"), r.get("problem"), r.get("answer")] for r in task.rows])
        args[f"problems of {task.name} (--limit)"] = len(task.rows)
        args[f"rows of {task.name} (its data)"] = hashlib.sha256(rows.encode()).hexdigest()[:16]
        args[f"n of {task.name}"] = n
        args[f"max_new_tokens of {task.name}"] = budget
    return {**args, "temperature": temperature, "top_p": top_p, "seed": seed, "world size": world, "device": device,
            "sampler": sampler, "tools": dataclasses.asdict(tool_cfg) if tool_cfg is not None else None}


def complete_calls(task: Task, n: int, rank: int, world: int, recorded: dict) -> dict[int, list[dict]]:
    """{problem index: its n records} of this rank's calls of `task` whose every problem has all n samples in
    `recorded` ({(task, index): {sample: record}}); a call only partly there is generated again."""
    got = {}
    for _, idx in task_calls(len(task.rows), n, rank, world):
        recs = [recorded.get((task.name, i), {}) for i in idx]
        if all(set(r) == set(range(n)) for r in recs):
            got.update({i: [r[j] for j in range(n)] for i, r in zip(idx, recs)})
    return got


class SampleFile:
    """OUT's .samples.jsonl, written as the eval goes (each rank its part, merged by rank 0 at the end; the arguments
    in OUT.samples.args.json until then), so a stopped eval keeps every finished call and a resumed one keeps them
    or raises ResumeMismatch (docs/eval.md, "--resume")."""

    def __init__(self, out: Path, args: dict, resume: bool, rank: int, world: int, exclusive: bool = False):
        self.path, self.args_path, self.args, self.rank = samples_path(out), samples_args_path(out), args, rank
        self.exclusive = exclusive  # `start` creates the files new (evaluate's `exclusive`)
        self.part = self.path if rank == 0 else self.path.with_suffix(f".rank{rank}.jsonl")
        self.recorded: dict[tuple, dict[int, dict]] = {}  # (task, index) -> {sample: record}
        self.file = None
        if resume:
            problem = self._mismatch()
            if problem:
                raise ResumeMismatch(problem)
            for path in [self.path, *self._parts()]:
                for rec in _read_records(path):
                    self.recorded.setdefault((rec["task"], rec["index"]), {})[rec["sample"]] = rec
            ndist.print0(f"eval --resume: {sum(map(len, self.recorded.values()))} samples recorded in {self.path}"
                         + (" and its rank parts" if world > 1 else "") + "; the calls they complete are not generated "
                         "again", file=sys.stderr)

    def _parts(self) -> list[Path]:
        return sorted(self.path.parent.glob(glob.escape(self.path.stem) + ".rank*.jsonl"))

    def _mismatch(self) -> str:
        """Why the recorded samples cannot be resumed with this run's arguments ("" if they can)."""
        if not self.args_path.is_file():
            if self.path.exists() or self._parts():
                return (f"{self.path} has no record of the arguments it was written with ({self.args_path.name} is "
                        "missing: the eval that wrote it finished, or it predates --resume): run without --resume "
                        "to start over")
            return ""  # nothing recorded: the run starts from the beginning
        try:
            before = files.loads(self.args_path.read_bytes())
            if not isinstance(before, dict):
                raise ValueError(f"not a JSON object ({type(before).__name__})")
        except ValueError as e:
            return f"{self.args_path} is unreadable ({e}): run without --resume to start over"
        diff = [f"{k}: {before.get(k)!r} in the samples file, {v!r} now" for k, v in self.args.items()
                if before.get(k) != v]
        diff += [f"{k}: {v!r} in the samples file, not in this run" for k, v in before.items() if k not in self.args]
        if diff:
            return (f"{self.path} was written with other arguments ({'; '.join(diff)}): run with the same ones, or "
                    "without --resume to start over")
        return ""

    def start(self, kept: list[dict]) -> None:
        """Begin writing: each rank's part holds exactly `kept` (its recorded calls), then what it appends."""
        ndist.barrier()  # every rank has read the old files
        write = files.write_new if self.exclusive else files.write_atomic
        if self.rank == 0:
            for part in self._parts():
                part.unlink(missing_ok=True)
            write(self.args_path, json.dumps(self.args, indent=1) + "\n")
        ndist.barrier()
        write(self.part, "".join(json.dumps(r) + "\n" for r in kept))
        self.file = open(self.part, "a", encoding="utf-8")

    def append(self, records: list[dict]) -> None:
        """One call's records: written at once, synced (a kill tears at most this write's last line). A full disk cuts
        what it let through back off (the file holds whole calls only) and is named (log.DiskFullError)."""
        fd = self.file.fileno()  # written below Python's buffer: nothing half-written is left to flush later
        size = os.lseek(fd, 0, os.SEEK_END)
        data = memoryview("".join(json.dumps(r) + "\n" for r in records).encode())
        try:
            while data:
                data = data[os.write(fd, data):]
            os.fsync(fd)
        except OSError as e:
            os.ftruncate(fd, size)
            raise files.disk_full(e, self.part, "the samples of every call before this one are kept whole: --resume "
                                  "continues from them") from e

    def finish(self, records: list[dict]) -> None:
        """Rank 0, after the results: the whole file, sorted as the results; then the rank parts and the arguments
        are removed (a finished eval leaves its results and samples only; until here --resume can finish it)."""
        if self.file is not None:
            self.file.close()
        if self.rank == 0:
            files.write_atomic(self.path, "".join(json.dumps(r) + "\n" for r in records))
            for part in self._parts():
                part.unlink(missing_ok=True)
            self.args_path.unlink(missing_ok=True)


# what run_task writes in a sample record, and what a resumed eval reads back (`_read_records` checks each)
RECORD = {"task": str, "index": int, "sample": int, "correct": bool, "reward": (float, int, type(None)),
          "finish_reason": str, "num_tokens": int, "completion": str}


def _record_problem(rec) -> str:
    """Why a line of a samples file is not a sample record a resumed eval can count ("" if it is)."""
    if not isinstance(rec, dict):
        return f"not a JSON object ({type(rec).__name__})"
    for key, want in {**RECORD, **({"tool_calls": int} if "tool_calls" in rec else {})}.items():
        if key not in rec:
            return f"no {key!r}"
        v = rec[key]
        if not isinstance(v, want) or (isinstance(v, bool) and want is not bool):
            return f"{key!r} is {v!r} ({type(v).__name__})"
        if (want is int and v < 0) or (key == "reward" and v is not None and not math.isfinite(v)):
            return f"{key!r} is {v!r}"
    return ""


def _read_records(path: Path) -> list[dict]:
    """The sample records of a samples file or part; a last line torn by a kill mid-write is left out. Any other
    line that is not a record as run_task writes it (edited by hand, another file) is a ResumeMismatch naming it."""
    if not path.is_file():
        return []
    out = []
    lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    for i, line in enumerate(lines, 1):
        try:
            rec = files.loads(line)
        except ValueError as e:
            if i == len(lines):  # torn by a kill: that call is generated again
                continue
            raise ResumeMismatch(f"{path}:{i}: {e}: run without --resume to start over") from None
        why = _record_problem(rec)
        if why:
            raise ResumeMismatch(f"{path}:{i}: not a sample record this eval wrote ({why}): run without --resume to "
                                 "start over (move the samples file away first)")
        out.append(rec)
    return out


def tool_summary(problems: list[dict], samples: int, sampler) -> dict:
    """With tools: the share of samples that ran code and the mean number of calls."""
    if not isinstance(sampler, tools.ToolSampler):
        return {}
    calls = [k for p in problems for k in p["tool_calls"]]
    return {"tool_use": sum(k > 0 for k in calls) / max(1, samples), "tool_calls_mean": sum(calls) / max(1, samples)}


def samples_path(out: Path) -> Path:
    return out.with_name(out.stem + ".samples.jsonl")


def samples_args_path(out: Path) -> Path:
    """The arguments of the samples in samples_path(out), while the eval runs or stands stopped (SampleFile)."""
    return out.with_name(out.stem + ".samples.args.json")


def lenient_metrics(problems: list[dict]) -> dict:
    """{"metrics_lenient": pass@k by math-verify alone} where every sample has a lenient verdict, else {}."""
    lenient = [p["lenient"] for p in problems]
    if not lenient or any(v is None for vs in lenient for v in vs):
        return {}
    return {"metrics_lenient": benchmarks.task_metrics(lenient)}


def markdown_table(results: dict) -> str:
    """pass@k per task: strict (this judge, the reward's) and lenient (math-verify alone; docs/eval.md)."""
    lines = ["| task | problems | metric | strict | lenient |", "| --- | --- | --- | --- | --- |"]
    for name, t in results["tasks"].items():
        lenient = t.get("metrics_lenient", {})
        for metric, value in t["metrics"].items():
            loose = f"{100 * lenient[metric]:.1f}" if metric in lenient else "-"
            lines.append(f"| {name} | {t['problems']} | {metric} | {100 * value:.1f} | {loose} |")
    return "\n".join(lines)
