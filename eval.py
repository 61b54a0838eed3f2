"""Evaluate a model directory on reasoning benchmarks: pass@1 over n samples, plus pass@n.

    python eval.py --model DIR|OWNER/NAME --tasks aime24,math500,gsm8k,amc23,humaneval,lcb,PATH.py:NAME \
        [--n N] [--limit K] [--out results.json] [--sampler auto|torch|vllm] \
        [--temperature 0.6] [--top-p 0.95] [--max-new-tokens M] [--data DIR]

    python eval.py ... --tools [--tools-file F.py] [--max-tool-calls 4]   # the model runs code mid-answer
    python eval.py ... --resume   # a stopped eval: keep the finished calls in OUT's samples file, generate the rest

    torchrun --nproc_per_node=8 eval.py ... --num-samples N   # problems split across ranks, results gathered
    (under torchrun spell --n as --num-samples: torchrun reads `--n` as an abbreviation of its own options)

Writes OUT (results JSON, at the end), OUT with `.samples.jsonl` (every generation with its verdict, appended
as each generate call ends; OUT with `.samples.args.json` records the arguments) and prints a markdown table;
progress on stderr (a line redrawn in place on a terminal, plain lines elsewhere). A bad argument (a range,
the model, a task, an OUT that cannot be written or is a file the run reads, a --resume with other arguments)
is an error naming it (exit 2) before anything is generated. Tasks, prompts and defaults:
nanogrpo/tasks/benchmarks.py and docs/eval.md.
The work is done by nanogrpo/evaluate.py (`evaluate()`), which train.py's in-run evals call too.
"""

from __future__ import annotations

import argparse
import math
import os
import re
import sys
from pathlib import Path

