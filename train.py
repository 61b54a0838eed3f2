"""GRPO training: `python train.py [CONFIG.toml] [key=value ...]`, or the same under `torchrun --nproc_per_node=N`.

One flat loop. Each step: this rank's prompts -> a group of completions per prompt (sampler) ->
rewards -> group-relative advantages (over all ranks) -> micro-batched update (nanogrpo/grpo.py) ->
push the new weights into the sampler -> metrics -> checkpoint. The algorithm lives in grpo.py.
"""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

import torch
from transformers import AutoConfig

from nanogrpo import checkpoint, data, dist, grpo, hub, lora, memory, parity, tasks, tools
from nanogrpo import config as C
from nanogrpo import model as M
from nanogrpo.log import Logger
from nanogrpo.optim import make_optimizer
from nanogrpo.evaluate import evaluate, heldout_accuracy, heldout_rows
from nanogrpo.rollout import (code_opts, encode_prompts, mean_valid, row_kind, score_rollouts, task_template,
                              task_verifier, trainer_sampler)
from nanogrpo.sampler import SamplingParams


def sampling_seed(cfg: C.Config, step: int, rank: int) -> int:
    """Sampling randomness is a function of (seed, step, rank), so a resumed run samples exactly the same."""
    return (cfg.seed * 1_000_003 + step * 7919 + rank * 104_729) % (2**31)


def load_task(cfg: C.Config) -> tuple[list[dict], list[dict]]:
    """Train rows and held-out rows (the built-in task has its own held-out split)."""
    where = {"subset": cfg.task_subset or None, "columns": data.parse_columns(cfg.task_columns)}  # Hub datasets / renames
    kind, gold_check = row_kind(cfg)
    return (tasks.load_rows(cfg.task, kind, split=cfg.task_split, seed=cfg.seed, gold_check=gold_check, **where),
            heldout_rows(cfg))


# A run whose every reward is None (none_frac 1) learns nothing; this many such steps in a row stop it.
ALL_NONE_STEPS = 3
NONE_CAUSES = {
    "code": "the sandbox failed on every program (see the warnings above: bubblewrap, the interpreter paths, "
            "E2B_API_KEY) or the rows' tests cannot be run",
    "math": "math-verify could not check any answer (is math-verify installed? are the rows' answers parseable?)",
    "exact": "the rows have no 'answer' to compare with",
    "number": "the rows' answers are not numbers (the number reward needs a number; \"math\" checks expressions)",
}


def check_rewards_alive(history: list[float], cfg: C.Config) -> None:
    """Stop a run whose last ALL_NONE_STEPS steps had no reward at all (every one None)."""
    if len(history) >= ALL_NONE_STEPS and all(x == 1.0 for x in history[-ALL_NONE_STEPS:]):
        judge = task_verifier(cfg) or "math or code, by row"
        raise C.ConfigError(f"every reward was None for {ALL_NONE_STEPS} steps in a row (verifier {judge}): nothing is "
                            f"learned, so the run stops. Likely cause: {NONE_CAUSES.get(judge, NONE_CAUSES['math'])}")


def load_benchmarks(cfg: C.Config) -> list:
    """eval.py tasks for `eval_benchmarks`, loaded now so a bad name or path stops the run before compute."""
    from nanogrpo.tasks import benchmarks

    tasks = []
    for spec in filter(None, (s.strip() for s in cfg.eval_benchmarks.split(","))):
        try:
            tasks.append(benchmarks.load_task(spec, limit=cfg.eval_size))
        except (ValueError, FileNotFoundError) as e:
            raise C.ConfigError(f"config key 'eval_benchmarks': {e}") from None
    return tasks


def run_benchmarks(tasks: list, sampler, model_dir: str, cfg: C.Config, step: int) -> dict:
    """eval.py's evaluate() (nanogrpo/evaluate.py) with the trainer's sampler (weights already synced)
    -> {"eval/TASK/METRIC": value}. Sampling as eval.py's defaults, with the run's max_new_tokens; every
    sample in OUT_DIR/evals/."""
    res = evaluate(model_dir, tasks, n=cfg.eval_benchmarks_n, sampler=sampler, max_new_tokens=cfg.max_new_tokens,
                   out=str(Path(cfg.out_dir) / "evals" / f"step_{step:06d}.json"), seed=cfg.seed)
    return {f"eval/{name}/{k}": v for name, t in res["tasks"].items() for k, v in t["metrics"].items()}


