"""GRPO training: `python train.py [CONFIG.toml] [key=value ...]`, or the same under `torchrun --nproc_per_node=N`.

One flat loop. Each step: this rank's prompts -> a group of completions per prompt (sampler) ->
rewards -> group-relative advantages (over all ranks) -> micro-batched update (nanogrpo/grpo.py) ->
push the new weights into the sampler -> metrics -> checkpoint. The algorithm lives in grpo.py.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
from transformers import AutoConfig

from nanogrpo import checkpoint, checks, data, dist, grpo, hub, lora, memory, pipeline, placement, rewards, tasks, tools
from nanogrpo import config as C
from nanogrpo import model as M
from nanogrpo.log import Logger, LogError
from nanogrpo.sampler import unwrap
from nanogrpo.evaluate import constant_answer, context_length, evaluate, heldout_accuracy, heldout_rows
from nanogrpo.rollout import (StepRollouts, Worker, check_filled, check_prompts, code_opts, mean_valid, row_kind,
                              run_scoring, task_template, trainer_sampler)


def main(argv: list[str]) -> dict:
    """The run; its results (held-out accuracy and benchmarks at the start and the end), with
    "stopped_by": the signal's name when a stop signal ended it early (saved: resume=true continues)."""
    cfg = C.load(argv)  # bad keys / types stop here, before anything is loaded
    # from here on a stop signal ends the run saved; `closing` closes the sampler however train() ends
    with checkpoint.StopSignals(cfg.stop_signal) as stop, contextlib.ExitStack() as closing:
        return train(cfg, stop, closing)


def train(cfg: C.Config, stop: checkpoint.StopSignals, closing: contextlib.ExitStack) -> dict:
    if cfg.sampler_ranks and int(os.environ.get("WORLD_SIZE", 1)) <= cfg.sampler_ranks:
        raise C.ConfigError(f"sampler_ranks={cfg.sampler_ranks} needs a torchrun with more ranks than that (WORLD_SIZE="
                            f"{os.environ.get('WORLD_SIZE', 1)}): the last sampler_ranks ranks sample, the others train")
    device = dist.init(cfg.device, cfg.cpu_allocator, cfg.sampler_ranks)  # with sampler_ranks: each side its own group
    if dist.SPLIT and dist.SPLIT.sampler:  # split placement: this rank only samples
        return serve_samples(cfg, closing, device)
    run = setup(cfg, closing, device)
    results = {}
    if run.evaluations and run.start == 0:
        start_evals = run.evaluations(0)
        results.update({f"{k}_start": v for k, v in start_evals.items()})
        run.logger.log(-1, start_evals)

    stopped = ""  # the stop signal's name, once one arrived (on any rank)
    for step in range(run.start, cfg.steps):
        t_step = time.time()
        # 1-2. this rank's prompts, a group of completions each, their rewards (None = could not be computed):
        # nanogrpo/rollout.py's Worker.take, or (async_steps = k) sampled up to k updates ago on a thread (pipeline.py)
        batch = run.sampling.take(step)
        times = {**batch.times, "time_wait": time.time() - t_step, "staleness": step - batch.version}

        # 3. advantages over the whole step: every rank sees all rewards (groups never span ranks)
        everyone = dist.all_gather_object(rank_rollouts(batch, cfg))
        if cfg.dynamic_sampling:
            check_filled(step, everyone, cfg)  # out of rounds: stops the run (or, dynamic_top_up, warns)
        adv = grpo.advantages([x for e in everyone for x in e["reward"]], cfg.group_size, cfg.scale, cfg.adv_eps)
        n = len(batch.total)  # every rank holds the same number of completions
        rollouts = batch.for_update(adv[run.rank * n : (run.rank + 1) * n].tolist())

        # 4. the update; first the checks rule on the rollouts (nanogrpo/checks: a sampler that did not generate with
        # the trainer's weights and settings stops the run here)
        run.checks.before_update(step, batch, rollouts)
        t0 = time.time()
        lr = run.scheduler.get_last_lr()[0]
        update = {**grpo.step(run.policy, run.ref, run.optimizer, run.scheduler, rollouts, cfg, run.tokenizer.pad_token_id,
                              run.behaviour), "lr": lr}
        times["time_train"] = time.time() - t0

        # 5. the sampler gets the new weights (streamed, never the whole model at once): now, or (async_steps)
        # a copy queued with the step that will sample with them
        t0 = time.time()
        # while the sampler sleeps (GPU): its KV cache and the gathered weights are never in memory together
        run.sampling.sync_weights(step + 1, M.iter_full_params(run.policy))
        times["time_sync"] = time.time() - t0

        # 6. metrics (and the evaluations, on their steps), the log; then the checks stop a run that went wrong
        metrics = {**step_metrics(everyone, update, times, t_step, cfg), **run.checks.statistics()}
        last = step + 1 == cfg.steps
        if run.evaluations and evaluates(step + 1, cfg):
            run.sampling.drain()  # async: the sampler is free, and holds the newest weights (the last job synced them)
            step_evals = run.evaluations(step + 1)
            metrics.update(step_evals)
            results.update({f"{k}_end": v for k, v in step_evals.items()})
        run.logger.log(step, metrics, cfg.log_every)
        run.checks.after_step(step, metrics)

        # 7. checkpoint, and a stop signal
        stopped = "" if last else stop.requested()  # an all-reduce: every rank stops after the same step
        if (cfg.save_every and (step + 1) % cfg.save_every == 0) or (last and cfg.save_final) or stopped:
            mine = run.sampling.state(run.stream)  # first: waits for the queued rollouts, which move the stream
            path = checkpoint.save(cfg.out_dir, step + 1, run.policy, run.optimizer, run.scheduler, run.tokenizer,
                                   {"data": mine["data"]}, cfg.keep_checkpoints, mine, cfg.model)
            dist.print0(f"saved {path}")
        if stopped:
            dist.print0(f"stopped by {stopped} after step {step + 1}/{cfg.steps}: exit code "
                        f"{checkpoint.EXIT_STOPPED}; resume=true continues from {path}")
            break
    run.sampling.close()
    run.logger.close()
    # the vLLM engine shuts down now, while the process group it tears down still exists (left to the
    # interpreter's exit, after dist.close(), its shutdown raised "Invalid process group specified")
    if run.sampler is not None:
        run.sampler.close()
    if results:
        dist.print0(" | ".join(f"{k} {v:.3f}" for k, v in results.items()))
    return {**results, "stopped_by": stopped} if stopped else results


