"""GRPO, all of it: group-relative advantages, the clipped surrogate (or GSPO / CISPO), the KL, the normaliser, the update.

For each prompt q the sampler draws a group of G completions o_1..o_G with rewards r_1..r_G. We maximise

    J(θ) = 1/Z · Σ_i Σ_t w_i · [ min(ρ_it·A_i, clip(ρ_it, 1-ε_low, 1+ε_high)·A_i) · c_it  -  β·KL_it ]

    ρ_it  = exp(logp_θ(o_it) - logp_old(o_it))          ratio to the policy that sampled (old log-probs)
    A_i   = (r_i - mean(r_group)) / (std + adv_eps)     group-relative advantage, one per completion
    KL_it = exp(ref - logp) - (ref - logp) - 1          k3 estimator of KL(π_θ || π_ref) (Schulman,
                                                        "Approximating KL"); see `kl_estimator` for its gradient
    c_it  = min(exp(logp_old - logp_sampler), tis_cap)  truncated importance sampling (only if tis_cap > 0)
    Z, w  = the normaliser (below)

The choices, as config knobs (defaults in brackets):
- `scale` [group]: divide A by the group's reward std (GRPO); `batch`: by the std of all rewards of the
  step (more robust with small groups); `none`: no division (Dr.GRPO: the std term biases towards
  too-easy and too-hard prompts). std is the unbiased sample std; `adv_eps` [1e-4] guards the division.
- Zero-variance groups (every valid reward exactly equal, e.g. all wrong; decided on the values, so
  fractional rewards such as 0.1, 0.1, 0.1 count too) get A = 0 exactly: they add no gradient
  (only KL), and their fraction is logged as `zero_std_frac`: when it nears 1, the task is too hard or
  too easy for the model and the run has stopped learning.
- A reward of None (the reward could not be computed, e.g. the sandbox failed) is left out of its
  group's mean and std and out of the loss and the normaliser. It is never turned into 0, which would
  punish the model for an infrastructure failure.
- `clip_low` [0.2], `clip_high` [0.28]: separate clip ranges (clip-higher, DAPO) so that low-probability
  tokens with positive advantage can grow faster than the symmetric PPO clip allows.
- `mu` [1]: optimisation passes (each one optimizer step) over one batch of rollouts. The old log-probs
  are computed once, before the first pass; with mu = 1 they equal the current log-probs, so we
  reuse them detached (ρ = 1 with the right gradient) and skip a forward.
- `beta` [0]: weight of the KL to a frozen reference model (the initial policy). With beta = 0 no
  reference model is loaded at all (DAPO, Dr.GRPO and most recent recipes drop it). With LoRA the
  reference is the policy with its adapters switched off (no second copy; nanogrpo/lora.py).
- `kl_estimator` [k3]: which per-token estimate of KL(π_θ || π_ref) the loss differentiates. Write
  r = π_ref/π_θ and ρ = π_θ/π_old for the sampled token (tokens are drawn from π_old; ρ = 1 when mu = 1),
  and recall ∇KL(π_θ||π_ref) = E_θ[(logπ_θ - logπ_ref)·∇logπ_θ] (the E_θ[∇logπ_θ] term is 0).
  - `k3` = r - log r - 1. Its value is unbiased for KL(π_θ||π_ref), its gradient is not:
        ∇k3 = (1 - r)·∇logπ_θ,  E_θ[(1 - π_ref/π_θ)∇logπ_θ] = -Σ π_ref ∇logπ_θ = ∇KL(π_ref||π_θ),
    the reverse KL's gradient, with a coefficient that grows like exp(log r) far from the reference.
  - `k3_ratio` = ρ·k3, ρ not detached (the bias-corrected KL of the DeepSeek-V3.2 report):
        ∇(ρ·k3) = ρ·(k3 + 1 - r)·∇logπ_θ = ρ·(-log r)·∇logπ_θ,  E_old[ρ·f] = E_θ[f]  ->  ∇KL(π_θ||π_ref),
    and its value E_old[ρ·k3] is KL(π_θ||π_ref) also off-policy (mu > 1).
  - `k2` = ½(log r)²:  ∇k2 = -log r·∇logπ_θ = (logπ_θ - logπ_ref)·∇logπ_θ -> ∇KL(π_θ||π_ref) on-policy
    (samples from π_θ: mu = 1 or the first pass); its value is biased (a second-order approximation).
- `ratio_level` [token]: `sequence` is GSPO (Zheng et al. 2025, "Group Sequence Policy Optimization"):
  one ratio per completion, s_i = exp(1/|o_i| Σ_t (logp_θ - logp_old)), clipped per sequence (the paper
  uses clip ranges of about 3e-4 / 4e-4, far below the token-level 0.2). We use the paper's GSPO-token
  form s_it = sg(s_i)·π_θ(o_it)/sg(π_θ(o_it)): every token's value is s_i and its gradient s_i·∇logπ_θ,
  so with loss_norm = sequence the loss is the paper's 1/G Σ_i 1/|o_i| Σ_t min(s_i A_i, clip(s_i) A_i).
- `policy_loss` [clip]: `cispo` is CISPO (MiniMax-M1, 2025): J = 1/Z Σ_i Σ_t w_i·sg(min(ρ_it, 1 + cispo_high))
  ·A_i·logπ_θ(o_it). The importance weight is capped and detached instead of the update being clipped, so
  no token leaves the gradient (PPO's clip zeroes the gradient of rare tokens whose ratio ran away).
  No lower bound on the weight, as in the paper; `cispo_high` [4.0] is our default, not the paper's.
  With `ratio_level = sequence` the weight is GSPO's s_i. `clip_*_frac` count tokens at the cap.
  The loss value is -Σ w·A·logπ/Z, not the surrogate's ≈ 0 (see the FAQ).
- `loss_norm` [token]: Z = the number of valid completion tokens in the whole step, across
  micro-batches and ranks (token-mean: DAPO and TRL's default; every token weighs the same).
  `sequence`: each completion's tokens are averaged first (w = 1/len), then Z = number of completions
  (the original GRPO; favours short wrong answers). `constant`: w = 1/max_new_tokens, Z = number of
  completions (Dr.GRPO: no length bias). This is the only place the normaliser is defined.
- Tool-integrated rollouts (nanogrpo/tools.py): tool output inside a completion is context the model
  did not sample. Its tokens are masked: no loss, not counted in Z or in a completion's length for w.
- `log_ratio_clamp` [20]: log ρ (and the KL's log π_ref/π_θ) is clamped to ±20 before exp, as verl
  does. A token whose probability ran away since it was sampled (mu > 1, a stale sampler) would
  otherwise have ρ = e^25 ≈ 7e10, and with A < 0 the clipped surrogate keeps the unclipped arm ρ·A
  (the min picks it), so its gradient is ~1e10, bounded only by grad_clip. A clamped token gets no
  gradient (the clamp's derivative is 0 outside the range). With mu = 1, ρ = 1 and it never acts.
- `mask_truncated` [off]: completions that hit max_new_tokens get no loss (DAPO's overlong filtering).
- `tis_cap` [0 = off]: the sampler (vLLM, bf16 kernels) and the trainer do not compute exactly the
  same probabilities; c_it re-weights each token by the trainer/sampler ratio, truncated at the cap.
- `exact_logprobs` [off] (nanogrpo/parity.py): with the PyTorch sampler, logp_sampler is recomputed from the
  sampler's own weights through this forward, in these micro-batches (`step`'s `behaviour`): bit-equal to
  the trainer's while the weights are, so c_it = 1 and the logged `logprob_gap` is exactly 0. The gap gate
  (`max_logprob_gap`, `gap_patience`, train.py) stops a run whose gap stays too large.

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

    def sampled(self) -> list[int]:
        """Indices of the completion tokens the model sampled (the ones that carry loss)."""
        m = self.completion_mask
        return list(range(len(self.completion_ids))) if m is None else [j for j, x in enumerate(m) if x]


@dataclass
class Batch:
    """One micro-batch, in one of two layouts.

    Padded (`micro_batch_tokens = 0`): one right-padded prompt + completion row per rollout; the loss
    tensors are (B, T-1) and index t is the prediction of token t+1.
    Packed (`micro_batch_tokens > 0`): a single row (B = 1) holding N sequences back to back, no
    padding, `position_ids` restarting at 0 per sequence and no attention mask (the model then keeps
    attention inside each sequence); the loss tensors are (N, L), one row per completion.
    In both, only the K completion tokens go through the lm_head (prompt and padding positions need
    no log-prob): `positions` says where they are predicted in the model's flattened (B*(T-1))
    outputs, `dest` where each lands in the flattened loss layout.
    """

    input_ids: torch.Tensor  # (B, T)
    attention_mask: torch.Tensor | None  # (B, T); None for a packed row
    loss_mask: torch.Tensor  # (B, T-1) padded | (N, L) packed; float: 1 where a counted completion token is predicted
    advantages: torch.Tensor  # (B,) | (N,)
    sampler_logp: torch.Tensor  # like loss_mask, 0 outside the completion
    seq_weight: torch.Tensor  # (B,) | (N,) per-completion token weight w (see loss_norm)
    position_ids: torch.Tensor | None = None  # (1, T) packed only
    positions: torch.Tensor | None = None  # (K,) None: every position goes through the lm_head
    dest: torch.Tensor | None = None  # (K,)


# ----------------------------------------------------------------------------------------------
# Advantages


def advantages(
    rewards: list[float | None] | torch.Tensor, group_size: int, scale: str = "group", eps: float = 1e-4
) -> torch.Tensor:
    """Group-relative advantages, (N,) for N = groups * group_size rewards in group-major order.

    None (or NaN) rewards are excluded from their group's mean and std and get advantage 0.
    """
    if isinstance(rewards, torch.Tensor):
        r = rewards.detach().double().reshape(-1)
    else:
        r = torch.tensor([math.nan if x is None else float(x) for x in rewards], dtype=torch.float64)
    if r.numel() % group_size:
        raise ValueError(f"{r.numel()} rewards do not split into groups of {group_size}")
    if scale not in ("group", "batch", "none"):
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

    token: valid completion tokens of the step; sequence / constant: counted completions of the step.
    """
    counted = [r for r in rollouts if counts(r, mask_truncated)]  # counts() implies >= 1 completion token
    local = sum(len(r.sampled()) for r in counted) if loss_norm == "token" else len(counted)
    total = dist.all_reduce(torch.tensor([float(local)], dtype=torch.float64))
    return max(total.item(), 1.0)


