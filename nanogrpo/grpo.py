"""GRPO, all of it: group-relative advantages, the clipped surrogate (or GSPO / CISPO), the KL, the normaliser, the update.

For each prompt q the sampler draws a group of G completions o_1..o_G with rewards r_1..r_G. We maximise

    J(θ) = 1/Z · Σ_i Σ_t w_i · [ min(ρ_it·A_i, clip(ρ_it, 1-ε_low, 1+ε_high)·A_i) · c_it  -  β·KL_it ]

    ρ_it  = exp(logp_θ(o_it) - logp_old(o_it))          ratio to the policy that sampled (old log-probs)
    A_i   = (r_i - mean(r_group)) / (std + adv_eps)     group-relative advantage, one per completion
    KL_it = exp(ref - logp) - (ref - logp) - 1          k3 estimator of KL(π_θ || π_ref)
    c_it  = min(exp(logp_old - logp_sampler), tis_cap)  truncated importance sampling (only if tis_cap > 0)
    Z, w  = the normaliser (`normaliser`, `seq_weight`: the only place it is defined)

Every choice is a config knob (default in brackets); docs/grpo.md derives each one and cites its paper.
- `scale` [group]: A divided by the group's reward std; `batch`: by the step's; `none`: not (Dr.GRPO);
  `rloo`: not scaled, the baseline is the mean of the group's other rewards (RLOO: A = n/(n-1)·(r - mean)).
- Zero-variance groups (every valid reward equal) get A = 0 exactly, logged as `zero_std_frac`.
- A reward of None (infrastructure failure) is left out of its group's baseline, the loss and Z; never 0.
- `clip_low` [0.2], `clip_high` [0.28]: separate clip ranges (clip-higher, DAPO).
- `mu` [1]: optimisation passes over one batch; with mu = 1 the old log-probs are the current ones, detached.
- `beta` [0]: KL to a frozen reference (with beta = 0 none is loaded); `kl_estimator` [k3] | k3_ratio | k2;
  `kl_clamp` [10]: the per-token estimate capped at this (0 = off).
- `ratio_level` [token] | sequence (GSPO: log s_i capped at 10, as verl); `policy_loss` [clip] | cispo (capped,
  detached weight in [1 - `cispo_low`, 1 + `cispo_high`]: [1] (no floor) and [4]); `dual_clip` [0 = off] caps a
  clip loss with A < 0 at -dual_clip·A (dual-clip PPO; verl uses 3; refused with cispo, which it would not touch).
- `loss_norm` [token]: Z = the step's valid completion tokens over micro-batches and ranks; `sequence`
  (w = 1/len, Z = completions: the original GRPO); `constant` (w = 1/max_new_tokens: Dr.GRPO).
- Tool output inside a completion (nanogrpo/tools.py) is masked: no loss, not in Z nor in a length.
- `log_ratio_clamp` [20]: log ρ and log π_ref/π_θ clamped before exp; a token past it gets no gradient in any
  mode (GSPO: its whole completion; k3_ratio: from either ratio).
- `mask_truncated` [off]: completions that hit max_new_tokens get no loss (DAPO's overlong filtering).
- `tis_cap` [0 = off]: c_it, for a sampler whose probabilities differ from the trainer's (vLLM, bf16), and
  for rollouts sampled k updates ago (`async_steps`, nanogrpo/pipeline.py): logp_old is then the current
  weights' (the clip's centre) and logp_sampler the older ones' (decoupled PPO; docs/grpo.md says why).
- `exact_logprobs` [off] (nanogrpo/checks/sampler.py): logp_sampler recomputed from the sampler's own weights
  through this forward (`step`'s `behaviour`): bit-equal while the weights are, so c_it = 1 and the gap 0.
- `skip_zero_advantage` [on]: completions with A = 0 are not run (they add exactly 0 when beta = 0).
- A pass whose loss or gradient norm is not finite (NaN, inf: on any rank) makes no optimizer step: no weight,
  Adam moment or schedule moves (`apply_update`); `updates_skipped` counts them, and NONFINITE_PATIENCE steps in
  a row with one stop the run (nanogrpo/checks): a non-finite number never reaches the weights.

FAQ: why is the loss about 0 at step 0 (and near 0 throughout)?
With mu = 1, ρ = 1 in value, so the loss is -Σ w·A / Z. The advantages of each group have mean zero,
so this sum is zero up to the length weighting (token-mean weighs long completions more). The
gradient is not zero: d ρ / dθ = ∇ logp. The loss value tells you nothing about learning; watch the
reward, the KL and the clip fractions instead.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import torch

from nanogrpo import dist, packing


@dataclass
class Rollout:
    """One sampled completion and what the update needs to know about it."""

    prompt_ids: list[int]
    completion_ids: list[int]
    sampler_logprobs: list[float]  # the sampler's log-prob of each completion token
    reward: float | None  # None = could not be computed: excluded from baseline, loss and normaliser
    truncated: bool  # hit max_new_tokens
    advantage: float = 0.0
    # per completion token: 1 = sampled by the model, 0 = inserted (tool output, nanogrpo/tools.py): no
    # loss, not counted by the normaliser, no log-prob needed. None: every token was sampled.
    completion_mask: list[int] | None = None

    def __post_init__(self):
        # A list of the wrong length would be broadcast or cut silently by packing: one log-prob copied onto
        # every token, a short mask dropping the last tokens from the loss.
        n = len(self.completion_ids)
        if len(self.sampler_logprobs) != n:
            raise ValueError(f"Rollout: {len(self.sampler_logprobs)} sampler log-probs for {n} completion tokens")
        if self.completion_mask is not None and len(self.completion_mask) != n:
            raise ValueError(f"Rollout: a completion_mask of {len(self.completion_mask)} for {n} completion tokens")

    def sampled(self) -> list[int]:
        """Indices of the completion tokens the model sampled (the ones that carry loss)."""
        m = self.completion_mask
        return list(range(len(self.completion_ids))) if m is None else [j for j, x in enumerate(m) if x]


# ----------------------------------------------------------------------------------------------
# Advantages


SCALES = ("group", "batch", "none", "rloo")  # config key `scale`'s choices (tests/test_grpo.py holds them equal)


def advantages(rewards: list[float | None] | torch.Tensor, group_size: int, scale: str = "group",
               eps: float = 1e-4) -> torch.Tensor:
    """Group-relative advantages, (N,) for N = groups * group_size rewards in group-major order.

    None (or NaN) rewards are excluded from their group's mean and std and get advantage 0."""
    if isinstance(rewards, torch.Tensor):
        r = rewards.detach().double().reshape(-1)
    else:
        r = torch.tensor([math.nan if x is None else float(x) for x in rewards], dtype=torch.float64)
    if r.numel() % group_size:
        raise ValueError(f"{r.numel()} rewards do not split into groups of {group_size}")
    if scale not in SCALES:
        raise ValueError(f"unknown advantage scale {scale!r}")
    r = r.view(-1, group_size)  # (groups, G)
    valid = ~torch.isnan(r)
    n = valid.sum(1, keepdim=True)  # (groups, 1)
    filled = torch.where(valid, r, 0.0)
    mean = filled.sum(1, keepdim=True) / n.clamp(min=1)
    adv = torch.where(valid, r - mean, 0.0)
    if scale == "group":
        std = ((adv**2).sum(1, keepdim=True) / (n - 1).clamp(min=1)).sqrt()  # unbiased; 0 for one member
        adv = adv / (std + eps)
    elif scale == "rloo":  # r_i - mean of the others = n/(n-1) (r_i - mean): RLOO's leave-one-out baseline
        adv = adv * n / (n - 1).clamp(min=1)
    elif scale == "batch":
        flat = r[valid]
        std = flat.std() if flat.numel() > 1 else torch.tensor(0.0, dtype=torch.float64)
        adv = adv / (std + eps)
    # Decided on the values, not on std > 0: the float mean of equal fractional rewards (0.1, 0.1, 0.1)
    # is off by an ulp, so r - mean and std are ~1e-17 and would make a tiny non-zero advantage.
    adv = torch.where(zero_variance(r).unsqueeze(1), 0.0, adv)
    return adv.view(-1).float()


