"""One GRPO update on fixed rollouts; writes the updated weights and the step's stats.

Run alone (`python update_check.py MODEL OUT MICRO_BATCH [LOSS_NORM MU BETA JSON_OVERRIDES]`) or under torchrun: each rank takes its slice
of the same global rollouts, so every run should produce the same weights to float32 rounding.
"""

import json
import random
import sys
from types import SimpleNamespace

import torch

from nanogrpo import dist, grpo, lora
from nanogrpo import model as M


def fixed_rollouts(n_prompts=4, group=4, vocab=200, seed=0, max_prompt=6, max_completion=9):
    """Mixed lengths, some None rewards, truncated completions (those of max_completion tokens)."""
    rng = random.Random(seed)
    rewards = [rng.choice([0.0, 1.0, None]) if i % 5 else 1.0 for i in range(n_prompts * group)]
    adv = grpo.advantages(rewards, group, "group")
    out = []
    for i in range(n_prompts * group):
        prompt = [rng.randrange(2, vocab) for _ in range(rng.randint(2, max_prompt))]
        comp = [rng.randrange(2, vocab) for _ in range(rng.randint(1, max_completion))]
        out.append(grpo.Rollout(prompt, comp, [-rng.random() for _ in comp], rewards[i], len(comp) == max_completion, adv[i].item()))
    return out


def config(**over) -> SimpleNamespace:
    """The update's config for fixed_rollouts (max_new_tokens = their longest completion)."""
    cfg = SimpleNamespace(clip_low=0.2, clip_high=0.28, beta=0.0, tis_cap=0.0, loss_norm="token", mask_truncated=True,
                          skip_zero_advantage=True, max_new_tokens=9, micro_batch_size=4, micro_batch_tokens=0,
                          temperature=0.9, mu=1, grad_clip=0.0, kl_estimator="k3", ratio_level="token", policy_loss="clip",
                          cispo_high=4.0, cispo_low=1.0, dual_clip=0.0, kl_clamp=10.0,
                          log_ratio_clamp=20.0, grad_accumulation="sharded", max_sample_z=0.0, async_steps=0,
                          top_p=1.0)
    cfg.__dict__.update(over)
    return cfg


def main(model_dir, out, micro_batch, loss_norm="token", mu=1, beta=0.0, **over):
    """`over`: further config fields (the loss variant: ratio_level, policy_loss, kl_estimator, ...)."""
    device = dist.init("cpu")
    torch.manual_seed(0)
    lora_rank = over.pop("lora_rank", 0)
    dtype = getattr(torch, over.pop("dtype", "float32"))  # bfloat16 / float16: FSDP2 mixed precision (fp32 master, fp32 reduce)
    cfg = config(beta=beta, loss_norm=loss_norm, micro_batch_size=micro_batch, mu=mu, **over)
    if lora_rank:  # adapters with a non-zero B (the policy differs from its base, the reference), then sharded
        hf = M.load_model(model_dir)
        lora.add_adapters(hf, lora_rank, 8.0, ["q_proj", "v_proj", "down_proj"])
        with torch.no_grad():
            for m in lora.lora_modules(hf).values():
                m.lora_B.copy_(0.05 * torch.randn(m.lora_B.shape, generator=torch.Generator().manual_seed(1)))
        policy = M.wrap_policy(hf, dtype, 3, False)
        ref = lora.BaseModel(policy) if beta > 0 else None
    else:
        policy = M.make_policy(model_dir, device, dtype, chunk_size=3, activation_checkpointing=False)
        ref = M.make_policy(model_dir, device, dtype, 3, False, trainable=False) if beta > 0 else None
    with torch.no_grad():  # move the reference away from the policy so the KL term is not trivially 0
        for p in (ref.parameters() if ref is not None and not lora_rank else []):
            p.mul_(0.9)
    opt = torch.optim.SGD([p for p in policy.parameters() if p.requires_grad], lr=1.0)  # weights after = weights - grad: compares gradients
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda i: 1.0)
    rollouts = fixed_rollouts()
    n = len(rollouts) // dist.world_size()
    mine = rollouts[dist.rank() * n : (dist.rank() + 1) * n]
    stats = grpo.step(policy, ref, opt, sched, mine, cfg, pad_id=1)
    weights = M.full_state_dict_cpu(policy)
    if dist.is_main():
        torch.save({"weights": weights, "stats": stats}, out)
        print(json.dumps(stats))
    dist.barrier()  # both ranks finish their work before either tears the group down
    dist.close()


if __name__ == "__main__":
    a = sys.argv[1:]
    main(a[0], a[1], int(a[2]), a[3] if len(a) > 3 else "token", int(a[4]) if len(a) > 4 else 1, float(a[5]) if len(a) > 5 else 0.0,
         **(json.loads(a[6]) if len(a) > 6 else {}))
