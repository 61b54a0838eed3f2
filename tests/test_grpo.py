"""grpo.advantages and grpo.policy_loss against slow, obvious references and hand-computed values."""

import math
import random
from types import SimpleNamespace

import pytest
import torch

from nanogrpo import grpo


def cfg(**kw):
    base = dict(clip_low=0.2, clip_high=0.28, beta=0.0, tis_cap=0.0, loss_norm="token", mask_truncated=False, max_new_tokens=8,
                kl_estimator="k3", ratio_level="token", policy_loss="clip", cispo_high=4.0,
                log_ratio_clamp=20.0, cispo_low=1.0, dual_clip=0.0, kl_clamp=0.0)
    base.update(kw)
    return SimpleNamespace(**base)


# ---------------------------------------------------------------- advantages


def naive_advantages(rewards, G, scale, eps):
    out = []
    valid_all = [r for r in rewards if r is not None]
    batch_mean = sum(valid_all) / len(valid_all)
    batch_std = math.sqrt(sum((r - batch_mean) ** 2 for r in valid_all) / (len(valid_all) - 1))
    for g in range(0, len(rewards), G):
        group = rewards[g : g + G]
        valid = [r for r in group if r is not None]
        mean = sum(valid) / len(valid) if valid else 0.0
        std = math.sqrt(sum((r - mean) ** 2 for r in valid) / (len(valid) - 1)) if len(valid) > 1 else 0.0
        for r in group:
            if r is None:
                out.append(0.0)
            elif scale == "group":
                out.append((r - mean) / (std + eps))
            elif scale == "batch":
                out.append((r - mean) / (batch_std + eps))
            else:
                out.append(r - mean)
    return out


def test_advantages_hand_computed():
    # group 1: rewards 1,0,0,1 -> mean .5, unbiased std sqrt(1/3); group 2 all equal -> 0
    adv = grpo.advantages([1.0, 0.0, 0.0, 1.0, 0.5, 0.5, 0.5, 0.5], 4, "group", eps=0.0)
    a = 0.5 / math.sqrt(1 / 3)
    assert adv.tolist() == pytest.approx([a, -a, -a, a, 0, 0, 0, 0], abs=1e-6)
    assert grpo.advantages([1.0, 0.0, 3.0, 0.0], 2, "none").tolist() == pytest.approx([0.5, -0.5, 1.5, -1.5])


def test_none_reward_left_out_of_baseline_not_zero():
    # with None treated as 0 the mean would be 1/3; excluded, the group is {1, 0}: mean 1/2
    adv = grpo.advantages([1.0, None, 0.0], 3, "none")
    assert adv.tolist() == pytest.approx([0.5, 0.0, -0.5])
    zero_filled = grpo.advantages([1.0, 0.0, 0.0], 3, "none")
    assert adv[0].item() != pytest.approx(zero_filled[0].item())
    # a group with one valid reward has no baseline information: advantage 0, not inf
    assert grpo.advantages([None, 1.0], 2, "group").tolist() == [0.0, 0.0]


@pytest.mark.parametrize("scale", ["group", "batch", "none"])
def test_advantages_match_naive(scale):
    rng = random.Random(0)
    for G in (2, 4, 8):
        rewards = [rng.choice([0.0, 0.25, 1.0, None, 0.5]) for _ in range(G * 6)]
        rewards[0], rewards[1] = 1.0, 0.0  # at least two valid values for the batch std
        got = grpo.advantages(rewards, G, scale, eps=1e-4).tolist()
        assert got == pytest.approx(naive_advantages(rewards, G, scale, 1e-4), abs=1e-5)


def test_group_stats_counts_zero_std_and_none():
    s = grpo.group_stats([1.0, 1.0, 0.0, 1.0, None, 0.0, 0.0, 0.0], 2)
    # groups: (1,1) zero-std, (0,1), (None,0) one value -> zero-std, (0,0) zero-std
    assert s["zero_std_frac"] == pytest.approx(0.75)
    assert s["none_frac"] == pytest.approx(1 / 8)
    assert s["reward_mean"] == pytest.approx(3 / 7)


def test_advantages_bad_shape():
    with pytest.raises(ValueError, match="groups of 4"):
        grpo.advantages([1.0, 0.0, 1.0], 4)


# ---------------------------------------------------------------- policy loss


def naive_loss(logp, old, ref, sampler, adv, mask, seq_w, z, c):
    """Per-token python loop: the obvious reading of the objective."""
    total = 0.0
    for i in range(len(logp)):
        for t in range(len(logp[i])):
            if not mask[i][t]:
                continue
            ratio = math.exp(logp[i][t] - old[i][t])
            clipped = min(max(ratio, 1 - c.clip_low), 1 + c.clip_high)
            pg = -min(ratio * adv[i], clipped * adv[i])
            if c.tis_cap > 0:
                pg *= min(math.exp(old[i][t] - sampler[i][t]), c.tis_cap)
            kl = 0.0
            if c.beta > 0:
                d = ref[i][t] - logp[i][t]
                kl = math.exp(d) - d - 1
            total += seq_w[i] * (pg + c.beta * kl)
    return total / z


