"""Which Reasoning Gym tasks can GRPO move on a small model? pass@1 and pass@k per task on a fixed held-out set.

    python scripts/bench/survey_reasoning_gym.py --model DIR [--problems 16] [--n 8] [--max-new-tokens 32]
        [--temperature 1.0] [--system-prompt direct] [--tasks "SPEC;SPEC"] [--out runs/rg-survey.jsonl]

GRPO learns from groups that hold both right and wrong answers: a task where pass@k (k = --n samples per problem) is
well above pass@1, and pass@1 is not about 0, gives it a signal. Each task is a `reasoning_gym:...` spec
(nanogrpo/tasks/reasoning_gym.py) at a small difficulty (TASKS below); its first --problems held-out rows (the set
train.py and eval.py use, fixed by spec and size) are prompted as training prompts them (RG's system prompt, the
question, the chat template: nanogrpo/data.py), sampled with nanogrpo's PyTorch sampler (one thread per process is
fastest on a shared machine), and scored by the task's own verdict. pass@1 counts only full marks (1.0); `constant`
is what one answer for every question scores (the most common gold's share of these rows): GRPO can raise pass@1 to
it by learning that answer alone, so a task's gain is read against it; `score` is the mean reward GRPO would see
(partial credit included); `tags` is the share of answers inside <answer> tags; `cut`
the share that hit --max-new-tokens.

One JSON line per task goes to --out as each task ends; tasks already there (same spec and arguments) are skipped,
so a stopped survey continues. The table is printed at the end (markdown, for docs/results.md).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import torch  # noqa: E402

from nanogrpo import data, rewards  # noqa: E402
from nanogrpo.evaluate import constant_answer  # noqa: E402
from nanogrpo.sampler import SamplingParams  # noqa: E402
from nanogrpo.torch_sampler import TorchSampler  # noqa: E402
from nanogrpo.tasks import reasoning_gym as rg  # noqa: E402
from nanogrpo.tasks.benchmarks import pass_at_k  # noqa: E402

# Small settings: each the easy end of the dataset's own ranges (fewer terms, digits, words, animals)
TASKS = [
    "leg_counting(min_animals=1, max_animals=2, max_instances=3)",
    "basic_arithmetic(max_terms=2, max_digits=1, operators=['+', '-'], allow_parentheses=false, allow_negation=false)",
    "chain_sum(max_terms=2, max_digits=2)",
    "products(max_digits=1)",
    "number_sorting(max_numbers=3, max_decimals=0, min_value=0, max_value=99)",
    "spell_backward(max_word_len=4)",
    "letter_counting(min_words=3, max_words=5)",
    "word_sorting(max_words=3, max_word_length=6)",
    "word_sequence_reversal(max_words=4)",
    "count_bits(max_n=255)",
    "gcd(max_value=20)",
    "lcm(max_value=12)",
    "base_conversion(max_base=10, max_value=20)",
    "prime_factorization(max_value=100)",
    "simple_equations(max_terms=2, max_value=10, operators=['+', '-'], operators_weights=[0.5, 0.5])",
    "number_filtering(max_numbers=4, max_decimals=0, min_value=0)",
    "fraction_simplification(max_value=20, max_factor=5, styles=['plain'])",
    "coin_flip(max_trials=10)",
    "color_cube_rotation(max_rotations=1)",
    "syllogism",
    "aiw(max_entities=3)",
    "needle_haystack(min_num_statements=2, max_num_statements=5)",
]


def survey_task(spec: str, sampler: TorchSampler, args) -> dict:
    rows = rg.rows(spec, "test", args.problems)
    prompts = [data.encode_prompt(r, sampler.tokenizer, "chat") for r in rows]
    t0 = time.time()
    params = SamplingParams(args.max_new_tokens, args.temperature, 1.0, seed=args.seed)
    groups = sampler.generate(prompts, args.n, params)
    seconds = time.time() - t0
    flat = [c for g in groups for c in g]
    scores = rewards.judge(rg.score, [c.text for c in flat], [r for r in rows for _ in range(args.n)])  # the trainer's
    full = [[s == 1.0 for s in scores[i * args.n:(i + 1) * args.n]] for i in range(len(rows))]
    valid = [s for s in scores if s is not None]
    return {
        "spec": spec, "problems": len(rows), "n": args.n, "max_new_tokens": args.max_new_tokens,
        "temperature": args.temperature, "seed": args.seed,
        "pass@1": sum(pass_at_k(args.n, sum(f), 1) for f in full) / len(full),
        f"pass@{args.n}": sum(pass_at_k(args.n, sum(f), args.n) for f in full) / len(full),
        "score": sum(valid) / max(1, len(valid)), "unscored": len(scores) - len(valid),
        "constant": constant_answer(rows)[1],
        "tags": sum(rg.extract_answer(c.text) is not None for c in flat) / len(flat),
        "cut": sum(c.finish_reason == "length" for c in flat) / len(flat),
        "mean_tokens": sum(len(c.token_ids) for c in flat) / len(flat),
        "tokens": sum(len(c.token_ids) for c in flat), "seconds": round(seconds, 1),
        "heldout": rg.heldout_description(rg.PREFIX + spec, args.problems),
        "example": {"question": rows[0]["problem"][:300], "answer": rows[0]["answer"], "completion": flat[0].text[:400]},
    }


def with_prompt(spec: str, name: str) -> str:
    """`spec` with `system_prompt=name` among its settings."""
    return spec.replace("(", f"(system_prompt={name}, ", 1) if "(" in spec else f"{spec}(system_prompt={name})"


def table(results: list[dict], n: int) -> str:
    lines = [f"| task (small settings) | pass@1 | pass@{n} | constant | score | tags | cut | tokens/answer | min |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in results:
        lines.append(f"| `{r['spec']}` | {r['pass@1']:.3f} | {r[f'pass@{n}']:.3f} | {r.get('constant', float('nan')):.2f} | {r['score']:.3f} | {r['tags']:.2f} "
                     f"| {r['cut']:.2f} | {r['mean_tokens']:.0f} | {r['seconds'] / 60:.1f} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True, help="Hugging Face model directory (SmolLM2-135M-Instruct: "
                    "scripts/models/smollm2_to_hf.py)")
    ap.add_argument("--problems", type=int, default=16, help="held-out problems per task")
    ap.add_argument("--n", type=int, default=8, help="samples per problem (pass@1 and pass@n)")
    ap.add_argument("--max-new-tokens", type=int, default=32)
    ap.add_argument("--system-prompt", default="", help="one of RG's SYSTEM_PROMPTS for every task (default: "
                    "each spec's own, else RG's 'default')")
    ap.add_argument("--temperature", type=float, default=1.0, help="the trainer's default sampling temperature")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--tasks", default="", help="';'-separated specs (without the reasoning_gym: prefix); "
                    "default: the list in this file")
    ap.add_argument("--out", default="runs/rg-survey.jsonl", help="one JSON line per task (a stopped survey resumes)")
    args = ap.parse_args()
    if min(args.problems, args.n, args.max_new_tokens) < 1:
        ap.error("--problems, --n and --max-new-tokens must be >= 1")
    specs = [s.strip() for s in args.tasks.split(";") if s.strip()] if args.tasks else TASKS
    if args.system_prompt:
        specs = [with_prompt(s, args.system_prompt) for s in specs]
    for spec in specs:  # every spec checked before the model is loaded
        try:
            rg.parse(rg.PREFIX + spec)
        except ValueError as e:
            sys.exit(f"error: {e}")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    keys = ("problems", "n", "max_new_tokens", "temperature", "seed")
    done = {}
    if out.is_file():
        for line in out.read_text().splitlines():
            r = json.loads(line)
            if all(r[k] == getattr(args, k) for k in keys):
                done[r["spec"]] = r
    torch.manual_seed(args.seed)
    sampler = TorchSampler(args.model, device="cpu", dtype=torch.float32)
    results, t_all = [], time.time()
    for i, spec in enumerate(specs, 1):
        if spec in done:
            results.append(done[spec])
            continue
        r = survey_task(spec, sampler, args)
        with out.open("a") as f:
            f.write(json.dumps(r) + "\n")
        results.append(r)
        print(f"[{i}/{len(specs)}] {spec}: pass@1 {r['pass@1']:.3f} pass@{args.n} {r[f'pass@{args.n}']:.3f} "
              f"score {r['score']:.3f} tags {r['tags']:.2f} cut {r['cut']:.2f} ({r['seconds']:.0f} s; "
              f"{(time.time() - t_all) / 60:.1f} min so far)", flush=True)
    print(f"\n{len(results)} tasks, {args.problems} held-out problems x {args.n} samples each, max_new_tokens "
          f"{args.max_new_tokens}, temperature {args.temperature}, model {args.model}\n")
    print(table(results, args.n))


if __name__ == "__main__":
    main()
