"""Save and resume. Every checkpoint is a Hugging Face model directory (fp32 weights, never a non-finite one) plus
the trainer's state, written to `.tmp_step_N/` and renamed to `step_N/` once every rank has finished (`_publish`).
Its layout and why: docs/architecture.md, "Checkpoints"; whether it is whole: nanogrpo/manifest.py.

The stop signals (config key `stop_signal`, StopSignals) end a run cleanly: the step finishes, a checkpoint is
saved, and the process exits with EXIT_STOPPED so a wrapper can requeue it.
"""

from __future__ import annotations

import os
import random
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
from nanogrpo.config import Config, ConfigError, stop_signals
from nanogrpo.manifest import CheckpointError, Writing, latest, nonfinite, problem, verified  # noqa: F401 (re-exported)
from nanogrpo.manifest import read as manifest
from nanogrpo.model import full_state_dict_cpu

EXIT_STOPPED = 75  # sysexits.h EX_TEMPFAIL: stopped by a stop signal after saving; run again with resume=true


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


def save(out_dir: str, step: int, policy, optimizer, scheduler, tokenizer, trainer_state: dict, keep: int = 2,
         rank_state: dict | None = None, model: str = "") -> Path:
    """Write checkpoint `step` (all ranks call this). `trainer_state` holds small picklable state (rank 0's);
    `rank_state` this rank's own (async_steps: its queued rollouts), beside its RNG state (read by `rank_state`);
    `model`: the model directory the run was started from (config key `model`), for `check_resume`."""
    root = Path(out_dir) / "checkpoints"
    final, tmp = root / f"step_{step:06d}", root / f".tmp_step_{step:06d}"
    writing = Writing(out_dir, step, tmp)
    writing.main(tmp, lambda: _fresh(tmp))
    # gather: the full weights on rank 0 (collectives), never one that is not finite
    weights = full_state_dict_cpu(policy)
    adapters = lora.adapter_state(policy.hf) if policy.adapted else {}
    writing.agree(nonfinite({**weights, **adapters}) if dist.is_main() else None)
    # the model files: an HF model directory (and the LoRA adapters)
    writing.main(tmp, lambda: _hf_files(tmp, policy, tokenizer, weights, adapters))
    del weights, adapters
    # the optimizer: sharded, each rank its own
    optim = tmp / "optim"
    writing.every(optim, lambda: dcp.save({"optim": get_optimizer_state_dict(policy, optimizer)},
                                          checkpoint_id=str(optim)))
    # RNG: each rank its own (and its rank_state); the trainer state: rank 0's
    rng, state = tmp / f"rng_rank{dist.rank()}.pt", tmp / "trainer_state.pt"
    writing.every(rng, lambda: torch.save({**_rng_state(), **(rank_state or {})}, rng))
    writing.main(state, lambda: torch.save({"step": step, "scheduler": scheduler.state_dict(), **trainer_state}, state))
    # the manifest, last: every file's size and SHA-256
    writing.seal(model)
    # rename: the checkpoint exists only once it is whole
    if dist.is_main():
        _publish(tmp, final, keep)
    dist.barrier()
    return final


def _fresh(tmp: Path) -> None:
    shutil.rmtree(tmp, ignore_errors=True)  # debris of an earlier crash
    tmp.mkdir(parents=True)


def _hf_files(tmp: Path, policy, tokenizer, weights: dict, adapters: dict) -> None:
    policy.hf.save_pretrained(tmp, state_dict=weights, safe_serialization=True)
    tokenizer.save_pretrained(tmp)
    if adapters:  # the HF files above hold the merged weights; resume needs base + adapters
        lora.save_adapters(tmp, adapters)


def _publish(tmp: Path, final: Path, keep: int) -> None:
    """Rename `tmp` to `final` (atomic), then delete the oldest complete checkpoints beyond `keep`. A checkpoint
    already at `final` (this run resumed from an older one: the newer was damaged, had no manifest, or appeared
    since) is never saved over: it is moved to checkpoints/replaced/, and a warning says so."""
    if final.exists():
        aside, n = final.parent / "replaced" / final.name, 0
        while aside.exists():
            n += 1
            aside = aside.with_name(f"{final.name}.{n}")
        aside.parent.mkdir(exist_ok=True)
        os.replace(final, aside)
        print(f"warning: checkpoint {final} already existed ({problem(aside) or 'complete'}) and this run saved its step "
              f"again: the old one is moved to {aside}, not overwritten", file=sys.stderr, flush=True)
    os.replace(tmp, final)
    # older complete checkpoints beyond `keep` go; a damaged one is left for inspection (and never counted)
    steps = [p for p in sorted(final.parent.glob("step_*")) if p.is_dir()]
    complete = [p for p in steps if not problem(p)] if 0 < keep < len(steps) else []
    for old in complete[:-keep]:
        shutil.rmtree(old, ignore_errors=True)