def policy_loss(logp, old_logp, ref_logp, advantages, mask, cfg, sampler_logp=None, seq_w=None, z=None):
    """The GRPO loss of one micro-batch: clipped surrogate (or CISPO), token or sequence (GSPO) ratios.

    logp, old_logp, ref_logp, sampler_logp, mask: (B, T) aligned per completion token (ref_logp may be
    None when beta = 0, sampler_logp None when tis_cap = 0); advantages: (B,); seq_w: (B,) per-token
    weights (default 1); z: the step's normaliser (default: this micro-batch's valid token count).
    Returns (loss, stats): loss = Σ_it w_i·mask·(pg + β·kl) / z; stats holds token-summed metrics.
    """
    mask = mask.to(logp.dtype)
    if seq_w is None:
        seq_w = torch.ones_like(advantages)
    if z is None:
        z = mask.sum().clamp(min=1)
    adv = advantages.unsqueeze(1)  # (B, 1)
    log_ratio = (logp - old_logp).clamp(-cfg.log_ratio_clamp, cfg.log_ratio_clamp)  # (B, T)
    if cfg.ratio_level == "sequence":
        # GSPO: s_i = exp(mean_t log_ratio), one per completion (mean over its counted tokens), in the
        # stop-gradient form s_i·π_θ/sg(π_θ): the value is s_i at every token, each token's gradient s_i·∇logp
        seq = (log_ratio * mask).sum(1, keepdim=True) / mask.sum(1, keepdim=True).clamp(min=1)  # (B, 1)
        ratio = torch.exp(seq.detach() + logp - logp.detach())  # (B, T)
    else:
        ratio = torch.exp(log_ratio)  # (B, T)
    if cfg.policy_loss == "cispo":
        # CISPO: the weight is capped and detached, so every token keeps its gradient A·weight·∇logp
        weight = ratio.clamp(max=1 + cfg.cispo_high).detach()
        pg = -weight * adv * logp
        clip_low = torch.zeros_like(mask, dtype=torch.bool)
        clip_high = ratio > 1 + cfg.cispo_high
    else:
        clipped = ratio.clamp(1 - cfg.clip_low, 1 + cfg.clip_high)
        pg = -torch.minimum(ratio * adv, clipped * adv)  # (B, T)
        clip_low, clip_high = (ratio < 1 - cfg.clip_low) & (adv < 0), (ratio > 1 + cfg.clip_high) & (adv > 0)
    if cfg.tis_cap > 0 and sampler_logp is not None:
        pg = pg * torch.exp(old_logp - sampler_logp).clamp(max=cfg.tis_cap).detach()
    per_token = pg
    kl = None
    if cfg.beta > 0:
        log_r = (ref_logp - logp).clamp(-cfg.log_ratio_clamp, cfg.log_ratio_clamp)  # log π_ref/π_θ
        estimator = cfg.kl_estimator
        if estimator == "k2":
            kl = 0.5 * log_r**2
        else:
            kl = torch.exp(log_r) - log_r - 1  # (B, T) k3, >= 0
            if estimator == "k3_ratio":
                kl = torch.exp(log_ratio) * kl  # π_θ/π_old, not detached: see the module docstring
        per_token = per_token + cfg.beta * kl
    loss = (per_token * mask * seq_w.unsqueeze(1)).sum() / z
    with torch.no_grad():
        stats = {
            "tokens": mask.sum(),
            "clip_low": clip_low.to(mask.dtype).mul(mask).sum(),
            "clip_high": clip_high.to(mask.dtype).mul(mask).sum(),
            "kl": (kl * mask).sum() if kl is not None else torch.zeros((), dtype=mask.dtype),
        }
    return loss, stats


