"""Supervised fine-tuning: `python sft.py [CONFIG.toml] [key=value ...]`, or the same under `torchrun`.

The R1 "cold start" (and any warm start) on the modules train.py uses: the same config (nanogrpo/config.py;
`sft_max_len` and `sft_stop_accuracy` are its own keys), the same FSDP2 policy (model.py), the same packing (packing.py),
checkpoints (checkpoint.py: HF directories, exact resume) and metrics line (log.py). `lora_rank` > 0 trains
LoRA adapters on a frozen base, as train.py does (nanogrpo/lora.py): the checkpoint holds the merged weights
and lora/adapters.safetensors.

Rows (`task`: a .jsonl / .parquet file or a Hub dataset id, `task_columns` to rename fields):
  - chat: {"messages": [{"role": "user", "content": ...}, {"role": "assistant", "content": ...}, ...]}
    (the OpenR1-Math-220k form), rendered with the model's chat template;
  - problem + solution (or answer): the prompt train.py would give the problem (`template`: raw | chat |
    math_eval, `system_prompt`), then the solution as the assistant turn;
  - a rollout: problem + segments [[text, scored], ...]: the prompt train.py samples from, each piece,
    then EOS; an unscored piece (a tool's output: read, never written) is context only.
Only assistant tokens are scored: for chat rows, the characters each assistant turn adds to the rendered
conversation (its content and the template's end-of-turn), found by rendering the conversation up to
that turn; for raw rows, the answer and EOS; for rollouts, the scored pieces and EOS.

Held-out accuracy every `eval_every` steps (and at the start and the end) is train.py's, through
nanogrpo/evaluate.py (`eval_task`, `eval_size`, `eval_temperature`, the tool loop with `tools`);
`sft_stop_accuracy` > 0 ends the run, saved, after the first eval that reaches it (the tiny models'
warm starts: configs/tiny_warm_start.toml).

One step: this rank's share of `prompts_per_step` rows (data.PromptStream: sharded, resumable) ->
padding-free micro-batches of at most `micro_batch_tokens` tokens (packing.plan; 0 = sft_max_len) ->
forward/backward -> clip, AdamW, schedule. The loss is the mean negative log-likelihood over every
scored token of the step: summed over micro-batches and ranks, divided once by their global count.
"""

from __future__ import annotations

import math
import sys
import time
from dataclasses import dataclass

import torch

from nanogrpo import checkpoint, checks, data, dist, grpo, hub, packing, tasks
from nanogrpo import config as C
from nanogrpo import model as M
from nanogrpo.evaluate import heldout_accuracy, heldout_rows
from nanogrpo.rollout import encode_prompts, task_template, trainer_sampler
from nanogrpo.log import Logger, LogError


# ----------------------------------------------------------------------------------------------
# Rows -> token ids and the mask of scored (assistant) tokens


def row_messages(row: dict, cfg: C.Config, where: str = "row") -> list[dict] | None:
    """The conversation of a chat row (checked), or None for a problem + solution/answer row."""
    if "messages" not in row:
        return None
    msgs = row["messages"]
    if not isinstance(msgs, list) or not all(isinstance(m, dict) and isinstance(m.get("role"), str)
                                             and isinstance(m.get("content"), str) for m in msgs):
        raise data.DataError(f"{where}: 'messages' must be a list of {{'role': str, 'content': str}}")
    if not any(m["role"] == "assistant" for m in msgs):
        raise data.DataError(f"{where}: 'messages' has no assistant turn: nothing to learn from")
    return [{"role": m["role"], "content": m["content"]} for m in msgs]


def target_text(row: dict, where: str = "row") -> str:
    """What a problem row teaches: its worked solution when it has one, else its answer."""
    for key in ("solution", "answer"):
        value = row.get(key)
        if isinstance(value, (str, int, float)) and not isinstance(value, bool) and str(value).strip():
            return str(value)
    raise data.DataError(f"{where}: an SFT row needs 'messages', or 'problem' with 'solution', 'answer' or "
                         f"'segments'; keys: {sorted(row)}")


def row_segments(row: dict, where: str = "row") -> list[tuple[str, bool]] | None:
    """A rollout row's completion as (text, scored) pieces, checked; None when the row has no 'segments'.
    Unscored text (a tool's output: the model reads it, never writes it) is context only."""
    if "segments" not in row:
        return None
    segs = row["segments"]
    if not (isinstance(segs, list) and segs and all(isinstance(x, (list, tuple)) and len(x) == 2 and isinstance(x[0], str)
                                                   and isinstance(x[1], bool) for x in segs)):
        raise data.DataError(f"{where}: 'segments' must be a non-empty list of [text, scored] pairs (str, bool)")
    if not any(scored for _, scored in segs):
        raise data.DataError(f"{where}: 'segments' has no scored piece: nothing to learn from")
    return [(text, scored) for text, scored in segs]