@pytest.mark.parametrize(
    "c", [cfg(), cfg(beta=0.1), cfg(clip_low=0.1, clip_high=0.1), cfg(tis_cap=2.0, beta=0.05)], ids=["plain", "kl", "sym", "tis"]
)
def test_policy_loss_matches_naive(c):
    g = torch.Generator().manual_seed(1)
    B, T = 4, 6
    logp = (-torch.rand(B, T, generator=g) * 3).double().requires_grad_()
    old = logp.detach() + 0.4 * torch.randn(B, T, generator=g).double()  # ratios well outside the clip range
    ref = logp.detach() + 0.3 * torch.randn(B, T, generator=g).double()
    sampler = old + 0.5 * torch.randn(B, T, generator=g).double()
    adv = torch.tensor([1.0, -0.5, 0.0, 2.0], dtype=torch.float64)
    mask = (torch.rand(B, T, generator=g) > 0.3).double()
    seq_w = torch.tensor([1.0, 0.5, 0.25, 1.0], dtype=torch.float64)
    z = 7.0
    loss, stats = grpo.policy_loss(logp, old, ref, adv, mask, c, sampler, seq_w, z)
    L = lambda x: x.tolist()  # noqa: E731
    assert loss.item() == pytest.approx(naive_loss(L(logp), L(old), L(ref), L(sampler), L(adv), L(mask), L(seq_w), z, c), rel=1e-10)
    # the gradient of the naive loss by finite differences at one unclipped-or-clipped token
    loss.backward()
    i, t = 3, int(mask[3].nonzero()[0])
    eps = 1e-6
    lp = L(logp)
    lp[i][t] += eps
    up = naive_loss(lp, L(old), L(ref), L(sampler), L(adv), L(mask), L(seq_w), z, c)
    lp[i][t] -= 2 * eps
    down = naive_loss(lp, L(old), L(ref), L(sampler), L(adv), L(mask), L(seq_w), z, c)
    assert logp.grad[i, t].item() == pytest.approx((up - down) / (2 * eps), rel=1e-5, abs=1e-9)
    assert stats["tokens"].item() == mask.sum().item()


def test_loss_at_step_zero_is_zero_for_equal_lengths():
    # ratio 1 and zero-mean advantages: the loss value is 0, the gradient is not (FAQ in grpo.py)
    logp = torch.full((4, 3), -1.0, requires_grad=True)
    adv = grpo.advantages([1.0, 0.0, 0.0, 1.0], 4, "group")
    loss, _ = grpo.policy_loss(logp, logp.detach(), None, adv, torch.ones(4, 3), cfg())
    assert loss.item() == pytest.approx(0.0, abs=1e-7)
    loss.backward()
    assert logp.grad.abs().sum() > 0
    assert torch.allclose(logp.grad[:, 0], -adv / 12)


def test_a_runaway_log_ratio_is_clamped_before_exp():
    """Token 0 ran away since sampling (log ratio 25) and has a negative advantage: the clipped surrogate keeps
    rho * A, so unclamped its gradient is e^25 / z ~ 4e10. Clamped at 20 it gets none, the loss is finite, and
    token 1 (log ratio 0.1) keeps the clip loss's gradient. The k3 KL to a far reference stays finite too."""
    old = torch.tensor([[-25.0, -1.1]], dtype=torch.float64)
    adv, mask = torch.tensor([-1.0], dtype=torch.float64), torch.ones(1, 2, dtype=torch.float64)
    grads = {}
    for clamp in (20.0, 700.0):
        logp = torch.tensor([[0.0, -1.0]], dtype=torch.float64, requires_grad=True)
        loss, _ = grpo.policy_loss(logp, old, None, adv, mask, cfg(log_ratio_clamp=clamp))
        loss.backward()
        grads[clamp] = logp.grad[0]
    assert grads[700.0][0] == pytest.approx(math.exp(25) / 2)  # what the clamp prevents
    assert grads[20.0][0] == 0
    assert grads[20.0][1] == pytest.approx(math.exp(0.1) / 2) == grads[700.0][1]
    logp = torch.tensor([[-120.0, -1.0]], dtype=torch.float32, requires_grad=True)  # the reference gives it e^-5
    loss, st = grpo.policy_loss(logp, logp.detach(), torch.tensor([[-5.0, -1.0]]), adv.float(), mask.float(), cfg(beta=0.1))
    loss.backward()
    assert math.isfinite(loss.item()) and math.isfinite(st["kl"].item()) and torch.isfinite(logp.grad).all()


def test_clip_fractions_count_the_right_side():
    logp = torch.log(torch.tensor([[1.5, 0.5, 1.0, 1.5]]))  # ratios vs old = 0
    old = torch.zeros(1, 4)
    _, st_pos = grpo.policy_loss(logp, old, None, torch.tensor([1.0]), torch.ones(1, 4), cfg())
    _, st_neg = grpo.policy_loss(logp, old, None, torch.tensor([-1.0]), torch.ones(1, 4), cfg())
    assert st_pos["clip_high"].item() == 2 and st_pos["clip_low"].item() == 0  # 1.5 > 1.28 twice
    assert st_neg["clip_low"].item() == 1 and st_neg["clip_high"].item() == 0  # 0.5 < 0.8 once