def main(argv: list[str]) -> dict:
    """The run; its results (held-out accuracy and benchmarks at the start and the end), with
    "stopped_by": the signal's name when a stop signal ended it early (saved: resume=true continues)."""
    cfg = C.load(argv)  # bad keys / types stop here, before anything is loaded
    # from here on a stop signal ends the run saved; `closing` closes the sampler however run() ends
    with checkpoint.StopSignals(cfg.stop_signal) as stop, contextlib.ExitStack() as closing:
        return run(cfg, stop, closing)


class Setup(NamedTuple):
    """What the step loop uses, built by `setup` with every input checked before the first step."""

    rank: int
    start: int  # the first step: 0, or the resumed checkpoint's
    stream: data.PromptStream  # this rank's prompts, resumable
    tokenizer: object
    prefilled_think: bool  # the prompt ends with "<think>" (R1-Distill chat templates): the format reward must know
    policy: M.Policy
    ref: object  # the frozen reference when beta > 0, else None
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LRScheduler
    sampler: object
    behaviour: object  # exact_logprobs: the sampler's weights as a policy (nanogrpo/parity.py), else None
    sampler_check: parity.SamplerCheck
    gap_gate: parity.GapGate
    logger: Logger
    evaluations: Callable[[int], dict] | None  # held-out accuracy and benchmarks after a step; None: no evals


def setup(cfg: C.Config, closing: contextlib.ExitStack) -> Setup:
    """Process group, data, model, optimizer, sampler, checks, logger and resume: everything before the first step."""
    device = dist.init(cfg.device, cfg.cpu_allocator)
    rank, world = dist.rank(), dist.world_size()
    if cfg.prompts_per_step % world:
        raise C.ConfigError(f"prompts_per_step={cfg.prompts_per_step} is not divisible by the world size {world}")
    dtype = C.torch_dtype(cfg, device.type == "cuda")
    torch.manual_seed(cfg.seed)

    # writable; a run already there is continued only with resume=true, from its newest complete checkpoint
    resume_from = checkpoint.open_run(cfg.out_dir, cfg.resume)

    # --- data, model, optimizer, sampler: every input is checked before the first step ---
    train_rows, eval_rows = load_task(cfg)
    bench_tasks = load_benchmarks(cfg) if cfg.eval_every else []
    # a Hub id becomes its snapshot directory in the HF cache (downloaded once; HF_HUB_OFFLINE=1: the cache only)
    cfg.model = hub.model_dir(cfg.model)
    tokenizer = M.load_tokenizer(cfg.model)
    cfg.template = task_template(cfg, tokenizer, train_rows[0])  # "" -> the task's own
    prefilled_think = data.format_prompt(train_rows[0], tokenizer, cfg.template).rstrip().endswith("<think>")
    if data.is_code_row(train_rows[0]):  # code rows: check now, loudly, that the sandbox really isolates (or was allowed not to)
        from nanogrpo.sandbox import get_pool

        get_pool(**{k: v for k, v in code_opts(cfg).items() if k != "binary"}).start()
    # what the run will hold per process, before any of it is allocated (nanogrpo/memory.py)
    longest = max(len(p) for p in encode_prompts(train_rows[:256], tokenizer, cfg))
    plan = memory.plan(cfg, memory.shape_of(AutoConfig.from_pretrained(cfg.model)), world, device.type, longest,
                       gpu_mem=memory.device_budget(device))
    dist.print0(f"memory plan: {plan.summary()}")
    if not plan.fits:
        dist.print0("WARNING: the memory plan does not fit; `python scripts/plan_memory.py CONFIG` shows each part "
                    "and a change that fits (activation_checkpointing, smaller micro-batches)", file=sys.stderr)
    weights = str(resume_from or cfg.model)  # after a resume, trainer and sampler start from the checkpoint
    # LoRA: the frozen base is always cfg.model (a checkpoint's HF files are merged); a resume loads the adapters
    policy = M.make_policy(cfg.model if cfg.lora_rank else weights, device, dtype, cfg.logprob_chunk,
                           cfg.activation_checkpointing, compile=cfg.compile, attention=cfg.attention,
                           lora_rank=cfg.lora_rank, lora_alpha=cfg.lora_alpha, lora_targets=cfg.lora_targets,
                           adapters_from=resume_from if cfg.lora_rank else None, lm_head_fp32=cfg.lm_head_fp32)
    if cfg.beta > 0:  # with LoRA the reference is the base: the policy with its adapters off, no second copy
        ref = lora.BaseModel(policy) if cfg.lora_rank else M.make_policy(
            cfg.model, device, dtype, cfg.logprob_chunk, False, trainable=False, compile=cfg.compile, attention=cfg.attention,
            lm_head_fp32=cfg.lm_head_fp32)
    else:
        ref = None
    optimizer, scheduler = make_optimizer(policy.parameters(), cfg, cfg.steps * cfg.mu)
    stream = data.PromptStream(train_rows, cfg.prompts_per_step, rank, world, cfg.seed)
    start = checkpoint.resume(resume_from, policy, optimizer, scheduler, stream)
    sampler = trainer_sampler(cfg, weights, device, dtype)  # with tools=true, the tool loop (its sandbox starts now)
    closing.callback(sampler.close)  # also when a check stops the run: see sampler.close() in run()
    behaviour = parity.SamplerPolicy(sampler, policy) if cfg.exact_logprobs else None  # nanogrpo/parity.py
    # after every generate: the sampler's weights and settings against the trainer's, exactly (nanogrpo/parity.py)
    sampler_check = parity.SamplerCheck(sampler, dtype, policy.hf, M.iter_full_params(policy))
    gap_gate = parity.GapGate(cfg.max_logprob_gap, cfg.gap_patience, dtype, cfg.sampler, parity.sampler_dtype(sampler),
                              cfg.exact_logprobs, sampler_check.on)

    out = Path(cfg.out_dir)
    if dist.is_main():
        out.mkdir(parents=True, exist_ok=True)
        (out / "config.toml").write_text(C.to_toml(cfg))
    dist.print0(C.to_toml(cfg), end="")
    dist.print0(f"world size {world} | device {device} | {len(train_rows)} train / {len(eval_rows)} held-out rows"
                + (f" | resumed from {resume_from}" if resume_from else ""))
    logger = Logger(cfg.out_dir, cfg.steps, start, cfg.wandb_project, cfg.wandb_run_name, vars(cfg))

    def evaluations(step: int) -> dict:  # held-out accuracy on the task's split, then eval.py's benchmarks
        got = heldout_accuracy(sampler, tokenizer, eval_rows, cfg, prefilled_think) if eval_rows else {}
        return {**got, **(run_benchmarks(bench_tasks, sampler, weights, cfg, step) if bench_tasks else {})}

    return Setup(rank, start, stream, tokenizer, prefilled_think, policy, ref, optimizer, scheduler, sampler, behaviour,
                 sampler_check, gap_gate, logger, evaluations if cfg.eval_every and (eval_rows or bench_tasks) else None)


