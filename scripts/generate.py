"""Distillation data: N generations per problem with the R1 prompt, optionally only the verified ones.

    python scripts/generate.py TASK --model MODEL --out OUT.jsonl [--n 4] [--verify] [--sft SFT.jsonl]
        [--template chat|math_eval|raw] [--temperature 0.6] [--top-p 0.95] [--max-new-tokens M]
        [--limit K] [--batch 16] [--sampler auto|torch|vllm] [--seed 0] [--split train] [--subset NAME]

TASK is what train.py's `task` takes (a built-in task, a .jsonl / .parquet file of math rows, a Hub
dataset id). The prompt is R1's (template "chat": the problem, then "Please reason step by step, and put
your final answer within \\boxed{}." as the user turn; "math_eval" is eval.py's math prompt; "raw" the
problem text alone, for models without a chat template). Generation and scoring are eval.py's own
(nanogrpo/evaluate.py: the same sampler, prompt encoding and math-verify scoring).

OUT gets one JSON line per problem: its index, id, problem, answer, prompt, and the full `generations`
with their `finish_reasons`, `num_tokens` and `correct` (math-verify against the answer). --verify keeps
only the correct generations (rejection sampling, as open-r1 does; `n_generated` says how many were
drawn). Problems are generated --batch at a time and each batch is appended in one write, so a killed
run resumes with the same command: finished problems are skipped (a line torn by the kill is dropped),
and with the same seed the result equals an uninterrupted run's. --sft also writes one chat row per
kept generation ({"messages": [user, assistant]}, what sft.py trains on), rebuilt from OUT at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from nanogrpo import benchmarks, data, hub  # noqa: E402
from nanogrpo import evaluate as E  # noqa: E402


def read_done(out: Path) -> dict[int, dict]:
    """Finished problems of an earlier run: {index: line}. A torn last line (a kill mid-write) is cut off."""
    if not out.exists():
        return {}
    raw = out.read_bytes()
    good = raw[: raw.rfind(b"\n") + 1]  # every complete line ends with "\n"; the rest was torn
    if len(good) != len(raw):
        print(f"generate: {out}: dropping a torn last line ({len(raw) - len(good)} bytes)", file=sys.stderr)
        out.write_bytes(good)
    done = {}
    for line in good.decode("utf-8").splitlines():
        rec = json.loads(line)
        done[rec["index"]] = rec
    return done


def user_prompt(template: str):
    """The user message for a row (benchmarks.Task's user_prompt), as train.py builds it for `template`."""
    if template == "raw":
        return lambda row: row["problem"]
    return lambda row: data.prompt_messages(row, template)[-1]["content"]


def main(argv: list[str] | None = None) -> list[dict]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("task", help="built-in task, .jsonl / .parquet of math rows, or a Hub dataset id")
    ap.add_argument("--model", required=True, help="HF model directory or Hub id")
    ap.add_argument("--out", required=True, help="JSONL, one line per problem (appended; resumable)")
    ap.add_argument("--n", type=int, default=4, help="generations per problem")
    ap.add_argument("--verify", action="store_true", help="keep only generations math-verify finds correct")
    ap.add_argument("--sft", default=None, help="also write the kept generations as chat rows for sft.py")
    ap.add_argument("--template", default="chat", choices=["chat", "math_eval", "raw"])
    ap.add_argument("--temperature", type=float, default=0.6)
    ap.add_argument("--top-p", type=float, default=0.95)
    ap.add_argument("--max-new-tokens", type=int, default=None, help="default: the model's context")
    ap.add_argument("--limit", type=int, default=None, help="the first K problems")
    ap.add_argument("--batch", type=int, default=16, help="problems per generate call and per write")
    ap.add_argument("--sampler", default="auto", choices=["auto", "torch", "vllm"])
    ap.add_argument("--device", default=None)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--split", default="train")
    ap.add_argument("--subset", default=None)
    args = ap.parse_args(argv)
    if args.n < 1 or args.batch < 1:
        ap.error("--n and --batch must be >= 1")
    out = Path(args.out)
    if args.sft and Path(args.sft).resolve() == out.resolve():
        ap.error("--sft must be another file than --out")

    rows = data.load_rows(args.task, "math", split=args.split, n=args.limit, seed=args.seed, subset=args.subset)
    rows = rows[: args.limit] if args.limit else rows
    done = read_done(out)
    settings = {"model": args.model, "n": args.n, "template": args.template, "verify": args.verify,
                "temperature": args.temperature, "seed": args.seed}
    for rec in done.values():  # resuming with other settings would mix two different data sets
        if rec.get("settings") != settings:
            sys.exit(f"error: {out} was written with {rec.get('settings')}, not {settings}: use another --out")
    todo = [s for s in range(0, len(rows), args.batch) if any(i not in done for i in range(s, min(s + args.batch, len(rows))))]
    print(f"generate: {len(rows)} problems x {args.n}, {len(done)} done before, {len(todo)} batches to go",
          file=sys.stderr)

    if todo:
        model_dir = hub.model_dir(args.model)
        import torch

        device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
        dtype = torch.bfloat16 if device.startswith("cuda") else torch.float32
        sampler = E.make_sampler(args.sampler, model_dir, device, dtype)
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(model_dir)
        context = E.context_length(model_dir)
        sampling = {"temperature": args.temperature, "top_p": args.top_p, "max_new_tokens": args.max_new_tokens}
        prompt = user_prompt(args.template)
        out.parent.mkdir(parents=True, exist_ok=True)
        t0, kept, drawn = time.monotonic(), 0, 0
        for k, start in enumerate(todo, 1):
            chunk = rows[start : start + args.batch]
            task = benchmarks.Task("generate", "math", chunk, args.n, prompt)
            # the seed depends on the batch's place in the data, so a resumed run draws the same samples
            _, records, _ = E.run_task(task, sampler, tokenizer, args.n, sampling, context,
                                       args.seed + 1_000_003 * start, 0, 1, lambda o: [o])
            lines = []
            for j, row in enumerate(chunk):
                mine = [r for r in records if r["index"] == j]
                keep = [r for r in mine if r["correct"] or not args.verify]
                kept, drawn = kept + len(keep), drawn + len(mine)
                lines.append({"index": start + j, "id": row.get("id", str(start + j)), "problem": row["problem"],
                              "answer": row["answer"], "prompt": prompt(row), "n_generated": len(mine),
                              "generations": [r["completion"] for r in keep],
                              "finish_reasons": [r["finish_reason"] for r in keep],
                              "num_tokens": [r["num_tokens"] for r in keep],
                              "correct": [r["correct"] for r in keep], "settings": settings})
            with out.open("a", encoding="utf-8") as f:  # one write per batch: a kill tears at most its last line
                f.write("".join(json.dumps(x, ensure_ascii=False) + "\n" for x in lines))
            elapsed = time.monotonic() - t0
            print(f"generate: batch {k}/{len(todo)} ({start + len(chunk)}/{len(rows)} problems), kept {kept} of "
                  f"{drawn} generations, {elapsed:.0f}s, eta {elapsed / k * (len(todo) - k):.0f}s", file=sys.stderr)
        if hasattr(sampler, "close"):  # the vLLM engine holds memory (and processes) until closed
            sampler.close()

    result = sorted(read_done(out).values(), key=lambda r: r["index"])
    if args.sft:
        with open(args.sft, "w", encoding="utf-8") as f:
            for rec in result:
                for g in rec["generations"]:
                    f.write(json.dumps({"messages": [{"role": "user", "content": rec["prompt"]},
                                                     {"role": "assistant", "content": g}],
                                        "problem": rec["problem"], "answer": rec["answer"]}, ensure_ascii=False) + "\n")
    total = sum(len(r["generations"]) for r in result)
    print(f"generate: {len(result)} problems, {total} generations kept in {out}", file=sys.stderr)
    return result


if __name__ == "__main__":
    main()
