"""Our loss knobs against the peers' rules for the same knob (docs/grpo.md's table, the rows marked *tested*).

Each peer's rule is written out here from the file named (not their code), on the same inputs; where the peer's
own test pins numbers, those numbers are ported as data, with the test they come from named:
  TRL       huggingface/trl trl/trainer/grpo_trainer.py (_compute_loss; the vLLM importance-sampling ratio)
  verl      volcengine/verl verl/trainer/ppo/core_algos.py (compute_policy_loss_vanilla / _cispo, kl_penalty)
  NeMo-RL   NVIDIA-NeMo/RL nemo_rl/algorithms/loss/loss_functions.py (ClippedPGLossFn), nemo_rl/algorithms/utils.py
            (calculate_kl, calculate_baseline_and_std_per_prompt), nemo_rl/algorithms/reward_functions.py,
            tests/unit/algorithms/test_loss_functions.py
"""

import math

import pytest
import torch

from nanogrpo import grpo, shaping
from test_grpo import cfg

D = torch.float64


def inputs(seed: int, B: int = 4, T: int = 6, spread: float = 1.5):
    """Random (logp, old, advantages, mask) with log-ratios wide enough to reach every clip and cap."""
    g = torch.Generator().manual_seed(seed)
    old = -torch.rand(B, T, generator=g, dtype=D) * 3 - 0.1
    logp = (old + torch.randn(B, T, generator=g, dtype=D) * spread).requires_grad_()
    adv = torch.randn(B, generator=g, dtype=D) * 2
    mask = (torch.rand(B, T, generator=g) > 0.2).to(D)
    mask[:, 0] = 1
    return logp, old, adv, mask


def ours(logp, old, adv, mask, **kw):
    logp.grad = None
    loss, _ = grpo.policy_loss(logp, old, None, adv, mask, cfg(**kw))
    loss.backward()
    return loss.detach(), logp.grad.clone()


def theirs(per_token, logp, mask):
    """A peer's per-token loss, token-mean over the mask (TRL's "dapo", verl's "token-mean", NeMo's token level)."""
    logp.grad = None
    loss = (per_token * mask).sum() / mask.sum()
    loss.backward()
    return loss.detach(), logp.grad.clone()


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("delta", [1.5, 3.0])
def test_dual_clip_is_trls_delta(seed, delta):
    """TRL `delta`: the ratio is capped at delta inside the clipped surrogate, -min(min(rho, delta) A, clip(rho) A).
    For delta > 1 + epsilon_high that is dual-clip PPO: the same loss and gradient as our dual_clip."""
    logp, old, adv, mask = inputs(seed)
    rho = torch.exp(logp - old)
    clipped = rho.clamp(1 - 0.2, 1 + 0.28)
    a = adv[:, None]
    trl = -torch.minimum(rho.clamp(max=delta) * a, clipped * a)
    want = theirs(trl, logp, mask)
    got = ours(logp, old, adv, mask, dual_clip=delta)
    assert (rho > delta).logical_and(adv[:, None] < 0).any(), "the cap must act somewhere"
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)