def test_kl_k3_is_nonnegative_and_zero_at_ref():
    logp = torch.randn(3, 5)
    _, st = grpo.policy_loss(logp, logp, logp, torch.zeros(3), torch.ones(3, 5), cfg(beta=1.0))
    assert st["kl"].item() == pytest.approx(0.0, abs=1e-7)
    _, st = grpo.policy_loss(logp, logp, logp + torch.randn(3, 5), torch.zeros(3), torch.ones(3, 5), cfg(beta=1.0))
    assert st["kl"].item() > 0


def test_make_batches_aligns_completion_tokens_and_none_rewards():
    rs = [
        grpo.Rollout([5, 6, 7], [8, 9], [-0.1, -0.2], 1.0, False, 0.7),
        grpo.Rollout([5], [8, 9, 10], [-0.3, -0.4, -0.5], None, False, 0.0),
        grpo.Rollout([5, 6], [8], [-0.6], 0.0, True, -0.7),
    ]
    (b,) = grpo.make_batches(rs, 8, pad_id=1, cfg=cfg(mask_truncated=True))
    assert b.input_ids.tolist() == [[5, 6, 7, 8, 9], [5, 8, 9, 10, 1], [5, 6, 8, 1, 1]]
    assert b.loss_mask.tolist() == [[0, 0, 1, 1], [0, 0, 0, 0], [0, 0, 0, 0]]  # None and truncated drop out
    assert b.sampler_logp[0].tolist() == pytest.approx([0, 0, -0.1, -0.2])
    assert b.sampler_logp[1].tolist() == pytest.approx([-0.3, -0.4, -0.5, 0])


# ---------------------------------------------------------------- zero-variance groups, exactly


@pytest.mark.parametrize("scale", ["group", "batch", "none"])
def test_equal_fractional_rewards_give_exactly_zero(scale):
    # the float mean of three 0.1s is 0.1 + 1 ulp: a std > 0 test would leave a ~1e-13 advantage
    assert grpo.advantages([0.1] * 3, 3, scale).tolist() == [0.0] * 3
    for v in (0.1, 0.3, 1 / 3, 0.7, 2 / 3, 1e-3, 0.123456789):
        for G in (2, 3, 5, 7, 8):
            assert grpo.advantages([v] * G + [0.0, 1.0] + [0.0] * (G - 2), G, scale, eps=0.0)[:G].tolist() == [0.0] * G
    # mixed None: the valid rewards of groups 1 and 3 are all equal; group 2 is not
    rewards = [0.1, None, 0.1, 0.3, None, 0.7, None, None, 0.7]
    adv = grpo.advantages(rewards, 3, scale)
    assert adv[:3].tolist() == [0.0] * 3 and adv[6:].tolist() == [0.0] * 3
    assert adv[3].item() < 0 < adv[5].item() and adv[4].item() == 0.0
    # float32 tensors as TRL passes them: the same decision
    assert grpo.advantages(torch.tensor([0.1] * 3), 3, scale).tolist() == [0.0] * 3


def test_group_stats_and_the_skip_agree_on_zero_variance():
    rewards = [0.1, 0.1, 0.1, 0.1, None, 0.1, 0.3, 0.7, 0.3, None, None, None]
    s = grpo.group_stats(rewards, 3)
    assert s["zero_std_frac"] == pytest.approx(3 / 4)  # (.1,.1,.1), (.1,None,.1), (None,None,None)
    adv = grpo.advantages(rewards, 3)
    # grpo.step trains a completion only when its advantage != 0: exactly the non-zero-variance group
    assert [i for i, a in enumerate(adv.tolist()) if a != 0] == [6, 7, 8]


# ---------------------------------------------------------------- KL estimators: exact gradients


def _expected_kl_grad(estimator, theta, old_lp, ref_lp):
    """E_{x~π_old}[∇θ estimator(x)] by enumerating the support: each token one row of weight π_old(x)."""
    lp = torch.log_softmax(theta, 0)
    V = lp.numel()
    c = cfg(beta=1.0, kl_estimator=estimator)
    loss, st = grpo.policy_loss(lp[:, None], old_lp[:, None], ref_lp[:, None], torch.zeros(V, dtype=lp.dtype),
                                torch.ones(V, 1, dtype=lp.dtype), c, seq_w=old_lp.exp(), z=1.0)
    return torch.autograd.grad(loss, theta)[0], loss.item()


def _kl(p_lp, q_lp):
    return (p_lp.exp() * (p_lp - q_lp)).sum()


@pytest.mark.parametrize("off_policy", [False, True])
def test_kl_estimator_gradients_against_the_exact_kl(off_policy):
    g = torch.Generator().manual_seed(0)
    V = 6
    theta = (1.5 * torch.randn(V, generator=g)).double().requires_grad_()
    ref_lp = torch.log_softmax(1.5 * torch.randn(V, generator=g).double(), 0)  # far from π_θ: log r up to ~±4
    lp = torch.log_softmax(theta, 0)
    old_lp = torch.log_softmax(theta.detach() + 0.7 * torch.randn(V, generator=g).double(), 0) if off_policy else lp.detach()
    forward = torch.autograd.grad(_kl(lp, ref_lp), theta, retain_graph=True)[0]  # ∇KL(π_θ || π_ref)
    reverse = torch.autograd.grad(_kl(ref_lp, lp), theta)[0]  # ∇KL(π_ref || π_θ)
    assert (forward - reverse).abs().max() > 0.1  # the two differ here: the test can tell them apart

    got, value = _expected_kl_grad("k3_ratio", theta, old_lp, ref_lp)
    torch.testing.assert_close(got, forward, rtol=1e-10, atol=1e-12)
    assert value == pytest.approx(_kl(lp, ref_lp).item(), rel=1e-10)  # value unbiased, also off-policy
    if off_policy:
        return
    got, value = _expected_kl_grad("k3", theta, old_lp, ref_lp)
    torch.testing.assert_close(got, reverse, rtol=1e-10, atol=1e-12)  # k3 differentiated: the reverse KL's gradient
    assert value == pytest.approx(_kl(lp, ref_lp).item(), rel=1e-10)  # while its value is the forward KL
    got, _ = _expected_kl_grad("k2", theta, old_lp, ref_lp)
    torch.testing.assert_close(got, forward, rtol=1e-10, atol=1e-12)


