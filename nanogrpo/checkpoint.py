"""Save and resume. Every checkpoint is a Hugging Face model directory plus the trainer's state.

    out_dir/checkpoints/step_000050/
        config.json, model.safetensors, tokenizer files   <- from_pretrained / vLLM / eval.py load this
        lora/adapters.safetensors                         <- LoRA runs only: the adapters (the HF files hold
                                                             the merged weights base + B·A·alpha/r)
        optim/                                            <- optimizer state, sharded (torch.distributed.checkpoint)
        trainer_state.pt                                  <- step, scheduler, data position, config
        rng_rank{r}.pt                                    <- each rank's RNG states
        manifest.json                                     <- every file's size, written last

Weights are written in fp32 (the trainer's master copy), so a resumed run continues exactly.
A checkpoint is written to `.tmp_step_N/` and renamed to `step_N/` only when every rank has
finished: a crash mid-write leaves the previous checkpoints untouched, and `latest()` never sees a
partial one. A write that fails (a full disk) removes `.tmp_step_N/` and raises CheckpointError on
every rank, naming the file and the checkpoint still intact. A checkpoint whose files no longer match
its manifest (truncated or missing since it was saved) is skipped, with a warning naming the file:
the run resumes from the one before it.

The stop signals (config key `stop_signal`, StopSignals) end a run cleanly: the step finishes, a
checkpoint is saved, and the process exits with EXIT_STOPPED (75) so a wrapper can requeue it.
"""

from __future__ import annotations

import errno
import json
import os
import random
import re
import shutil
import signal
import sys
import threading
from pathlib import Path

import numpy as np
import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.api import CheckpointException
from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict, set_optimizer_state_dict

from nanogrpo import dist, files, lora
from nanogrpo.config import ConfigError, stop_signals
from nanogrpo.model import full_state_dict_cpu

EXIT_STOPPED = 75  # sysexits.h EX_TEMPFAIL: stopped by a stop signal after saving; run again with resume=true
MANIFEST = "manifest.json"
FULL_DISK_BYTES = 16 << 20  # a write that failed with less than this free on its file system failed for space


class CheckpointError(RuntimeError):
    """A checkpoint could not be written or read; the message names the step, the file and what is intact."""


def _rng_state() -> dict:
    return {
        "python": random.getstate(),
        "numpy": np.random.get_state(),
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None,
    }


def _set_rng_state(state: dict) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if state["cuda"] is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def _owner(rel: str) -> int:
    """The rank that writes, and so measures for the manifest, a checkpoint file: each rank its RNG state
    and its optimizer shards (torch.distributed.checkpoint names them __RANK_N.distcp), rank 0 the rest."""
    m = re.fullmatch(r"rng_rank(\d+)\.pt|optim/__(\d+)_\d+\.distcp", rel)
    return int(m.group(1) or m.group(2)) if m else 0


def _causes(e: BaseException):
    """`e`, what it was raised from, and the per-rank failures inside a torch.distributed.checkpoint error."""
    seen, todo = set(), [e]
    while todo:
        x = todo.pop()
        if x is None or id(x) in seen:
            continue
        seen.add(id(x))
        yield x
        todo += [x.__cause__, x.__context__]
        todo += [f[0] if isinstance(f, tuple) else f for f in (getattr(x, "failures", None) or {}).values()]


def _describe(e: BaseException, path: Path) -> str:
    """What went wrong writing `path`: a full disk is said so. torch.save reports one without an errno
    ("unexpected pos ..."), safetensors in its message: the file system's free space decides then."""
    for x in _causes(e):
        if isinstance(x, OSError) and x.errno in (errno.ENOSPC, errno.EDQUOT):
            what = "no space left on device" if x.errno == errno.ENOSPC else "disk quota exceeded"
            return f"{what} writing {x.filename or path}"
    try:
        free = shutil.disk_usage(next(p for p in (path, *path.parents) if p.exists())).free
    except (OSError, StopIteration):
        free = None
    if "No space left on device" in str(e) or (free is not None and free < FULL_DISK_BYTES):
        return f"no space left on device writing {path}" + (f" ({free} bytes free)" if free is not None else "")
    first = (str(e).strip().splitlines() or [""])[0]
    return f"writing {path} failed ({type(e).__name__}: {first})"


def _attempt(path: Path, write) -> str | None:
    """Run `write`; None when it worked, else what went wrong (see _describe)."""
    try:
        write()
    except (Exception, CheckpointException) as e:  # CheckpointException is a BaseException
        return _describe(e, path)
    return None


