"""Stale-sampler faults against the default run: when each is caught, and named as what.

    OMP_NUM_THREADS=1 python scripts/bench/bench_stale_sampler.py [--steps 40] [--late 21] [--faults "no-op sync,top-p"]

Each fault of tests/helpers/sampler_faults.py is injected into the PyTorch sampler (monkeypatched, nothing
raises) in the default recipe (`train.py` with no arguments but `steps`, `eval_every=0`, `save_final=false`), in
float32 and bfloat16, with exact_logprobs off and on:
  - before: the gap gate alone (the sampler check off, as for a sampler that cannot report what it holds): the
    step the run stopped at and the cause it named, or "never" within --steps;
  - after: the sampler check on: the step it stopped at and the first name of its message; the fault starts at
    the first step it can touch (step 2 for a sync fault, step 1 for a generate fault), and again at step --late.
Prints a markdown table (docs/precision.md has it).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import re
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

import pytest  # noqa: E402  (its MonkeyPatch undoes each injection)
import torch  # noqa: E402

import train  # noqa: E402
from helpers.sampler_faults import FAULTS, inject  # noqa: E402
from nanogrpo import checks  # noqa: E402
from nanogrpo.torch_sampler import TorchSampler  # noqa: E402

NAMES = ("STALE WEIGHTS", "DTYPE", "SAMPLING", "PROMPTS", "WEIGHT NAMES", "SAMPLER", "CHUNKING / KERNELS")


def run(fault: str, dtype: str, exact: bool, check: bool, onset: int, steps: int, out: Path) -> str:
    """One run with the fault from step `onset`: "step N: NAME", "never", or "n/a" (LoRA has no exact mode)."""
    lora = fault == "LoRA never merged"
    if lora and exact:
        return "n/a"
    shutil.rmtree(out, ignore_errors=True)
    args = [f"out_dir={out}", f"steps={steps}", "eval_every=0", "save_final=false", f"dtype={dtype}",
            f"exact_logprobs={str(exact).lower()}", *(["lora_rank=4"] if lora else [])]
    with pytest.MonkeyPatch.context() as mp, contextlib.redirect_stdout(io.StringIO()), \
            contextlib.redirect_stderr(io.StringIO()):
        if not check:
            mp.delattr(TorchSampler, "held_weights")
        inject(mp, fault, onset, getattr(torch, dtype))
        try:
            train.main(args)
        except checks.LogprobGapError as e:
            msg = str(e)
            if isinstance(e, checks.StaleSamplerError):
                stopped, name = int(msg.split(":")[0].removeprefix("step ")), next(n for n in NAMES if n in msg)
            else:
                stopped = int(re.search(r"and [^ ]+ at step (\d+)", msg).group(1))
                name = next(n for n in NAMES if f"Likely cause: {n}" in msg)
            return f"step {stopped}: {name}"
    return "never"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=40, help="steps per run (a run not stopped by then: never)")
    ap.add_argument("--late", type=int, default=21, help="the later onset step (sampler check on, exact off)")
    ap.add_argument("--faults", default="", help="comma-separated subset of the faults (default: all)")
    args = ap.parse_args()
    faults = [f.strip() for f in args.faults.split(",") if f.strip()] or list(FAULTS)
    out = Path(tempfile.mkdtemp(prefix="bench-stale-")) / "run"
    print(f"default recipe, {args.steps} steps per run; fault from the first step it can touch (after: also from "
          f"step {args.late})\n")
    print("| fault | injected | dtype | before (gate only) | before, exact | after | after, exact | "
          f"after, from step {args.late} |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for fault in faults:
        where, how, _ = FAULTS[fault]
        early = 2 if where == "sync" else 1
        for dtype in ("float32", "bfloat16"):
            cells = [run(fault, dtype, exact, check, early, args.steps, out)
                     for check in (False, True) for exact in (False, True)]
            cells.append(run(fault, dtype, False, True, args.late, args.steps, out))
            print(f"| {fault} | {how} | {dtype} | " + " | ".join(cells) + " |", flush=True)
    shutil.rmtree(out.parent, ignore_errors=True)


if __name__ == "__main__":
    main()
