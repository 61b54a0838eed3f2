"""Transfer: what GRPO on one task does to the others. eval.py on each model, the results side by side.

    python scripts/bench/bench_transfer.py --out runs/transfer-gsm8k --model start=runs/smollm2-rg-format \
        --model aiw=runs/rg-aiw/ws0-g0/checkpoints/step_000015  --tasks gsm8k --limit 200 --max-new-tokens 512
    python scripts/bench/bench_transfer.py --out runs/transfer-rg --model ... \
        --tasks "reasoning_gym:aiw(system_prompt=direct, max_entities=3),reasoning_gym:letter_counting(...)"

Each model is one `eval.py --model DIR --out OUT/NAME.json` with the arguments after the script's own (--tasks,
--limit, --sampler, --seed ...: the same for every model), one after another with every core. A results file
already there is kept and read (so a stopped sweep goes on where it stopped; choose a new OUT to redo one). Then a
table: per task, each model's pass@1, strict (the reward's judge) and lenient (math-verify alone) where the task
has one, with the correct count. The intervals are wide at small counts: one problem in 200 is 0.5 points.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def cell(task: dict) -> str:
    """'12.0% (24/200)' strict, then ' / 13.5% lenient' where the task has a lenient score."""
    key = next(k for k in task["metrics"] if k.startswith("pass@1"))
    n = task["problems"] * task["n"]
    text = f"{100 * task['metrics'][key]:.1f}% ({round(task['metrics'][key] * n)}/{n})"
    if "metrics_lenient" in task:
        text += f" / {100 * task['metrics_lenient'][key]:.1f}% lenient"
    return text


def table(names: list[str], results: dict[str, dict]) -> str:
    tasks = list(results[names[0]]["tasks"])
    lines = ["| task | " + " | ".join(names) + " |", "| --- |" + " --- |" * len(names)]
    for t in tasks:
        lines.append(f"| {t} | " + " | ".join(cell(results[m]["tasks"][t]) for m in names) + " |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", action="append", required=True, help="NAME=DIR (a model or checkpoint directory)")
    ap.add_argument("--out", required=True, help="OUT/NAME.json per model (and its samples)")
    args, eval_args = ap.parse_known_args()
    models = {}
    for spec in args.model:
        name, sep, path = spec.partition("=")
        if not sep or not name or not path:
            ap.error(f"--model {spec!r}: expected NAME=DIR")
        if not (Path(path) / "config.json").is_file():
            ap.error(f"--model {spec!r}: {path} has no config.json (not a model directory)")
        models[name] = path
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    results = {}
    for name, path in models.items():
        file = out / f"{name}.json"
        if not file.exists():
            print(f"== {name}: eval.py --model {path} {' '.join(eval_args)}", flush=True)
            done = subprocess.run([sys.executable, str(ROOT / "eval.py"), "--model", path, "--out", str(file),
                                   *eval_args])
            if done.returncode != 0:
                sys.exit(f"error: eval.py failed on {name} ({path}), exit {done.returncode}")
        results[name] = json.loads(file.read_text())
    print(table(list(models), results))


if __name__ == "__main__":
    main()
