"""Evaluation, one path: prompt a benchmark row, generate, score, pass@k; and the trainers' held-out accuracy.

eval.py (the CLI), train.py's in-run evals (`eval_benchmarks`, `eval_every`), sft.py's and
scripts/generate.py all run through this module, so a number from one of them means the same as from
the others. Tasks, prompts and defaults live in nanogrpo/tasks/benchmarks.py; the metrics (pass@k) there too.
The sampler, the prompt encoding and the scoring are the trainer's own (nanogrpo/rollout.py).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import torch

from nanogrpo import data, files, hub, rewards, tools
from nanogrpo.tasks import benchmarks
from nanogrpo.rollout import encode_prompts, make_sampler, score_rollouts
from nanogrpo import dist as ndist
from nanogrpo.tasks.benchmarks import Task
from nanogrpo.sampler import SamplingParams

MAX_NEW_TOKENS_CAP = 32768  # the reference evaluations' generation budget for reasoning models


def _log(msg: str, rank: int) -> None:
    if rank == 0:
        print(msg, file=sys.stderr, flush=True)


# ----------------------------------------------------------------------------------------------
# The trainers' held-out accuracy (train.py, sft.py): a Config's prompts, rewards and sampler


def heldout_rows(cfg) -> list[dict]:
    """The rows `eval_every` measures held-out accuracy on: `eval_task`, else the built-in task's own
    held-out split, else none; the first `eval_size` of them."""
    source = cfg.eval_task or (cfg.task if cfg.task in data.BUILTIN_TASKS else "")
    if not source:
        return []
    kind = "code" if cfg.reward == "code" else "math"
    return data.load_rows(source, kind, split="test", seed=cfg.seed)[: cfg.eval_size]


def heldout_accuracy(sampler, tokenizer, rows: list[dict], cfg, prefilled_think: bool = False) -> dict:
    """Accuracy on held-out rows, one sample per problem at eval_temperature; rows split over ranks.
    With tools, also the share of answers that ran code."""
    mine = rows[ndist.rank() :: ndist.world_size()]
    prompts = encode_prompts(mine, tokenizer, cfg)
    params = SamplingParams(cfg.max_new_tokens, cfg.eval_temperature, cfg.top_p, tuple(cfg.stop), seed=cfg.seed + 12345)
    outs = sampler.generate(prompts, 1, params) if prompts else []
    _, _, correct = score_rollouts([o[0] for o in outs], mine, cfg, prefilled_think)
    used = [float(getattr(o[0], "calls", 0) > 0) for o in outs]
    counts = torch.tensor([sum(c or 0.0 for c in correct), sum(used), len(correct)], dtype=torch.float64)
    ndist.all_reduce(counts)
    n = counts[2].clamp(min=1)
    got = {"heldout_accuracy": (counts[0] / n).item()}
    return {**got, "heldout_tool_use": (counts[1] / n).item()} if cfg.tools else got


def prompt_ids(task: Task, row: dict, tokenizer, tool_cfg: tools.ToolConfig | None = None) -> tuple[list[int], bool]:
    """Token ids of the prompt, and whether the chat template ended it with `<think>` (R1-Distill).
    With tools, a chat model's system message also says how to run code (tools.system_prompt)."""
    messages = benchmarks.user_messages(task, row)
    if tool_cfg is not None and getattr(tokenizer, "chat_template", None):
        base = messages[0]["content"] if messages[0]["role"] == "system" else ""
        messages = [{"role": "system", "content": tools.system_prompt(tool_cfg, base)}] + messages[1 if base else 0 :]
    if getattr(tokenizer, "chat_template", None):
        text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    else:  # a base model: system and user text, one after the other
        text = "\n\n".join(m["content"] for m in messages)
        ids = tokenizer(text)["input_ids"]
    return ids, text.rstrip().endswith("<think>")


def context_problem(model_dir: str, loaded: list[Task], tool_cfg: tools.ToolConfig | None = None) -> str:
    """Why a task cannot be evaluated with this model's context (its longest prompt leaves no room to
    answer), or "". Tokenizer only: checked before the model is loaded or anything is generated."""
    from transformers import AutoTokenizer

    tokenizer, context = AutoTokenizer.from_pretrained(model_dir), context_length(model_dir)
    for task in loaded:
        longest = max((len(prompt_ids(task, row, tokenizer, tool_cfg)[0]) for row in task.rows), default=0)
        if longest >= context:
            return (f"{task.name}: its longest prompt is {longest} tokens and {model_dir!r} has a context of "
                    f"{context} (max_position_embeddings): no room for an answer; evaluate a model with a longer "
                    "context, or fewer problems with --limit")
    return ""