def encode_chat(messages: list[dict], tokenizer, where: str = "row") -> tuple[list[int], list[bool]]:
    """(token ids, scored) for a conversation rendered with the tokenizer's chat template; scored marks
    the tokens that start inside an assistant turn (its content and the template's end-of-turn)."""
    if getattr(tokenizer, "chat_template", None) is None:
        raise data.DataError(f"{where}: chat rows need a tokenizer with a chat template")
    render = lambda msgs, gen=False: tokenizer.apply_chat_template(msgs, tokenize=False, add_generation_prompt=gen)  # noqa: E731
    full = render(messages)
    spans = []
    for i, m in enumerate(messages):
        if m["role"] != "assistant":
            continue
        before, upto = (render(messages[:i], True) if i else ""), render(messages[: i + 1])
        # templates that rewrite earlier turns (R1's drops past reasoning) break this prefix property
        if not (upto.startswith(before) and full.startswith(upto)):
            raise data.DataError(f"{where}: the chat template does not render turn {i} as a prefix of the "
                                 "conversation, so its assistant tokens cannot be located")
        spans.append((len(before), len(upto)))
    enc = tokenizer(full, add_special_tokens=False, return_offsets_mapping=True)
    scored = [any(s <= start < e for s, e in spans) for start, _ in enc["offset_mapping"]]
    return enc["input_ids"], scored


def encode_row(row: dict, tokenizer, cfg: C.Config, where: str = "row") -> tuple[list[int], list[bool]]:
    """(ids, scored) of one row, cut to sft_max_len tokens."""
    messages = row_messages(row, cfg, where)
    if messages is not None:
        ids, scored = encode_chat(messages, tokenizer, where)
    else:
        if "problem" not in row:
            raise data.DataError(f"{where}: an SFT row needs 'messages', or 'problem' with 'solution', 'answer' "
                                 "or 'segments'")
        segments = row_segments(row, where)
        template = task_template(cfg, tokenizer, row)
        if segments is None and template != "raw":  # the answer as the assistant turn of a chat
            prompt = data.prompt_messages(row, template, cfg.system_prompt or None)
            ids, scored = encode_chat(prompt + [{"role": "assistant", "content": target_text(row, where)}],
                                      tokenizer, where)
        else:  # the rollout format: the prompt train.py samples from, then the completion and EOS
            ids = encode_prompts([row], tokenizer, cfg)[0]
            scored = [False] * len(ids)
            for text, s in segments or [(target_text(row, where), True)]:
                piece = tokenizer(text, add_special_tokens=False)["input_ids"]
                ids, scored = ids + piece, scored + [s] * len(piece)
            ids, scored = ids + [tokenizer.eos_token_id], scored + [True]
    return ids[: cfg.sft_max_len], scored[: cfg.sft_max_len]


# ----------------------------------------------------------------------------------------------
# Packed micro-batches and the update


@dataclass
class Packed:
    """One padding-free micro-batch: examples back to back in one row, positions restarting per example."""

    input_ids: torch.Tensor  # (1, T)
    position_ids: torch.Tensor  # (1, T)
    positions: torch.Tensor  # (K,) where each scored token is predicted in the model's (T-1) outputs
    weight: float  # 1, or 0 for a filler micro-batch that only keeps the ranks' collectives in step


def make_batches(examples: list[tuple[list[int], list[bool]]], budget: int) -> list[Packed]:
    """Pack examples into rows of at most `budget` tokens (packing.plan: an example is never split)."""
    batches = []
    for group in packing.plan([len(ids) for ids, _ in examples], budget):
        ids, pos, positions = [], [], []
        for i in group:
            seq, scored = examples[i]
            start = len(ids)
            ids += seq
            pos += range(len(seq))
            # token t of the example is predicted at row index start + t - 1 (its first token never is)
            positions += [start + t - 1 for t in range(1, len(seq)) if scored[t]]
        batches.append(Packed(torch.tensor([ids]), torch.tensor([pos]), torch.tensor(positions or [0]),
                              1.0 if positions else 0.0))
    return batches


def scored_tokens(examples: list[tuple[list[int], list[bool]]]) -> int:
    return sum(sum(scored[1:]) for _, scored in examples)


