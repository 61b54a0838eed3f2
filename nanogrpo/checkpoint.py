"""Save and resume. Every checkpoint is a Hugging Face model directory plus the trainer's state.

    out_dir/checkpoints/step_000050/
        config.json, model.safetensors, tokenizer files   <- from_pretrained / vLLM / eval.py load this
        lora/adapters.safetensors                         <- LoRA runs only: the adapters (the HF files hold
                                                             the merged weights base + B·A·alpha/r)
        optim/                                            <- optimizer state, sharded (torch.distributed.checkpoint)
        trainer_state.pt                                  <- step, scheduler, data position, config
        rng_rank{r}.pt                                    <- each rank's RNG states

Weights are written in fp32 (the trainer's master copy), so a resumed run continues exactly.
A checkpoint is written to `.tmp_step_N/` and renamed to `step_N/` only when every rank has
finished: a crash mid-write leaves the previous checkpoints untouched, and `latest()` never sees a
partial one.
"""

from __future__ import annotations

import os
import random
import shutil
from pathlib import Path

import numpy as np
import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict, set_optimizer_state_dict

from nanogrpo import dist, lora
from nanogrpo.model import full_state_dict_cpu


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


def save(out_dir: str, step: int, policy, optimizer, scheduler, tokenizer, trainer_state: dict, keep: int = 2) -> Path:
    """Write checkpoint `step` (all ranks call this). `trainer_state` holds small picklable state."""
    root = Path(out_dir) / "checkpoints"
    final, tmp = root / f"step_{step:06d}", root / f".tmp_step_{step:06d}"
    if dist.is_main():
        shutil.rmtree(tmp, ignore_errors=True)  # debris of an earlier crash
        tmp.mkdir(parents=True)
    dist.barrier()
    weights = full_state_dict_cpu(policy)  # collective; rank 0 holds the tensors
    if dist.is_main():
        policy.hf.save_pretrained(tmp, state_dict=weights, safe_serialization=True)
        tokenizer.save_pretrained(tmp)
    del weights
    adapters = lora.adapter_state(policy.hf)  # collective; {} without LoRA
    if dist.is_main() and adapters:  # the HF files above hold the merged weights; resume needs base + adapters
        lora.save_adapters(tmp, adapters)
    del adapters
    dcp.save({"optim": get_optimizer_state_dict(policy, optimizer)}, checkpoint_id=str(tmp / "optim"))
    torch.save(_rng_state(), tmp / f"rng_rank{dist.rank()}.pt")
    if dist.is_main():
        torch.save({"step": step, "scheduler": scheduler.state_dict(), **trainer_state}, tmp / "trainer_state.pt")
    dist.barrier()
    if dist.is_main():
        if final.exists():  # re-saving the same step (e.g. after a resume): replace it
            shutil.rmtree(final)
        os.replace(tmp, final)  # atomic: the checkpoint exists only once it is whole
        for old in sorted(root.glob("step_*"))[:-keep] if keep > 0 else []:
            shutil.rmtree(old, ignore_errors=True)
    dist.barrier()
    return final


def latest(out_dir: str) -> Path | None:
    """The newest complete checkpoint directory, or None."""
    root = Path(out_dir) / "checkpoints"
    done = [p for p in sorted(root.glob("step_*")) if (p / "trainer_state.pt").is_file()]
    return done[-1] if done else None


def resume(ckpt: Path | None, policy, optimizer, scheduler, stream) -> int:
    """Restore optimizer, scheduler, RNG and the prompt stream's position into objects built from the
    checkpoint's weights; returns the step to continue from (0 when there is no checkpoint).

    The model weights themselves are loaded by building the policy from `ckpt` (an HF directory).
    train.py and sft.py both resume through here.
    """
    if ckpt is None:
        return 0
    state = get_optimizer_state_dict(policy, optimizer)
    dcp.load({"optim": state}, checkpoint_id=str(ckpt / "optim"))
    set_optimizer_state_dict(policy, optimizer, state)
    trainer_state = torch.load(ckpt / "trainer_state.pt", weights_only=False)
    scheduler.load_state_dict(trainer_state.pop("scheduler"))
    rng = ckpt / f"rng_rank{dist.rank()}.pt"
    if rng.is_file():  # absent when resuming on more ranks than saved
        _set_rng_state(torch.load(rng, weights_only=False))
    stream.load_state_dict(trainer_state["data"])
    return trainer_state["step"]