def evaluates(version: int, cfg: C.Config) -> bool:
    """Whether a run with evaluations evaluates the weights after `version` updates (0: before the first step)."""
    return bool(cfg.eval_every) and (version % cfg.eval_every == 0 or version == cfg.steps)


def rank_rollouts(batch: StepRollouts, cfg: C.Config) -> dict:
    """This rank's rewards and what the metrics need of its completions, for the gather over ranks."""
    flat = batch.flat()
    return {"reward": batch.total, "parts": batch.parts, "correct": batch.correct,
            "len": [len(c.token_ids) for *_, c in flat], "trunc": [c.finish_reason == "length" for *_, c in flat],
            "tools": [tools.rollout_stats(c) for *_, c in flat] if cfg.tools else [],
            "tool_stats": batch.tool_stats,  # the tool loop's (nanogrpo/tools.py)
            "gap": batch.gap, "rounds": batch.rounds, "drawn": batch.drawn, "generated": batch.generated_tokens,
            "topped_up": batch.topped_up}


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
        "generated_tokens": sum(e["generated"] for e in everyone),  # dynamic sampling: dropped groups' too
        **update,
        **times,
        "time_step": time.time() - t_step,
        "tokens_per_s": sum(lens) / (time.time() - t_step),
        **(tools.metrics([x for e in everyone for x in e["tools"]], [e["tool_stats"] for e in everyone]) if cfg.tools else {}),
        **({"groups_drawn": sum(e["drawn"] for e in everyone), "sampling_rounds": max(e["rounds"] for e in everyone),
            "groups_topped_up": sum(e["topped_up"] for e in everyone)} if cfg.dynamic_sampling else {}),
        **(async_metrics(everyone, update) if cfg.async_steps else {}),
    }


def async_metrics(everyone: list[dict], update: dict) -> dict:
    """async_steps: the gap against the weights that sampled (what the gate reads), and against the current ones."""
    tokens, dev, var = (sum(e["gap"][i] for e in everyone) for i in (1, 2, 3))
    return {"logprob_gap": sum(e["gap"][0] for e in everyone) / tokens if tokens else float("nan"),
            "logprob_gap_now": update["logprob_gap"],  # the updates since sampling included: not a fault
            "sample_z": dev / var**0.5 if var > 0 else float("nan")}  # with the weights that sampled, as the gap


# ---- the set-up: everything before the first step, every input checked ----