def zero_variance(r: torch.Tensor) -> torch.Tensor:
    """(groups,) bool for (groups, G) rewards with NaN for None: the group's valid rewards are all
    exactly equal (also true for 0 or 1 valid rewards). The one definition of a zero-variance group."""
    valid = ~torch.isnan(r)
    hi = torch.where(valid, r, -math.inf).amax(1)
    lo = torch.where(valid, r, math.inf).amin(1)
    return (hi == lo) | (valid.sum(1) <= 1)


def group_stats(rewards: list[float | None], group_size: int) -> dict[str, float]:
    """Reward statistics of a step: mean/std over valid rewards, None fraction, zero-variance groups."""
    valid = [x for x in rewards if x is not None]
    groups = len(rewards) // group_size
    r = torch.tensor([math.nan if x is None else float(x) for x in rewards], dtype=torch.float64)
    zero_std = int(zero_variance(r.view(groups, group_size)).sum()) if groups else 0
    mean = sum(valid) / len(valid) if valid else math.nan
    var = sum((x - mean) ** 2 for x in valid) / max(len(valid) - 1, 1) if valid else math.nan
    return {
        "reward_mean": mean,
        "reward_std": math.sqrt(var) if valid else math.nan,
        "none_frac": 1 - len(valid) / max(len(rewards), 1),
        "zero_std_frac": zero_std / max(groups, 1),
    }


