"""Distillation data: N generations per problem with the R1 prompt, optionally only the verified ones.

    python scripts/generate.py TASK --model MODEL --out OUT.jsonl [--n 4] [--verify] [--sft SFT.jsonl]
        [--kind math|code] [--template chat|math_eval|raw] [--temperature 0.6] [--top-p 0.95] [--max-new-tokens M]
        [--limit K] [--batch 16] [--sampler auto|torch|vllm] [--seed 0] [--split train] [--subset NAME]

TASK is what train.py's `task` takes (a built-in task, a .jsonl / .parquet file, a Hub dataset id) with
math rows, or with --kind code rows in DESIGN.md's code schema (as train.py's reward=code). The math
prompt is R1's (template "chat": the problem, then "Please reason step by step, and put your final answer
within \\boxed{}." as the user turn; "math_eval" is eval.py's math prompt; "raw" the problem text alone,
for models without a chat template). The code prompt (template "chat") is eval.py's LiveCodeBench one,
its system message included: Python rows only, as it asks for Python; "raw" is again the problem text
alone. Generation and scoring are eval.py's own (nanogrpo/evaluate.py: the same sampler, prompt encoding,
math-verify for math, the row's tests in the sandbox pool for code).

OUT gets one JSON line per problem: its index, id, problem (math: answer), prompt (and system, if any),
and the full `generations` with their `finish_reasons`, `num_tokens`, `rewards` (math: 1/0; code: the
fraction of tests passed; None: not checkable) and `correct` (reward 1). --verify keeps only the correct
generations (rejection sampling, as open-r1 does). `n_generated` says how many were drawn, `n_rejected`
how many were checked and wrong, `n_unscored` how many could not be checked (reward None: a math answer
math-verify cannot parse, or a sandbox failure): --verify drops those too, but they are reported apart
and never counted as wrong. Problems are generated --batch at a time and each batch is appended in one
write, so a killed run resumes with the same command: finished problems are skipped (a line torn by the
kill is dropped), and with the same seed the result equals an uninterrupted run's. --sft also writes one
chat row per kept generation ({"messages": [system?, user, assistant]}, what sft.py trains on), rebuilt
from OUT at the end.
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


def prompts(kind: str, template: str):
    """(row -> user message, system message or None) for benchmarks.Task: as train.py builds a math prompt
    for `template`; for code, eval.py's LiveCodeBench prompt ("raw": the problem text alone, both kinds)."""
    if template == "raw":
        return (lambda row: row["problem"]), None
    if kind == "code":
        return benchmarks.lcb_prompt, benchmarks.LCB_SYSTEM
    return (lambda row: data.prompt_messages(row, template)[-1]["content"]), None


