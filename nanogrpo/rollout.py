"""The trainer's rollout half: a Config's prompts, its sampler and its rewards.

train.py's data path reads top-down through here: prompts (encoded as the config's template says) ->
the sampler (`trainer_sampler`: PyTorch or vLLM, wrapped in the tool loop when `tools` is on) ->
rewards (`score_rollouts`) -> nanogrpo/grpo.py. nanogrpo/evaluate.py (eval.py, the held-out evals)
uses the same pieces, so a number from training means the same as one from evaluation.
"""

from __future__ import annotations

import math
import sys
import time
from dataclasses import dataclass, field

import torch

from nanogrpo import data, dist, grpo, rewards, tasks, tools
from nanogrpo import ConfigError
from nanogrpo.checks import sampled_gap
from nanogrpo.sampler import Completion, Sampler, SamplingParams
from nanogrpo.torch_sampler import TorchSampler


def make_sampler(kind: str, model_dir: str, device: str, dtype: torch.dtype, **kwargs) -> Sampler:
    """The sampler named by `kind`: "torch" (nanogrpo/torch_sampler.py), "vllm" (imported only when asked for),
    or "auto": vLLM where it is installed and the device is a GPU, the PyTorch sampler otherwise. Not in sampler.py,
    which vllm_sampler.py imports: a factory there would make the two import each other."""
    if kind == "auto":
        try:
            import vllm  # noqa: F401

            kind = "vllm" if str(device).startswith("cuda") else "torch"
        except ImportError:
            kind = "torch"
    if kind == "torch":
        return TorchSampler(model_dir, device=device, dtype=dtype, **kwargs)
    if kind == "vllm":
        from nanogrpo.vllm_sampler import VLLMSampler

        return VLLMSampler(model_dir, device=device, dtype=dtype, **kwargs)
    raise ValueError(f"unknown sampler kind {kind!r}: expected 'torch', 'vllm' or 'auto'")


def trainer_sampler(cfg, weights: str, device, dtype: torch.dtype) -> Sampler:
    """The sampler a trainer generates with (`sampler`), wrapped in the tool loop when `tools` is on; the
    sandbox starts now, before any compute."""
    memory = {"gpu_memory_utilization": cfg.vllm_gpu_memory_utilization, "kv_cache_gb": cfg.vllm_kv_cache_gb}
    own = memory if cfg.sampler == "vllm" else {"lm_head_fp32": cfg.lm_head_fp32}
    sampler = make_sampler(cfg.sampler, weights, str(device), dtype, **own)
    if cfg.tools:  # rollouts run code mid-answer (nanogrpo/tools.py)
        tool_cfg = tools.ToolConfig.from_config(cfg)
        sampler = tools.ToolSampler(sampler, tool_cfg, tools.make_cells(tool_cfg, cfg.sandbox, cfg.sandbox_concurrency,
                                                                         cfg.allow_unsandboxed))
    return sampler


def encode_prompts(rows: list[dict], tokenizer, cfg) -> list[list[int]]:
    template = task_template(cfg, tokenizer, rows[0] if rows else {})
    system = cfg.system_prompt
    if cfg.tools and template != "raw":  # a chat model is told how to run code (and which functions it has)
        system = tools.system_prompt(tools.ToolConfig.from_config(cfg), cfg.system_prompt)
    return [data.encode_prompt(r, tokenizer, template, system_prompt=system or None) for r in rows]


LONGEST_OF = 64  # prompts encoded to find the longest (the longest by their bound below)


