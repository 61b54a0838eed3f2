"""The checks that stop a bad run, in their own layer around the core: the loop reaches them through three lines
(`Checks.before_update`, `Checks.statistics`, `Checks.after_step`), and the sampler check is a Sampler that wraps
the run's (nanogrpo/checks/sampler.py). Every check is on by default; none changes what the update computes.

- The sampler check (`CheckedSampler`): after every generate, what the sampler used and holds against what the
  trainer asked for and pushed, exactly; the trainer rules on every rank's findings before the update (`rule`).
- The gap gate (`GapGate`): `gap_patience` steps in a row above `max_logprob_gap` stop the run, naming the cause.
- The calibration gate (`SampleGate`, `max_sample_z`): are the sampled tokens draws from the distribution the sampler
  reports? (the sums come with the PyTorch sampler's draws, else a forward here, without backward).
- Reward values (`reward_values`), rewards alive (`ALL_NONE_STEPS`), a start with no signal (`NO_SIGNAL_STEPS`, a
  warning), updates that stayed non-finite (`NONFINITE_PATIENCE`), the rollout queue's staleness (pipeline.py).
Why, cost and measured faults of each: docs/precision.md.
"""

from __future__ import annotations

import math
import numbers
import sys
import time
from collections.abc import Sequence

import torch
import torch.nn as nn
from torch.distributed.fsdp import FSDPModule

from nanogrpo import dist, grpo
from nanogrpo import model as M
from nanogrpo.checks.sampler import (CheckedSampler, LogprobGapError, SamplerPolicy, StaleSamplerError,  # noqa: F401
                                     drawn_sums, fingerprint, forward_sums, sampled_gap)
from nanogrpo import ConfigError
from nanogrpo.sampler import unwrap