def accumulate(policy, examples: list[tuple[list[int], list[bool]]], cfg: C.Config, pad_id: int) -> tuple[float, float]:
    """Forward and backward of this rank's examples -> (the step's loss, its scored tokens), both global.
    The gradients left in `policy` are those of the global per-token mean NLL."""
    device = next(policy.parameters()).device
    budget = cfg.micro_batch_tokens or cfg.sft_max_len
    batches = make_batches(examples, budget) if examples else []
    # every rank runs as many micro-batches as the busiest one; a filler has weight 0
    batches = dist.even_out(batches, lambda: Packed(torch.tensor([[pad_id, pad_id]]), torch.tensor([[0, 1]]),
                                                    torch.tensor([0]), 0.0))
    # the normaliser: scored tokens of the whole step, on every rank
    z = dist.all_reduce(torch.tensor([float(scored_tokens(examples))], dtype=torch.float64))[0].item()
    # FSDP averages gradients over ranks: scale by the world size so the global mean is not divided again
    scale = dist.world_size() / max(z, 1.0)
    total = torch.zeros((), dtype=torch.float64)
    for _, b in dist.syncing_grads(policy, batches, cfg.grad_accumulation):
        logp, _ = policy(b.input_ids.to(device), None, position_ids=b.position_ids.to(device),
                         positions=b.positions.to(device))  # (1, K)
        nll = -logp.sum() * b.weight
        (nll * scale).backward()
        total += nll.detach().double().cpu()
    return dist.all_reduce(total.reshape(1))[0].item() / max(z, 1.0), z


def sft_step(policy, optimizer, scheduler, examples: list[tuple[list[int], list[bool]]], cfg: C.Config,
             pad_id: int) -> dict[str, float]:
    """One optimizer step on this rank's examples."""
    loss, z = accumulate(policy, examples, cfg, pad_id)
    # a rank with no tokens still steps with the others; a non-finite loss or gradient norm: no step (grpo.py)
    grad_norm, applied = grpo.apply_update(policy, optimizer, scheduler, cfg.grad_clip, math.isfinite(loss))
    return {"sft_loss": loss, "grad_norm": grad_norm, "train_tokens": z, "updates_skipped": int(not applied)}


# ----------------------------------------------------------------------------------------------
# The run


def load_sft_rows(cfg: C.Config) -> list[tuple[str, dict]]:
    """(where, row) of the training set, checked before any compute (every row's shape, not its tokens)."""
    if tasks.get(cfg.task).rows is not None:  # a task that makes its rows (a built-in, your own): not a file
        records = [(f"{cfg.task} row {i}", r) for i, r in enumerate(tasks.load_rows(cfg.task, seed=cfg.seed), 1)]
    else:
        records = data.map_columns(data.read_records(cfg.task, cfg.task_split, cfg.task_subset or None),
                                   data.parse_columns(cfg.task_columns))
    if not records:
        raise data.DataError(f"{cfg.task}: the dataset is empty")
    for where, row in records:
        if row_messages(row, cfg, where) is None and row_segments(row, where) is None:
            target_text(row, where)
    return records


def main(argv: list[str]) -> dict:
    """The run; the last step's metrics and "steps_run", with "stopped_by": the signal's name when a stop
    signal ended it early (saved: resume=true continues)."""
    cfg = C.load(argv)
    with checkpoint.StopSignals(cfg.stop_signal) as stop:  # from here on a stop signal ends the run saved
        return run(cfg, stop)