def test_kl_estimators_monte_carlo():
    """The same by sampling tokens, as training does: the mean of the per-sample gradients converges."""
    g = torch.Generator().manual_seed(1)
    V, N = 5, 200_000
    theta = torch.randn(V, generator=g).double().requires_grad_()
    ref_lp = torch.log_softmax(torch.randn(V, generator=g).double(), 0)
    lp = torch.log_softmax(theta, 0)
    x = torch.multinomial(lp.detach().exp(), N, replacement=True, generator=g)
    forward = torch.autograd.grad(_kl(lp, ref_lp), theta, retain_graph=True)[0]
    for est in ("k3_ratio", "k2"):
        loss, _ = grpo.policy_loss(lp[x][:, None], lp.detach()[x][:, None], ref_lp[x][:, None], torch.zeros(N, dtype=lp.dtype),
                                   torch.ones(N, 1, dtype=lp.dtype), cfg(beta=1.0, kl_estimator=est))
        got = torch.autograd.grad(loss, theta, retain_graph=True)[0]
        torch.testing.assert_close(got, forward, rtol=0, atol=0.02)


# ---------------------------------------------------------------- GSPO and CISPO against the papers' formulas


def reference_loss(logp, old, ref, sampler, adv, mask, seq_w, z, c):
    """(loss, d loss / d logp) written per sequence and per token from the papers' formulas.

    GSPO (Zheng et al. 2025): s_i = (π_θ(o_i)/π_old(o_i))^(1/|o_i|), clipped per sequence; in the GSPO-token
    form every token's objective is min(s_i A_i, clip(s_i) A_i), with gradient s_i A_i ∇logπ(o_it) where
    the unclipped arm is the active one, else 0. CISPO (MiniMax-M1): objective sg(min(ρ, 1+ε)) A logπ.
    """
    B, T = len(logp), len(logp[0])
    total, grad = 0.0, [[0.0] * T for _ in range(B)]
    for i in range(B):
        toks = [t for t in range(T) if mask[i][t]]
        if not toks:
            continue
        s = math.exp(sum(logp[i][t] - old[i][t] for t in toks) / len(toks))
        for t in toks:
            rho = s if c.ratio_level == "sequence" else math.exp(logp[i][t] - old[i][t])
            A = adv[i]
            if c.policy_loss == "cispo":
                weight = min(rho, 1 + c.cispo_high)
                pg, dpg = -weight * A * logp[i][t], -weight * A
            else:
                clipped = min(max(rho, 1 - c.clip_low), 1 + c.clip_high)
                pg = -min(rho * A, clipped * A)
                unclipped_active = 1 - c.clip_low <= rho <= 1 + c.clip_high or rho * A < clipped * A
                dpg = -rho * A if unclipped_active else 0.0
            if c.tis_cap > 0:
                tis = min(math.exp(old[i][t] - sampler[i][t]), c.tis_cap)
                pg, dpg = pg * tis, dpg * tis
            kl = dkl = 0.0
            if c.beta > 0:
                log_r = ref[i][t] - logp[i][t]
                k3 = math.exp(log_r) - log_r - 1
                if c.kl_estimator == "k3":
                    kl, dkl = k3, 1 - math.exp(log_r)
                elif c.kl_estimator == "k2":
                    kl, dkl = 0.5 * log_r**2, -log_r
                else:
                    r_old = math.exp(logp[i][t] - old[i][t])
                    kl, dkl = r_old * k3, r_old * k3 + r_old * (1 - math.exp(log_r))
            total += seq_w[i] * (pg + c.beta * kl)
            grad[i][t] = seq_w[i] * (dpg + c.beta * dkl) / z
    return total / z, grad


VARIANT_CFGS = {
    "gspo": cfg(ratio_level="sequence", clip_low=3e-2, clip_high=4e-2),
    "gspo-kl-k3_ratio": cfg(ratio_level="sequence", clip_low=3e-2, clip_high=4e-2, beta=0.1, kl_estimator="k3_ratio"),
    "gspo-tis": cfg(ratio_level="sequence", clip_low=0.05, clip_high=0.1, tis_cap=1.5, beta=0.05),
    "cispo": cfg(policy_loss="cispo", cispo_high=0.3),
    "cispo-k2-tis": cfg(policy_loss="cispo", cispo_high=0.3, beta=0.1, kl_estimator="k2", tis_cap=2.0),
    "cispo-seq": cfg(policy_loss="cispo", ratio_level="sequence", cispo_high=0.05),
    "clip-k3_ratio": cfg(beta=0.1, kl_estimator="k3_ratio"),
}