def main(argv: list[str] | None = None) -> list[dict]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("task", help="built-in task, .jsonl / .parquet of math (or code) rows, or a Hub dataset id")
    ap.add_argument("--model", required=True, help="HF model directory or Hub id")
    ap.add_argument("--out", required=True, help="JSONL, one line per problem (appended; resumable)")
    ap.add_argument("--n", type=int, default=4, help="generations per problem")
    ap.add_argument("--verify", action="store_true",
                    help="keep only the correct generations (math-verify; code: every test passes in the sandbox)")
    ap.add_argument("--kind", default="math", choices=["math", "code"], help="the rows' schema (DESIGN.md)")
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

    if args.kind == "code" and (args.template == "math_eval" or args.task in data.BUILTIN_TASKS):
        ap.error("--kind code takes code rows (not a built-in math task) and --template chat or raw")
    rows = data.load_rows(args.task, args.kind, split=args.split, n=args.limit, seed=args.seed, subset=args.subset)
    rows = rows[: args.limit] if args.limit else rows
    if args.kind == "code" and args.template == "chat" and any(r.get("language", "python") != "python" for r in rows):
        ap.error("--template chat for code is eval.py's LiveCodeBench prompt, which asks for Python: use "
                 "--template raw (the problem text alone) for rows in other languages")
    done = read_done(out)
    settings = {"model": args.model, "kind": args.kind, "n": args.n, "template": args.template,
                "verify": args.verify, "temperature": args.temperature, "seed": args.seed}
    for rec in done.values():  # resuming with other settings would mix two different data sets
        if rec.get("settings") != settings:
            sys.exit(f"error: {out} was written with {rec.get('settings')}, not {settings}: use another --out")
    todo = [s for s in range(0, len(rows), args.batch) if any(i not in done for i in range(s, min(s + args.batch, len(rows))))]
    print(f"generate: {len(rows)} problems x {args.n}, {len(done)} done before, {len(todo)} batches to go",
          file=sys.stderr)

    if todo:
        if args.kind == "code":  # a sandbox that cannot isolate stops here (SandboxUnavailable says how to fix
            from nanogrpo.sandbox import get_pool  # it), not after generating, with every verdict None

            get_pool().start()
        model_dir = hub.model_dir(args.model)
        import torch

        device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
        dtype = torch.bfloat16 if device.startswith("cuda") else torch.float32
        sampler = E.make_sampler(args.sampler, model_dir, device, dtype)
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(model_dir)
        context = E.context_length(model_dir)
        sampling = {"temperature": args.temperature, "top_p": args.top_p, "max_new_tokens": args.max_new_tokens}
        prompt, system = prompts(args.kind, args.template)
        out.parent.mkdir(parents=True, exist_ok=True)
        t0, kept, drawn, rejected, unscored = time.monotonic(), 0, 0, 0, 0
        for k, start in enumerate(todo, 1):
            chunk = rows[start : start + args.batch]
            task = benchmarks.Task("generate", args.kind, chunk, args.n, prompt, system)
            # the seed depends on the batch's place in the data, so a resumed run draws the same samples
            _, records, _ = E.run_task(task, sampler, tokenizer, args.n, sampling, context,
                                       args.seed + 1_000_003 * start, 0, 1, lambda o: [o])
            lines = []
            for j, row in enumerate(chunk):
                mine = [r for r in records if r["index"] == j]
                keep = [r for r in mine if r["correct"] or not args.verify]
                # reward None: the checker failed (sandbox, unparseable answer), which says nothing of the answer
                n_unscored = sum(r["reward"] is None for r in mine)
                n_rejected = len(mine) - n_unscored - sum(r["correct"] for r in mine)
                kept, drawn = kept + len(keep), drawn + len(mine)
                rejected, unscored = rejected + n_rejected, unscored + n_unscored
                lines.append({"index": start + j, "id": row.get("id", str(start + j)), "problem": row["problem"],
                              **({"answer": row["answer"]} if args.kind == "math" else {}), "prompt": prompt(row),
                              **({"system": system} if system else {}), "n_generated": len(mine),
                              "n_rejected": n_rejected, "n_unscored": n_unscored,
                              "generations": [r["completion"] for r in keep],
                              "finish_reasons": [r["finish_reason"] for r in keep],
                              "num_tokens": [r["num_tokens"] for r in keep], "rewards": [r["reward"] for r in keep],
                              "correct": [r["correct"] for r in keep], "settings": settings})
            with out.open("a", encoding="utf-8") as f:  # one write per batch: a kill tears at most its last line
                f.write("".join(json.dumps(x, ensure_ascii=False) + "\n" for x in lines))
            elapsed = time.monotonic() - t0
            print(f"generate: batch {k}/{len(todo)} ({start + len(chunk)}/{len(rows)} problems), kept {kept} of "
                  f"{drawn} generations ({rejected} wrong, {unscored} unscored), {elapsed:.0f}s, "
                  f"eta {elapsed / k * (len(todo) - k):.0f}s", file=sys.stderr)
        sampler.close()  # the vLLM engine holds memory (and processes) until closed

    result = sorted(read_done(out).values(), key=lambda r: r["index"])
    if args.sft:
        with open(args.sft, "w", encoding="utf-8") as f:
            for rec in result:
                system = [{"role": "system", "content": rec["system"]}] if rec.get("system") else []
                for g in rec["generations"]:
                    messages = system + [{"role": "user", "content": rec["prompt"]},
                                         {"role": "assistant", "content": g}]
                    f.write(json.dumps({"messages": messages, "problem": rec["problem"],
                                        **({"answer": rec["answer"]} if "answer" in rec else {})},
                                       ensure_ascii=False) + "\n")
    total = sum(len(r["generations"]) for r in result)
    unscored = sum(r["n_unscored"] for r in result)
    print(f"generate: {len(result)} problems, {total} generations kept in {out}; "
          f"{sum(r['n_rejected'] for r in result)} wrong, {unscored} unscored", file=sys.stderr)
    if unscored:  # an infrastructure problem, not the model's: say so where it cannot be missed
        print(f"generate: WARNING {unscored} generations could not be checked (reward None: the sandbox failed or "
              f"an answer was unparseable); counted apart, not as wrong{', and not kept' if args.verify else ''}",
              file=sys.stderr)
    return result


if __name__ == "__main__":
    main()