def test_dual_clip_nemo_numbers():
    """NeMo-RL tests/unit/algorithms/test_loss_functions.py::test_clipped_pg_loss_dual_clip, its data: ratios
    0.5, 1.0, 10.0, advantages 1, -1, -4, clip 0.2 / 0.2, ratio_clip_c = 3 -> per token -0.5, 1.0, 12.0, mean 4.1667."""
    old = torch.tensor([[-1.0, -1.0, -3.0]], dtype=D)
    logp = (old + torch.log(torch.tensor([[0.5, 1.0, 10.0]], dtype=D))).requires_grad_()
    adv = torch.tensor([1.0, -1.0, -4.0], dtype=D)
    # one token per completion: the advantages are per completion here
    loss, _ = grpo.policy_loss(logp.view(3, 1), old.view(3, 1), None, adv, torch.ones(3, 1, dtype=D),
                               cfg(clip_high=0.2, dual_clip=3.0))
    assert loss.item() == pytest.approx(12.5 / 3, abs=1e-9)


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("low, high", [(0.2, 0.2), (1.0, 4.0), (0.5, 1.0)])
def test_cispo_is_verls_and_nemos(seed, low, high):
    """verl's compute_policy_loss_cispo and NeMo-RL's use_cispo: -A sg(clamp(rho, 1 - low, 1 + high)) logp, with
    (clip_ratio_low, clip_ratio_high) / (ratio_clip_min, ratio_clip_max) = (cispo_low, cispo_high)."""
    logp, old, adv, mask = inputs(seed)
    weight = torch.exp(logp - old).clamp(1 - low, 1 + high).detach()
    want = theirs(-adv[:, None] * weight * logp, logp, mask)
    got = ours(logp, old, adv, mask, policy_loss="cispo", cispo_low=low, cispo_high=high)
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("seed", range(4))
def test_cispo_is_trls_with_epsilon_high_the_cap_itself(seed):
    """TRL loss_type = "cispo": -A sg(clamp(rho, max=epsilon_high)) logp, no floor: our cispo_high = epsilon_high - 1
    and cispo_low = 1 (TRL suggests epsilon_high = 5.0: cispo_high = 4.0, our default)."""
    logp, old, adv, mask = inputs(seed)
    weight = torch.exp(logp - old).clamp(max=5.0).detach()
    want = theirs(-adv[:, None] * weight * logp, logp, mask)
    got = ours(logp, old, adv, mask, policy_loss="cispo", cispo_low=1.0, cispo_high=4.0)
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)


def test_cispo_nemo_numbers():
    """NeMo-RL test_clipped_pg_loss_cispo, its data: ratios 0.5, 1.0, 1.5 -> weights 0.8, 1.0, 1.2 (clip 0.2 / 0.2),
    advantages 1, -1, 2, current log-probs log(0.5) - 1, -1, log(1.5) - 1: loss = mean(-A w logp)."""
    old = torch.full((3, 1), -1.0, dtype=D)
    logp = torch.tensor([[-1.69315], [-1.0], [-0.59453]], dtype=D)
    adv = torch.tensor([1.0, -1.0, 2.0], dtype=D)
    want = sum(-a * w * lp for a, w, lp in zip((1.0, -1.0, 2.0), (0.8, 1.0, 1.2), (-1.69315, -1.0, -0.59453))) / 3
    loss, _ = grpo.policy_loss(logp, old, None, adv, torch.ones(3, 1, dtype=D),
                               cfg(policy_loss="cispo", cispo_low=0.2, cispo_high=0.2))
    assert loss.item() == pytest.approx(want, abs=1e-4)


def per_token_kl(logp, ref, est, clamp_in, clamp_out):
    """Our per-token KL values, one token per completion (A = 0, beta = 1: the loss is the mean KL)."""
    out = []
    for lp, rf in zip(logp, ref):
        loss, st = grpo.policy_loss(torch.tensor([[lp]], dtype=D), torch.tensor([[lp]], dtype=D),
                                    torch.tensor([[rf]], dtype=D), torch.zeros(1, dtype=D), torch.ones(1, 1, dtype=D),
                                    cfg(beta=1.0, kl_estimator=est, log_ratio_clamp=clamp_in, kl_clamp=clamp_out))
        out.append(st["kl"].item())
    return out


@pytest.mark.parametrize("est, nemo, unclamped, clamped", [
    ("k3", "k3", [0.7183, 13.0, 28.0], [0.7183, 10.0, 10.0]),
    ("k2", "k2", [0.5, 98.0, 420.5], [0.5, 10.0, 10.0]),
])
def test_kl_clamps_are_nemos(est, nemo, unclamped, clamped):
    """NeMo-RL tests/unit/algorithms/test_loss_functions.py::test_calculate_kl, its data: log-probs -1 against
    references 0, -15, -30; kl_input_clamp_value = 20 is our log_ratio_clamp, kl_output_clamp_value = 10 our kl_clamp."""
    logp, ref = [-1.0, -1.0, -1.0], [0.0, -15.0, -30.0]
    assert per_token_kl(logp, ref, est, 700.0, 0.0) == pytest.approx(unclamped, rel=1e-3)
    assert per_token_kl(logp, ref, est, 20.0, 10.0) == pytest.approx(clamped, rel=1e-3)