def rank_rollouts(flat: list, total: list, parts: dict, correct: list, sampler, cfg: C.Config) -> dict:
    """This rank's rewards and what the metrics need of its completions, for the gather over ranks."""
    return {"reward": total, "parts": parts, "correct": correct,
            "len": [len(c.token_ids) for *_, c in flat], "trunc": [c.finish_reason == "length" for *_, c in flat],
            "tools": [tools.rollout_stats(c) for *_, c in flat] if cfg.tools else [],
            "tool_stats": sampler.last_stats if cfg.tools else {}}  # the tool loop's (nanogrpo/tools.py)


def step_metrics(everyone: list[dict], update: dict, times: dict, t_step: float, cfg: C.Config) -> dict:
    """The step's metrics over every rank's `rank_rollouts`, then the update's (`update`) and the timings."""
    lens = [x for e in everyone for x in e["len"]]
    return {
        **grpo.group_stats([x for e in everyone for x in e["reward"]], cfg.group_size),
        "accuracy": mean_valid([x for e in everyone for x in e["correct"]]),
        **{f"reward/{k}": mean_valid([x for e in everyone for x in e["parts"][k]]) for k in everyone[0]["parts"]},
        "completion_len_mean": sum(lens) / len(lens),
        "completion_len_max": max(lens),
        "truncated_frac": mean_valid([float(x) for e in everyone for x in e["trunc"]]),
        **update,
        **times,
        "time_step": time.time() - t_step,
        "tokens_per_s": sum(lens) / (time.time() - t_step),
        **(tools.metrics([x for e in everyone for x in e["tools"]], [e["tool_stats"] for e in everyone]) if cfg.tools else {}),
    }