def check_prompts(sets: dict[str, list[dict]], tokenizer, cfg, context: int) -> int:
    """The longest prompt of the rows of `sets` ({what they are: rows}) in tokens, after checking that every prompt
    leaves room for max_new_tokens in the model's `context`: a ConfigError naming the row otherwise, before any
    compute. Without encoding every row (a chat template costs ~0.4 ms a row): a prompt's tokens are at most its
    template's (the row with an empty problem, encoded) plus a token per UTF-8 byte of the row's own text (byte-level
    BPE, byte fallback) plus a few (a word prefix); only rows whose bound does not fit, and the longest, are encoded."""
    own = lambda r: len(str(r.get("problem", "")).encode()) + len(str(r.get("starter_code") or "").encode())  # noqa: E731
    kinds: dict[tuple, int] = {}  # the template's tokens, per prompt shape (language, starter code or not)

    def bound(r: dict) -> int:
        key = (r.get("language"), bool(r.get("starter_code")), data.is_code_row(r))
        if key not in kinds:
            empty = {**r, "problem": "", **({"starter_code": " "} if r.get("starter_code") else {})}
            kinds[key] = len(encode_prompts([empty], tokenizer, cfg)[0])
        return kinds[key] + own(r) + 8

    longest = 0
    for what, rows in sets.items():
        bounds = [bound(r) for r in rows]
        order = sorted(range(len(rows)), key=bounds.__getitem__, reverse=True)
        near = [i for i in order if bounds[i] + cfg.max_new_tokens > context]
        picked = sorted(set(order[:LONGEST_OF]) | set(near))
        lengths = dict(zip(picked, map(len, encode_prompts([rows[i] for i in picked], tokenizer, cfg))))
        for i in near:
            if lengths[i] + cfg.max_new_tokens > context:
                start = str(rows[i].get("problem", ""))[:60]
                raise ConfigError(f"{what} row {i + 1} ({start!r}...): its prompt is {lengths[i]} tokens, and with "
                                  f"max_new_tokens = {cfg.max_new_tokens} it does not fit the model's context of "
                                  f"{context} tokens (max_position_embeddings): drop such rows, lower max_new_tokens, "
                                  "or use a model with a longer context")
        longest = max([longest, *lengths.values()])
    return longest


def code_opts(cfg) -> dict:
    return {"backend": cfg.sandbox, "concurrency": cfg.sandbox_concurrency or None, "binary": cfg.code_binary,
            "allow_unsandboxed": cfg.allow_unsandboxed}


def run_scoring(cfg) -> rewards.Scoring:
    """The run's rewards (`rewards`, `reward_weights`) on its task (`task`: its own reward is the verdict unless
    the list names a verifier)."""
    return rewards.scoring(cfg.rewards, cfg.reward_weights, tasks.get(cfg.task).reward)


def row_kind(cfg) -> tuple[str, object]:
    """(kind, gold_check) for a dataset's rows: the schema the verdict reads ("auto": each row says), and its gold
    reader (a gold it cannot read stops the load naming the row, instead of a None every step)."""
    judge = run_scoring(cfg).verdict
    return {rewards.code: "code", rewards.by_row: "auto"}.get(judge, "math"), rewards.GOLD_CHECKS.get(judge)


def task_template(cfg, tokenizer, row: dict) -> str:
    """`template`, or the task's own when it is "": a built-in's, else math_eval for math rows and chat for
    code rows; raw on a model without a chat template (its only choice)."""
    own = cfg.template or tasks.get(cfg.task).template or ("chat" if data.is_code_row(row) else "math_eval")
    return own if own == "raw" or cfg.template or getattr(tokenizer, "chat_template", None) else "raw"


def score_rollouts(completions: list, rows: list[dict], scoring: rewards.Scoring, cfg, prefilled_think: bool = False,
                   group_size: int = 1):
    """(rewards, None where not computed; each part by name; `correct`: the verdict == 1). With tools the verdict
    reads the text after the last tool output, and a rollout whose sandbox failed gets None. group_size:
    consecutive completions of one prompt (the `length` reward compares within one)."""
    total, parts = scoring(rewards.Batch([c.text for c in completions], [c.answer_text for c in completions], rows,
                                         [len(c.token_ids) for c in completions], group_size, prefilled_think, cfg))
    for i, c in enumerate(completions):
        if c.failed:
            total[i] = parts["accuracy"][i] = None
    correct = [None if r is None else float(r == 1.0) for r in parts["accuracy"]]
    return total, parts, correct