# ----------------------------------------------------------------------------------------------
# Loss


def counts(rollout: Rollout, mask_truncated: bool) -> bool:
    """Does this completion contribute to the loss?"""
    return rollout.reward is not None and len(rollout.sampled()) > 0 and not (mask_truncated and rollout.truncated)


def seq_weight(completion_len: int, loss_norm: str, max_new_tokens: int) -> float:
    """Per-token weight w of one completion (the numerator half of the normaliser)."""
    if loss_norm == "token":
        return 1.0
    if loss_norm == "sequence":
        return 1.0 / max(completion_len, 1)
    if loss_norm == "constant":
        return 1.0 / max_new_tokens
    raise ValueError(f"unknown loss_norm {loss_norm!r}")


def normaliser(rollouts: list[Rollout], loss_norm: str, mask_truncated: bool) -> float:
    """Z, the one denominator of the step: over this rank's rollouts, all-reduced over ranks.

    token: valid completion tokens of the step; sequence / constant: counted completions of the step."""
    counted = [r for r in rollouts if counts(r, mask_truncated)]  # counts() implies >= 1 completion token
    local = sum(len(r.sampled()) for r in counted) if loss_norm == "token" else len(counted)
    total = dist.all_reduce(torch.tensor([float(local)], dtype=torch.float64))
    return max(total.item(), 1.0)


