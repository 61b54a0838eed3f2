"""What the checks cost where they run inside a step: the sampler's calibration sums (SamplingParams.moments) and
the sampler check's fingerprints, each side by side with what it rides on, alternating in one process.

    python scripts/bench/bench_checks.py MODEL_DIR [--prompts 8] [--n 8] [--tokens 16] [--rounds 6]

Prints one table: `generate` with and without the calibration sums (the same prompts, seed and tokens: the sums do
not change a draw), CPU seconds, median and min over `--rounds` alternating pairs; and one fingerprint pass over every
weight the sampler holds as the sampler check reads it (`CheckedSampler.held`: a tied tensor once), which the check
runs twice a step (the pushed weights at the sync, the held ones after generate). The prompts are chat-templated
chain sums, as configs/rg_chain_sum.toml asks them. CPU time, not wall time: the machines here are shared.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from nanogrpo.checks import CheckedSampler  # noqa: E402
from nanogrpo.sampler import SamplingParams  # noqa: E402
from nanogrpo.torch_sampler import TorchSampler  # noqa: E402


def cpu_seconds(f) -> tuple[float, object]:
    t = time.process_time()
    out = f()
    return time.process_time() - t, out


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("model")
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--n", type=int, default=8)
    ap.add_argument("--tokens", type=int, default=16)
    ap.add_argument("--rounds", type=int, default=6)
    args = ap.parse_args(argv)
    sampler = TorchSampler(args.model, max_batch_size=args.prompts * args.n)
    tok = sampler.tokenizer
    asks = [f"Compute {i} + {2 * i + 3} + {5 * i + 1}. Put the final answer in <answer></answer> tags."
            for i in range(args.prompts)]
    texts = [tok.apply_chat_template([{"role": "user", "content": a}], add_generation_prompt=True, tokenize=False)
             if tok.chat_template else a for a in asks]
    prompts = [tok.encode(t, add_special_tokens=False) for t in texts]
    times: dict[bool, list[float]] = {False: [], True: []}
    for r in range(args.rounds):
        outs = {}
        for moments in (r % 2 == 1, r % 2 == 0):  # alternate which goes first
            params = SamplingParams(args.tokens, 1.0, 1.0, seed=r, moments=moments)
            sec, outs[moments] = cpu_seconds(lambda: sampler.generate(prompts, args.n, params))
            times[moments].append(sec)
        same = [c.token_ids for g in outs[False] for c in g] == [c.token_ids for g in outs[True] for c in g]
        assert same, "the calibration sums changed a draw"
    tokens = sum(len(c.token_ids) for g in outs[True] for c in g)
    check = CheckedSampler(sampler, sampler.model.dtype, sampler.model, [], moments=True)
    held = [cpu_seconds(check.held)[0] for _ in range(3)]
    weights = sum(t.numel() for t in {id(t): t for _, t in sampler.held_weights()}.values())
    row = {"off": statistics.median(times[False]), "on": statistics.median(times[True]),
           "off_min": min(times[False]), "on_min": min(times[True]), "fingerprint": min(held)}
    print(f"{Path(args.model).name}: {args.prompts} prompts x {args.n}, {tokens} completion tokens a call, "
          f"{weights / 1e6:.1f}M weights; torch {torch.__version__}, {torch.get_num_threads()} threads; CPU seconds\n")
    print("| generate, sums off | generate, sums on | on / off (median) | (min / min) | one fingerprint pass | x2 a step |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: |")
    print(f"| {row['off']:.3f} | {row['on']:.3f} | {row['on'] / row['off']:.3f} | {row['on_min'] / row['off_min']:.3f} | "
          f"{row['fingerprint']:.3f} | {2 * row['fingerprint']:.3f} |")
    return row


if __name__ == "__main__":
    main()
