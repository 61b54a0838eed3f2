"""Distillation data: N generations per problem with the R1 prompt, optionally only the verified ones.

    python scripts/generate.py TASK --model MODEL --out OUT.jsonl [--n 4] [--verify] [--sft SFT.jsonl]
        [--kind math|code] [--template chat|math_eval|raw] [--temperature 0.6] [--top-p 0.95] [--max-new-tokens M]
        [--limit K] [--batch 16] [--sampler auto|torch|vllm] [--seed 0] [--split train] [--subset NAME]

TASK is what train.py's `task` takes (a built-in task, a .jsonl / .parquet file, a Hub dataset id) with
math rows, or with --kind code rows in the code schema (docs/data.md) (as train.py's rewards = ["code"]). The math
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
from OUT at the end and written whole (a temporary file renamed into place).

Every argument is checked before any compute, each bad one an error naming it (exit 2) with no file
changed: the numbers' ranges, the device, the TASK's rows, the model directory, and the outputs: --out and
--sft must be writable, neither may be TASK (or each other), and an existing --out must be this script's
output with the same settings (it is resumed).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import sys
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from nanogrpo import data, files, hub, rewards, rollout, tasks  # noqa: E402
from nanogrpo.tasks import benchmarks  # noqa: E402
from nanogrpo import evaluate as E  # noqa: E402
from nanogrpo import model as M  # noqa: E402


def read_done(out: Path) -> tuple[dict[int, dict], int]:
    """Finished problems of an earlier run ({index: line}) and how many bytes its complete lines take: a
    last line torn by a kill (no newline) is not one, and is cut off when the run appends. Nothing is
    written here. ValueError names the line of a file that is not this script's output."""
    if not out.exists():
        return {}, 0
    raw = out.read_bytes()
    good = raw[: raw.rfind(b"\n") + 1]  # every complete line ends with "\n"; the rest was torn
    done = {}
    for i, line in enumerate(good.decode("utf-8", errors="replace").splitlines(), 1):
        try:
            rec = files.loads(line)
        except ValueError:
            rec = None
        if not (isinstance(rec, dict) and isinstance(rec.get("index"), int) and "settings" in rec):
            raise ValueError(f"line {i} is not a generate.py record (index, settings, generations ...): the file "
                             "holds something else, which appending would mix in; choose another --out")
        done[rec["index"]] = rec
    return done, len(good)


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
    ap.add_argument("--kind", default="math", choices=["math", "code"], help="the rows' schema (docs/data.md)")
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
    # every input is checked before any compute (a model loaded, a sandbox started, a row generated): a
    # bad one is an argparse error (exit 2) naming it, and no file is changed
    if args.n < 1 or args.batch < 1:
        ap.error("--n and --batch must be >= 1")
    if not (math.isfinite(args.temperature) and (args.temperature == 0 or args.temperature >= 0.01)):
        ap.error(f"--temperature must be 0 (greedy) or a finite number >= 0.01 (below, logits / T overflow: the "
                 f"config's eval_temperature range), got {args.temperature}")
    if not (math.isfinite(args.top_p) and 0 < args.top_p <= 1):
        ap.error(f"--top-p must be in (0, 1], got {args.top_p}")
    for name, value in (("--max-new-tokens", args.max_new_tokens), ("--limit", args.limit)):
        if value is not None and value < 1:
            ap.error(f"{name} must be >= 1, got {value}")
    if args.device is not None and not re.fullmatch(r"cpu|cuda(:\d+)?", args.device):
        ap.error(f"--device must be cpu, cuda or cuda:N, got {args.device!r}")
    if args.kind == "code" and (args.template == "math_eval" or args.task in tasks.TASKS):
        ap.error("--kind code takes code rows (not a built-in math task) and --template chat or raw")
    out = Path(args.out)
    inputs = [args.task] if Path(args.task).is_file() else []
    for flag, path, reads in (("--out", out, inputs), ("--sft", args.sft, inputs)):
        if not path:
            continue
        same_as_out = flag == "--sft" and Path(path).resolve() == out.resolve()
        # --out is resumed (appended to, its lines checked below); --sft is rewritten from it at the end, so it
        # belongs to the generation in --out: replaced only when that is being resumed
        problem = "is --out: choose another file" if same_as_out else files.output_problem(
            path, reads, replaces=flag == "--out" or out.is_file())
        if problem:
            ap.error(f"{flag} {str(path)!r}: {problem} (checked before generating: nothing was written)")

    try:
        rows = tasks.load_rows(args.task, args.kind, split=args.split, n=args.limit, seed=args.seed,
                              subset=args.subset)
    except (data.DataError, FileNotFoundError, ValueError) as e:  # a missing / malformed file, a bad row, a Hub id
        ap.error(f"TASK {args.task!r}: {e}")
    rows = rows[: args.limit] if args.limit else rows
    if args.kind == "code" and args.template == "chat" and any(r.get("language", "python") != "python" for r in rows):
        ap.error("--template chat for code is eval.py's LiveCodeBench prompt, which asks for Python: use "
                 "--template raw (the problem text alone) for rows in other languages")
    try:
        done, complete = read_done(out)
    except (ValueError, OSError) as e:
        ap.error(f"--out {str(out)!r}: {e}")
    settings = {"model": args.model, "kind": args.kind, "n": args.n, "template": args.template,
                "verify": args.verify, "temperature": args.temperature, "seed": args.seed}
    for rec in done.values():  # resuming with other settings would mix two different data sets
        if rec.get("settings") != settings:
            ap.error(f"--out {str(out)!r} was written with {rec.get('settings')}, not {settings}: use another --out")
    todo = [s for s in range(0, len(rows), args.batch) if any(i not in done for i in range(s, min(s + args.batch, len(rows))))]
    print(f"generate: {len(rows)} problems x {args.n}, {len(done)} done before, {len(todo)} batches to go",
          file=sys.stderr)

    if todo:
        try:  # the model as eval.py checks it (a Hub id: its snapshot in the cache, downloaded first if need be)
            model_dir = hub.model_dir(args.model)
            M.check_model_dir(model_dir)
            M.check_tokenizer_files(model_dir)
        except (FileNotFoundError, M.ModelError) as e:
            ap.error(f"--model: {e}")
        import torch

        if (args.device or "").startswith("cuda") and not torch.cuda.is_available():
            ap.error(f"--device {args.device}: no CUDA GPU is available")
        if args.kind == "code":  # a sandbox that cannot isolate stops here, not after generating (every verdict None)
            from nanogrpo.sandbox import SandboxUnavailable, get_pool

            try:
                get_pool().start()
            except SandboxUnavailable as e:
                ap.error(f"--kind code: {e}")
        device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
        dtype = torch.bfloat16 if device.startswith("cuda") else torch.float32
        sampler = rollout.make_sampler(args.sampler, model_dir, device, dtype)
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(model_dir)
        context = E.context_length(model_dir)
        sampling = {"temperature": args.temperature, "top_p": args.top_p, "max_new_tokens": args.max_new_tokens}
        prompt, system = prompts(args.kind, args.template)
        out.parent.mkdir(parents=True, exist_ok=True)
        if out.exists() and out.stat().st_size > complete:  # a line torn by a kill: the next write starts clean
            print(f"generate: {out}: dropping a torn last line ({out.stat().st_size - complete} bytes)", file=sys.stderr)
            os.truncate(out, complete)
        t0, kept, drawn, rejected, unscored = time.monotonic(), 0, 0, 0, 0
        for k, start in enumerate(todo, 1):
            chunk = rows[start : start + args.batch]
            task = benchmarks.Task("generate", rewards.code if args.kind == "code" else rewards.math, chunk, args.n,
                                   prompt, system)
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

    result = sorted(read_done(out)[0].values(), key=lambda r: r["index"])
    if args.sft:
        with files.atomic_open(args.sft) as f:  # whole or not at all
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
