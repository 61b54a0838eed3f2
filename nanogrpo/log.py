"""Metrics: one printed line per step, one JSON line per step in metrics.jsonl, wandb when asked.

Only rank 0 writes. Values are already reduced over ranks by the caller.
"""

from __future__ import annotations

import json
import math
import os
import time
from pathlib import Path

from nanogrpo import dist

# what the printed line shows (the jsonl gets everything)
LINE = [
    ("reward_mean", "reward", "{:.3f}"),
    ("sft_loss", "loss", "{:.4f}"),  # sft.py
    ("heldout_accuracy", "heldout", "{:.3f}"),
    ("heldout_tool_use", "heldout tools", "{:.2f}"),  # tools = true: held-out answers that ran code
    ("accuracy", "acc", "{:.3f}"),
    ("tool_use_frac", "tools", "{:.2f}"),  # rollouts with at least one tool call
    ("zero_std_frac", "zstd", "{:.2f}"),
    ("completion_len_mean", "len", "{:.1f}"),
    ("entropy", "ent", "{:.3f}"),
    ("kl", "kl", "{:.4f}"),
    ("logprob_gap", "gap", "{:.1e}"),
    ("grad_norm", "gnorm", "{:.3f}"),
    ("lr", "lr", "{:.1e}"),
    ("tokens_per_s", "tok/s", "{:.0f}"),
]


def _fmt_duration(s: float) -> str:
    s = int(s)
    return f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s"


class Logger:
    def __init__(self, out_dir: str, total_steps: int, start_step: int = 0, wandb_project: str = "", run_name: str = "", config: dict | None = None):
        self.main = dist.is_main()
        self.total, self.start = total_steps, start_step
        self.t0 = time.time()
        self.path = Path(out_dir) / "metrics.jsonl"
        self.wandb = None
        if self.main and self.path.exists():  # resuming: lines after the checkpoint are recomputed, drop them
            keep = []
            for i, x in enumerate(self.path.read_text(errors="replace").splitlines(), 1):
                try:
                    step = json.loads(x)["step"]
                except (ValueError, KeyError, TypeError):  # a line torn by a crash mid-write
                    print(f"warning: {self.path}:{i}: dropping an unreadable line (torn by a crash?): {x[:80]!r}",
                          flush=True)
                    continue
                if start_step and step <= start_step:
                    keep.append(x)
            tmp = self.path.with_name(self.path.name + ".tmp")  # a crash here must not lose the kept lines
            tmp.write_text("".join(x + "\n" for x in keep))
            os.replace(tmp, self.path)
        if self.main and wandb_project:
            import wandb  # only when asked for

            self.wandb = wandb.init(project=wandb_project, name=run_name or None, config=config, resume="allow")

    def log(self, step: int, metrics: dict, every: int = 1) -> None:
        """Append `metrics` for `step` (0-based; printed 1-based) and print a line every `every` steps."""
        if not self.main:
            return
        clean = {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in metrics.items()}
        with open(self.path, "a") as f:
            f.write(json.dumps({"step": step + 1, **clean}) + "\n")
        if self.wandb is not None:
            self.wandb.log({k: v for k, v in clean.items() if isinstance(v, (int, float))}, step=step + 1)
        done = step + 1 - self.start
        if (step + 1) % every and step + 1 != self.total:
            return
        eta = (time.time() - self.t0) / max(done, 1) * (self.total - step - 1)
        parts = [f"step {step + 1}/{self.total}"]
        for key, short, fmt in LINE:
            v = metrics.get(key)
            if v is not None and not (isinstance(v, float) and math.isnan(v)):
                parts.append(f"{short} {fmt.format(v)}")
        parts.append(f"eta {_fmt_duration(eta)}")
        print(" | ".join(parts), flush=True)

    def event(self, text: str) -> None:
        if self.main:
            print(text, flush=True)

    def close(self) -> None:
        if self.wandb is not None:
            self.wandb.finish()