def mean_valid(xs) -> float:
    v = [x for x in xs if x is not None]
    return sum(v) / len(v) if v else math.nan


def sampling_seed(cfg, step: int, rank: int, round_: int = 0) -> int:
    """Sampling randomness is a function of (seed, step, rank, round), so a resumed run samples exactly the same."""
    return (cfg.seed * 1_000_003 + step * 7919 + rank * 104_729 + round_ * 15_485_863) % (2**31)


@dataclass
class StepRollouts:
    """One step's rollouts on this rank, sampled and scored: what the update and the step's metrics read."""

    step: int
    version: int  # how many updates the weights that sampled them had seen (the step itself when not async)
    rows: list[dict] = field(default_factory=list)
    prompts: list[list[int]] = field(default_factory=list)
    completions: list[list[Completion]] = field(default_factory=list)  # [prompt][sample]
    total: list = field(default_factory=list)  # per completion, prompt-major: the reward (None: not computed)
    parts: dict = field(default_factory=dict)  # reward name -> per completion
    correct: list = field(default_factory=list)
    tool_stats: dict = field(default_factory=dict)  # the tool loop's, summed over rounds
    problems: list[str] = field(default_factory=list)  # split placement: the sampler rank's sampler check's findings
    gap: tuple[float, ...] | None = None  # async: checks.sampled_gap's (sum, tokens, dev, var) at `version`: the gap, sample_z
    rounds: int = 0  # generate calls (dynamic sampling: more than one when groups had no signal)
    drawn: int = 0  # groups generated, dropped ones included
    topped_up: int = 0  # dynamic sampling: dropped groups that filled the share when the rounds ran out
    generated_tokens: int = 0  # completion tokens generated, dropped groups included
    times: dict = field(default_factory=dict)
    first_draw: list = field(default_factory=list)  # dynamic sampling: (prompt, completion) for all of round 0

    def flat(self) -> list[tuple[list[int], dict, Completion]]:
        """(prompt, row, completion) per completion, prompt-major: the order of `total`."""
        return [(p, r, c) for p, r, g in zip(self.prompts, self.rows, self.completions) for c in g]

    def for_check(self) -> list[grpo.Rollout] | None:
        """What the sampler's calibration check reads (nanogrpo/checks: its forward, or checks.sampled_gap): None, the update's rollouts;
        with dynamic sampling, every completion of the step's first draw, kept or dropped. The kept groups are chosen
        by what was sampled: of a near-deterministic policy they are those that drew a rare token, so their tokens
        look flatter than draws (a clean run was stopped at sample_z -4.5, -4.8: docs/precision.md)."""
        return [grpo.Rollout(p, c.token_ids, c.logprobs, 0.0, False, 0.0, c.mask)
                for p, c in self.first_draw] if self.first_draw else None

    def for_update(self, advantages) -> list[grpo.Rollout]:
        """What grpo.step trains on: one Rollout per completion, in `flat` order, with its advantage."""
        return [grpo.Rollout(p, c.token_ids, c.logprobs, r, c.finish_reason == "length", float(a), c.mask)
                for (p, _, c), r, a in zip(self.flat(), self.total, advantages)]