class Checks:
    """The run's checks as the loop reaches them (train.py); every rank calls each at the same place: collectives."""

    def __init__(self, cfg, dtype: torch.dtype, policy, pad_id: int, sampler=None, verdict: str = "the task's reward"):
        """`sampler`: the trainer's own (None on a trainer rank of the split placement, whose sampler rank checks its
        own): wrapped now in the sampler check, `self.sampler`, which the run generates with. `verdict`: the name of
        the reward that judges the answers (what an all-None run names)."""
        self.cfg, self.policy, self.pad_id, self.verdict = cfg, policy, pad_id, verdict
        self.sampler = None if sampler is None else CheckedSampler(sampler, dtype, policy.hf, M.iter_full_params(policy),
                                                                   moments=bool(cfg.max_sample_z))
        self.gap_gate = GapGate(cfg.max_logprob_gap, cfg.gap_patience, dtype, cfg.sampler,
                                sampler and sampler_dtype(sampler), cfg.exact_logprobs,
                                sampler is None or self.sampler.on)  # split: the sampler ranks check theirs
        self.sample_gate = SampleGate(cfg.max_sample_z, cfg.temperature, cfg.top_p)
        self.none_history: list[float] = []  # none_frac per step (ALL_NONE_STEPS)
        self.signal: list[float] = []  # zero_std_frac of this process's first steps (NO_SIGNAL_STEPS)
        self.skipped: list[int] = []  # updates_skipped per step (NONFINITE_PATIENCE)
        self.sums: tuple[float, float] | None = None  # this step's calibration sums (Σ log p - E, Σ Var)
        self.seconds = 0.0  # this step's time in the checks (the sampler check's is in time_generate / time_sync)
        self.variance = math.inf  # this step's Σ Var[log p] (statistics), what the calibration gate divides by

    def before_update(self, step: int, batch, rollouts: list) -> None:
        """Before step `step`'s update of `rollouts` (sampled as `batch`): the sampler check's ruling over every rank
        (`rule`), the queue's invariant, and the calibration sums of the step's draws (async_steps: its rollout
        thread takes them with the gap, checks.sampled_gap)."""
        t0, cfg = time.time(), self.cfg
        rule(step, batch.problems + (self.sampler.take_findings() if self.sampler else []))
        if step - batch.version > cfg.async_steps:  # the queue's invariant (nanogrpo/pipeline.py)
            raise RuntimeError(f"step {step + 1} got rollouts of weights version {batch.version}")
        self.sums = None
        if cfg.max_sample_z and not cfg.async_steps:
            self.sums = drawn_sums(batch) or self.calibrate(batch.for_check() or rollouts)
        self.seconds = time.time() - t0

    def calibrate(self, drawn: list) -> tuple[float, float]:
        """The calibration sums of a sampler that reports none with its draws (vLLM): a forward of all the step's
        `drawn` completions, no backward, with the weights that sampled them (before the update). All of them: the
        update's own are selected by what was sampled (it skips groups whose rewards came out equal, dynamic
        sampling drops them), and the rest look flatter than draws (sample_z drifted to -0.5 per step)."""
        device = next(self.policy.parameters()).device
        with torch.no_grad():
            looked = grpo.micro_batches(drawn, self.cfg, self.pad_id)
            sums = forward_sums(self.policy, looked, self.cfg, device)[2:]
            if looked and isinstance(self.policy, FSDPModule):
                self.policy.reshard()  # FSDP2's root stays gathered after a forward, for a backward that may not come
        return sums

    def statistics(self) -> dict:
        """The step's check metrics: `sample_z` over every rank (a collective; async_steps: train.async_metrics's) and
        `time_checks` (the ruling and the calibration sums)."""
        t0, out = time.time(), {}
        self.variance = math.inf
        if self.sums is not None:
            dev, self.variance = dist.all_reduce(torch.tensor(self.sums, dtype=torch.float64)).tolist()
            out["sample_z"] = dev / math.sqrt(self.variance) if self.variance > 0 else math.nan  # Σ log p - E / sqrt(Σ Var)
        elif not self.cfg.async_steps:
            out["sample_z"] = math.nan  # off: not computed
        return {**out, "time_checks": self.seconds + time.time() - t0}

    def after_step(self, step: int, metrics: dict) -> None:
        """After step `step` was logged: stop a run that went wrong, or warn once about a start with no signal."""
        self.none_history.append(metrics["none_frac"])
        rewards_alive(self.none_history, self.verdict)
        self.signal.append(metrics["zero_std_frac"])
        no_signal(self.signal, metrics, self.cfg)
        self.skipped.append(metrics["updates_skipped"])
        check_finite(self.skipped)
        self.gap_gate(step, metrics["logprob_gap"])  # warns, and stops a run whose sampler and trainer drifted apart
        self.sample_gate(step, metrics["sample_z"], self.variance)  # stops a run whose sampler draws from another distribution


def rule(step: int, problems: list[str]) -> None:
    """Raise StaleSamplerError on every rank if any rank's sampler check found a problem (a collective)."""
    if dist.all_reduce(torch.tensor([float(bool(problems))]), "max").item():
        raise StaleSamplerError(
            f"step {step + 1}: the sampler did not generate with the trainer's weights and settings (checked "
            "exactly after every generate call: nanogrpo/checks/sampler.py); these rollouts are not the trainer's "
            "policy, so the run stops. " + ("; ".join(problems) or f"(on another rank than {dist.rank()})"))


# ---- rewards: their values, and a run whose rewards say nothing ----


class RewardError(ValueError):
    """A reward function returned what no reward is (not a list of finite numbers or None), raised, or the weighted sum
    overflowed: the reward (a user's, most likely) or `reward_weights` is wrong. train.py exits 2 naming it, before the
    update."""