def test_kl_input_clamp_stops_the_gradient_as_nemos():
    """NeMo-RL test_calculate_kl_detaches_importance_sampling_when_input_clamped, its data: log-probs -3, -1 against a
    reference of 0, k3 times the on-policy weight exp(logp - sg(logp)) (our k3_ratio at mu = 1), input clamp 2:
    KL 4.389056, 0.7182818; gradient 0 past the clamp, -1 inside it."""
    logp = torch.tensor([[-3.0, -1.0]], dtype=D, requires_grad=True)
    loss, st = grpo.policy_loss(logp, logp.detach(), torch.zeros(1, 2, dtype=D), torch.zeros(1, dtype=D),
                                torch.ones(1, 2, dtype=D), cfg(beta=1.0, kl_estimator="k3_ratio", log_ratio_clamp=2.0))
    (loss * 2).backward()  # NeMo's test sums the tokens; ours is the token mean
    assert st["kl"].item() == pytest.approx(4.389056 + 0.7182818, abs=1e-6)
    assert logp.grad.flatten().tolist() == pytest.approx([0.0, -1.0], abs=1e-6)


@pytest.mark.parametrize("seed", range(4))
def test_token_truncate_is_trls_tis(seed):
    """TRL vllm_importance_sampling_mode = "token_truncate": each token's loss times
    clamp(exp(old - sampler), max=vllm_importance_sampling_clip_max) (clip_min None): our tis_cap."""
    logp, old, adv, mask = inputs(seed)
    sampler = old + torch.randn(old.shape, generator=torch.Generator().manual_seed(seed + 9), dtype=D)
    rho, a = torch.exp(logp - logp.detach()), adv[:, None]  # mu = 1: the old log-probs are the current ones
    surrogate = -torch.minimum(rho * a, rho.clamp(0.8, 1.28) * a)
    want = theirs(surrogate * torch.exp(logp.detach() - sampler).clamp(max=3.0), logp, mask)
    logp.grad = None
    loss, _ = grpo.policy_loss(logp, logp.detach(), None, adv, mask, cfg(tis_cap=3.0), sampler_logp=sampler)
    loss.backward()
    torch.testing.assert_close((loss.detach(), logp.grad.clone()), want, rtol=1e-12, atol=1e-12)


def nemo_loo(rewards: list[float], normalize: bool) -> list[float]:
    """NeMo-RL calculate_baseline_and_std_per_prompt with leave_one_out_baseline = True, then (normalize_rewards)
    division by that std, for one group: the baseline and the squared baseline over the others, the std
    sqrt((E[r^2] - E[r]^2) (n - 1) / (n - 2)) with n - 1 the others' count."""
    n = len(rewards) - 1  # num_valid with the leave-one-out baseline
    out = []
    for i, r in enumerate(rewards):
        others = [x for j, x in enumerate(rewards) if j != i]
        mean, sq = sum(others) / n, sum(x * x for x in others) / n
        std = math.sqrt(max((sq - mean**2) * n / (n - 1), 0.0))
        out.append((r - mean) / (std + 1e-6) if normalize and std > 0 else r - mean)
    return out


def test_rloo_is_nemos_leave_one_out_baseline_without_normalize_rewards():
    """scale = "rloo" equals NeMo-RL's use_leave_one_out_baseline with normalize_rewards = false; with true (its
    default) NeMo also divides by the leave-one-out std, which ours does not."""
    group = [1.0, 0.0, 0.5, 0.25, 1.0, 0.0]
    got = grpo.advantages(group, len(group), "rloo").tolist()
    assert got == pytest.approx(nemo_loo(group, normalize=False), abs=1e-6)
    assert got != pytest.approx(nemo_loo(group, normalize=True), abs=1e-3)


def test_soft_overlong_punishment_is_nemos_reward_shaping():
    """NeMo-RL grpo.reward_shaping (nemo_rl/algorithms/reward_functions.py): min(-(len - (max_response_length -
    overlong_buffer_length)) / overlong_buffer_length * overlong_buffer_penalty, 0); ours with max_completion_len =
    max_response_length, soft_punish_cache = overlong_buffer_length and the penalty as its weight, up to the limit."""
    limit, buffer, penalty = 64, 16, 0.5
    for n in range(limit + 1):
        nemo = min(-(n - (limit - buffer)) / buffer * penalty, 0.0)
        assert penalty * shaping.soft_overlong_reward(n, limit, buffer) == pytest.approx(nemo, abs=1e-12)


