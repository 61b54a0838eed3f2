"""Build the tiny CPU model: BPE tokenizer + random 4-layer Qwen2, warm-started on 3-digit addition.

    python scripts/build_tiny_model.py --out runs/tiny [--seed 0] [--steps 3000] [--target-acc 0.15]
    python scripts/build_tiny_model.py --out models/tiny-arithmetic    # rebuild the committed default, on purpose
    python scripts/build_tiny_model.py --tools --out models/tiny-multiply-tools   # the tool task's model (issue 11)

Writes a normal Hugging Face directory (from_pretrained loads it), `warm_start.json` (the recipe, the steps it
took, the accuracy reached, the package versions) and `SHA256SUMS` (scripts/setup.sh and the tests check the
committed model against it), and prints the held-out accuracy reached, greedy and sampled at temperature 1.
The warm start stops once sampled accuracy on a train-split validation slice reaches --target-acc (0 or less:
run all --steps), leaving room for GRPO. Its outcome depends on the CPU's kernels and package versions, which
is why the default model is committed rather than rebuilt by the set-up.
"""

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="output directory (created)")
    ap.add_argument("--steps", type=int, default=3000, help="most supervised steps (batch 64)")
    ap.add_argument("--target-acc", type=float, default=0.15, help="stop at this train-split sampled accuracy")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--eval-rows", type=int, default=500, help="held-out rows to report accuracy on")
    ap.add_argument("--tools", action="store_true", help="the tool task's model (nanogrpo/multiply.py): "
                    "--tool-steps steps on multiplication rows, --tool-frac of them in the tool format")
    ap.add_argument("--tool-steps", type=int, default=1500, help="most supervised steps of the tool warm start")
    ap.add_argument("--tool-frac", type=float, default=0.2)
    ap.add_argument("--tool-target-acc", type=float, default=0.04,
                    help="stop at this sampled accuracy with the tool (train split, real tool loop)")
    args = ap.parse_args()

    import platform

    import torch
    import transformers

    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "2")))
    from nanogrpo.data import arithmetic_rows
    from nanogrpo.tiny import build_tiny_model, evaluate_accuracy

    if args.tools:
        return build_tools(args)
    t0 = time.time()
    target = args.target_acc if args.target_acc > 0 else None
    out, model, tok, losses = build_tiny_model(args.out, args.steps, target, args.seed, log_every=100)
    secs = time.time() - t0
    test = arithmetic_rows("test", args.eval_rows)
    greedy = evaluate_accuracy(model, tok, test, temperature=0.0)
    sampled = evaluate_accuracy(model, tok, test, temperature=1.0, n=4)
    info = {"seed": args.seed, "max_steps": args.steps, "target_acc": args.target_acc, "steps_run": len(losses),
            "final_loss": round(losses[-1], 4), "heldout_rows": len(test), "heldout_greedy": greedy,
            "heldout_sampled_t1_n4": sampled,
            "reached_target": target is None or len(losses) < args.steps, "seconds": round(secs), "torch": torch.__version__,
            "transformers": transformers.__version__, "cpu": platform.processor() or platform.machine()}
    write_info(out, info)
    print(f"wrote {out}: {len(losses)} warm-start steps in {secs:.0f}s, final loss {losses[-1]:.3f}")
    print(f"held-out accuracy ({len(test)} rows): greedy {greedy:.3f}  sampled@T=1 {sampled:.3f}")
    if not info["reached_target"]:
        print(f"WARNING: the warm start never reached --target-acc {args.target_acc} in {args.steps} steps: the model "
              "may still be on the loss plateau, from which GRPO does not learn (raise --steps)")


def write_info(out: Path, info: dict) -> None:
    """warm_start.json (the recipe and what it reached), then SHA256SUMS over every file."""
    import hashlib
    import json

    (out / "warm_start.json").write_text(json.dumps(info, indent=1) + "\n")
    files = sorted(p for p in out.iterdir() if p.is_file() and p.name != "SHA256SUMS")
    (out / "SHA256SUMS").write_text("".join(f"{hashlib.sha256(p.read_bytes()).hexdigest()}  {p.name}\n" for p in files))


def build_tools(args) -> None:
    """The tool task's model, and its held-out accuracy and tool-use rate with the tool (local sandbox)."""
    import platform

    import torch
    import transformers

    from nanogrpo import data
    from nanogrpo.tiny import build_tool_model, tool_accuracy

    t0 = time.time()
    out, _, _, losses = build_tool_model(args.out, args.tool_steps, args.tool_frac, args.seed, args.tool_target_acc,
                                         log_every=50)
    secs = time.time() - t0
    rows = data.load_rows("multiply", split="test", n=args.eval_rows)
    info = {"task": "multiply", "seed": args.seed, "max_steps": args.tool_steps, "tool_frac": args.tool_frac,
            "target_acc": args.tool_target_acc, "steps_run": len(losses), "reached_target": len(losses) < args.tool_steps,
            "final_loss": round(losses[-1], 4), "heldout_rows": len(rows)}
    for name, temperature in (("greedy", 0.0), ("sampled_t1", 1.0)):
        info[f"heldout_{name}"], info[f"tool_use_{name}"] = tool_accuracy(out, rows, temperature, seed=args.seed)
    info.update({"seconds": round(secs), "torch": torch.__version__, "transformers": transformers.__version__,
                 "cpu": platform.processor() or platform.machine()})
    write_info(out, info)
    print(f"wrote {out}: {len(losses)} warm-start steps in {secs:.0f}s, final loss {losses[-1]:.3f}")
    print(" ".join(f"{k} {v:.3f}" for k, v in info.items() if k.startswith(("heldout_", "tool_use_")) and k != "heldout_rows"))
    if not info["reached_target"]:
        print(f"WARNING: the warm start never reached --tool-target-acc {args.tool_target_acc} in {args.tool_steps} steps")


if __name__ == "__main__":
    main()
