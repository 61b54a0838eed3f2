"""The warm start of the SmolLM2 tool recipe: worked answers to word problems, some with the tool, then sft.py.

    python scripts/models/smollm2_tools_warm_start.py                      # -> .cache/smollm2-135m-tools
    python scripts/models/smollm2_tools_warm_start.py --out DIR --seed 1 --tool-frac 0.3 [key=value ...]

1. Rows: `--rows` train instances of "word_problems_large" (scripts/models/tool_rows.py), a
   `--tool-frac` share answered with the tool (the expression as code, its output as unscored context, the final
   line), the rest worked in text, both written from each template's own solution, in the `segments` format.
2. `sft.py configs/smollm2_tools_warm_start.toml model=--model task=ROWS seed=--seed` (overrides after the flags
   go to sft.py too): held-out accuracy and tool use through the real tool loop at its start and end.
3. OUT: the last checkpoint's model files (weights, config, tokenizer; not the optimizer), warm_start.json (the
   recipe, the rows, the evals) and the rows. OUT.build/ (the sft.py run) is removed.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
RECIPE = ROOT / "configs" / "smollm2_tools_warm_start.toml"
MODEL_FILES = ("config.json", "generation_config.json", "model.safetensors")  # and every tokenizer file


def build(out: Path, model: str, seed: int, rows: int, tool_frac: float, overrides: list[str]) -> dict:
    from nanogrpo import config as C
    from nanogrpo.tools import ToolConfig
    from tool_rows import word_problems_warm_start_rows

    if not (Path(model) / "config.json").is_file():
        sys.exit(f"no model at {model}: convert SmolLM2 first (python scripts/models/smollm2_to_hf.py)")
    cfg = C.load([str(RECIPE), f"model={model}", *overrides])  # bad keys fail here, before any compute
    made = word_problems_warm_start_rows(rows, seed, tool_frac, ToolConfig.from_config(cfg))
    info = sft_to_model(made, RECIPE, out, model, seed, overrides)
    info.update(tool_frac=tool_frac, evals=[{k: m.get(k) for k in ("step", "heldout_accuracy", "heldout_tool_use")}
                                            for m in info["evals"]])
    (out / "warm_start.json").write_text(json.dumps(info, indent=1) + "\n")
    return info


def sft_to_model(rows: list[dict], recipe: Path, out: Path, model: str, seed: int, overrides: list[str]) -> dict:
    """sft.py `recipe` on `rows` from `model`; OUT gets the last checkpoint's model files (not the optimizer), the rows
    (warm_start_rows.jsonl) and warm_start.json (the recipe, the evals, the loss, the time). OUT.build/ is removed."""
    import sft
    from nanogrpo import config as C

    cfg = C.load([str(recipe), f"model={model}", *overrides])
    build_dir = out.with_name(out.name + ".build")
    shutil.rmtree(build_dir, ignore_errors=True)
    build_dir.mkdir(parents=True)
    rows_file = build_dir / "rows.jsonl"
    rows_file.write_text("".join(json.dumps(r) + "\n" for r in rows))
    t0 = time.time()
    metrics = sft.main([str(recipe), f"model={model}", f"task={rows_file}", f"out_dir={build_dir / 'sft'}", f"seed={seed}",
                        *overrides])
    last = sorted((build_dir / "sft" / "checkpoints").glob("step_*"))[-1]
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    for f in last.iterdir():
        if f.is_file() and (f.name in MODEL_FILES or f.name.startswith(("tokenizer", "special_tokens", "vocab", "merges"))
                            or f.name == "chat_template.jinja"):
            shutil.copy2(f, out / f.name)
    shutil.copy2(rows_file, out / "warm_start_rows.jsonl")
    evals = [json.loads(x) for x in (build_dir / "sft" / "metrics.jsonl").read_text().splitlines()]
    evals = [m for m in evals if m.get("heldout_accuracy") is not None]
    info = {"recipe": str(recipe.relative_to(ROOT)), "model": model, "seed": seed, "rows": len(rows),
            "steps": cfg.steps, "rows_per_step": cfg.prompts_per_step, "overrides": overrides, "evals": evals,
            "final_loss": metrics.get("sft_loss"), "seconds": round(time.time() - t0)}
    (out / "warm_start.json").write_text(json.dumps(info, indent=1) + "\n")
    shutil.rmtree(build_dir)
    return info


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=str(ROOT / ".cache" / "smollm2-135m-tools"))
    ap.add_argument("--model", default=str(ROOT / ".cache" / "smollm2-135m-instruct"))
    ap.add_argument("--seed", type=int, default=0, help="the rows and sft.py's seed")
    ap.add_argument("--rows", type=int, default=640, help="supervised rows (steps x rows per step: one epoch)")
    ap.add_argument("--tool-frac", type=float, default=0.3, help="share of the rows answered with the tool")
    ap.add_argument("overrides", nargs="*", help="key=value, passed to sft.py")
    args = ap.parse_args()
    info = build(Path(args.out), args.model, args.seed, args.rows, args.tool_frac, args.overrides)
    print(f"wrote {args.out}: {info['steps']} steps on {args.rows} rows in {info['seconds']} s; held-out "
          + ", ".join(f"step {e['step']}: accuracy {e['heldout_accuracy']:.3f} tool use {e['heldout_tool_use']:.3f}"
                      for e in info["evals"]))


if __name__ == "__main__":
    main()