# ----------------------------------------------------------------------------------------------
# Micro-batches and the update


def make_batches(rollouts: list[Rollout], micro_batch_size: int, pad_id: int, cfg, micro_batch_tokens: int = 0) -> list[Batch]:
    """Micro-batches of the rollouts: packed rows of at most `micro_batch_tokens` tokens when that is
    > 0 (padding-free), else right-padded rows, `micro_batch_size` sequences per micro-batch."""
    if any(not r.prompt_ids for r in rollouts):
        raise ValueError("a rollout has an empty prompt: the first completion token needs a prefix to be predicted from")
    if micro_batch_tokens > 0:
        lengths = [len(r.prompt_ids) + len(r.completion_ids) for r in rollouts]
        return [_packed_batch([rollouts[i] for i in group], cfg) for group in packing.plan(lengths, micro_batch_tokens)]
    batches = []
    for start in range(0, len(rollouts), micro_batch_size):
        chunk = rollouts[start : start + micro_batch_size]
        T = max(len(r.prompt_ids) + len(r.completion_ids) for r in chunk)
        ids = torch.full((len(chunk), T), pad_id, dtype=torch.long)  # (B, T)
        attn = torch.zeros((len(chunk), T), dtype=torch.long)
        loss_mask = torch.zeros((len(chunk), T - 1))  # (B, T-1)
        sampler_logp = torch.zeros((len(chunk), T - 1))
        positions = []
        for i, r in enumerate(chunk):
            p, c = len(r.prompt_ids), len(r.completion_ids)
            ids[i, : p + c] = torch.tensor(r.prompt_ids + r.completion_ids)
            attn[i, : p + c] = 1
            # token p+j is predicted at index p+j-1 of the shifted log-probs; only sampled tokens need one
            js = torch.tensor(r.sampled(), dtype=torch.long)
            if counts(r, cfg.mask_truncated):
                loss_mask[i, p - 1 + js] = 1
            sampler_logp[i, p - 1 : p - 1 + c] = torch.tensor(r.sampler_logprobs, dtype=torch.float32)
            positions += (i * (T - 1) + p - 1 + js).tolist()
        pos = _nonempty(positions)
        batches.append(Batch(ids, attn, loss_mask, _advantages(chunk), sampler_logp, _weights(chunk, cfg), None, pos, pos))
    return batches