def policy_loss(logp, old_logp, ref_logp, advantages, mask, cfg, sampler_logp=None, seq_w=None, z=None):
    """The GRPO loss of one micro-batch: Σ_it w_i·mask·(pg + β·kl) / z, and token-summed stats for the metrics.

    logp, old_logp, ref_logp, sampler_logp, mask: (B, T) aligned per completion token (ref_logp may be None when
    beta = 0, sampler_logp None when tis_cap = 0); advantages: (B,); seq_w: (B,) per-token weights (default 1);
    z: the step's normaliser (default: this micro-batch's valid token count). The default path is the clipped
    token ratio; each other knob is one small function below, called only when it is on."""
    mask = mask.to(logp.dtype)
    seq_w = torch.ones_like(advantages) if seq_w is None else seq_w
    z = mask.sum().clamp(min=1) if z is None else z
    adv = advantages.unsqueeze(1)  # (B, 1)
    raw = logp - old_logp  # (B, T) log ρ
    # a token whose log ratio ran past the clamp gets no gradient from the policy term, whatever the loss: the
    # clamp's own derivative does that for the token ratio, `inside` for GSPO and CISPO, which bypass it
    inside = raw.detach().abs() <= cfg.log_ratio_clamp
    log_ratio = raw.clamp(-cfg.log_ratio_clamp, cfg.log_ratio_clamp)
    if cfg.ratio_level == "sequence":
        ratio, inside = gspo_ratio(log_ratio, logp, mask, inside)
    else:
        ratio = torch.exp(log_ratio)  # (B, T) ρ
    pg, clip_low, clip_high = (cispo(ratio, adv, logp, cfg) if cfg.policy_loss == "cispo" else
                               clipped_surrogate(ratio, adv, cfg))  # (B, T) each
    is_weight = torch.exp(old_logp - sampler_logp).detach() if sampler_logp is not None else torch.ones_like(logp)
    if cfg.tis_cap > 0 and sampler_logp is not None:
        pg = pg * is_weight.clamp(max=cfg.tis_cap)  # c_it, truncated importance sampling
    per_token = torch.where(inside, pg, pg.detach())
    kl = kl_penalty(logp, ref_logp, log_ratio, inside, cfg) if cfg.beta > 0 else None
    if kl is not None:
        per_token = per_token + cfg.beta * kl
    loss = (per_token * mask * seq_w.unsqueeze(1)).sum() / z
    return loss, loss_stats(mask, clip_low, clip_high, kl, is_weight, cfg.tis_cap)


def clipped_surrogate(ratio, adv, cfg):
    """PPO's -min(ρ·A, clip(ρ, 1 - clip_low, 1 + clip_high)·A) per token, and the tokens each clip bound holds."""
    clipped = ratio.clamp(1 - cfg.clip_low, 1 + cfg.clip_high)
    pg = -torch.minimum(ratio * adv, clipped * adv)  # (B, T)
    if cfg.dual_clip > 0:
        pg = dual_clip(pg, adv, cfg.dual_clip)
    return pg, (ratio < 1 - cfg.clip_low) & (adv < 0), (ratio > 1 + cfg.clip_high) & (adv > 0)


def dual_clip(pg, adv, cap: float):
    """Dual-clip PPO: with A < 0 a token's loss is capped at -cap·A (no gradient there)."""
    return torch.where(adv < 0, torch.minimum(pg, -cap * adv), pg)


SEQ_LOG_RATIO_CAP = 10.0  # GSPO's log s_i is capped here, as verl's compute_policy_loss_gspo caps it


def gspo_ratio(log_ratio, logp, mask, inside):
    """GSPO (`ratio_level = "sequence"`): s_i = exp(mean_t log ρ_it) over a completion's counted tokens, in the
    stop-gradient form s_i·π_θ/sg(π_θ): the value is s_i at every token, each token's gradient s_i·∇logp. s_i is
    built from every token, so one token past the clamp stops its whole completion's gradient (the new `inside`).
    Every token can sit inside the clamp with their mean still far out (12, 12: s_i = e^12, a gradient of 8e4 per
    token), so log s_i is capped at SEQ_LOG_RATIO_CAP: past it the ratio is e^10, and the cap's own derivative (0)
    leaves the clip loss no gradient there."""
    seq = (log_ratio * mask).sum(1, keepdim=True) / mask.sum(1, keepdim=True).clamp(min=1)  # (B, 1)
    ratio = torch.exp((seq.detach() + logp - logp.detach()).clamp(max=SEQ_LOG_RATIO_CAP))  # (B, T)
    return ratio, (inside | (mask == 0)).all(1, keepdim=True).expand_as(inside)


def cispo(ratio, adv, logp, cfg):
    """CISPO (`policy_loss = "cispo"`): a capped, detached weight, so every token keeps its gradient A·weight·∇logp."""
    weight = ratio.clamp(min=1 - cfg.cispo_low, max=1 + cfg.cispo_high).detach()
    return -weight * adv * logp, ratio < 1 - cfg.cispo_low, ratio > 1 + cfg.cispo_high


