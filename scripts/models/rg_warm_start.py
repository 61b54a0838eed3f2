"""The format warm start of the Reasoning Gym recipes: Reasoning Gym's answer tags, taught on problems that are not RG's.

    python scripts/models/rg_warm_start.py --model DIR --out DIR [--seed 0] [--rows 320] [key=value ...]

SmolLM2-135M-Instruct never writes `<answer>...</answer>`, whatever RG system prompt it is given, so every Reasoning
Gym reward is 0 and GRPO has no signal. This teaches the format and nothing of Reasoning Gym: `--rows` train problems
of the built-in "word_problems" (nanogrpo/tasks/word_problems.py; drawn with seed 2,000,000 + --seed, so no GRPO run
of that task shares them), each as a chat with RG's "direct" system prompt, the problem, and the answer
`<answer>N</answer>`; then sft.py with configs/rg_warm_start.toml (overrides after the flags go to sft.py).
OUT: the model files, the rows and warm_start.json (scripts/models/smollm2_tools_warm_start.py `sft_to_model`).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
RECIPE = ROOT / "configs" / "rg_warm_start.toml"
SYSTEM_PROMPT = "direct"  # Reasoning Gym's: the answer between the tags, no preamble


def rows(n: int, seed: int) -> list[dict]:
    from nanogrpo.tasks import reasoning_gym
    from nanogrpo.tasks.word_problems import word_problem_rows

    system = reasoning_gym.system_prompts()[SYSTEM_PROMPT]
    return [{"messages": [{"role": "system", "content": system}, {"role": "user", "content": r["problem"]},
                          {"role": "assistant", "content": f"<answer>{r['answer']}</answer>"}]}
            for r in word_problem_rows("train", n, seed=2_000_000 + seed)]


def main() -> None:
    from smollm2_tools_warm_start import sft_to_model

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True, help="SmolLM2-135M-Instruct (scripts/models/smollm2_to_hf.py)")
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=0, help="the rows and sft.py's seed")
    ap.add_argument("--rows", type=int, default=320, help="supervised rows (steps x rows per step: one epoch)")
    ap.add_argument("overrides", nargs="*", help="key=value, passed to sft.py")
    args = ap.parse_args()
    if not (Path(args.model) / "config.json").is_file():
        sys.exit(f"error: no model at {args.model}: convert SmolLM2 first (python scripts/models/smollm2_to_hf.py)")
    info = sft_to_model(rows(args.rows, args.seed), RECIPE, Path(args.out), args.model, args.seed, args.overrides)
    print(f"wrote {args.out}: {info['steps']} steps on {info['rows']} rows in {info['seconds']} s, final loss "
          f"{info['final_loss']}")


if __name__ == "__main__":
    main()