@pytest.mark.parametrize("name", list(VARIANT_CFGS))
@pytest.mark.parametrize("loss_norm", ["token", "sequence"])
def test_variants_match_the_per_sequence_reference(name, loss_norm):
    c = VARIANT_CFGS[name]
    g = torch.Generator().manual_seed(2)
    B, T = 6, 7
    logp = (-torch.rand(B, T, generator=g) * 3).double().requires_grad_()
    old = logp.detach() + 0.5 * torch.randn(B, T, generator=g).double()  # ratios far from 1: clipping engaged
    ref = logp.detach() + 0.3 * torch.randn(B, T, generator=g).double()
    sampler = old + 0.5 * torch.randn(B, T, generator=g).double()
    adv = torch.tensor([1.0, 0.5, 0.0, 2.0, -1.5, -0.7], dtype=torch.float64)
    mask = (torch.rand(B, T, generator=g) > 0.3).double()
    mask[4] = 0  # a None reward: its row is masked out entirely
    lens = mask.sum(1)
    seq_w = (1 / lens.clamp(min=1)) if loss_norm == "sequence" else torch.ones(B, dtype=torch.float64)
    z = float((lens > 0).sum()) if loss_norm == "sequence" else float(lens.sum())
    loss, st = grpo.policy_loss(logp, old, ref, adv, mask, c, sampler, seq_w, z)
    loss.backward()
    L = lambda x: x.tolist()  # noqa: E731
    want, want_grad = reference_loss(L(logp), L(old), L(ref), L(sampler), L(adv), L(mask), L(seq_w), z, c)
    assert loss.item() == pytest.approx(want, rel=1e-10)
    torch.testing.assert_close(logp.grad, torch.tensor(want_grad, dtype=torch.float64), rtol=1e-9, atol=1e-12)
    assert logp.grad[4].abs().sum() == 0  # the None row adds nothing
    # clipping (or the CISPO cap) is engaged on some tokens and not on others
    engaged = (st["clip_low"] + st["clip_high"]).item()
    assert 0 < engaged < mask.sum().item(), engaged
    if c.policy_loss == "cispo" and c.beta == 0:  # and no token left the gradient: every counted token with A != 0 has one
        assert ((logp.grad != 0) == ((mask > 0) & (adv[:, None] != 0))).all()


@pytest.mark.parametrize("name", ["gspo", "gspo-kl-k3_ratio"])
def test_gspo_gradient_is_the_sequence_ratio_objectives(name):
    """The stop-gradient form has the gradient of the paper's sequence objective Σ_i |o_i|·min(s_i A, clip(s_i) A),
    a plain function of logp: finite differences of the reference's value check the per-token formula."""
    c = VARIANT_CFGS[name]
    g = torch.Generator().manual_seed(3)
    B, T = 3, 4
    logp = (-torch.rand(B, T, generator=g) * 2).double()
    old = logp + 0.1 * torch.randn(B, T, generator=g).double()
    ref = logp + 0.3 * torch.randn(B, T, generator=g).double()
    adv, mask, w = [1.0, -1.0, 0.5], [[1] * T] * B, [1.0] * B
    lp, o, r = logp.tolist(), old.tolist(), ref.tolist()
    _, grad = reference_loss(lp, o, r, o, adv, mask, w, 5.0, c)
    for i in range(B):
        for t in range(T):
            lp[i][t] += 1e-6
            up, _ = reference_loss(lp, o, r, o, adv, mask, w, 5.0, c)
            lp[i][t] -= 2e-6
            down, _ = reference_loss(lp, o, r, o, adv, mask, w, 5.0, c)
            lp[i][t] += 1e-6
            assert grad[i][t] == pytest.approx((up - down) / 2e-6, rel=1e-6, abs=1e-9), (i, t)


def test_gspo_and_cispo_hand_computed():
    # two tokens with log-ratios 0.2 and 0.4 to the old policy; token normaliser z = 2
    logp = torch.tensor([[-1.0, -2.0]], dtype=torch.float64, requires_grad=True)
    old = logp.detach() - torch.tensor([[0.2, 0.4]], dtype=torch.float64)
    mask = torch.ones(1, 2, dtype=torch.float64)
    s = math.exp(0.3)  # GSPO: exp of the mean log-ratio = 1.3499, above 1 + 0.28
    # A = +1: the clipped arm 1.28 is the smaller one at both tokens; loss -1.28, no gradient
    loss, st = grpo.policy_loss(logp, old, None, torch.tensor([1.0], dtype=torch.float64), mask, cfg(ratio_level="sequence"))
    loss.backward()
    assert loss.item() == pytest.approx(-1.28) and logp.grad.tolist() == [[0.0, 0.0]] and st["clip_high"].item() == 2
    # A = -1: the unclipped arm (-s) is the smaller: loss s, each token's gradient s/2 (token-level PPO
    # would instead give 1.2214/2 and 1.4918/2)
    logp.grad = None
    loss, _ = grpo.policy_loss(logp, old, None, torch.tensor([-1.0], dtype=torch.float64), mask, cfg(ratio_level="sequence"))
    loss.backward()
    assert loss.item() == pytest.approx(s) and logp.grad[0].tolist() == pytest.approx([s / 2, s / 2])
    # CISPO, log-ratios 0.2 and 1.0, cap 1 + 1.0 = 2: weights 1.2214, 2; loss -(1.2214·(-1) + 2·(-2))/2
    old = logp.detach() - torch.tensor([[0.2, 1.0]], dtype=torch.float64)
    logp.grad = None
    loss, st = grpo.policy_loss(logp, old, None, torch.tensor([1.0], dtype=torch.float64), mask, cfg(policy_loss="cispo", cispo_high=1.0))
    loss.backward()
    w = math.exp(0.2)
    assert loss.item() == pytest.approx((w + 4) / 2) and logp.grad[0].tolist() == pytest.approx([-w / 2, -1.0])
    assert st["clip_high"].item() == 1
    # the PPO clip drops the second token (ratio e = 2.72 > 1.28, A > 0) from the gradient; CISPO kept it
    logp.grad = None
    grpo.policy_loss(logp, old, None, torch.tensor([1.0], dtype=torch.float64), mask, cfg())[0].backward()
    assert logp.grad[0].tolist() == pytest.approx([-w / 2, 0.0])