@dataclass
class Run:
    """What the step loop uses, built by `setup` with every input checked before the first step."""

    rank: int
    start: int  # the first step: 0, or the resumed checkpoint's
    stream: data.PromptStream  # this rank's prompts, resumable
    sampling: Worker | pipeline.Rollouts | placement.Remote  # `take` a step's rollouts, `sync_weights` after the update
    tokenizer: object
    policy: M.Policy
    ref: object | None  # the frozen reference when beta > 0
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LRScheduler
    sampler: object | None  # None on a trainer rank of the split placement (sampler_ranks)
    behaviour: object | None  # exact_logprobs: the sampler's weights as a policy (nanogrpo/checks/sampler.py)
    checks: checks.Checks  # what stops a bad run, around the core (nanogrpo/checks)
    logger: Logger
    evaluations: Callable[[int], dict] | None  # held-out accuracy and benchmarks after `version` updates; None: none


@dataclass
class Inputs:
    """What both the trainer and a sampler rank read: the rows, the benchmarks, the tokenizer and the prompt format."""

    train_rows: list[dict]
    eval_rows: list[dict]
    bench_tasks: list
    tokenizer: object
    prefilled_think: bool  # the prompt ends with "<think>" (R1-Distill chat templates): the format reward must know


@dataclass
class RunEvals:
    """A training run's evaluations (`eval_every`) of the weights its sampler holds: held-out accuracy on the inputs'
    eval_rows, then eval.py's benchmarks (`eval_benchmarks`) with the trainer's sampler; `run(version)` -> their
    metrics."""

    cfg: object
    inputs: Inputs  # the held-out rows (heldout_rows), eval.py's tasks (load_benchmarks), the prompt format
    sampler: object
    model_dir: str  # the weights the sampler loaded (eval.py's prompts read its tokenizer files)
    scoring: rewards.Scoring  # the run's rewards (rollout.run_scoring)

    def run(self, version: int) -> dict:
        i = self.inputs
        got = heldout_accuracy(self.sampler, i.tokenizer, i.eval_rows, self.cfg, i.prefilled_think,
                               self.scoring) if i.eval_rows else {}
        return {**got, **(self.run_benchmarks(version) if i.bench_tasks else {})}

    def run_benchmarks(self, version: int) -> dict:
        """eval.py's evaluate() with the trainer's sampler (weights already synced) -> {"eval/TASK/METRIC": value}
        (strict: the reward's judge) and {"eval_lenient/TASK/METRIC": value} (math-verify alone, math tasks;
        docs/eval.md). Sampling as eval.py's defaults, with the run's max_new_tokens; every sample in OUT_DIR/evals/."""
        cfg = self.cfg
        res = evaluate(self.model_dir, self.inputs.bench_tasks, n=cfg.eval_benchmarks_n, sampler=self.sampler,
                       max_new_tokens=cfg.max_new_tokens, out=str(Path(cfg.out_dir) / "evals" / f"step_{version:06d}.json"),
                       seed=cfg.seed)
        return {f"{prefix}/{name}/{k}": v for name, t in res["tasks"].items()
                for prefix, metrics in (("eval", t["metrics"]), ("eval_lenient", t.get("metrics_lenient", {})))
                for k, v in metrics.items()}