def _packed_batch(chunk: list[Rollout], cfg) -> Batch:
    """One row: the sequences back to back, positions restarting per sequence, (N, L) loss tensors."""
    L = max(max(len(r.completion_ids) for r in chunk), 1)
    ids, pos, positions, dest = [], [], [], []
    loss_mask = torch.zeros((len(chunk), L))  # (N, L)
    sampler_logp = torch.zeros((len(chunk), L))
    for i, r in enumerate(chunk):
        p, c, start = len(r.prompt_ids), len(r.completion_ids), len(ids)
        ids += r.prompt_ids + r.completion_ids
        pos += range(p + c)
        # completion token j sits at start+p+j in the row, so it is predicted at start+p+j-1; the
        # prediction across a sequence boundary (last token -> next sequence's first) is never used
        js = r.sampled()
        positions += [start + p - 1 + j for j in js]
        dest += [i * L + j for j in js]
        if counts(r, cfg.mask_truncated):
            loss_mask[i, js] = 1
        sampler_logp[i, :c] = torch.tensor(r.sampler_logprobs, dtype=torch.float32)
    row = torch.tensor([ids], dtype=torch.long)  # (1, T)
    return Batch(row, None, loss_mask, _advantages(chunk), sampler_logp, _weights(chunk, cfg),
                 torch.tensor([pos], dtype=torch.long), _nonempty(positions), _nonempty(dest))