def _agree(failure: str | None, out_dir: str, step: int, tmp: Path, sizes: dict | None = None) -> dict:
    """Every rank's failure (the first one in rank order wins) and file sizes: a collective, so ranks
    never wait on one that stopped. On a failure the partial checkpoint is removed and every rank raises."""
    everyone = dist.all_gather_object((failure, sizes or {}))
    failed = next((f for f, _ in everyone if f), None)
    if failed:
        if dist.is_main():
            shutil.rmtree(tmp, ignore_errors=True)
        intact = latest(out_dir)
        raise CheckpointError(f"checkpoint step {step}: {failed}; earlier checkpoints are intact: "
                              + (str(intact) if intact else "(none: this was the run's first checkpoint)"))
    return {rel: size for _, mine in everyone for rel, size in mine.items()}


def save(out_dir: str, step: int, policy, optimizer, scheduler, tokenizer, trainer_state: dict, keep: int = 2,
         rank_state: dict | None = None) -> Path:
    """Write checkpoint `step` (all ranks call this). `trainer_state` holds small picklable state (rank 0's);
    `rank_state` this rank's own (async_steps: its queued rollouts), beside its RNG state (read by `rank_state`).
    A failed write (a full disk) raises CheckpointError on every rank and leaves no partial checkpoint."""
    root = Path(out_dir) / "checkpoints"
    final, tmp = root / f"step_{step:06d}", root / f".tmp_step_{step:06d}"
    main, rank = dist.is_main(), dist.rank()

    def start():
        shutil.rmtree(tmp, ignore_errors=True)  # debris of an earlier crash
        tmp.mkdir(parents=True)

    _agree(_attempt(tmp, start) if main else None, out_dir, step, tmp)
    weights = full_state_dict_cpu(policy)  # collective; rank 0 holds the tensors
    adapters = lora.adapter_state(policy.hf)  # collective; {} without LoRA

    def hf_files():
        policy.hf.save_pretrained(tmp, state_dict=weights, safe_serialization=True)
        tokenizer.save_pretrained(tmp)
        if adapters:  # the HF files above hold the merged weights; resume needs base + adapters
            lora.save_adapters(tmp, adapters)

    failure = _attempt(tmp, hf_files) if main else None
    del weights, adapters
    _agree(failure, out_dir, step, tmp)
    # collective: a rank's failure is raised on every rank
    failure = _attempt(tmp / "optim", lambda: dcp.save({"optim": get_optimizer_state_dict(policy, optimizer)},
                                                       checkpoint_id=str(tmp / "optim")))
    _agree(failure, out_dir, step, tmp)
    rng = tmp / f"rng_rank{rank}.pt"
    failure = _attempt(rng, lambda: torch.save({**_rng_state(), **(rank_state or {})}, rng))
    if main and not failure:
        state = tmp / "trainer_state.pt"
        failure = _attempt(state, lambda: torch.save({"step": step, "scheduler": scheduler.state_dict(),
                                                      **trainer_state}, state))
    mine = {}  # the sizes of the files this rank wrote, for the manifest
    for f in [] if failure else tmp.rglob("*"):
        rel = f.relative_to(tmp).as_posix()
        if f.is_file() and _owner(rel) == rank:
            mine[rel] = f.stat().st_size
    sizes = _agree(failure, out_dir, step, tmp, mine)
    manifest = tmp / MANIFEST
    write = lambda: manifest.write_text(json.dumps({"step": step, "files": dict(sorted(sizes.items()))}, indent=1))  # noqa: E731
    _agree(_attempt(manifest, write) if main else None, out_dir, step, tmp)
    if main:
        if final.exists():  # re-saving the same step (e.g. after a resume): replace it
            shutil.rmtree(final)
        os.replace(tmp, final)  # atomic: the checkpoint exists only once it is whole
        # older complete checkpoints beyond `keep` go; a damaged one is left for inspection (and never counted)
        complete = [p for p in sorted(root.glob("step_*")) if p.is_dir() and not problem(p)]
        for old in complete[:-keep] if keep > 0 else []:
            shutil.rmtree(old, ignore_errors=True)
    dist.barrier()
    return final


def problem(ckpt: Path) -> str:
    """Why checkpoint directory `ckpt` cannot be resumed from, or "" when it is complete: a file missing
    or of another size than its manifest says (truncated). A checkpoint written before manifests
    existed is complete when its trainer_state.pt is there, as then."""
    man = ckpt / MANIFEST
    if not man.is_file():
        return "" if (ckpt / "trainer_state.pt").is_file() else "no trainer_state.pt (and no manifest.json)"
    try:
        sizes = json.loads(man.read_text()).get("files")
    except (ValueError, AttributeError, OSError) as e:
        return f"{MANIFEST} is unreadable ({type(e).__name__})"
    if not isinstance(sizes, dict) or "trainer_state.pt" not in sizes:
        return f"{MANIFEST} does not list the checkpoint's files"
    for rel, size in sizes.items():
        f = ckpt / rel
        if not f.is_file():
            return f"{rel} is missing"
        got = f.stat().st_size
        if got != size:
            return f"{rel} is {got} bytes, {size} when saved ({'truncated' if got < size else 'changed'})"
    return ""