def context_length(model_dir: str) -> int:
    cfg = json.loads((Path(model_dir) / "config.json").read_text())
    cfg = cfg.get("text_config", cfg)
    return int(cfg.get("max_position_embeddings") or cfg.get("max_sequence_length") or 4096)


def score(task: Task, completions: list, rows: list[dict]) -> list[float | None]:
    """Verdicts of Completions: on the text after the last tool output (tools), None where the sandbox
    of a tool call failed (unscored, never wrong)."""
    texts = [tools.answer_text(c) for c in completions]
    if task.kind == "math":
        verdicts = rewards.math_rewards(texts, [r["answer"] for r in rows])
    else:
        verdicts = rewards.code_rewards(texts, rows)
    return [None if getattr(c, "failed", False) else v for c, v in zip(completions, verdicts)]


def run_task(task, sampler, tokenizer, n, sampling, context, seed, rank, world, gather):
    """Generate and score this rank's share of the task -> (per-problem results, sample records, token budget)."""
    mine = list(range(rank, len(task.rows), world))  # strided: ranks get similar mixes of problems
    tool_cfg = sampler.cfg if isinstance(sampler, tools.ToolSampler) else None
    encoded = {i: prompt_ids(task, task.rows[i], tokenizer, tool_cfg) for i in mine}
    longest = max((len(ids) for ids, _ in encoded.values()), default=0)
    longest = max(gather(longest))
    # The budget: what was asked for (or the reference cap), never past the model's context.
    budget = min(sampling["max_new_tokens"] or MAX_NEW_TOKENS_CAP, context - longest)
    if budget < 1:
        raise ValueError(f"eval {task.name}: the longest prompt ({longest} tokens) fills the context ({context})")
    per_call = max(1, 64 // n)  # problems per generate call: about 64 rows, and a progress line per call
    done, t0 = 0, time.monotonic()
    problems, records = [], []
    for start in range(0, len(mine), per_call):
        idx = mine[start : start + per_call]
        params = SamplingParams(max_new_tokens=budget, temperature=sampling["temperature"],
                                top_p=sampling["top_p"], seed=seed + 7919 * rank + start)  # reproducible per call
        outs = sampler.generate([encoded[i][0] for i in idx], n, params)
        flat_rows = [task.rows[i] for i in idx for _ in range(n)]
        flat = [c for group in outs for c in group]
        verdicts = score(task, flat, flat_rows)
        for k, i in enumerate(idx):
            row, prefilled = task.rows[i], encoded[i][1]
            group = flat[k * n : (k + 1) * n]
            vs = verdicts[k * n : (k + 1) * n]
            problems.append({"index": i, "correct": [v == 1.0 for v in vs], "unscored": sum(v is None for v in vs),
                             "tokens": [len(c.token_ids) for c in group],
                             "truncated": sum(c.finish_reason == "length" for c in group),
                             "format": sum(rewards.format_reward(c.text, prefilled) for c in group),
                             "tool_calls": [getattr(c, "calls", 0) for c in group]})
            for j, (c, v) in enumerate(zip(group, vs)):
                records.append({"task": task.name, "index": i, "id": row.get("id", str(i)), "sample": j,
                                "answer": row.get("answer"), "reward": v, "correct": v == 1.0,
                                "finish_reason": c.finish_reason, "num_tokens": len(c.token_ids),
                                "completion": c.text, **({"tool_calls": c.calls} if tool_cfg else {})})
        done += len(idx)
        acc = sum(sum(p["correct"]) for p in problems) / max(1, n * len(problems))
        _log(f"eval {task.name}: {done}/{len(mine)} problems on rank {rank}, pass@1 so far {acc:.3f}, "
             f"{time.monotonic() - t0:.0f}s", rank)
    return problems, records, budget


def evaluate(
    model_dir: str,
    tasks: list[str | Task],
    n: int | None = None,
    limit: int | None = None,
    sampler=None,
    sampler_kind: str = "auto",
    device: str | None = None,
    dtype: torch.dtype | None = None,
    temperature: float = 0.6,
    top_p: float = 0.95,
    max_new_tokens: int | None = None,
    data_dir: str | None = None,
    out: str | None = None,
    seed: int = 0,
    tool_cfg: tools.ToolConfig | None = None,
    sandbox: str = "local",
) -> dict:
    """Run the tasks and return the results dict (on every rank); rank 0 writes `out` and its samples.

    `tasks`: names / `name=PATH` specs (see benchmarks.load_task) or ready `Task`s (a held-out split).
    `sampler`: pass the trainer's sampler (weights already synced) to skip loading the model again; a
    tools.ToolSampler (train.py with tools = true) evaluates with its tools.
    `tool_cfg`: run the tool loop (nanogrpo/tools.py) on the `sandbox` backend, for any task.
    """
    rank, world, gather = ndist.rank(), ndist.world_size(), ndist.all_gather_object
    model_dir = hub.model_dir(model_dir)  # a Hub id: its snapshot in the HF cache
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cuda" and world > 1:
        device = f"cuda:{torch.cuda.current_device()}"
    dtype = dtype or (torch.bfloat16 if str(device).startswith("cuda") else torch.float32)
    loaded = [t if isinstance(t, Task) else benchmarks.load_task(t, data_dir, limit) for t in tasks]
    if any(t.kind == "code" for t in loaded):
        # Check the sandbox now (SandboxUnavailable says how to fix it), not after hours of generation,
        # when every code reward would come back None (unscored) and pass@1 would read as 0.
        from nanogrpo.sandbox import get_pool

        get_pool().start()
    if sampler is None:
        sampler = make_sampler(sampler_kind, model_dir, device, dtype)
    if tool_cfg is not None and not isinstance(sampler, tools.ToolSampler):
        sampler = tools.ToolSampler(sampler, tool_cfg, tools.make_cells(tool_cfg, sandbox))
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    context = context_length(model_dir)
    sampling = {"temperature": temperature, "top_p": top_p, "max_new_tokens": max_new_tokens}
    results = {"model": str(model_dir), "world_size": world, "seed": seed, "sampling": sampling, "tasks": {}}
    all_records = []
    t_start = time.monotonic()
    for task in loaded:
        task_n = n or task.default_n
        t0 = time.monotonic()
        problems, records, budget = run_task(task, sampler, tokenizer, task_n, sampling, context, seed, rank, world, gather)
        problems = sorted((p for part in gather(problems) for p in part), key=lambda p: p["index"])
        records = sorted((r for part in gather(records) for r in part), key=lambda r: (r["index"], r["sample"]))
        samples = task_n * len(problems)
        tokens = [t for p in problems for t in p["tokens"]]
        results["tasks"][task.name] = {
            "metrics": benchmarks.task_metrics([p["correct"] for p in problems]),
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
            _log(f"WARNING eval {task.name}: {unscored} of {samples} samples could not be scored (reward None: "
                 "unparseable gold or a sandbox failure); pass@1 counts them as wrong", rank)
    results["seconds"] = round(time.monotonic() - t_start, 1)
    if rank == 0 and out:
        out_path = Path(out)
        out_path.parent.mkdir(parents=True, exist_ok=True)
        # each file appears whole or not at all (tmp + rename): a crash never leaves half a results file
        files.write_atomic(samples_path(out_path), "".join(json.dumps(r) + "\n" for r in all_records))
        files.write_atomic(out_path, json.dumps(results, indent=2) + "\n")
    return results


def tool_summary(problems: list[dict], samples: int, sampler) -> dict:
    """With tools: the share of samples that ran code and the mean number of calls."""
    if not isinstance(sampler, tools.ToolSampler):
        return {}
    calls = [k for p in problems for k in p["tool_calls"]]
    return {"tool_use": sum(k > 0 for k in calls) / max(1, samples), "tool_calls_mean": sum(calls) / max(1, samples)}


def samples_path(out: Path) -> Path:
    return out.with_name(out.stem + ".samples.jsonl")


def markdown_table(results: dict) -> str:
    lines = ["| task | problems | metric | value |", "| --- | --- | --- | --- |"]
    for name, t in results["tasks"].items():
        for metric, value in t["metrics"].items():
            lines.append(f"| {name} | {t['problems']} | {metric} | {100 * value:.1f} |")
    return "\n".join(lines)