def _nonempty(idx: list[int]) -> torch.Tensor:
    """(K,) indices; with no completion token at all, slot 0 (masked) stands in, so that the forward
    and backward still run (and with them FSDP's collectives)."""
    return torch.tensor(idx or [0], dtype=torch.long)


def _advantages(chunk: list[Rollout]) -> torch.Tensor:
    return torch.tensor([r.advantage for r in chunk], dtype=torch.float32)


def _weights(chunk: list[Rollout], cfg) -> torch.Tensor:
    return torch.tensor([seq_weight(len(r.sampled()), cfg.loss_norm, cfg.max_new_tokens) for r in chunk])


def even_out(batches: list[Batch], pad_id: int, cfg, micro_batch_tokens: int) -> list[Batch]:
    """Append loss-free micro-batches until every rank has as many as the rank with the most.

    Each micro-batch's forward/backward runs FSDP collectives (all-gathers, and the reduce-scatter on
    the last one), so the ranks must agree on the count; with a token budget it differs per rank.
    The filler is a two-token sequence whose reward is None: it adds nothing to the loss, the
    gradient or the normaliser.
    """
    most = int(dist.all_reduce(torch.tensor([len(batches)], dtype=torch.float64), "max").item())
    filler = Rollout([pad_id], [pad_id], [0.0], None, False)
    return batches + [make_batches([filler], 1, pad_id, cfg, micro_batch_tokens)[0] for _ in range(most - len(batches))]