from nanogrpo import dist, files, hub, rewards, tools, usercode
from nanogrpo.log import LogError
from nanogrpo.tasks import benchmarks
from nanogrpo.tasks.reasoning_gym import split_top
from nanogrpo import config as C
from nanogrpo import model as M
# the work is done in the library (one path with train.py's in-run evals); these names stay importable from here
from nanogrpo.evaluate import (MAX_NEW_TOKENS_CAP, ContextError, ResumeMismatch, evaluate,  # noqa: F401
                               markdown_table, prompt_ids, samples_args_path, samples_path)


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description="Evaluate a model directory on reasoning benchmarks.")
    ap.add_argument("--model", required=True, help="Hugging Face model directory (a checkpoint) or Hub id (owner/name)")
    ap.add_argument("--tasks", required=True,
                    help=f"comma-separated: {','.join(benchmarks.TASKS)}; NAME=PATH.jsonl for a custom file; a math "
                         "task from the Hub: NAME=hub (its default dataset) or NAME=OWNER/NAME[:SUBSET][@SPLIT]; a "
                         "training task of your own, PATH.py:NAME (its held-out split, judged by its own reward)")
    # --num-samples: the same; under torchrun, whose own parser takes `--n` for an abbreviation of its options
    ap.add_argument("--n", "--num-samples", dest="n", type=int, default=None,
                    help="samples per problem (default per task, docs/eval.md)")
    ap.add_argument("--limit", type=int, default=None, help="first K problems of each task")
    ap.add_argument("--out", default="results.json",
                    help="results JSON; samples go to OUT's .samples.jsonl as each generate call ends (a file "
                         "already there is never replaced: choose a new OUT, or --resume a stopped eval)")
    ap.add_argument("--resume", action="store_true",
                    help="continue a stopped eval with the same arguments: the calls recorded in OUT's samples file "
                         "are kept, the rest generated (same seeds: the results equal an uninterrupted run's); "
                         "a samples file written with other arguments is an error")
    ap.add_argument("--sampler", default="auto", choices=["auto", "torch", "vllm"])
    ap.add_argument("--temperature", type=float, default=0.6)
    ap.add_argument("--top-p", type=float, default=0.95)
    ap.add_argument("--max-new-tokens", type=int, default=None,
                    help=f"default: {MAX_NEW_TOKENS_CAP} on GPU, the task's default on CPU (gsm8k "
                         f"{benchmarks.CPU_MAX_NEW_TOKENS['gsm8k']}, docs/eval.md); never past the context left "
                         "after the longest prompt")
    ap.add_argument("--data", default=None, help=f"folder of eval files (default {benchmarks.DEFAULT_DATA_DIR})")
    ap.add_argument("--device", default=None, help="cpu | cuda (default: cuda if available)")
    ap.add_argument("--seed", type=int, default=0)
    tool = ap.add_argument_group("tools", "run code mid-answer, as train.py's tools = true (nanogrpo/tools.py)")
    tool.add_argument("--tools", action="store_true", help="code blocks run in the sandbox; their output goes back")
    tool.add_argument("--tools-file", default="", help="a Python file loaded into every session (its functions "
                      "are listed in the system prompt)")
    tool.add_argument("--max-tool-calls", type=int, default=C.Config.max_tool_calls)
    tool.add_argument("--tool-output-tokens", type=int, default=C.Config.tool_output_tokens)
    tool.add_argument("--tool-timeout-s", type=float, default=C.Config.tool_timeout_s)
    tool.add_argument("--sandbox", default="local", choices=["local", "e2b"])
    args = ap.parse_args(argv)
    if args.n is not None and args.n < 1:
        ap.error("--n must be >= 1")
    if args.limit is not None and args.limit < 1:
        ap.error(f"--limit must be >= 1 (the first K problems of each task), got {args.limit}")
    specs = [t.strip() for t in split_top(args.tasks) if t.strip()]  # reasoning_gym:NAME(K=V, K=V) has commas
    if not specs:
        ap.error(f"--tasks {args.tasks!r} names no task (known: {','.join(benchmarks.TASKS)})")
    if not (math.isfinite(args.temperature) and (args.temperature == 0 or args.temperature >= 0.01)):
        ap.error(f"--temperature must be 0 (greedy) or a finite number >= 0.01 (below, logits / T overflow: the "
                 f"config's eval_temperature range), got {args.temperature}")
    if not (math.isfinite(args.top_p) and 0 < args.top_p <= 1):
        ap.error(f"--top-p must be in (0, 1], got {args.top_p}")
    if args.max_new_tokens is not None and args.max_new_tokens < 1:
        ap.error(f"--max-new-tokens must be >= 1, got {args.max_new_tokens}")
    if args.device is not None and not re.fullmatch(r"cpu|cuda(:\d+)?", args.device):
        ap.error(f"--device must be cpu, cuda or cuda:N, got {args.device!r}")
    # the results and the samples: writable, and neither one a file this run reads (checked before
    # generating, so no evaluation is lost and no input is overwritten)
    data_dir = Path(args.data) if args.data else benchmarks.DEFAULT_DATA_DIR
    reads = ([t.partition("=")[2] for t in specs if "=" in t] + [args.tools_file]
             + [t.rpartition(":")[0] for t in specs if usercode.is_spec(t)]
             + [str(data_dir / f) for f in (*benchmarks.MATH_FILES.values(), "lcb.jsonl")])
    # a file already there is another eval's (or not an eval's at all): never replaced, except the samples of a
    # stopped eval by --resume, which continues it (its arguments checked against them); a stopped eval wrote no OUT
    for flag, path, resumes in (("--out", args.out, False),
                                ("--out's samples file", str(samples_path(Path(args.out))), args.resume),
                                ("--out's samples arguments", str(samples_args_path(Path(args.out))), args.resume)):
        problem = files.output_problem(path, reads, replaces=resumes)
        if problem and args.resume and flag == "--out" and Path(path).is_file():
            problem = ("already exists: the eval that wrote it finished (a stopped eval writes no results yet), so "
                       "there is nothing to resume; it is never replaced: move it away, or choose another --out")
        if problem:
            ap.error(f"{flag} {path!r}: {problem} (checked before generating, so no evaluation is lost; --resume "
                     "continues a stopped eval there)")
    try:  # every task loads now, before the model: an unknown name or a bad file stops here, not after generating
        loaded = [benchmarks.load_task(t, args.data, args.limit) for t in specs]
        for t in loaded:  # a user task's own reward fits its rows' columns
            rewards.check_user_calls([], t.reward, t.rows, f"{t.name}'s")
    except (ValueError, FileNotFoundError) as e:
        ap.error(f"--tasks: {e}")
    # a Hub id becomes its snapshot in the HF cache, as in train.py (after the cheap checks: a download can be
    # long); a local path is returned as it is and checked below
    try:
        args.model = hub.model_dir(args.model)
    except hub.HubError as e:  # neither cached nor reachable: the error names the id
        ap.error(f"--model: {e}")
    if not (Path(args.model) / "config.json").is_file():
        ap.error(f"--model {args.model!r} is not a Hugging Face model directory (no config.json)")
    try:
        M.check_model_dir(args.model)
        M.check_tokenizer_files(args.model)
    except (FileNotFoundError, M.ModelError) as e:
        ap.error(f"--model: {e}")
    tool_cfg = None
    if args.tools:  # the same keys and checks as train.py's config (a missing or broken tools file stops here)
        try:
            cfg = C.validate(C.Config(tools=True, tools_file=args.tools_file, max_tool_calls=args.max_tool_calls,
                                      tool_output_tokens=args.tool_output_tokens, tool_timeout_s=args.tool_timeout_s))
        except C.ConfigError as e:
            ap.error(f"--tools: {e}")
        tool_cfg = tools.ToolConfig.from_config(cfg)
    if (args.device or "").startswith("cuda"):
        import torch

        if not torch.cuda.is_available():
            ap.error(f"--device {args.device}: no CUDA GPU is available")

    if "RANK" in os.environ:  # under torchrun: join the group so problems are split across ranks
        dist.init(args.device or "auto")
    try:
        results = evaluate(args.model, loaded, n=args.n, limit=args.limit, sampler_kind=args.sampler,
                           device=args.device, temperature=args.temperature, top_p=args.top_p,
                           max_new_tokens=args.max_new_tokens, data_dir=args.data, out=args.out, seed=args.seed,
                           tool_cfg=tool_cfg, sandbox=args.sandbox, resume=args.resume, exclusive=not args.resume)
    except ContextError as e:  # raised before the model is loaded: a prompt the model cannot even read
        ap.error(f"--tasks {e}")
    except ResumeMismatch as e:  # raised before the model is loaded
        ap.error(f"--resume: {e}")
    except FileExistsError as e:  # another eval created the samples file meanwhile (evaluate's `exclusive`)
        ap.error(f"--out {args.out!r}: {e.filename or e} was created by another run meanwhile: nothing was generated")
    except LogError as e:  # a full disk under the results or the samples (log.DiskFullError), named
        print(f"error: {e}", file=sys.stderr)
        sys.exit(1)
    if dist.is_main():
        print(markdown_table(results))
        print(f"\nresults: {args.out}\nsamples: {samples_path(Path(args.out))}", file=sys.stderr)
    return results


if __name__ == "__main__":
    main()