def latest(out_dir: str, warn: bool = False) -> Path | None:
    """The newest complete checkpoint directory, or None. `warn`: name each newer one that is skipped
    because it is damaged (see problem)."""
    root = Path(out_dir) / "checkpoints"
    for p in sorted(root.glob("step_*"), reverse=True):
        why = problem(p) if p.is_dir() else "not a directory"
        if not why:
            return p
        if warn:
            print(f"warning: checkpoint {p} is damaged: {why}; it is skipped (left as it is) and the run resumes "
                  "from the checkpoint before it", file=sys.stderr, flush=True)
    return None


def open_run(out_dir: str, resume: bool) -> Path | None:
    """Check out_dir before anything is loaded, and return the checkpoint to resume from (None: step 0),
    the same on every rank (rank 0 decides). Nothing in out_dir is ever overwritten by surprise: a run
    already there needs resume=true, and resume=true with a metrics.jsonl but no complete checkpoint
    (which would start again from step 0 and replace that log) is refused. train.py and sft.py call this."""
    why = files.dir_problem(out_dir)
    if why:
        raise ConfigError(f"config key 'out_dir': {why}")
    logged = (Path(out_dir) / "metrics.jsonl").exists()
    if not resume and (logged or any((Path(out_dir) / "checkpoints").glob("step_*"))):
        raise ConfigError(f"out_dir {out_dir!r} already holds a run: pass resume=true to continue it, "
                          "or choose another out_dir (nothing there is overwritten)")
    ckpt = dist.broadcast_object(str(latest(out_dir, warn=dist.is_main()) or "") if resume else "")
    if resume and logged and not ckpt:
        raise ConfigError(f"resume=true, but out_dir {out_dir!r} has a metrics.jsonl and no complete "
                          "checkpoint to resume from. To start over there, move or delete its metrics.jsonl "
                          "first (it is not overwritten silently), or choose another out_dir")
    return Path(ckpt) if ckpt else None


class StopSignals:
    """The stop signals (config key stop_signal), caught while the block runs; the previous handlers come
    back after it. The handler only notes the signal: the loop asks `requested()` after each step."""

    def __init__(self, names: str):
        self.signals = [signal.Signals[n] for n in stop_signals(names)]
        self.received = 0
        self._previous: dict = {}

    def _note(self, signum, frame) -> None:
        self.received = signum

    def __enter__(self) -> "StopSignals":
        if threading.current_thread() is threading.main_thread():  # Python handles signals there only
            self._previous = {s: signal.signal(s, self._note) for s in self.signals}
        return self

    def __exit__(self, *exc) -> None:
        for s, handler in self._previous.items():
            signal.signal(s, handler)

    def requested(self) -> str:
        """The stop signal any rank received ("" if none): an all-reduce, the same answer on every rank."""
        got = int(dist.all_reduce(torch.tensor([float(self.received)], dtype=torch.float64), "max").item())
        return signal.Signals(got).name if got else ""


def rank_state(ckpt: Path | None) -> dict:
    """This rank's own state saved by `save(rank_state=...)`; {} without a checkpoint or one (resuming on more ranks)."""
    rng = None if ckpt is None else ckpt / f"rng_rank{dist.rank()}.pt"
    if rng is None or not rng.is_file():
        return {}
    state = torch.load(rng, weights_only=False)
    return {k: v for k, v in state.items() if k not in ("python", "numpy", "torch", "cuda")}  # _rng_state's keys


def resume(ckpt: Path | None, policy, optimizer, scheduler, stream) -> int:
    """Restore optimizer, scheduler, RNG and the prompt stream's position into objects built from the
    checkpoint's weights; returns the step to continue from (0 when there is no checkpoint).

    The model weights themselves are loaded by building the policy from `ckpt` (an HF directory).
    train.py and sft.py both resume through here.
    """
    if ckpt is None:
        return 0

    def read(name: str, load):
        try:
            return load()
        except (Exception, CheckpointException) as e:  # a damage the manifest's sizes cannot see
            raise CheckpointError(f"checkpoint {ckpt}: cannot read {name} ({type(e).__name__}: "
                                  f"{(str(e).strip().splitlines() or [''])[0]}); move this checkpoint "
                                  "aside to resume from the one before it") from e

    state = get_optimizer_state_dict(policy, optimizer)
    read("optim/", lambda: dcp.load({"optim": state}, checkpoint_id=str(ckpt / "optim")))
    set_optimizer_state_dict(policy, optimizer, state)
    trainer_state = read("trainer_state.pt", lambda: torch.load(ckpt / "trainer_state.pt", weights_only=False))
    scheduler.load_state_dict(trainer_state.pop("scheduler"))
    rng = ckpt / f"rng_rank{dist.rank()}.pt"
    if rng.is_file():  # absent when resuming on more ranks than saved
        _set_rng_state(read(rng.name, lambda: torch.load(rng, weights_only=False)))
    stream.load_state_dict(trainer_state["data"])
    return trainer_state["step"]
