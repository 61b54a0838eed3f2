"""The update does not depend on how a step is split: micro-batches, or 2 ranks instead of 1 process."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from helpers import update_check

HELPER = Path(__file__).parent / "helpers" / "update_check.py"
ROOT = Path(__file__).parent.parent


# loss variants (grpo.py docstring); with mu = 2 the second pass runs off-policy, ratios far from 1
VARIANTS = {
    "clip": {},
    "gspo": {"ratio_level": "sequence", "clip_low": 3e-3, "clip_high": 4e-3},
    "cispo": {"policy_loss": "cispo", "cispo_high": 0.5},
    "gspo-cispo-k2": {"ratio_level": "sequence", "policy_loss": "cispo", "cispo_high": 0.2, "kl_estimator": "k2"},
    "k3_ratio": {"kl_estimator": "k3_ratio"},
    "lora": {"lora_rank": 4},  # adapters sharded with their layers; the reference is the base (adapters off)
}


def run(model_dir, out, micro_batch, loss_norm="token", mu=1, beta=0.0, nproc=1, **over):
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    args = [str(HELPER), model_dir, str(out), str(micro_batch), loss_norm, str(mu), str(beta), json.dumps(over)]
    if nproc == 1:  # in-process: the same code path (a one-rank process group), without a fresh interpreter
        update_check.main(model_dir, str(out), micro_batch, loss_norm, mu, beta, **over)
        return torch.load(out)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}", *args]
    res = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, f"torchrun exited {res.returncode}; its stderr ends:\n{res.stderr[-4000:]}"
    return torch.load(out)


def assert_same(a, b, tol=2e-6):
    for k in ("loss", "kl", "entropy", "clip_low_frac", "clip_high_frac", "train_tokens"):
        assert a["stats"][k] == pytest.approx(b["stats"][k], rel=1e-5, abs=1e-7), k
    for name, w in a["weights"].items():
        torch.testing.assert_close(w, b["weights"][name], rtol=0, atol=tol, msg=name)


@pytest.mark.slow
@pytest.mark.parametrize("loss_norm,variant", [("token", "clip"), ("sequence", "clip"), ("constant", "clip"),
                                               ("token", "gspo"), ("sequence", "cispo")])
def test_micro_batch_split_does_not_change_the_update(tiny_model_dir, tmp_path, loss_norm, variant):
    whole = run(tiny_model_dir, tmp_path / "whole.pt", 16, loss_norm, **VARIANTS[variant])
    split = run(tiny_model_dir, tmp_path / "split.pt", 3, loss_norm, **VARIANTS[variant])
    assert_same(whole, split)
    # and the update is not trivially zero
    assert whole["stats"]["grad_norm"] > 0


@pytest.mark.slow
@pytest.mark.parametrize("variant", list(VARIANTS))
def test_mu_and_kl_split_invariant(tiny_model_dir, tmp_path, variant):
    whole = run(tiny_model_dir, tmp_path / "whole.pt", 16, "token", mu=2, beta=0.1, **VARIANTS[variant])
    split = run(tiny_model_dir, tmp_path / "split.pt", 5, "token", mu=2, beta=0.1, **VARIANTS[variant])
    assert whole["stats"]["kl"] > 0
    assert_same(whole, split)


@pytest.mark.parametrize("loss_norm,variant,mu", [("token", "clip", 1), ("sequence", "clip", 1), ("token", "gspo", 2),
                                                  ("sequence", "cispo", 2), ("token", "lora", 2)])
@pytest.mark.slow
def test_two_ranks_equal_one_process(tiny_model_dir, tmp_path, loss_norm, variant, mu):
    one = run(tiny_model_dir, tmp_path / "one.pt", 4, loss_norm, mu=mu, **VARIANTS[variant])
    two = run(tiny_model_dir, tmp_path / "two.pt", 4, loss_norm, mu=mu, nproc=2, **VARIANTS[variant])
    assert_same(one, two)
    assert one["stats"]["grad_norm"] > 0


def _policy_and_cfg(model_dir, opt_cls, lr):
    from nanogrpo import dist
    from nanogrpo import model as M

    dist.init("cpu")
    policy = M.make_policy(model_dir, torch.device("cpu"), torch.float32, 3, False)
    opt = opt_cls(policy.parameters(), lr=lr)
    return policy, opt, torch.optim.lr_scheduler.LambdaLR(opt, lambda i: 1.0), update_check.config()


def test_zero_advantage_completions_are_skipped_without_changing_the_update(tiny_model_dir):
    """grpo.step runs only completions with advantage != 0 (beta = 0). Reference: a naive loop over
    every counted completion, zero-advantage ones included, with the plain HF model: SGD with lr 1
    makes the weight change equal to minus the gradient."""
    from transformers import AutoModelForCausalLM

    from nanogrpo import grpo
    from nanogrpo import model as M

    rollouts = update_check.fixed_rollouts()
    assert any(r.advantage == 0 and grpo.counts(r, True) for r in rollouts)  # the case under test occurs
    policy, opt, sched, cfg = _policy_and_cfg(tiny_model_dir, torch.optim.SGD, lr=1.0)
    before = M.full_state_dict_cpu(policy)
    stats = grpo.step(policy, None, opt, sched, rollouts, cfg, pad_id=1)
    after = M.full_state_dict_cpu(policy)
    trained = [r for r in rollouts if r.advantage != 0 and grpo.counts(r, True)]
    assert stats["train_tokens"] == sum(len(r.completion_ids) for r in trained)

    ref = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    counted = [r for r in rollouts if grpo.counts(r, True)]
    z = sum(len(r.completion_ids) for r in counted)  # token normaliser over every counted completion
    for r in counted:
        ids = torch.tensor([r.prompt_ids + r.completion_ids])
        logits = ref(ids).logits[0, len(r.prompt_ids) - 1 : -1] / cfg.temperature
        logp = torch.log_softmax(logits, -1).gather(1, torch.tensor(r.completion_ids)[:, None])[:, 0]
        mask = torch.ones(1, len(logp))
        loss, _ = grpo.policy_loss(logp[None], logp[None].detach(), None, torch.tensor([r.advantage]), mask, cfg, z=z)
        loss.backward()
    grads = dict(ref.named_parameters())
    for name, w in before.items():
        g = grads[name].grad if grads[name].grad is not None else torch.zeros_like(w)
        torch.testing.assert_close(before[name] - after[name], g, rtol=0, atol=2e-6, msg=name)


@pytest.mark.slow
def test_a_step_with_nothing_to_train_still_moves_adams_moments(tiny_model_dir):
    """All advantages 0: no forward runs, but AdamW must see a zero gradient (its momentum keeps moving
    the weights), exactly as if every completion had been run."""
    from nanogrpo import grpo
    from nanogrpo import model as M

    rollouts = update_check.fixed_rollouts()
    flat = [grpo.Rollout(r.prompt_ids, r.completion_ids, r.sampler_logprobs, 0.0, False, 0.0) for r in rollouts]
    runs = []
    for manual in (False, True):
        policy, opt, sched, cfg = _policy_and_cfg(tiny_model_dir, torch.optim.AdamW, lr=1e-3)
        grpo.step(policy, None, opt, sched, rollouts, cfg, pad_id=1)  # a real update first: momentum != 0
        mid = M.full_state_dict_cpu(policy)
        if manual:  # the reference: AdamW stepped with zero gradients
            for q in policy.parameters():
                q.grad = torch.zeros_like(q)
            opt.step()
            sched.step()
        else:
            stats = grpo.step(policy, None, opt, sched, flat, cfg, pad_id=1)
            assert stats["train_tokens"] == 0 and stats["grad_norm"] == 0
        runs.append((mid, M.full_state_dict_cpu(policy)))
    (mid, skipped), (_, manual) = runs
    assert any(not torch.equal(mid[k], skipped[k]) for k in mid)  # momentum moved the weights
    for k in skipped:
        torch.testing.assert_close(skipped[k], manual[k], rtol=0, atol=0, msg=k)