@dataclass
class Worker:
    """What samples and scores a rank's rollouts: its sampler, the prompt format, the rewards. train.py calls it on the
    trainer's ranks (through nanogrpo/pipeline.py with async_steps), a sampler rank on its own (placement.py)."""

    cfg: object
    sampler: Sampler  # the run's: checked at every call (nanogrpo/checks/sampler.py's CheckedSampler wraps it)
    tokenizer: object
    prefilled_think: bool  # the prompt ends with "<think>" (R1-Distill chat templates): the format rewards must know
    scoring: rewards.Scoring  # the run's rewards (run_scoring)
    sampled_by: object | None = None  # async_steps: the gap against the weights that sampled (checks.SamplerPolicy)
    stream: object = None  # a trainer rank's prompts (data.PromptStream): `take` draws from it
    rank: int = 0

    def take(self, step: int) -> "StepRollouts":
        """Step `step`'s rollouts, sampled now: the k = 0 schedule (pipeline.py samples ahead)."""
        return self.rollouts(step, step, None, self.stream, self.rank)

    def sync_weights(self, version: int, weights) -> None:
        """After the update that made weights `version`: the trainer's (name, tensor) weights into the sampler."""
        self.sampler.sync_weights(weights)

    def drain(self) -> None:  # nothing is queued
        pass

    def state(self, stream) -> dict:
        """This rank's part of a checkpoint (as pipeline.Rollouts.state, with nothing queued)."""
        return rank_state([], 0, stream.state_dict())

    def close(self) -> None:
        pass

    def rollouts(self, step: int, version: int, weights, stream, rank: int) -> StepRollouts:
        """Rank `rank`'s rollouts of `step`: its prompts from `stream`, a group of completions each, scored, sampled
        with the weights of `version` (`weights`: those, already synced, for the gap's forward; None: the ones both
        sides loaded). With dynamic_sampling, `dynamic_rounds` draws them."""
        out = StepRollouts(step, version)
        draw = lambda rows, round_: self.draw(out, rows, round_, rank)  # noqa: E731
        if self.cfg.dynamic_sampling:
            dynamic_rounds(out, stream, draw, self.cfg)
        else:
            for group in draw(stream.next_batch(), 0):
                _add(out, group)
        if not self.cfg.async_steps:
            self.sampler.sleep()  # on GPU: give the sampler's memory to the update; generate() wakes it (no-op on CPU)
        if self.sampled_by is not None:
            out.gap = sampled_gap(self.sampled_by, out, self.cfg, self.tokenizer.pad_token_id, weights)
        return out

    def draw(self, out: StepRollouts, rows: list[dict], round_: int, rank: int) -> list[tuple]:
        """One generate call for `rows`, scored: a group (row, prompt, completions, total, parts, correct) per row,
        counted and timed in `out`."""
        cfg, t0 = self.cfg, time.time()
        prompts = encode_prompts(rows, self.tokenizer, cfg)
        params = SamplingParams(cfg.max_new_tokens, cfg.temperature, cfg.top_p, tuple(cfg.stop),
                                seed=sampling_seed(cfg, out.step, rank, round_))
        groups = self.sampler.generate(prompts, cfg.group_size, params)  # [prompt][sample]
        if len(groups) != len(prompts) or any(len(g) != cfg.group_size for g in groups):  # ranks would misalign
            raise RuntimeError(f"the sampler returned {[len(g) for g in groups]} completions for {len(prompts)} "
                               f"prompts of group_size = {cfg.group_size} each")
        t1 = time.time()
        flat = [(r, c) for r, g in zip(rows, groups) for c in g]
        total, parts, correct = score_rollouts([c for _, c in flat], [r for r, _ in flat], self.scoring, cfg,
                                               self.prefilled_think, cfg.group_size)
        tally(out, groups, t0, t1, self.sampler.last_stats if cfg.tools else {})
        g = cfg.group_size
        return [(rows[i], prompts[i], groups[i], total[i * g:(i + 1) * g],
                 {k: v[i * g:(i + 1) * g] for k, v in parts.items()}, correct[i * g:(i + 1) * g])
                for i in range(len(groups))]


def rank_state(queued: list, async_steps: int, data: dict) -> dict:
    """A rank's part of a checkpoint (checkpoint.save's rank_state), whichever schedule sampled: the steps sampled
    ahead, oldest first, the async_steps and world size they were sampled for, and its place in the prompt stream."""
    return {"rollouts": queued, "async_steps": async_steps, "world": dist.world_size(), "data": data}


