"""What gloo is asked to move and sum in a low-precision run (run under torchrun; rank 0 writes a JSON to OUT).

    fsdp MODEL OUT: one grpo.step per dtype (bfloat16, float16) of FSDP2 with MixedPrecisionPolicy, recording
        the dtype of every all-gather and reduce-scatter FSDP2 hands to torch.distributed.
    sum OUT: gloo's all_reduce and reduce_scatter of bfloat16 / float16 / float32 tensors built so that an
        accumulation in the tensor's own dtype and one in fp32 give different results.
"""

import collections
import json
import sys

import torch
import torch.distributed as tdist

from nanogrpo import dist, grpo
from nanogrpo import model as M


def fsdp(model_dir: str) -> dict:
    from helpers import update_check

    seen = collections.Counter()
    for name in ("all_gather_single", "reduce_scatter_single"):  # what FSDP2's default collectives call
        real = getattr(tdist, name)

        def record(*args, _real=real, _name=name, **kwargs):
            tensor = kwargs.get("input", args[1] if len(args) > 1 else None)
            seen[f"{_name} {str(tensor.dtype).removeprefix('torch.')}"] += 1
            return _real(*args, **kwargs)

        setattr(tdist, name, record)
    out = {}
    for dtype in (torch.bfloat16, torch.float16):
        policy = M.make_policy(model_dir, torch.device("cpu"), dtype, 3, False)
        opt = torch.optim.SGD(policy.parameters(), lr=1.0)
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda i: 1.0)
        rollouts = update_check.fixed_rollouts()
        n = len(rollouts) // dist.world_size()
        seen.clear()
        grpo.step(policy, None, opt, sched, rollouts[dist.rank() * n : (dist.rank() + 1) * n], update_check.config(), 1)
        out[str(dtype).removeprefix("torch.")] = {"collectives": dict(seen),
                                                  "master": sorted({str(p.dtype) for p in policy.parameters()})}
    return out


def sums() -> dict:
    """Element j: 1 on rank j % world, a quarter of the dtype's ulp of 1 on every other rank. Summed in the
    dtype, every addition of the small value to 1 rounds back to 1, so the result is 1 where the 1 came first;
    summed in fp32 and rounded once, it is 1 + (world - 1) * small rounded, which is > 1 for world >= 3."""
    r, w = dist.rank(), dist.world_size()
    out = {}
    for dtype in (torch.bfloat16, torch.float16, torch.float32):
        small = torch.finfo(dtype).eps / 2  # half an ulp of 1: 1 + small rounds (to even) to 1
        x = torch.tensor([1.0 if j % w == r else small for j in range(w)], dtype=dtype)
        reduced = x.clone()
        tdist.all_reduce(reduced)
        scattered = torch.empty(w, dtype=dtype)
        tdist.reduce_scatter_single(scattered, x.repeat(w))
        once = torch.tensor(1 + (w - 1) * small, dtype=torch.float64).to(dtype).item()  # fp32 accumulation, one rounding
        out[str(dtype).removeprefix("torch.")] = {"all_reduce": reduced.double().tolist(),
                                                  "reduce_scatter": scattered.double().tolist(), "rounded_once": once}
    return out


if __name__ == "__main__":
    dist.init("cpu")
    result = fsdp(sys.argv[2]) if sys.argv[1] == "fsdp" else sums()
    if dist.is_main():
        with open(sys.argv[-1], "w") as f:
            json.dump(result, f)
    dist.barrier()
    dist.close()
