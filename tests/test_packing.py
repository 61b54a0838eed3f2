"""Padding-free (packed) micro-batches against the padded computation they replace.

The packed row attends within each sequence only (position ids restart per sequence), so its
log-probs, loss and gradients equal the padded ones to fp32 rounding; ranks with different numbers
of packed micro-batches still run the same number (loss-free fillers), and 2 uneven ranks equal
1 process. Run as a script under torchrun, this file is its own 2-rank worker.
"""

import json
import os
import random
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

ROOT = Path(__file__).parent.parent
sys.path.insert(0, str(ROOT))

from helpers import update_check  # noqa: E402
from nanogrpo import dist, grpo, packing  # noqa: E402
from nanogrpo import model as M  # noqa: E402

VOCAB = 90  # below the tiny tokenizer's size


def cfg(**kw):
    base = dict(clip_low=0.2, clip_high=0.28, beta=0.0, tis_cap=0.0, loss_norm="token", mask_truncated=True,
                max_new_tokens=12, micro_batch_size=4, micro_batch_tokens=0, temperature=0.9, mu=1, grad_clip=0.0,
                skip_zero_advantage=True, kl_estimator="k3", ratio_level="token", policy_loss="clip", cispo_high=4.0,
                cispo_low=1.0, dual_clip=0.0, kl_clamp=10.0, log_ratio_clamp=20.0, grad_accumulation="sharded",
                max_sample_z=0.0, async_steps=0, top_p=1.0)
    base.update(kw)
    return SimpleNamespace(**base)


def rollouts(n_prompts=4, group=4, seed=0):
    """Mixed lengths (prompts 2-7, completions 1-12 tokens), some None rewards, some truncated."""
    return update_check.fixed_rollouts(n_prompts, group, VOCAB, seed, max_prompt=7, max_completion=12)


# ---------------------------------------------------------------- the plan and the layout


def test_plan_respects_the_budget_and_places_every_sequence_once():
    rng = random.Random(1)
    lengths = [rng.randint(1, 40) for _ in range(50)] + [70]  # 70 > budget: alone
    groups = packing.plan(lengths, 64)
    assert sorted(i for g in groups for i in g) == list(range(len(lengths)))
    assert all(sum(lengths[i] for i in g) <= 64 for g in groups if len(g) > 1)
    assert [50] in groups
    # first-fit decreasing is near the lower bound on the number of micro-batches
    assert len(groups) <= -(-sum(lengths) // 64) + 2
    assert packing.plan(lengths, 64) == groups  # deterministic
    with pytest.raises(ValueError, match="budget"):
        packing.plan([3], 0)


def test_packed_layout_positions_and_index():
    rs = rollouts(2, 3)
    (b,) = grpo.make_batches(rs, 99, pad_id=1, cfg=cfg(), micro_batch_tokens=1000)
    assert b.attention_mask is None and b.input_ids.shape[0] == 1
    assert b.input_ids.shape[1] == sum(len(r.prompt_ids) + len(r.completion_ids) for r in rs)  # no padding
    pos = b.position_ids[0].tolist()
    starts = [i for i, p in enumerate(pos) if p == 0]
    assert len(starts) == len(rs) and all(pos[i] == pos[i - 1] + 1 for i in range(1, len(pos)) if i not in starts)
    row = b.input_ids[0]
    # the lm_head sees exactly the completion tokens: position k predicts row token positions[k] + 1
    assert row[b.positions + 1].tolist() == [t for r in rs for t in r.completion_ids]
    L = b.loss_mask.shape[1]
    for i, r in enumerate(rs):
        c = len(r.completion_ids)
        mine = (b.dest >= i * L) & (b.dest < (i + 1) * L)
        assert (b.dest[mine] - i * L).tolist() == list(range(c))  # completion i fills row i of the loss layout
        assert b.sampler_logp[i, :c].tolist() == pytest.approx(r.sampler_logprobs)
        assert b.loss_mask[i].sum().item() == (c if grpo.counts(r, True) else 0)
    assert b.advantages.tolist() == pytest.approx([r.advantage for r in rs])
    # the padded layout selects the same tokens
    (pad,) = grpo.make_batches(rs, 99, pad_id=1, cfg=cfg())
    assert pad.input_ids[:, 1:].reshape(-1)[pad.positions].tolist() == [t for r in rs for t in r.completion_ids]


def test_empty_prompt_is_a_clear_error():
    r = grpo.Rollout([], [5, 6], [-0.1, -0.2], 1.0, False, 0.5)
    with pytest.raises(ValueError, match="empty prompt"):
        grpo.make_batches([r], 4, pad_id=1, cfg=cfg(), micro_batch_tokens=64)


# ---------------------------------------------------------------- packed == padded


def test_packed_logprobs_and_gradients_equal_padded(tiny_untied_model_dir):
    hf = M.load_model(tiny_untied_model_dir)
    rs = rollouts(2, 4, seed=3)
    c = cfg()
    (pad,) = grpo.make_batches(rs, 99, 1, c)
    (pk,) = grpo.make_batches(rs, 99, 1, c, micro_batch_tokens=1000)
    want, want_ent = M.Policy(hf, 5)(pad.input_ids, pad.attention_mask, 0.9, with_entropy=True)
    got, got_ent = M.Policy(hf, 5)(pk.input_ids, None, 0.9, with_entropy=True, position_ids=pk.position_ids)
    # only the completion positions through the lm_head: the same values
    sel, sel_ent = M.Policy(hf, 5)(pk.input_ids, None, 0.9, with_entropy=True,
                                    position_ids=pk.position_ids, positions=pk.positions)
    torch.testing.assert_close(sel[0], got.reshape(-1)[pk.positions], atol=1e-6, rtol=0)
    torch.testing.assert_close(sel_ent[0], got_ent.reshape(-1)[pk.positions], atol=1e-5, rtol=0)
    L = pk.loss_mask.shape[1]
    got = torch.zeros(pk.loss_mask.numel()).scatter(0, pk.dest, sel[0]).view(-1, L)  # (N, L)
    got_ent = torch.zeros(pk.loss_mask.numel()).scatter(0, pk.dest, sel_ent[0]).view(-1, L)
    for i, r in enumerate(rs):
        p, n = len(r.prompt_ids), len(r.completion_ids)
        torch.testing.assert_close(got[i, :n], want[i, p - 1 : p - 1 + n], atol=1e-5, rtol=0)
        torch.testing.assert_close(got_ent[i, :n], want_ent[i, p - 1 : p - 1 + n], atol=1e-4, rtol=0)
    # the same sequences packed without restarting positions attend across boundaries: different values
    # (so the equality above is not an accident of the mask being ignored)
    leak, _ = M.Policy(hf, 5)(pk.input_ids, torch.ones_like(pk.input_ids), 0.9, positions=pk.positions)
    assert (leak - sel).abs().max() > 1e-3
    want = want * pad.loss_mask.ne(0)  # the loss sees log-probs at counted completion tokens only
    # loss and gradients
    losses = []
    for b, lp in ((pad, want), (pk, got)):
        loss, _ = grpo.policy_loss(lp, lp.detach(), None, b.advantages, b.loss_mask, c, seq_w=b.seq_weight, z=20.0)
        hf.zero_grad()
        loss.backward()
        losses.append((loss.item(), {n: q.grad.clone() for n, q in hf.named_parameters()}))
    assert losses[0][0] == pytest.approx(losses[1][0], abs=1e-6)
    assert any(g.abs().max() > 0 for g in losses[0][1].values())
    for n, g in losses[0][1].items():
        torch.testing.assert_close(losses[1][1][n], g, atol=1e-5, rtol=1e-4, msg=n)


def update(model_dir, out, budget, loss_norm="token", mu=1, beta=0.0, uneven=False, device="cpu"):
    """One grpo.step on fixed rollouts (this rank's share) on `device`; saves weights, stats, micro-batch counts."""
    device = dist.init(device)
    torch.manual_seed(0)
    c = cfg(loss_norm=loss_norm, mu=mu, beta=beta, micro_batch_tokens=budget)
    policy = M.make_policy(model_dir, device, torch.float32, chunk_size=4, activation_checkpointing=False)
    ref = M.make_policy(model_dir, device, torch.float32, 4, False, trainable=False) if beta > 0 else None
    with torch.no_grad():  # move the reference off the policy so the KL term is not 0
        for p in ref.parameters() if ref is not None else []:
            p.mul_(0.9)
    opt = torch.optim.SGD(policy.parameters(), lr=1.0)  # weights after = weights - grad
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda i: 1.0)
    rs = rollouts()
    if dist.world_size() > 1:  # rank 0: 12 rollouts, rank 1: 4: different micro-batch counts
        cut = 12 if uneven else len(rs) // 2
        rs = rs[:cut] if dist.rank() == 0 else rs[cut:]
    n_batches = len(grpo.make_batches(rs, c.micro_batch_size, 1, c, budget))
    stats = grpo.step(policy, ref, opt, sched, rs, c, pad_id=1)
    counts = dist.all_gather_object(n_batches)
    weights = M.full_state_dict_cpu(policy)
    if dist.is_main():
        torch.save({"weights": weights, "stats": stats, "counts": counts}, out)
    dist.barrier()  # both ranks finish their work before either tears the group down
    dist.close()
    return out