def run(cfg: C.Config, stop: checkpoint.StopSignals, closing: contextlib.ExitStack) -> dict:
    (rank, start, stream, tokenizer, prefilled_think, policy, ref, optimizer, scheduler, sampler, behaviour, sampler_check,
     gap_gate, logger, evaluations) = setup(cfg, closing)
    results = {}
    if evaluations and start == 0:
        start_evals = evaluations(0)
        results.update({f"{k}_start": v for k, v in start_evals.items()})
        logger.log(-1, start_evals)

    params = SamplingParams(cfg.max_new_tokens, cfg.temperature, cfg.top_p, tuple(cfg.stop))
    none_history: list[float] = []  # none_frac per step (check_rewards_alive)
    stopped = ""  # the stop signal's name, once one arrived (on any rank)
    for step in range(start, cfg.steps):
        t_step = time.time()
        rows = stream.next_batch()  # this rank's prompts_per_step / world rows
        prompts = encode_prompts(rows, tokenizer, cfg)

        # 1. sample a group per prompt
        t0 = time.time()
        params.seed = sampling_seed(cfg, step, rank)
        groups = sampler.generate(prompts, cfg.group_size, params)  # [prompt][sample]
        sampler_check(step, prompts, cfg.group_size, params)  # stops the run if they were not the trainer's
        sampler.sleep()  # on GPU: give the sampler's memory to the update; generate() wakes it (no-op on CPU)
        times = {"time_generate": time.time() - t0}

        # 2. rewards (None = could not be computed)
        t0 = time.time()
        flat = [(p, r, c) for p, r, g in zip(prompts, rows, groups) for c in g]
        total, parts, correct = score_rollouts([c for _, _, c in flat], [r for _, r, _ in flat], cfg, prefilled_think,
                                               cfg.group_size)
        times["time_reward"] = time.time() - t0

        # 3. advantages over the whole step: every rank sees all rewards (groups never span ranks)
        everyone = dist.all_gather_object(rank_rollouts(flat, total, parts, correct, sampler, cfg))
        adv = grpo.advantages([x for e in everyone for x in e["reward"]], cfg.group_size, cfg.scale, cfg.adv_eps)
        adv = adv[rank * len(flat) : (rank + 1) * len(flat)]
        rollouts = [
            grpo.Rollout(p, c.token_ids, c.logprobs, r, c.finish_reason == "length", a.item(), c.mask)
            for (p, _, c), r, a in zip(flat, total, adv)
        ]

        # 4. the update
        t0 = time.time()
        lr = scheduler.get_last_lr()[0]
        update = {**grpo.step(policy, ref, optimizer, scheduler, rollouts, cfg, tokenizer.pad_token_id, behaviour), "lr": lr}
        times["time_train"] = time.time() - t0

        # 5. the sampler gets the new weights (streamed, never the whole model at once)
        t0 = time.time()
        # while the sampler sleeps (GPU): its KV cache and the gathered weights are never in memory together
        sampler_check.sync(sampler, M.iter_full_params(policy))  # sampler.sync_weights, noting what it must now hold
        times["time_sync"] = time.time() - t0

        # 6. metrics (and the evals, on their steps), the log, the run's guards
        metrics = step_metrics(everyone, update, times, t_step, cfg)
        last = step + 1 == cfg.steps
        if evaluations and ((step + 1) % cfg.eval_every == 0 or last):
            step_evals = evaluations(step + 1)
            metrics.update(step_evals)
            results.update({f"{k}_end": v for k, v in step_evals.items()})
        logger.log(step, metrics, cfg.log_every)
        none_history.append(metrics["none_frac"])
        check_rewards_alive(none_history, cfg)
        gap_gate(step, metrics["logprob_gap"])  # warns, and stops a run whose sampler and trainer drifted apart

        # 7. checkpoint, and a stop signal
        stopped = "" if last else stop.requested()  # an all-reduce: every rank stops after the same step
        if (cfg.save_every and (step + 1) % cfg.save_every == 0) or (last and cfg.save_final) or stopped:
            path = checkpoint.save(cfg.out_dir, step + 1, policy, optimizer, scheduler, tokenizer,
                                   {"data": stream.state_dict()}, cfg.keep_checkpoints)
            logger.event(f"saved {path}")
        if stopped:
            logger.event(f"stopped by {stopped} after step {step + 1}/{cfg.steps}: exit code "
                         f"{checkpoint.EXIT_STOPPED}; resume=true continues from {path}")
            break
    logger.close()
    # the vLLM engine shuts down now, while the process group it tears down still exists (left to the
    # interpreter's exit, after dist.close(), its shutdown raised "Invalid process group specified")
    sampler.close()
    if results:
        dist.print0(" | ".join(f"{k} {v:.3f}" for k, v in results.items()))
    return {**results, "stopped_by": stopped} if stopped else results


if __name__ == "__main__":
    # exit codes: 0 done; 2 bad input (named, before any compute); 75 stopped by a stop signal, saved
    # (run again with resume=true); 1 anything else (a checkpoint that could not be written is named)
    try:
        if main(sys.argv[1:]).get("stopped_by"):
            sys.exit(checkpoint.EXIT_STOPPED)
    except (C.ConfigError, FileNotFoundError, data.DataError, M.ModelError) as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
    except checkpoint.CheckpointError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(1)
    finally:
        dist.close()
