"""Can a tool model copy the tool's output? Held-out products fed the tool transcript up to the answer, by length.

    python scripts/bench/probe_tool_copy.py models/tiny-multiply-tools runs/bench-tools/warm-start-1 ...

For each of the 200 held-out products of the built-in `multiply` task (the held-out set train.py and
scripts/bench/bench_tools.py score), the model is given the prompt, the code and the tool's real output
(`scripts/models/tool_rows.py: multiply_transcript`, exactly as a rollout shows them) and decodes the answer
greedily. It isolates the copy from the decision to call the tool: a model that copies by position and not
by content gets every 10-digit product right and no 9-digit one. Prints one row per model: right answers
per product length, and a few wrong ones.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "models"))  # tool_rows.py


def probe(model_dir: str, n: int = 200) -> tuple[dict[int, list[int]], list[tuple[str, str]]]:
    """({product length: [copied right, products]}, [(product, answer) for each wrong one])."""
    import torch

    from nanogrpo import model as M
    from nanogrpo.tasks.multiply import multiply_rows
    from nanogrpo.tools import ToolConfig
    from tool_rows import multiply_transcript, operands

    tok, model = M.load_tokenizer(model_dir), M.load_model(model_dir).eval()
    by_len: dict[int, list[int]] = {}
    wrong = []
    for r in multiply_rows("test", n):
        code, output, _ = multiply_transcript(*operands(r), ToolConfig())
        ids = tok(r["problem"] + code[0] + output[0], return_tensors="pt").input_ids
        with torch.no_grad():
            out = model.generate(ids, max_new_tokens=len(r["answer"]) + 2, do_sample=False,
                                 pad_token_id=tok.pad_token_id)
        answer = tok.decode(out[0, ids.shape[1]:], skip_special_tokens=True).strip().split("\n")[0]
        counts = by_len.setdefault(len(r["answer"]), [0, 0])
        counts[0] += answer == r["answer"]
        counts[1] += 1
        if answer != r["answer"]:
            wrong.append((r["answer"], answer))
    return by_len, wrong


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("models", nargs="+", help="model directories (the tool task's warm starts or GRPO checkpoints)")
    ap.add_argument("--n", type=int, default=200, help="held-out products (default 200)")
    a = ap.parse_args()
    from nanogrpo.model import check_model_dir

    for m in a.models:  # every directory checked before any is probed
        try:
            check_model_dir(m)
        except (OSError, ValueError) as e:
            print(f"error: {e}", file=sys.stderr)
            sys.exit(2)
    print("| model | copied right, 9-digit products | 10-digit products | wrong (product -> answer), first 3 |")
    print("| --- | ---: | ---: | --- |")
    for m in a.models:
        by_len, wrong = probe(m, a.n)
        cell = lambda d: f"{by_len.get(d, [0, 0])[0]} / {by_len.get(d, [0, 0])[1]}"  # noqa: E731
        print(f"| {m} | {cell(9)} | {cell(10)} | {', '.join(f'{p} -> {w}' for p, w in wrong[:3])} |", flush=True)


if __name__ == "__main__":
    main()