def verl_gspo(logp, old, adv, mask, low=0.2, high=0.28):
    """verl's compute_policy_loss_gspo: log s_it = sg(mean_t log rho) + logp - sg(logp), clamped at max 10, then
    max(-A s, -A clip(s)) per token, aggregated seq-mean-token-mean."""
    seq = ((logp - old) * mask).sum(-1) / mask.sum(-1).clamp(min=1)
    s = torch.exp((logp - logp.detach() + seq.detach()[:, None]).clamp(max=10.0))
    a = adv[:, None]
    per_token = torch.maximum(-a * s, -a * s.clamp(1 - low, 1 + high))
    logp.grad = None
    loss = ((per_token * mask).sum(-1) / mask.sum(-1)).mean()
    loss.backward()
    return loss.detach(), logp.grad.clone()


def test_gspo_caps_the_sequence_log_ratio_as_verl():
    """Log-ratios 12 and 12 with A = -1: every token sits inside log_ratio_clamp (20), but the sequence ratio is e^12.
    verl caps log s_i at 10: a loss of e^10 = 2.2e4 and no gradient (it was 1.63e5 and 8.1e4 per token here)."""
    logp = torch.tensor([[12.0, 12.0]], dtype=D, requires_grad=True)
    old, adv, mask = torch.zeros(1, 2, dtype=D), torch.tensor([-1.0], dtype=D), torch.ones(1, 2, dtype=D)
    want = verl_gspo(logp, old, adv, mask)
    assert want[0].item() == pytest.approx(math.exp(10.0)) and want[1].abs().max() == 0
    # our loss_norm = sequence (w = 1/len, Z = completions) is verl's seq-mean-token-mean
    logp.grad = None
    loss, _ = grpo.policy_loss(logp, old, None, adv, mask, cfg(ratio_level="sequence", loss_norm="sequence"),
                               seq_w=torch.tensor([0.5], dtype=D), z=1.0)
    loss.backward()
    assert loss.item() == pytest.approx(math.exp(10.0)) and logp.grad.abs().max() == 0


@pytest.mark.parametrize("seed", range(4))
def test_gspo_is_verls(seed):
    """GSPO against verl's rule on random completions (log-ratios inside the token clamp, some sequences past the
    cap): the same loss and gradient with loss_norm = sequence."""
    logp, old, adv, mask = inputs(seed, spread=3.0)
    with torch.no_grad():
        logp[0] = old[0] + 11 + torch.rand(old.shape[1], dtype=D) * 4  # a completion whose mean log-ratio is past 10
    adv[0] = -abs(adv[0])
    want = verl_gspo(logp, old, adv, mask)
    logp.grad = None
    loss, _ = grpo.policy_loss(logp, old, None, adv, mask, cfg(ratio_level="sequence"),
                               seq_w=1 / mask.sum(-1), z=float(len(adv)))
    loss.backward()
    torch.testing.assert_close((loss.detach(), logp.grad.clone()), want, rtol=1e-10, atol=1e-10)


def test_dual_clip_with_cispo_is_refused(tmp_path):
    """dual_clip caps the clip loss; with policy_loss = "cispo" it would do nothing. NeMo-RL refuses the combination
    (use_cispo with ratio_clip_c); so does the config, naming it, before any compute (train.py exits 2 on a
    ConfigError: tests/test_train.py)."""
    import train
    from nanogrpo import config as C

    with pytest.raises(C.ConfigError, match="dual_clip.*cispo"):
        C.load(["policy_loss=cispo", "dual_clip=3"])
    with pytest.raises(C.ConfigError, match="dual_clip.*cispo"):
        train.main(["policy_loss=cispo", "dual_clip=3", f"out_dir={tmp_path / 'out'}"])
    assert not (tmp_path / "out").exists()
    C.load(["policy_loss=cispo"])
    C.load(["dual_clip=3"])
