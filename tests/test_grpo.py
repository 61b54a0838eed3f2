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
                log_ratio_clamp=20.0)
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