def tally(out: StepRollouts, groups: list, t0: float, t1: float, tool_stats: dict) -> None:
    """Count a generate call in `out` (begun at t0, scored from t1 until now): its times, the groups and tokens drawn,
    the tool loop's stats (nanogrpo/tools.py)."""
    out.times["time_generate"] = out.times.get("time_generate", 0.0) + t1 - t0
    out.times["time_reward"] = out.times.get("time_reward", 0.0) + time.time() - t1
    out.rounds, out.drawn = out.rounds + 1, out.drawn + len(groups)
    out.generated_tokens += sum(len(c.token_ids) for g in groups for c in g)
    for k, v in tool_stats.items():
        out.tool_stats[k] = out.tool_stats.get(k, 0) + v


def dynamic_rounds(out: StepRollouts, stream, draw, cfg) -> None:
    """dynamic_sampling (DAPO): groups whose `dynamic_metric` values are all equal are dropped and more prompts drawn,
    until this rank holds its share of kept groups or `dynamic_max_rounds` generate calls were made; a later round
    draws the missing prompts scaled by the fraction kept so far (why: docs/grpo.md, "Dynamic sampling"). When the
    rounds run out, the share is topped up with dropped groups (`topped_up`; `check_filled` rules on them)."""
    dropped: list[tuple] = []
    share = want = None  # want: this round's prompts (None: a step's share)
    for round_ in range(cfg.dynamic_max_rounds):
        rows = stream.next_batch(want)  # this rank's prompts_per_step / world rows, or `want` of them
        share = len(rows) if share is None else share
        groups = draw(rows, round_)
        if round_ == 0:
            out.first_draw = [(prompt, c) for _, prompt, completions, *_ in groups for c in completions]
        for group in groups:
            if silent(group, cfg):
                dropped.append(group)
            elif len(out.rows) < share:
                _add(out, group)
        kept = len(out.rows)
        if kept >= share:
            break
        want = share if not kept else min(share, math.ceil((share - kept) * out.drawn / kept))
    out.topped_up = share - len(out.rows)
    for group in dropped[: out.topped_up]:
        _add(out, group)


def silent(group: tuple, cfg) -> bool:
    """Dynamic sampling drops this group: its `dynamic_metric` values (the verifier's accuracy, or the total reward)
    are all equal (grpo.zero_variance: None left out)."""
    _, _, _, total, parts, _ = group
    values = parts["accuracy"] if cfg.dynamic_metric == "accuracy" else total
    return bool(grpo.zero_variance(torch.tensor([[math.nan if x is None else x for x in values]], dtype=torch.float64)))


class DynamicSamplingError(ConfigError):
    """Dynamic sampling ran out of rounds before a step had its groups (train.py exits 2 with it)."""


def check_filled(step: int, everyone: list[dict], cfg) -> None:
    """After the step's gather (`rank_rollouts` of every rank, so every rank rules alike): groups that dynamic
    sampling topped up stop the run, as verl and NeMo-RL stop theirs, or with `dynamic_top_up` are counted and
    warned about."""
    short = sum(e["topped_up"] for e in everyone)
    if not short:
        return
    what = (f"step {step + 1}: dynamic sampling made dynamic_max_rounds = {cfg.dynamic_max_rounds} generate calls and "
            f"{short} of the step's {cfg.prompts_per_step} groups still had equal {cfg.dynamic_metric} values")
    if not cfg.dynamic_top_up:
        raise DynamicSamplingError(f"{what}, so the run stops. The data may be too hard (or too easy) for the "
                                   "model: raise dynamic_max_rounds, or set dynamic_top_up = true to fill such steps "
                                   "with dropped groups (counted as groups_topped_up)")
    dist.print0(f"warning: {what}: topped up with {short} dropped groups (dynamic_top_up)", file=sys.stderr)


def _add(out: StepRollouts, group: tuple) -> None:
    row, prompt, completions, total, parts, correct = group
    out.rows.append(row)
    out.prompts.append(prompt)
    out.completions.append(completions)
    out.total += total
    out.correct += correct
    for k, v in parts.items():
        out.parts.setdefault(k, []).extend(v)