def reward_values(name: str, values, rows: list, key: str = "config key 'rewards':") -> list[float | None]:
    """A reward function's values, as the trainer may use them: a list of one per completion, each None (could not be
    computed) or a finite real number. Anything else is a broken reward (a user's, most likely), not a verdict on the
    model: a RewardError naming the reward (`key`: the config key that named it), the value and the row, raised before
    the step's update. Why not None: an inf, a NaN or a string would be dropped silently every step it appears,
    biasing what is learned towards the completions the reward can score; an error says where the reward is wrong."""
    what = f"{key} reward {name!r}"
    if values is None:
        raise RewardError(f"{what} returned None for the whole batch (no `return`?): a reward returns a list with one "
                          f"value per completion ({len(rows)} here), None for a completion it cannot score")
    if isinstance(values, (str, bytes, dict)) or not isinstance(values, (Sequence, torch.Tensor)) and \
            not hasattr(values, "__array__") and not hasattr(values, "__next__"):
        raise RewardError(f"{what} returned {_value(values)}, not a list: a reward returns a list with one value per "
                          f"completion ({len(rows)} here)")
    values = list(values)
    if len(values) != len(rows):  # a reward that lost or gained items would be summed onto the wrong completions
        raise RewardError(f"{what} gave {len(values)} values for {len(rows)} completions")
    out = []
    for v, row in zip(values, rows):
        if v is None:
            out.append(None)
            continue
        bad = isinstance(v, bool) or not isinstance(v, numbers.Real)
        try:
            x = None if bad else float(v)
        except OverflowError:  # an int too large for a float (10**400)
            x = None
        if x is None or not math.isfinite(x):
            raise RewardError(f"{what} returned {_value(v)} for row {shown(row)}: a reward is a finite number (not a "
                              "bool), or None when it cannot be computed")
        out.append(x)
    return out


def reward_total(total: list[float | None], parts: dict, terms: list, rows: list) -> list[float | None]:
    """The weighted sums of finite rewards (rewards.Scoring's `total`), each finite, and their sum and spread finite
    too (the group statistics and advantages square them): weights that overflow the sum, or rewards so large that
    their spread overflows a float, are a RewardError naming them."""
    for i, t in enumerate(total):
        if t is not None and not math.isfinite(t):
            raise RewardError(f"config key 'reward_weights': the weighted sum of rewards {[n for n, _, _ in terms]} = "
                              f"{[parts[n][i] for n, _, _ in terms]} with weights {[w for _, w, _ in terms]} is {t} (row "
                              f"{shown(rows[i])}): a reward must be finite")
    valid = [t for t in total if t is not None]
    try:
        mean = math.fsum(valid) / max(len(valid), 1)
        spread = math.fsum((t - mean) ** 2 for t in valid)
    except OverflowError:
        spread = math.inf
    if not math.isfinite(spread):
        raise RewardError(f"config key 'rewards': rewards as large as {max(valid, key=abs):.3g} (the weighted sum of "
                          f"{[n for n, _, _ in terms]}): their sum or spread overflows a float, so no advantage can be "
                          "computed; scale the reward down (or its reward_weights)")
    return total


def _value(v) -> str:
    text = f"{v!r}"[:80] if not isinstance(v, int) or isinstance(v, bool) or abs(v) < 10**40 else f"an int of {len(str(v))} digits"
    return f"{text} ({type(v).__name__})" if not isinstance(v, float) else text


def shown(row) -> str:
    """A row, short, for an error message: its id or its problem's start."""
    if isinstance(row, dict):
        return repr(row.get("id") or str(row.get("problem", ""))[:60])
    return repr(str(row)[:60])


# A run whose every reward is None (none_frac 1) learns nothing; this many such steps in a row stop it.
ALL_NONE_STEPS = 3
NONE_CAUSES = {  # by the verdict's name (rewards.py)
    "code": "the sandbox failed on every program (see the warnings above: bubblewrap, the interpreter paths, "
            "E2B_API_KEY) or the rows' tests cannot be run",
    "math": "math-verify could not check any answer (is math-verify installed? are the rows' answers parseable?)",
    "exact": "the rows have no 'answer' to compare with",
    "number": "the rows' answers are not numbers (the number reward needs a number; \"math\" checks expressions)",
}
NONE_CAUSES["by_row"] = NONE_CAUSES["math"] + "; or, for code rows, " + NONE_CAUSES["code"]


def rewards_alive(history: list[float], verdict: str) -> None:
    """Stop a run whose last ALL_NONE_STEPS steps had no reward at all (every one None)."""
    if len(history) >= ALL_NONE_STEPS and all(x == 1.0 for x in history[-ALL_NONE_STEPS:]):
        cause = NONE_CAUSES.get(verdict, "the task's reward returned None for every completion")
        raise ConfigError(f"every reward was None for {ALL_NONE_STEPS} steps in a row (verifier {verdict}): nothing is "
                          f"learned, so the run stops. Likely cause: {cause}")