def setup(cfg: C.Config, closing: contextlib.ExitStack, device: torch.device) -> Run:
    """Data, model, optimizer, sampler, checks, logger and resume: everything before the first step."""
    rank, world = dist.rank(), dist.world_size()  # with sampler_ranks: among the trainer ranks
    closing.callback(torch.set_num_threads, torch.get_num_threads())  # as it was, for a caller in this process
    pipeline.split_threads(cfg.async_steps and not dist.SPLIT, device)  # async on a CPU: half the threads each
    if cfg.prompts_per_step % world:
        raise C.ConfigError(f"prompts_per_step={cfg.prompts_per_step} is not divisible by the world size {world}")
    dtype = C.torch_dtype(cfg, device.type == "cuda")
    torch.manual_seed(cfg.seed)

    # writable; a run already there is continued only with resume=true, from its newest complete checkpoint
    resume_from = checkpoint.open_run(cfg.out_dir, cfg.resume, unverified=cfg.resume_without_manifest)

    # --- data, model, optimizer, sampler: every input is checked before the first step ---
    inputs = load_inputs(cfg)
    train_rows, eval_rows, tokenizer = inputs.train_rows, inputs.eval_rows, inputs.tokenizer
    checkpoint.check_resume(resume_from, cfg, tokenizer)  # its steps and model fit the checkpoint
    # the longest prompt; each one fits in the context with max_new_tokens (a ConfigError naming the row)
    longest = check_prompts({"task": train_rows, "held-out": eval_rows}, tokenizer, cfg, context_length(cfg.model))
    # what the run will hold per process, before any of it is allocated (nanogrpo/memory.py)
    plan = memory.plan(cfg, memory.shape_of(AutoConfig.from_pretrained(cfg.model)), world, device.type, longest,
                       gpu_mem=memory.device_budget(device), sampler=not dist.SPLIT)  # split: a trainer rank holds none
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
    optimizer, scheduler = grpo.make_optimizer(policy.parameters(), cfg, cfg.steps * cfg.mu)
    stream = data.PromptStream(train_rows, cfg.prompts_per_step, rank, world, cfg.seed)
    start = checkpoint.resume(resume_from, policy, optimizer, scheduler, stream)
    if cfg.async_steps and not cfg.tis_cap:
        dist.print0(f"warning: async_steps={cfg.async_steps} with tis_cap=0: rollouts up to {cfg.async_steps} updates old "
                    "are trained as if on-policy (no importance correction); tis_cap=2 corrects them (docs/grpo.md)",
                    file=sys.stderr)
    # a checkpoint holds the rollouts an async run had queued: they are trained first
    queued = pipeline.resumed(cfg, checkpoint.rank_state(resume_from), stream, resume_from)
    verdict = getattr(run_scoring(cfg).verdict, "__name__", "the task's reward")
    if dist.SPLIT:  # this rank only trains: its rollouts and evaluations come from a sampler rank (serve_samples)
        sampler = behaviour = None
        checked = checks.Checks(cfg, dtype, policy, tokenizer.pad_token_id, None, verdict)  # the sampler rank checks its own
        evaluating = bool(cfg.eval_every and (eval_rows or inputs.bench_tasks))
        sampling = placement.Remote(cfg, start, dtype, (lambda v: evaluates(v, cfg)) if evaluating else None, stream,
                                    M.iter_full_params(policy), queued)
        evaluations = sampling.evaluations if evaluating else None
    else:
        sampler = trainer_sampler(cfg, weights, device, dtype)  # with tools=true, the tool loop (its sandbox starts now)
        closing.callback(sampler.close)  # also when a check stops the run: see sampler.close() in train()
        behaviour = checks.SamplerPolicy.of(sampler, policy) if cfg.exact_logprobs else None  # nanogrpo/checks/sampler.py
        # the run's checks; the sampler it generates with is checked at every call (checked.sampler wraps it)
        checked = checks.Checks(cfg, dtype, policy, tokenizer.pad_token_id, sampler, verdict)
        evals = run_evals(cfg, inputs, sampler, weights)
        evaluations = evals and evals.run
        worker = rollout_worker(cfg, inputs, checked.sampler, device, stream, rank)  # the k = 0 schedule itself
        sampling = pipeline.Rollouts(worker, stream, rank, cfg.async_steps, start, cfg.steps, queued) \
            if cfg.async_steps else worker
    closing.callback(sampling.close)  # first: the rollout thread stops before the sampler closes

    if dist.is_main():
        checkpoint.write_config(cfg.out_dir, C.to_toml(cfg))
    dist.print0(C.to_toml(cfg), end="")
    const = constant_answer(eval_rows)  # the bar held-out accuracy is read against
    dist.print0(f"world size {world} | device {device} | {len(train_rows)} train / {len(eval_rows)} held-out rows"
                + (f" (one answer for all, {const[0][:20]!r}, scores {const[1]:.3f})" if const else "")
                + (f" | resumed from {resume_from}" if resume_from else ""))
    logger = Logger(cfg.out_dir, cfg.steps, start, cfg.wandb_project, cfg.wandb_run_name, vars(cfg))
    return Run(rank, start, stream, sampling, tokenizer, policy, ref, optimizer, scheduler, sampler, behaviour,
               checked, logger, evaluations)


def load_task(cfg: C.Config) -> tuple[list[dict], list[dict]]:
    """Train rows and held-out rows (the built-in task has its own held-out split)."""
    where = {"subset": cfg.task_subset or None, "columns": data.parse_columns(cfg.task_columns)}  # Hub datasets / renames
    kind, gold_check = row_kind(cfg)
    rows = (tasks.load_rows(cfg.task, kind, split=cfg.task_split, seed=cfg.seed, gold_check=gold_check, **where),
            heldout_rows(cfg))
    verdict = run_scoring(cfg).verdict
    for some in filter(None, rows):  # a user's reward fits the rows' columns, before any compute
        rewards.check_user_calls(cfg.rewards, verdict, some)
    return rows