def kl_penalty(logp, ref_logp, log_ratio, inside, cfg):
    """The per-token KL to the reference (`beta` > 0, `kl_estimator`, `kl_clamp`); past the clamp: value only."""
    raw_r = ref_logp - logp  # log π_ref/π_θ
    log_r, kept = raw_r.clamp(-cfg.log_ratio_clamp, cfg.log_ratio_clamp), raw_r.detach().abs() <= cfg.log_ratio_clamp
    if cfg.kl_estimator == "k2":
        kl = 0.5 * log_r**2
    else:
        kl = torch.exp(log_r) - log_r - 1  # (B, T) k3, >= 0
        if cfg.kl_estimator == "k3_ratio":
            # π_θ/π_old, not detached (see the module docstring); its gradient carries the k3 value, up to
            # e^clamp, so the ratio must be inside the clamp too
            kl = torch.exp(log_ratio) * kl
            kept = kept & inside
    kl = torch.where(kept, kl, kl.detach())
    if cfg.kl_clamp > 0:  # the estimate's value capped (verl, NeMo-RL: 10); no gradient past the cap
        kl = kl.clamp(max=cfg.kl_clamp)
    return kl


@torch.no_grad()
def loss_stats(mask, clip_low, clip_high, kl, is_weight, tis_cap: float) -> dict:
    """Token sums of one micro-batch for the step's metrics (grpo.step_metrics divides them by the tokens)."""
    none = torch.zeros((), dtype=mask.dtype)
    return {
        "tokens": mask.sum(),
        "clip_low": clip_low.to(mask.dtype).mul(mask).sum(),
        "clip_high": clip_high.to(mask.dtype).mul(mask).sum(),
        "kl": (kl * mask).sum() if kl is not None else none,
        "is_weight": (is_weight * mask).sum(),  # c_it before the cap: 1 on-policy, off 1 with staleness
        "is_capped": ((is_weight > tis_cap) * mask).sum() if tis_cap > 0 else none,
    }


# ----------------------------------------------------------------------------------------------
# Micro-batches and the update


def make_batches(rollouts: list[Rollout], micro_batch_size: int, pad_id: int, cfg, micro_batch_tokens: int = 0) -> list[packing.Batch]:
    """The micro-batches of an update (laid out by nanogrpo/packing.py: padded, or packed when
    micro_batch_tokens > 0), with which completions carry loss and their weights w decided here."""
    counted = [counts(r, cfg.mask_truncated) for r in rollouts]
    weights = [seq_weight(len(r.sampled()), cfg.loss_norm, cfg.max_new_tokens) for r in rollouts]
    return packing.make_batches(rollouts, counted, weights, micro_batch_size, pad_id, micro_batch_tokens)


def batch_logprobs(model, b: packing.Batch, temperature: float, device, entropy: bool = False, sampling=None):
    """(logp, entropy) of micro-batch `b` under `model`, in the loss layout ((B, T-1) padded, (N, L) packed),
    0 off the completions. sampling = (top_p, top_k): entropy is (..., 3), with the sampling distribution's
    moments of log p (logprobs.chunked_logprobs)."""
    to = lambda t: None if t is None else t.to(device, non_blocking=True)  # noqa: E731
    lp, ent = model(to(b.input_ids), to(b.attention_mask), temperature=temperature, with_entropy=entropy,
                    position_ids=to(b.position_ids), positions=to(b.positions), sampling=sampling)
    if b.positions is None:
        return lp, ent
    dest, n = to(b.dest), b.loss_mask.numel()
    place = lambda x: torch.zeros((n, *x.shape[2:]), device=device).index_copy_(0, dest, x[0]).view(  # noqa: E731
        *b.loss_mask.shape, *x.shape[2:])
    return place(lp), place(ent)


def micro_batches(rollouts: list[Rollout], cfg, pad_id: int) -> list[packing.Batch]:
    """`make_batches` of this rank's `rollouts`, as many as on the rank with the most (FSDP's all-gathers are
    collectives: every rank runs the same number of forwards; the extra ones hold a filler that adds nothing)."""
    filler = Rollout([pad_id], [pad_id], [0.0], None, False)  # reward None: nothing in the loss, gradient or z
    budget = cfg.micro_batch_tokens
    return dist.even_out(make_batches(rollouts, cfg.micro_batch_size, pad_id, cfg, budget) if rollouts else [],
                         lambda: make_batches([filler], 1, pad_id, cfg, budget)[0])