@pytest.mark.parametrize("variant", [dict(ratio_level="sequence"), dict(policy_loss="cispo")])
def test_variants_on_policy_have_the_clip_losses_gradient(variant):
    # mu = 1 (old = logp detached): every ratio is 1, and GSPO / CISPO give the same gradient -A·∇logp
    g = torch.Generator().manual_seed(4)
    logp = torch.randn(3, 5, generator=g).double().requires_grad_()
    adv, mask = torch.tensor([1.0, -2.0, 0.5], dtype=torch.float64), torch.ones(3, 5, dtype=torch.float64)
    grpo.policy_loss(logp, logp.detach(), None, adv, mask, cfg(**variant))[0].backward()
    torch.testing.assert_close(logp.grad, (-adv[:, None] / 15).expand(3, 5))


# ---------------------------------------------------------------- the clamp in every mode


def hand_gradient(logp, old, ref, adv, mask, c):
    """d loss / d logp, derived by hand per token in float64 (no autograd): the reference for policy_loss in
    every kl_estimator x ratio_level x policy_loss mode. A token past the clamp (|log ratio| > clamp, to the
    sampling policy or the reference) gets 0; under GSPO one such token stops its whole completion."""
    B, T = len(logp), len(logp[0])
    z = max(sum(sum(row) for row in mask), 1)
    grad = [[0.0] * T for _ in range(B)]
    for i in range(B):
        A = adv[i]
        counted = [t for t in range(T) if mask[i][t]]
        lr = [max(-c.log_ratio_clamp, min(c.log_ratio_clamp, logp[i][t] - old[i][t])) for t in range(T)]
        ok = [abs(logp[i][t] - old[i][t]) <= c.log_ratio_clamp for t in range(T)]
        if c.ratio_level == "sequence":
            s = math.exp(sum(lr[t] for t in counted) / max(len(counted), 1))
            rho, ok = [s] * T, [all(ok[t] for t in counted)] * T
        else:
            rho = [math.exp(x) for x in lr]
        for t in counted:
            g = 0.0
            if ok[t]:
                if c.policy_loss == "cispo":
                    g = -min(rho[t], 1 + c.cispo_high) * A
                else:
                    clipped = min(max(rho[t], 1 - c.clip_low), 1 + c.clip_high)
                    g = -A * rho[t] if rho[t] * A <= clipped * A else 0.0  # the unclipped arm is active (or both are)
            if c.beta > 0:
                d = ref[i][t] - logp[i][t]  # log pi_ref / pi
                inside_ref = abs(d) <= c.log_ratio_clamp
                if c.kl_estimator == "k2":
                    g += c.beta * (-d) * inside_ref
                elif c.kl_estimator == "k3":
                    g += c.beta * (1 - math.exp(d)) * inside_ref
                else:  # k3_ratio: e^lr * k3(d), both factors depend on logp
                    k3 = math.exp(d) - d - 1
                    g += c.beta * math.exp(lr[t]) * (k3 + 1 - math.exp(d)) * (inside_ref and ok[t])
            grad[i][t] = g / z
    return grad


MODES = [(est, level, loss) for est in ("k3", "k3_ratio", "k2") for level in ("token", "sequence") for loss in ("clip", "cispo")]