NO_SIGNAL_STEPS = 3  # this process's first steps with every group's rewards equal: a warning, once


def no_signal(zero_std: list[float], metrics: dict, cfg) -> None:
    """Warn once when this process's first NO_SIGNAL_STEPS steps had no signal at all: every group's rewards equal,
    so every advantage is 0 and nothing is learned (GRPO learns only from groups whose rewards differ)."""
    if len(zero_std) != NO_SIGNAL_STEPS or not all(x == 1.0 for x in zero_std):
        return
    mean, trunc = metrics.get("reward_mean", math.nan), metrics.get("truncated_frac", 0.0)
    causes = []
    if trunc and trunc > 0.5:
        causes.append(f"max_new_tokens = {cfg.max_new_tokens} is too small for the answer format: {trunc:.0%} of "
                      "the completions were cut there, before their answer")
    if mean == 0:
        causes.append("the task is too hard for the model, or its answers are not where the verdict reads them (the "
                      "prompt template, the answer format: docs/judge.md); a warm start or an easier task gives it a "
                      "first right answer")
    elif mean == 1:
        causes.append("the task is too easy for the model: every completion is right")
    else:
        causes.append(f"group_size = {cfg.group_size} is too small for the rewards to differ, or the sampling too "
                      f"cold (temperature = {cfg.temperature:g})")
    dist.print0(f"warning: no signal in the first {NO_SIGNAL_STEPS} steps: every group's completions got equal rewards "
                f"(reward_mean {mean:.3g}), so every advantage is 0 and nothing is learned. Likely cause: "
                + "; or ".join(causes), file=sys.stderr)


NONFINITE_PATIENCE = 3  # steps in a row with a skipped update (grpo.apply_update) stop the run


class NonFiniteError(RuntimeError):
    """NONFINITE_PATIENCE steps in a row had a loss or gradient norm that is not finite: the run stops."""


def check_finite(skipped: list[int]) -> None:
    """Stop a run whose last NONFINITE_PATIENCE steps each skipped an update (`skipped`: updates_skipped per step):
    the weights have not moved since, and nothing says they will."""
    if len(skipped) >= NONFINITE_PATIENCE and all(skipped[-NONFINITE_PATIENCE:]):
        raise NonFiniteError(
            f"the loss or the gradient norm was not finite (NaN or inf) in {NONFINITE_PATIENCE} steps in a row: each "
            "of those updates was skipped (the weights are those before them, and no checkpoint holds a non-finite "
            "weight). The run stops: nothing is learned. Likely causes: "
            "weights in model= that hold NaN or inf, lr too high, float16 overflowing (dtype=bfloat16), rewards or "
            "reward_weights so large that the advantages overflow")


# ---- the gap gate and the calibration gate ----


# max_logprob_gap = -1: the limit by precision, far from both healthy runs and a stale sampler (docs/precision.md,
# 'The gap gate'): fp32 healthy <= 6e-6, stale 1.9e-2; bf16 GPU samplers are reported at ~1e-2
AUTO_LIMIT = {torch.float32: 1e-3, torch.bfloat16: 0.1, torch.float16: 0.1}


def gap_limit(max_logprob_gap: float, dtype: torch.dtype, exact: bool) -> float | None:
    """The gate's limit: None = off (0), the value itself (> 0), or by precision (-1): 0 with exact_logprobs
    (any gap at all), else AUTO_LIMIT."""
    if max_logprob_gap == 0:
        return None
    if max_logprob_gap > 0:
        return max_logprob_gap
    return 0.0 if exact else AUTO_LIMIT.get(dtype, 0.1)


def sampler_dtype(sampler) -> torch.dtype | None:
    """The dtype the sampler's weights are in (None when it does not say)."""
    inner = unwrap(sampler)
    model = getattr(inner, "model", None)
    if isinstance(model, nn.Module):
        return next(model.parameters()).dtype
    return getattr(inner, "dtype", None)