def open_run(out_dir: str, resume: bool, unverified: bool = False) -> Path | None:
    """Check out_dir before anything is loaded, and return the checkpoint to resume from (None: step 0), the same on
    every rank (rank 0 decides). Nothing in out_dir is overwritten by surprise: a run already there needs resume=true;
    resume=true with a metrics.jsonl but no complete checkpoint is refused (step 0 would replace that log), and so is
    a config.toml a run did not write. A checkpoint is resumed only with its manifest verified (nanogrpo/manifest.py)
    or with `unverified` (config key `resume_without_manifest`). train.py and sft.py call this."""
    why = files.dir_problem(out_dir) or files.owned_problem(Path(out_dir) / "config.toml")  # the run writes it
    if why:
        raise ConfigError(f"config key 'out_dir': {why}")
    logged = (Path(out_dir) / "metrics.jsonl").exists()
    if not resume and (logged or any((Path(out_dir) / "checkpoints").glob("step_*"))):
        raise ConfigError(f"out_dir {out_dir!r} already holds a run: pass resume=true to continue it, "
                          "or choose another out_dir (nothing there is overwritten)")
    ckpt = str(verified(out_dir, unverified) or "") if resume else ""
    if resume and logged and not ckpt:
        raise ConfigError(f"resume=true, but out_dir {out_dir!r} has a metrics.jsonl and no complete "
                          "checkpoint to resume from. To start over there, move or delete its metrics.jsonl "
                          "first (it is not overwritten silently), or choose another out_dir")
    return Path(ckpt) if ckpt else None


# what makes a model the same architecture for a checkpoint's weights (config.json keys, read where present)
ARCHITECTURE = ("model_type", "vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
                "num_attention_heads", "num_key_value_heads", "head_dim", "max_position_embeddings",
                "tie_word_embeddings", "rope_theta", "rope_parameters", "rope_scaling")


def _architecture(model_dir) -> dict | str:
    """The ARCHITECTURE keys of a model directory's config.json, or why it cannot be read."""
    try:
        cfg = files.loads((Path(model_dir) / "config.json").read_bytes())
    except (OSError, ValueError) as e:
        return f"{Path(model_dir) / 'config.json'} cannot be read ({e})"
    cfg = cfg.get("text_config", cfg) if isinstance(cfg, dict) else cfg
    if not isinstance(cfg, dict):
        return f"{Path(model_dir) / 'config.json'} is not a JSON object"
    return {k: cfg[k] for k in ARCHITECTURE if k in cfg}


def check_resume(ckpt: Path | None, cfg: Config, tokenizer) -> None:
    """Refuse, before the model is built, a resume that cannot continue checkpoint `ckpt` (ConfigError naming the
    key): `steps` below its step (at its step: said, and the run ends at once, as finished); `model` naming another
    existing directory than the one it was made from (the tokenizer, and with LoRA or beta > 0 the base's weights,
    would not be the checkpoint's); a model whose architecture (config.json) or tokenizer differs from the
    checkpoint's own files. A model directory that moved (the recorded one is gone) is accepted when those agree."""
    if ckpt is None:
        return
    record = manifest(ckpt)
    step = record.get("step")
    if isinstance(step, int) and cfg.steps < step:
        raise ConfigError(f"config key 'steps': steps={cfg.steps}, but checkpoint {ckpt} is at step {step}: a resumed run "
                          f"trains up to `steps`, so nothing would run. Pass steps > {step} to train on")
    if isinstance(step, int) and cfg.steps == step:
        dist.print0(f"resume: checkpoint {ckpt} is at step {step} = steps: this run is finished, nothing to train")
    made_from = str(record.get("model") or "")
    if made_from and Path(made_from).exists() and not files.same_file(made_from, cfg.model):
        raise ConfigError(f"config key 'model': checkpoint {ckpt} was made from model {made_from!r}, and model="
                          f"{cfg.model!r} is another directory: its tokenizer (and, with LoRA or beta > 0, its weights) "
                          f"would be paired with the checkpoint's weights. Resume with model={made_from!r}")
    mine, theirs = _architecture(cfg.model), _architecture(ckpt)
    for why in (mine, theirs):
        if isinstance(why, str):
            raise ConfigError(f"resume from {ckpt}: {why}")
    diff = [f"{k} {theirs.get(k)!r} in the checkpoint, {mine.get(k)!r} in model={cfg.model!r}"
            for k in ARCHITECTURE if theirs.get(k) != mine.get(k)]
    if not diff:
        from transformers import AutoTokenizer

        saved = AutoTokenizer.from_pretrained(str(ckpt))
        if saved.get_vocab() != tokenizer.get_vocab() or saved.all_special_tokens != tokenizer.all_special_tokens:
            diff = [f"the tokenizer (vocabulary or special tokens) of model={cfg.model!r} is not the checkpoint's"]
    if diff:
        raise ConfigError(f"config key 'model': checkpoint {ckpt} was not made from this model: {'; '.join(diff)}. "
                          f"Resume with the model it was made from{f' ({made_from!r})' if made_from else ''}")
    if made_from and not Path(made_from).exists():
        dist.print0(f"resume: checkpoint {ckpt} was made from {made_from!r}, which is gone; model={cfg.model!r} has its "
                    "architecture and tokenizer, so the run goes on with it")


def write_config(out_dir: str, toml: str) -> None:
    """OUT_DIR/config.toml: the resolved config, under files.MARK (never over a file a run did not write)."""
    files.write_owned(Path(out_dir) / "config.toml", toml, "the resolved config of the run in this directory")


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
    """Restore optimizer, scheduler, RNG and the prompt stream's position into objects built from the checkpoint's
    weights (the policy is built from `ckpt`, an HF directory); returns the step to continue from (0: none)."""
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