def load_benchmarks(cfg: C.Config) -> list:
    """eval.py tasks for `eval_benchmarks`, loaded now so a bad name or path stops the run before compute."""
    from nanogrpo.tasks import benchmarks

    loaded = []
    for spec in filter(None, (s.strip() for s in cfg.eval_benchmarks.split(","))):
        try:
            loaded.append(benchmarks.load_task(spec, limit=cfg.eval_size))
        except (ValueError, FileNotFoundError) as e:
            raise C.ConfigError(f"config key 'eval_benchmarks': {e}") from None
    return loaded


def load_inputs(cfg: C.Config) -> Inputs:
    """Every input is checked before the first step: rows, benchmarks, model directory, template, sandbox."""
    train_rows, eval_rows = load_task(cfg)
    bench_tasks = load_benchmarks(cfg) if cfg.eval_every else []
    # a Hub id becomes its snapshot directory in the HF cache (downloaded once; HF_HUB_OFFLINE=1: the cache only)
    cfg.model = hub.model_dir(cfg.model)
    tokenizer = M.load_tokenizer(cfg.model)
    cfg.template = task_template(cfg, tokenizer, train_rows[0])  # "" -> the task's own
    prefilled_think = data.format_prompt(train_rows[0], tokenizer, cfg.template).rstrip().endswith("<think>")
    rewards.SANDBOX = code_opts(cfg)  # the code verifier's options: this run's sandbox
    if data.is_code_row(train_rows[0]):  # code rows: check now, loudly, that the sandbox really isolates (or was allowed not to)
        from nanogrpo.sandbox import get_pool

        get_pool(**{k: v for k, v in code_opts(cfg).items() if k != "binary"}).start()
    return Inputs(train_rows, eval_rows, bench_tasks, tokenizer, prefilled_think)


def rollout_worker(cfg: C.Config, inputs: Inputs, sampler, device, stream=None, rank: int = 0) -> Worker:
    """What samples and scores a rank's rollouts (nanogrpo/rollout.py), on a trainer rank (`stream`: its prompts) or a
    sampler rank."""
    # async: the gap against the weights that sampled, through the trainer's forward (nanogrpo/checks/sampler.py)
    sampled_by = checks.SamplerPolicy(sampler, cfg.logprob_chunk, cfg.lm_head_fp32,
                                      M.pick_attention(cfg.attention, device)) if cfg.async_steps else None
    return Worker(cfg, sampler, inputs.tokenizer, inputs.prefilled_think, run_scoring(cfg), sampled_by, stream, rank)


def run_evals(cfg: C.Config, inputs: Inputs, sampler, model_dir: str) -> RunEvals | None:
    """The run's evaluations with this sampler (nanogrpo/evaluate.py); None when it has none."""
    if not (cfg.eval_every and (inputs.eval_rows or inputs.bench_tasks)):
        return None
    return RunEvals(cfg, inputs, sampler, model_dir, run_scoring(cfg))


def serve_samples(cfg: C.Config, closing: contextlib.ExitStack, device: torch.device) -> dict:
    """A sampler rank of the split placement (sampler_ranks > 0): it samples every step for its trainer ranks, with the
    weights they send, and runs the evaluations (nanogrpo/placement.py). Returns the evaluations, as `train`."""
    split = dist.SPLIT
    dtype = C.torch_dtype(cfg, device.type == "cuda")
    torch.manual_seed(cfg.seed)
    inputs = load_inputs(cfg)
    sampler = trainer_sampler(cfg, cfg.model, device, dtype)  # the trainers send their weights before the first step
    closing.callback(sampler.close)
    hf = unwrap(sampler).model
    checked = checks.CheckedSampler(sampler, dtype, hf, hf.named_parameters(),  # its findings travel with the batches
                                    moments=bool(cfg.max_sample_z))
    evals = run_evals(cfg, inputs, sampler, cfg.model)
    streams = {r: data.PromptStream(inputs.train_rows, cfg.prompts_per_step, r, split.trainers, cfg.seed)
               for r in range(split.rank - split.trainers, split.trainers, split.samplers)}
    return placement.serve(cfg, rollout_worker(cfg, inputs, checked, device), streams,
                           evals and evals.run, lambda v: evaluates(v, cfg))


if __name__ == "__main__":
    # exit codes: 0 done; 2 bad input (named, before any compute); 75 stopped by a stop signal, saved
    # (run again with resume=true); 1 anything else (a checkpoint that could not be written, updates that stayed
    # non-finite: named)
    try:
        if main(sys.argv[1:]).get("stopped_by"):
            sys.exit(checkpoint.EXIT_STOPPED)
    except (C.ConfigError, FileNotFoundError, data.DataError, M.ModelError, rewards.RewardError) as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
    except (checkpoint.CheckpointError, checks.NonFiniteError, LogError) as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(1)
    finally:
        dist.close()