class GapGate:
    """Watches `logprob_gap` step by step: warns above the limit, stops after `patience` such steps in a row.

    A step with no trained token (gap NaN) measured nothing: it neither counts nor breaks a streak."""

    def __init__(self, max_logprob_gap: float, patience: int, dtype: torch.dtype, sampler: str = "torch",
                 sampler_dtype: torch.dtype | None = None, exact: bool = False, checked: bool = False):
        self.limit = gap_limit(max_logprob_gap, dtype, exact)
        self.patience, self.dtype, self.sampler, self.exact = patience, dtype, sampler, exact
        self.checked = checked  # SamplerCheck is on: the weights and settings matched at every step, so not stale
        self.sampler_dtype = sampler_dtype or dtype
        self.history: list[tuple[int, float]] = []  # (1-based step, gap) of every measured step of this process
        self.streak = 0

    def __call__(self, step: int, gap: float | None) -> None:
        """After step `step` (0-based) with its `logprob_gap`: warn, or raise LogprobGapError."""
        if self.limit is None or gap is None or math.isnan(gap):
            return
        self.history.append((step + 1, gap))
        if gap <= self.limit:
            self.streak = 0
            return
        self.streak += 1
        dist.print0(f"warning: step {step + 1}: logprob_gap {gap:.3g} > max_logprob_gap {self.limit:.3g} "
                    f"({self.streak} of gap_patience {self.patience} in a row; sampler and trainer disagree)",
                    file=sys.stderr)
        if self.streak >= self.patience:
            raise LogprobGapError(self.message())

    def cause(self) -> str:
        """What the history points to: "stale weights" when the sampler check is off and the first measured step
        was within the limit (the sampler and the trainer started from the same weights and agreed) and the gap
        rose since; else "dtype" when the two sides differ in precision or run a low one, "kernels" otherwise."""
        if not self.checked and self.history[0][1] <= self.limit:
            return "stale weights"
        low = self.dtype != torch.float32 and not self.exact
        return "dtype" if self.sampler_dtype != self.dtype or low else "kernels"

    def message(self) -> str:
        (s0, g0), (s1, g1) = self.history[0], self.history[-1]
        trainer, sampler = (str(d).removeprefix("torch.") for d in (self.dtype, self.sampler_dtype))
        trend = (f"logprob_gap (mean |trainer - sampler| log-prob per trained token) was {g0:.3g} at step {s0}, the "
                 f"first this process measured, and {g1:.3g} at step {s1}: above max_logprob_gap = {self.limit:.3g} "
                 f"for {self.streak} steps in a row (gap_patience = {self.patience}), so the run stops. ")
        if sampler != trainer:
            precision = f"the {self.sampler} sampler runs {sampler} weights, the trainer computes in {trainer}"
        else:
            precision = (f"both sides run {trainer}, each with its own kernels" + (
                ", and low-precision logits and sums round differently (lm_head_fp32 = true, dtype = float16 or "
                "float32 shrink it; or set max_logprob_gap to what your healthy run measures: docs/precision.md)"
                if trainer != "float32" else ": precision is unlikely to be the cause"))
        causes = {
            "stale weights": "STALE WEIGHTS: the sampler is not getting the trainer's weights (sync_weights did not "
                             "happen or did not take effect), so the rollouts come from an older policy" + (
                                 f"; the gap was within the limit at step {s0}, when both sides had loaded the same "
                                 "weights, and grew" if g0 <= self.limit else ""),
            "dtype": f"DTYPE: {precision}",
            "kernels": "CHUNKING / KERNELS: the two sides compute the same weights differently (vLLM's kernels, LoRA's "
                       "merged weights, top_p < 1 with vLLM, an attention implementation or logprob_chunk that "
                       "changes the sums)" + ("; with exact_logprobs the recompute and the trainer's forward ran "
                                              "different kernels on this platform" if self.exact else
                                              "; exact_logprobs = true (sampler = torch) removes it"),
        }
        if self.checked:  # ruled out exactly, every step: not a cause to send anyone after
            del causes["stale weights"]
            trend += ("The sampler's weights and sampling settings equalled the trainer's at every step (the sampler "
                      "check), so this is how the two sides compute, not what they hold. ")
        first = self.cause()
        rest = "; ".join(causes[c] for c in causes if c != first)
        return f"{trend}Likely cause: {causes[first]}. Otherwise: {rest}."