def step(policy, ref_policy, optimizer, scheduler, rollouts: list[Rollout], cfg, pad_id: int,
         behaviour=None) -> dict[str, float]:
    """One GRPO update on this rank's rollouts: mu passes, each a full pass over the micro-batches
    followed by one optimizer step. Ranks may hold different numbers of rollouts and tokens:
    `even_out` gives every rank the same number of micro-batches (FSDP collectives run in each).

    `behaviour` (exact_logprobs, nanogrpo/parity.py): a Policy over the sampler's own weights. The
    sampler's log-probs are then recomputed by it, in these same micro-batches with this same forward,
    instead of taken from the sampler's decode: bit-equal to the trainer's while the weights are."""
    device = next(policy.parameters()).device
    budget = cfg.micro_batch_tokens
    z = normaliser(rollouts, cfg.loss_norm, cfg.mask_truncated)
    # A completion with advantage 0 adds exactly 0 to the gradient when there is no KL term (both arms
    # of the clipped surrogate are 0 * ratio), so only the others are run forward and backward. The
    # normaliser z above still counts every completion: the update is the same, at the cost of the
    # completions that carry signal (zero-variance groups are most of a step early in a hard task).
    skip = cfg.beta == 0 and cfg.skip_zero_advantage
    trained = [r for r in rollouts if not skip or (r.advantage is not None and r.advantage != 0)]
    batches = make_batches(trained, cfg.micro_batch_size, pad_id, cfg, budget) if trained else []
    batches = even_out(batches, pad_id, cfg, budget)
    to = lambda t: None if t is None else t.to(device, non_blocking=True)  # noqa: E731

    def logprobs(model, b, entropy=False):
        """(logp, entropy) in the loss layout of `b` ((B, T-1) padded, (N, L) packed), 0 off the completions."""
        lp, ent = model(to(b.input_ids), to(b.attention_mask), temperature=cfg.temperature, with_entropy=entropy,
                        position_ids=to(b.position_ids), positions=to(b.positions))
        if b.positions is None:
            return lp, ent
        dest = to(b.dest)
        place = lambda x: torch.zeros(b.loss_mask.numel(), device=device).scatter(0, dest, x[0]).view(b.loss_mask.shape)  # noqa: E731
        return place(lp), place(ent)

    with torch.no_grad():  # fixed targets: reference (beta > 0) and old (mu > 1) log-probs, taken once
        ref = [logprobs(ref_policy, b)[0] for b in batches] if cfg.beta > 0 else [None] * len(batches)
        old = [logprobs(policy, b)[0] for b in batches] if cfg.mu > 1 else [None] * len(batches)
        t0 = time.perf_counter()
        behaved = [logprobs(behaviour, b)[0] for b in batches] if behaviour is not None else [None] * len(batches)
        t_recompute = time.perf_counter() - t0

    sums = {k: torch.zeros((), dtype=torch.float64) for k in ("tokens", "clip_low", "clip_high", "kl", "entropy", "gap", "loss")}
    grad_norms = []
    # FSDP averages gradients over ranks; our loss is already a global mean (z counts every rank's
    # tokens), so scale by the world size to turn that average back into the sum.
    scale = float(dist.world_size())
    for p in range(cfg.mu):
        for i, b in enumerate(batches):
            last = i == len(batches) - 1
            # sharded: reduce-scatter after every micro-batch, so no GPU ever holds the whole model's fp32
            # gradients; unsharded: once per pass (they stay unsharded until the last micro-batch)
            policy.set_requires_gradient_sync(last or cfg.grad_accumulation == "sharded")
            logp, ent = logprobs(policy, b, entropy=p == 0)
            old_logp = old[i] if old[i] is not None else logp.detach()
            mask = to(b.loss_mask)
            sampler_logp = to(b.sampler_logp) if behaved[i] is None else behaved[i]
            loss, st = policy_loss(logp, old_logp, ref[i], to(b.advantages), mask, cfg, sampler_logp, to(b.seq_weight), z)
            (loss * scale).backward()
            if p == 0:  # metrics describe the rollouts under the weights that sampled them
                for k, v in st.items():
                    sums[k] += v.double().cpu()
                sums["loss"] += loss.detach().double().cpu()
                sums["entropy"] += (ent * mask).sum().double().cpu()
                sums["gap"] += ((logp.detach() - sampler_logp).abs() * mask).sum().double().cpu()
        for q in policy.parameters():  # nothing trained on any rank: a zero gradient, so AdamW's moments
            if q.grad is None and q.requires_grad:  # and step count move as when every completion was run
                q.grad = torch.zeros_like(q)
        if cfg.grad_clip > 0:
            norm = torch.nn.utils.clip_grad_norm_(policy.parameters(), cfg.grad_clip)
        else:
            norm = torch.nn.utils.get_total_norm([q.grad for q in policy.parameters() if q.grad is not None])
        grad_norms.append(norm.full_tensor().item() if hasattr(norm, "full_tensor") else float(norm))
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)

    keys = list(sums)
    totals = dist.all_reduce(torch.stack([sums[k] for k in keys]))  # sums over ranks
    t = dict(zip(keys, totals.tolist()))
    tokens = t["tokens"] or math.nan  # no trained token anywhere: the per-token metrics are undefined
    return {
        "loss": t["loss"],  # already a global mean: summed partial means
        # per-token means over the trained completions (advantage != 0, or all when beta > 0)
        "entropy": t["entropy"] / tokens,
        "kl": t["kl"] / tokens,
        "clip_low_frac": t["clip_low"] / tokens,
        "clip_high_frac": t["clip_high"] / tokens,
        "logprob_gap": t["gap"] / tokens,  # mean |trainer - sampler| log-prob per completion token
        "grad_norm": sum(grad_norms) / len(grad_norms),
        "train_tokens": t["tokens"],
        **({"time_recompute": t_recompute} if behaviour is not None else {}),  # exact_logprobs: its cost, in the update
    }