def step(policy, ref_policy, optimizer, scheduler, rollouts: list[Rollout], cfg, pad_id: int,
         behaviour=None) -> dict[str, float]:
    """One GRPO update on this rank's rollouts: mu passes, each a full pass over the micro-batches
    followed by one optimizer step. Ranks may hold different numbers of rollouts and tokens.

    `behaviour` (exact_logprobs, nanogrpo/checks/sampler.py): a Policy over the sampler's own weights. The
    sampler's log-probs are then recomputed by it, in these same micro-batches with this same forward,
    instead of taken from the sampler's decode: bit-equal to the trainer's while the weights are."""
    device = next(policy.parameters()).device
    z = normaliser(rollouts, cfg.loss_norm, cfg.mask_truncated)
    # A completion with advantage 0 adds exactly 0 to the gradient when there is no KL term (both arms
    # of the clipped surrogate are 0 * ratio), so only the others are run forward and backward. The
    # normaliser z above still counts every completion: the update is the same, at the cost of the
    # completions that carry signal (zero-variance groups are most of a step early in a hard task).
    skip = cfg.beta == 0 and cfg.skip_zero_advantage
    batches = micro_batches([r for r in rollouts if not skip or r.advantage != 0], cfg, pad_id)
    to = lambda t: None if t is None else t.to(device, non_blocking=True)  # noqa: E731
    logprobs = lambda model, b, entropy=False: batch_logprobs(model, b, cfg.temperature, device, entropy)  # noqa: E731
    sums = {k: torch.zeros((), dtype=torch.float64) for k in ("tokens", "clip_low", "clip_high", "kl", "is_weight",
                                                               "is_capped", "entropy", "gap", "loss")}
    with torch.no_grad():  # fixed targets: reference (beta > 0) and old (mu > 1) log-probs, taken once
        ref = [logprobs(ref_policy, b)[0] for b in batches] if cfg.beta > 0 else [None] * len(batches)
        old = [logprobs(policy, b)[0] for b in batches] if cfg.mu > 1 else [None] * len(batches)
        t0 = time.perf_counter()
        behaved = [logprobs(behaviour, b)[0] for b in batches] if behaviour is not None else [None] * len(batches)
        t_recompute = time.perf_counter() - t0
    grad_norms, skipped = [], 0
    for p in range(cfg.mu):
        nonfinite = torch.zeros((), device=device)  # micro-batches of this pass whose loss is not finite (this rank)
        for i, b in dist.syncing_grads(policy, batches, cfg.grad_accumulation):
            logp, ent = logprobs(policy, b, entropy=p == 0)
            old_logp = old[i] if old[i] is not None else logp.detach()
            mask = to(b.loss_mask)
            sampler_logp = to(b.sampler_logp) if behaved[i] is None else behaved[i]
            loss, st = policy_loss(logp, old_logp, ref[i], to(b.advantages), mask, cfg, sampler_logp, to(b.seq_weight), z)
            (loss * dist.world_size()).backward()  # FSDP averages gradients over ranks; z already counts every rank's tokens
            nonfinite += ~torch.isfinite(loss.detach())
            if p == 0:  # metrics describe the rollouts under the weights that sampled them
                record(sums, st, loss, logp, ent, sampler_logp, mask)
        norm, applied = apply_update(policy, optimizer, scheduler, cfg.grad_clip, nonfinite.item() == 0)
        grad_norms.append(norm)
        skipped += not applied

    metrics = {**step_metrics(sums, grad_norms), "updates_skipped": skipped}
    return {**metrics, "time_recompute": t_recompute} if behaviour is not None else metrics  # exact_logprobs' cost