# ---- the sampler's calibration check: are the sampled tokens draws from the trainer's distribution? ----


class SamplerDistributionError(LogprobGapError):
    """The sampled tokens are not draws from the distribution the sampler reports (train.py exits 2 with it)."""


class SampleGate:
    """Watches `sample_z` step by step: are the sampled tokens draws from the distribution the sampler reports (the
    sampler check and the gap gate read what it holds and reports, neither the draws)? sample_z = Σ_t (log p(x_t) -
    E_q[log p]) / sqrt(Σ_t Var_q[log p]) is about N(0, 1) on a healthy step; a two-sided CUSUM, S = max(0, S + z -
    SLACK) per side, stops the run at S > max_sample_z. The sums come with the PyTorch sampler's draws
    (Completion.calibration), else a forward (`Checks.calibrate`). Why each choice: docs/precision.md."""

    # per step, in standard deviations: clean runs' heavier flat tail climbed to 4.2 of 6 with a slack of 1;
    # the hidden faults give 3 to 4.6 per step (docs/precision.md, 'False alarms')
    SLACK = 1.5

    def __init__(self, limit: float, temperature: float = 1.0, top_p: float = 1.0):
        self.limit, self.temperature, self.top_p = limit, temperature, top_p
        self.up = self.down = 0.0
        self.history: list[tuple[int, float]] = []  # (1-based step, sample_z)

    # Σ Var[log p] (nats²) under which a step is nearly greedy, too few uncertain tokens for z to be near normal:
    # not read, said once (docs/precision.md)
    MIN_VARIANCE = 1.0

    def __call__(self, step: int, z: float | None, variance: float = math.inf) -> None:
        """After step `step` (0-based) with its `sample_z` (NaN: no trained token) and the Σ Var[log p] it divides by:
        raise SamplerDistributionError."""
        if not self.limit or z is None or math.isnan(z):
            return
        if variance < self.MIN_VARIANCE:
            if not getattr(self, "_said", False):
                self._said = True
                dist.print0(f"note: step {step + 1}: the draws are nearly greedy (their Var[log p] sums to {variance:.2g} "
                            f"< {self.MIN_VARIANCE:g}): the calibration check (max_sample_z) cannot test such steps and "
                            "skips them; the sampler check and the gap gate still run", file=sys.stderr)
            return
        self.history.append((step + 1, z))
        self.up, self.down = max(0.0, self.up + z - self.SLACK), max(0.0, self.down - z - self.SLACK)
        if max(self.up, self.down) > self.limit:
            raise SamplerDistributionError(self.message())

    def message(self) -> str:
        (s1, _), sharp = self.history[-1], self.up > self.down
        run = [f"{z:+.1f}" for _, z in self.history[-8:]]
        return (f"step {s1}: SAMPLER DISTRIBUTION: the sampled tokens are not draws from the trainer's distribution at "
                f"temperature = {self.temperature:g}, top_p = {self.top_p:g}: their log-probs sat {'above' if sharp else 'below'} "
                f"what such draws give by sample_z = {', '.join(run)} standard deviations on the last steps, a CUSUM of "
                f"{max(self.up, self.down):.1f} > max_sample_z = {self.limit:g} (nanogrpo/checks), so the run stops. "
                + ("The draws are sharper than reported: the sampler samples at a lower temperature, or truncates "
                   "(top-p, top-k) where its log-probs do not" if sharp else
                   "The draws are flatter than reported: the sampler samples at a higher temperature, or truncates "
                   "less than it says")
                + " (its weights and reported settings matched: the sampler check). Make the sampling engine draw "
                "with the temperature and top_p its log-probs use; max_sample_z = 0 turns the check off.")