def run(cfg: C.Config, stop: checkpoint.StopSignals) -> dict:
    device = dist.init(cfg.device, cfg.cpu_allocator)
    rank, world = dist.rank(), dist.world_size()
    if cfg.prompts_per_step % world:
        raise C.ConfigError(f"prompts_per_step={cfg.prompts_per_step} (rows per step) is not divisible by the "
                            f"world size {world}")
    dtype = C.torch_dtype(cfg, device.type == "cuda")
    torch.manual_seed(cfg.seed)
    # train.py's check: writable; a run already there is continued only with resume=true, and never replaced
    resume_from = checkpoint.open_run(cfg.out_dir, cfg.resume, unverified=cfg.resume_without_manifest)

    records = load_sft_rows(cfg)
    eval_rows = heldout_rows(cfg) if cfg.eval_every else []  # eval_task, or a built-in task's held-out split
    if cfg.sft_stop_accuracy and not eval_rows:
        raise C.ConfigError("config key 'sft_stop_accuracy' stops at a held-out accuracy, but this run measures none: "
                            "set eval_every > 0 and eval_task (a file of held-out problems with answers)")
    cfg.model = hub.model_dir(cfg.model)  # a Hub id: its snapshot in the HF cache
    tokenizer = M.load_tokenizer(cfg.model)
    cfg.template = task_template(cfg, tokenizer, records[0][1])  # "" -> the task's own (as train.py)
    encode_row(records[0][1], tokenizer, cfg, records[0][0])  # template problems show up now, not mid-run
    checkpoint.check_resume(resume_from, cfg, tokenizer)  # its steps and model fit the checkpoint
    # LoRA (lora_rank > 0), as in train.py: the frozen base is always cfg.model (a checkpoint's HF files hold
    # merged weights), the adapters come from the checkpoint on resume; the optimizer then sees only them
    policy = M.make_policy(cfg.model if cfg.lora_rank else str(resume_from or cfg.model), device, dtype,
                           cfg.logprob_chunk, cfg.activation_checkpointing, compile=cfg.compile,
                           attention=cfg.attention, lora_rank=cfg.lora_rank, lora_alpha=cfg.lora_alpha,
                           lora_targets=cfg.lora_targets, adapters_from=resume_from if cfg.lora_rank else None)
    optimizer, scheduler = grpo.make_optimizer(policy.parameters(), cfg, cfg.steps)
    # rows are (where, row) pairs so an error mid-run still names the file and line
    stream = data.PromptStream(records, cfg.prompts_per_step, rank, world, cfg.seed)
    start = checkpoint.resume(resume_from, policy, optimizer, scheduler, stream)
    # held-out accuracy through train.py's path (prompts, sampler, tool loop, rewards); the sampler is
    # given the trained weights before each eval
    sampler = trainer_sampler(cfg, str(resume_from or cfg.model), device, dtype) if eval_rows else None

    def evaluate_now() -> dict:
        sampler.sync_weights(M.iter_full_params(policy))
        return heldout_accuracy(sampler, tokenizer, eval_rows, cfg)

    if dist.is_main():
        checkpoint.write_config(cfg.out_dir, C.to_toml(cfg))
    dist.print0(C.to_toml(cfg), end="")
    dist.print0(f"sft | world size {world} | device {device} | {len(records)} rows"
                + (f" | resumed from {resume_from}" if resume_from else ""))
    logger = Logger(cfg.out_dir, cfg.steps, start, cfg.wandb_project, cfg.wandb_run_name, vars(cfg))
    last_metrics: dict = {}
    skipped: list[int] = []  # updates_skipped per step (checks.check_finite)
    stopped = ""  # the stop signal's name, once one arrived (on any rank)
    if sampler is not None and start == 0:
        logger.log(-1, evaluate_now())
    for step in range(start, cfg.steps):
        t0 = time.time()
        lr = scheduler.get_last_lr()[0]
        examples = [encode_row(row, tokenizer, cfg, where) for where, row in stream.next_batch()]
        stats = sft_step(policy, optimizer, scheduler, examples, cfg, tokenizer.pad_token_id)
        lengths = dist.all_gather_object([len(ids) for ids, _ in examples])
        lengths = [n for part in lengths for n in part]
        seconds = time.time() - t0
        last_metrics = {**stats, "lr": lr, "seq_len_mean": sum(lengths) / len(lengths),
                        "truncated_frac": sum(n >= cfg.sft_max_len for n in lengths) / len(lengths),
                        "time_step": seconds, "tokens_per_s": sum(lengths) / seconds}
        last = step + 1 == cfg.steps
        if sampler is not None and ((step + 1) % cfg.eval_every == 0 or last):
            last_metrics.update(evaluate_now())
            # sft_stop_accuracy: this step is the last (a warm start that should leave room for RL)
            if cfg.sft_stop_accuracy and last_metrics["heldout_accuracy"] >= cfg.sft_stop_accuracy:
                last = True
                dist.print0(f"held-out accuracy {last_metrics['heldout_accuracy']:.3f} reached sft_stop_accuracy "
                            f"{cfg.sft_stop_accuracy} after step {step + 1}: stopping")
        logger.log(step, last_metrics, cfg.log_every)
        skipped.append(stats["updates_skipped"])
        checks.check_finite(skipped)
        stopped = "" if last else stop.requested()  # an all-reduce: every rank stops after the same step
        if (cfg.save_every and (step + 1) % cfg.save_every == 0) or (last and cfg.save_final) or stopped:
            path = checkpoint.save(cfg.out_dir, step + 1, policy, optimizer, scheduler, tokenizer,
                                   {"data": stream.state_dict()}, cfg.keep_checkpoints, model=cfg.model)
            dist.print0(f"saved {path}")
        if stopped:
            dist.print0(f"stopped by {stopped} after step {step + 1}/{cfg.steps}: exit code "
                        f"{checkpoint.EXIT_STOPPED}; resume=true continues from {path}")
        if last or stopped:
            break
    logger.close()
    if sampler is not None:
        sampler.close()
    return {**last_metrics, "steps_run": step + 1 if start < cfg.steps else start,
            **({"stopped_by": stopped} if stopped else {})}


if __name__ == "__main__":
    # exit codes as train.py's: 0 done; 2 bad input (named, before any compute); 75 stopped by a stop
    # signal, saved (run again with resume=true); 1 anything else (a checkpoint not written is named)
    try:
        if main(sys.argv[1:]).get("stopped_by"):
            sys.exit(checkpoint.EXIT_STOPPED)
    except (C.ConfigError, FileNotFoundError, data.DataError, M.ModelError) as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
    except (checkpoint.CheckpointError, checks.NonFiniteError, LogError) as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(1)
    finally:
        dist.close()