def apply_update(policy, optimizer, scheduler, grad_clip: float, loss_finite: bool = True) -> tuple[float, bool]:
    """The optimizer step after a pass's backward -> (gradient norm, applied). A loss (`loss_finite`, this rank's)
    or a gradient norm that is not finite, on any rank, skips it: the gradients are dropped and no weight, Adam
    moment or schedule moves (AdamW would carry a NaN into every weight and into its moments for good)."""
    norm = dist.finish_grads(policy, grad_clip)  # over every rank: the same on each
    bad = dist.all_reduce(torch.tensor([0.0 if loss_finite else 1.0], dtype=torch.float64), "max").item()
    applied = math.isfinite(norm) and not bad
    if applied:
        optimizer.step()
        scheduler.step()
    optimizer.zero_grad(set_to_none=True)
    return norm, applied


def record(sums: dict, stats: dict, loss, logp, entropy, sampler_logp, mask) -> None:
    """Add a first-pass micro-batch to the step's token sums (`policy_loss`'s stats, the loss, the entropy and the
    |trainer - sampler| log-prob gap of its counted tokens); step_metrics divides them."""
    for k, v in stats.items():
        sums[k] += v.double().cpu()
    sums["loss"] += loss.detach().double().cpu()
    sums["entropy"] += (entropy * mask).sum().double().cpu()
    sums["gap"] += ((logp.detach() - sampler_logp).abs() * mask).sum().double().cpu()


def step_metrics(sums: dict[str, torch.Tensor], grad_norms: list[float]) -> dict[str, float]:
    """The update's metrics from this rank's token sums (summed over ranks here): per-token means over the
    trained completions (advantage != 0, or all of them when beta > 0)."""
    keys = list(sums)
    t = dict(zip(keys, dist.all_reduce(torch.stack([sums[k] for k in keys])).tolist()))
    tokens = t["tokens"] or math.nan  # no trained token anywhere: the per-token metrics are undefined
    return {
        "loss": t["loss"],  # already a global mean: summed partial means
        "entropy": t["entropy"] / tokens,
        "kl": t["kl"] / tokens,
        "clip_low_frac": t["clip_low"] / tokens,
        "clip_high_frac": t["clip_high"] / tokens,
        "logprob_gap": t["gap"] / tokens,  # mean |trainer - sampler| log-prob per completion token
        "is_weight_mean": t["is_weight"] / tokens,  # exp(old - sampler) per token, before tis_cap
        "is_capped_frac": t["is_capped"] / tokens,  # tokens whose weight tis_cap cut
        "grad_norm": sum(grad_norms) / len(grad_norms),
        "train_tokens": t["tokens"],
    }


# ----------------------------------------------------------------------------------------------
# The optimizer and the learning-rate schedule (train.py and sft.py): AdamW over the trainable parameters, linear
# warm-up, then constant / cosine / linear decay to min_lr_ratio * lr over the run's optimizer steps


def make_optimizer(parameters, cfg, total_updates: int):
    """(AdamW, LambdaLR) over the parameters that require grad (with LoRA: the adapters only, so no optimizer
    state is kept for frozen weights). fused: one kernel over all parameters (measured ~7x faster than the
    foreach default on CPU, SmolLM2-135M)."""
    optimizer = torch.optim.AdamW([q for q in parameters if q.requires_grad], lr=cfg.lr,
                                  betas=(cfg.adam_beta1, cfg.adam_beta2), weight_decay=cfg.weight_decay, fused=True)
    return optimizer, torch.optim.lr_scheduler.LambdaLR(optimizer, lr_lambda(cfg, total_updates))


def lr_lambda(cfg, total_updates: int):
    """LambdaLR's factor for optimizer step i (cfg: warmup_steps, lr_schedule, min_lr_ratio)."""
    def f(i: int) -> float:
        if i < cfg.warmup_steps:
            return (i + 1) / cfg.warmup_steps
        if cfg.lr_schedule == "constant":
            return 1.0
        progress = min((i - cfg.warmup_steps) / max(total_updates - cfg.warmup_steps, 1), 1.0)
        shape = 0.5 * (1 + math.cos(math.pi * progress)) if cfg.lr_schedule == "cosine" else 1 - progress
        return cfg.min_lr_ratio + (1 - cfg.min_lr_ratio) * shape

    return f