def same(a, b, tol=2e-6):
    for k in ("loss", "kl", "entropy", "clip_low_frac", "clip_high_frac", "train_tokens", "grad_norm"):
        assert a["stats"][k] == pytest.approx(b["stats"][k], rel=1e-5, abs=1e-7), k
    for name, w in a["weights"].items():
        torch.testing.assert_close(w, b["weights"][name], rtol=0, atol=tol, msg=name)


@pytest.mark.slow
@pytest.mark.gpu
@pytest.mark.parametrize("loss_norm,mu,beta", [("token", 1, 0.0), ("sequence", 2, 0.1)])
def test_packed_update_equals_padded(tiny_model_dir, tmp_path, device, loss_norm, mu, beta):
    padded = torch.load(update(tiny_model_dir, tmp_path / "pad.pt", 0, loss_norm, mu, beta, device=device.type))
    packed = torch.load(update(tiny_model_dir, tmp_path / "pack.pt", 24, loss_norm, mu, beta, device=device.type))
    assert packed["counts"][0] > 1  # a budget of 24 tokens really splits the step
    assert padded["stats"]["grad_norm"] > 0
    if beta:
        assert packed["stats"]["kl"] > 0
    same(padded, packed)


@pytest.mark.slow
def test_two_uneven_ranks_equal_one_process(tiny_model_dir, tmp_path):
    one = torch.load(update(tiny_model_dir, tmp_path / "one.pt", 24))
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", __file__,
           tiny_model_dir, str(tmp_path / "two.pt"), "24"]
    subprocess.run(cmd, check=True, env=env, cwd=ROOT, capture_output=True, timeout=300)
    two = torch.load(tmp_path / "two.pt")
    a, b = two["counts"]
    assert a != b, two["counts"]  # the ranks packed different numbers of micro-batches
    same(one, two)


if __name__ == "__main__":  # the 2-rank worker: MODEL OUT BUDGET
    update(sys.argv[1], sys.argv[2], int(sys.argv[3]), uneven=True)
    print(json.dumps("ok"))