@pytest.mark.parametrize("est,level,loss", MODES)
def test_the_clamp_holds_in_every_mode(est, level, loss):
    """Random log-probs with some tokens far past the clamp (to the sampling policy and to the reference):
    policy_loss's gradient equals the hand-derived float64 reference, and no token past the clamp gets any."""
    rng = random.Random(hash((est, level, loss)) % 1000)
    c = cfg(beta=0.1, kl_estimator=est, ratio_level=level, policy_loss=loss, log_ratio_clamp=3.0)
    B, T = 6, 5
    logp = [[-rng.uniform(0.1, 4) for _ in range(T)] for _ in range(B)]
    old = [[x + rng.choice([rng.uniform(-0.5, 0.5), rng.uniform(-0.5, 0.5), rng.uniform(3.5, 6) * rng.choice([-1, 1])])
            for x in row] for row in logp]
    ref = [[x + rng.choice([rng.uniform(-1, 1), rng.uniform(3.5, 6) * rng.choice([-1, 1])]) for x in row] for row in logp]
    adv = [rng.choice([-1.3, -0.4, 0.6, 1.1]) for _ in range(B)]
    mask = [[1.0] * T for _ in range(B)]
    mask[0][4] = mask[3][0] = 0.0
    old[1] = [x + 0.2 for x in logp[1]]  # one completion wholly inside the clamp (GSPO gives it a gradient)
    lp = torch.tensor(logp, dtype=torch.float64, requires_grad=True)
    loss_, _ = grpo.policy_loss(lp, torch.tensor(old, dtype=torch.float64), torch.tensor(ref, dtype=torch.float64),
                                torch.tensor(adv, dtype=torch.float64), torch.tensor(mask, dtype=torch.float64), c)
    loss_.backward()
    want = torch.tensor(hand_gradient(logp, old, ref, adv, mask, c), dtype=torch.float64)
    torch.testing.assert_close(lp.grad, want, rtol=1e-12, atol=1e-12)
    past = torch.tensor([[abs(a - b) > 3.0 for a, b in zip(r1, r2)] for r1, r2 in zip(logp, old)])
    past_ref = torch.tensor([[abs(a - b) > 3.0 for a, b in zip(r1, r2)] for r1, r2 in zip(logp, ref)])
    if est == "k3_ratio" or level == "token":  # past both, or (token level) past the sampling ratio with no KL term
        assert (lp.grad[past & past_ref] == 0).all()
    assert past.any() and past_ref.any() and lp.grad.abs().sum() > 0  # the case really has both kinds


def test_k3_ratio_gives_no_gradient_past_the_clamp():
    """The issue's case: logp -25 against a reference at -1 (mu = 1, so pi = pi_old). Before the fix the
    k3_ratio term's gradient was e^20 - 21 ~ 4.85e8 (the clamped k3 value times the ratio's gradient)."""
    logp = torch.tensor([[-25.0, -1.2]], dtype=torch.float64, requires_grad=True)
    ref = torch.tensor([[-1.0, -1.0]], dtype=torch.float64)
    loss, _ = grpo.policy_loss(logp, logp.detach(), ref, torch.tensor([0.0], dtype=torch.float64),
                               torch.ones(1, 2, dtype=torch.float64), cfg(beta=1.0, kl_estimator="k3_ratio"))
    loss.backward()
    assert logp.grad[0, 0] == 0
    d = 0.2  # token 1: log pi_ref / pi; k3_ratio's gradient at rho = 1 is k3 + 1 - e^d
    assert logp.grad[0, 1].item() == pytest.approx((math.exp(d) - d - 1 + 1 - math.exp(d)) / 2, rel=1e-12)


def test_gspo_gives_no_gradient_to_a_completion_with_a_runaway_token():
    """The issue's case: A = -1, token log ratios [25, 0]. Before the fix both tokens got ~1.1e4 (e^10 / 2:
    the mean of the clamped log ratios); now the completion gets none, and a completion inside the clamp keeps
    GSPO's gradient -A * s / z."""
    logp = torch.tensor([[-1.0, -2.0], [-1.0, -2.0]], dtype=torch.float64, requires_grad=True)
    old = torch.tensor([[-26.0, -2.0], [-1.1, -2.1]], dtype=torch.float64)
    for loss_name in ("clip", "cispo"):
        logp.grad = None
        loss, _ = grpo.policy_loss(logp, old, None, torch.tensor([-1.0, -1.0], dtype=torch.float64),
                                   torch.ones(2, 2, dtype=torch.float64), cfg(ratio_level="sequence", policy_loss=loss_name))
        loss.backward()
        assert (logp.grad[0] == 0).all() and math.isfinite(loss.item())
        torch.testing.assert_close(logp.grad[1], torch.full((2,), math.exp(0.1) / 4, dtype=torch.float64))


@pytest.mark.parametrize("est,level,loss", MODES)
def test_runaway_tokens_give_finite_bounded_gradients(est, level, loss):
    """Property: log ratios up to +-100 to both the sampling policy and the reference, tis on, in float32 as
    training runs: the loss and every gradient are finite, and bounded by what the clamp allows."""
    g = torch.Generator().manual_seed(7)
    c = cfg(beta=0.5, kl_estimator=est, ratio_level=level, policy_loss=loss, log_ratio_clamp=5.0, tis_cap=2.0)
    for _ in range(20):
        logp = (-torch.rand(8, 6, generator=g) * 5).requires_grad_()
        old = logp.detach() + (torch.rand(8, 6, generator=g) * 200 - 100) * (torch.rand(8, 6, generator=g) < 0.3)
        ref = logp.detach() + (torch.rand(8, 6, generator=g) * 200 - 100) * (torch.rand(8, 6, generator=g) < 0.3)
        sampler = old + torch.rand(8, 6, generator=g) * 4 - 2
        adv = torch.randn(8, generator=g) * 3
        loss_, st = grpo.policy_loss(logp, old, ref, adv, torch.ones(8, 6), c, sampler_logp=sampler)
        loss_.backward()
        assert math.isfinite(loss_.item()) and torch.isfinite(logp.grad).all()
        # per token at most |A| * e^5 * tis_cap (policy) + beta * e^5 * (e^5 + 6) (k3_ratio's KL), over z = 48
        bound = (adv.abs().max() * math.exp(5) * 2 + 0.5 * math.exp(5) * (math.exp(5) + 6)) / 48
        assert logp.grad.abs().max() <= bound * 1.0001


def test_misaligned_rollouts_are_named_errors():
    """One log-prob for two tokens used to be broadcast onto both; a one-entry mask dropped the second token."""
    with pytest.raises(ValueError, match="1 sampler log-probs for 2 completion tokens"):
        grpo.Rollout([1], [5, 6], [-0.1], 1.0, False)
    with pytest.raises(ValueError, match="completion_mask of 1 for 2 completion tokens"):
        grpo.Rollout([1], [5, 6], [-0.1, -0.2], 1.0, False, 0.0, [1])
    grpo.Rollout([1], [5, 6], [-0.1, -0.2], 1.0, False, 0.0, [1, 0])  # aligned: fine


# ---------------------------------------------------------------- baselines and clips


def test_rloo_is_the_leave_one_out_baseline():
    """scale = rloo: A_i = r_i - mean of the other valid rewards of its group, unscaled; None rewards are left
    out (and get 0); a group with one valid reward gets 0."""
    rewards = [1.0, 0.0, 0.5, None, 0.3, 0.3, 0.9, 0.0, None, None, 1.0, None]
    got = grpo.advantages(rewards, 4, "rloo").tolist()
    want = []
    for g in range(0, len(rewards), 4):
        group = rewards[g : g + 4]
        for i, r in enumerate(group):
            others = [x for j, x in enumerate(group) if j != i and x is not None]
            want.append(0.0 if r is None or not others else r - sum(others) / len(others))
    assert got == pytest.approx(want, abs=1e-6)
    assert got[:3] == pytest.approx([0.75, -0.75, 0.0], abs=1e-6)  # by hand: 1 - (0 + 0.5) / 2, ...


def test_dual_clip_caps_a_negative_advantage_token():
    """Dual-clip PPO: with A < 0 the clip loss keeps the unclipped arm rho * |A|, unbounded in rho; dual_clip = 3
    caps it at 3 |A| and that token's gradient is 0; tokens under the cap, and positive advantages, unchanged."""
    logp = torch.tensor([[2.0, math.log(2.0)], [2.0, 0.0]], dtype=torch.float64, requires_grad=True)
    old = torch.zeros(2, 2, dtype=torch.float64)
    adv = torch.tensor([-1.0, 1.0], dtype=torch.float64)
    loss, _ = grpo.policy_loss(logp, old, None, adv, torch.ones(2, 2, dtype=torch.float64), cfg(dual_clip=3.0))
    loss.backward()
    assert loss.item() == pytest.approx((3.0 + 2.0 - 1.28 - 1.0) / 4)  # capped, rho |A|, clipped arm, rho = 1
    assert logp.grad.flatten().tolist() == pytest.approx([0.0, 2.0 / 4, 0.0, -1.0 / 4])


def test_cispo_floor():
    """cispo_low: the detached weight is floored at 1 - cispo_low (default 1: no floor, as in the paper)."""
    logp = torch.tensor([[math.log(0.3), math.log(0.8)]], dtype=torch.float64, requires_grad=True)
    for low, w0 in ((1.0, 0.3), (0.5, 0.5)):
        logp.grad = None
        loss, st = grpo.policy_loss(logp, torch.zeros(1, 2, dtype=torch.float64), None, torch.tensor([1.0], dtype=torch.float64),
                                    torch.ones(1, 2, dtype=torch.float64), cfg(policy_loss="cispo", cispo_low=low))
        loss.backward()
        assert logp.grad.flatten().tolist() == pytest.approx([-w0 / 2, -0.8 / 2])
        assert st["clip_low"].item() == (1 if low == 0.5 else 0)


@pytest.mark.parametrize("est", ["k3", "k3_ratio", "k2"])
def test_kl_clamp_caps_the_estimate(est):
    """kl_clamp = 10 (verl, NeMo-RL): a token whose KL estimate is above 10 counts 10 and gets no KL gradient;
    one under it is unchanged."""
    logp = torch.tensor([[-7.0, -1.2]], dtype=torch.float64, requires_grad=True)
    ref = torch.tensor([[-1.0, -1.0]], dtype=torch.float64)  # log pi_ref/pi = 6: k3 = e^6 - 7 ~ 396, k2 = 18
    grads, kls = {}, {}
    for clamp in (0.0, 10.0):
        logp.grad = None
        loss, st = grpo.policy_loss(logp, logp.detach(), ref, torch.zeros(1, dtype=torch.float64), torch.ones(1, 2, dtype=torch.float64),
                                    cfg(beta=1.0, kl_estimator=est, kl_clamp=clamp))
        loss.backward()
        grads[clamp], kls[clamp] = logp.grad.clone(), st["kl"].item()
    k_small = {"k2": 0.5 * 0.2**2}.get(est, math.exp(0.2) - 0.2 - 1)
    assert kls[10.0] == pytest.approx(10.0 + k_small)
    assert grads[10.0][0, 0] == 0 and grads[0.0][0, 0] != 0 and grads[10.0][0, 1] == grads[0.0][0, 1]


def test_the_advantage_scales_are_the_configs_choices():
    from nanogrpo import config as C

    assert grpo.SCALES == C.CHOICES["scale"]
