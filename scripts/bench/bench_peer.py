"""Whole GRPO steps against a peer: the same recipe run by nanogrpo (train.py) and by TRL's GRPOTrainer, alternating.

    python scripts/bench/bench_peer.py                                            # the default tiny run, seeds 0,1,2
    python scripts/bench/bench_peer.py --recipes rg_chain_sum --steps 12 --seeds 0
    python scripts/bench/bench_peer.py --repo /tmp/snapshot                        # measure another checkout's nanogrpo
    python scripts/bench/bench_peer.py --from-json runs/peer/peer.json             # the table again

One invocation runs, for each recipe and seed, nanogrpo then TRL (the next seed TRL first), each in its own process,
so machine load hits both alike; the ratio is read per seed from that pair (docs/throughput.md "Whole steps against
TRL"). Printed per recipe and system: seconds per step (median and interquartile range over the steps after
`--warmup`, all seeds), split into generate / score / update / sync / checks where the system exposes it, generated
tokens/s (completion tokens over generate time), the process's peak RSS, and held-out accuracy after the same steps,
judged by nanogrpo's own judge for both systems (each final model evaluated by the same function, the run's own
held-out rows and seed: `evaluate.heldout_accuracy` with the PyTorch sampler). Then nanogrpo / TRL in steps per hour.

What is the same on both sides (a recipe is a config file plus overrides; both read it):
- prompts: nanogrpo's prompt stream (rows, order, template, seed) laid out step by step as TRL's dataset, read in
  order (`shuffle_dataset=False`); TRL tokenizes the same text itself (the table says whether its token ids equal
  nanogrpo's);
- reward: nanogrpo's verdict for the task (`rollout.run_scoring`: the same function train.py scores with), passed to
  TRL through `reward_funcs`;
- optimizer and schedule: the very AdamW (fused) and LambdaLR of nanogrpo/grpo.py's make_optimizer (lr, betas, weight decay,
  warm-up, cosine floor), handed to GRPOTrainer through `optimizers=`; grad clip `max_grad_norm = grad_clip`;
- loss: beta 0 (no KL, no reference model), clip 1 - clip_low .. 1 + clip_high (`epsilon`, `epsilon_high`),
  advantages scaled by the group's std + 1e-4 (`scale_rewards="group"`: both use the unbiased std), one pass
  (`num_iterations = mu = 1`), and TRL `loss_type="dapo"`: the sum over all completion tokens of the step divided by
  their count, which is nanogrpo's `loss_norm="token"` normaliser (all valid completion tokens of the step, across
  micro-batches);
- group size, prompts per step, max new tokens, temperature, top_p, seed, fp32 on CPU, attention sdpa.
What differs, by design of each system: nanogrpo samples with its own sampler (`sampler` in the config: the PyTorch
KV-cache sampler on CPU), TRL with transformers' `generate` (its CPU path; `--trl-vllm` where vLLM runs); nanogrpo
runs its checks (the sampler check after every generate, the calibration sums), TRL has none; nanogrpo's update
skips completions whose advantage is 0 (the same gradient). Dynamic sampling is off on both sides (TRL has none).
The sampled tokens differ (two random streams), so held-out accuracy is compared over seeds, not per step.

TRL is never a dependency of nanogrpo: it runs in its own venv (`--trl-python`, default .venv-trl/bin/python; the
TRL arm is skipped, and said so, when that interpreter does not exist). That venv, as measured (CPU):

    python -m venv .venv-trl
    .venv-trl/bin/pip install torch==2.13.0          # first: a newer or unpinned torch pulls a multi-GB CUDA build
    .venv-trl/bin/pip install trl==1.16.0 transformers==5.19.0 accelerate==1.15.0 datasets==5.2.0 reasoning-gym==0.1.25

Run it with OMP_NUM_THREADS set (both systems inherit it); on a 2-core machine a SmolLM2 step takes many seconds.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# name -> (config, overrides). Both systems read the config with these overrides; train.py gets the run-specific ones
# (steps, seed, out_dir) on top. eval_every=0: no evaluation inside the timed loop (held-out accuracy is measured
# after, the same way for both). dynamic_sampling off: TRL has none, and the work must be equal (its other knobs at
# their defaults: config.py refuses a knob that has no effect).
RECIPES = {
    "tiny": ("configs/tiny_arithmetic.toml", []),
    "rg_chain_sum": ("configs/rg_chain_sum.toml", ["dynamic_sampling=false", "dynamic_max_rounds=10",
                                                    "dynamic_top_up=false"]),  # dynamic's knobs at their defaults
}
PHASES = ("time_generate", "time_reward", "time_train", "time_sync", "time_checks")
PHASE_NAMES = {"time_generate": "generate", "time_reward": "score", "time_train": "update", "time_sync": "sync",
               "time_checks": "checks", "time_other": "other"}


# ---------------------------------------------------------------------------------------------- helpers


def run_child(cmd: list[str], cwd: Path, log: Path, env: dict | None = None) -> tuple[int, int, float]:
    """(exit code, peak RSS in bytes, wall seconds) of a command run to its end, its output in `log`."""
    t0 = time.time()
    with open(log, "w") as f:
        p = subprocess.Popen(cmd, cwd=cwd, stdout=f, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})})
        _, status, usage = os.wait4(p.pid, 0)  # this child's own rusage (ru_maxrss in KiB on Linux)
        p.returncode = os.waitstatus_to_exitcode(status)
    return p.returncode, usage.ru_maxrss * 1024, time.time() - t0


def tail(path: Path, n: int = 2500) -> str:
    return path.read_text(errors="replace")[-n:] if path.exists() else ""


def quantiles(xs: list[float]) -> tuple[float, float, float]:
    """(p25, median, p75)."""
    xs = sorted(xs)
    if len(xs) == 1:
        return xs[0], xs[0], xs[0]
    q = statistics.quantiles(xs, n=4, method="inclusive")
    return q[0], q[1], q[2]


def repo_argv(repo: Path, config: str, overrides: list[str]) -> list[str]:
    """The config path and overrides as train.py takes them, with a relative model path that exists only in this
    checkout (a converted or warm-started model under .cache/ or runs/) made absolute."""
    return [str(repo / config), *overrides]


# ---------------------------------------------------------------------------------------------- prepare (nanogrpo's venv)


def prepare(spec_path: str, out_path: str) -> None:
    """In the measured checkout (cwd, PYTHONPATH): the config, the step-by-step prompts of nanogrpo's stream, their
    token ids and rows, and the run's held-out rows: what the TRL worker and the evaluation read."""
    import train  # the measured checkout's train.py: its load_task is what the run trains on
    from nanogrpo import config as C
    from nanogrpo import data
    from nanogrpo import model as M
    from nanogrpo.rollout import task_template

    spec = json.loads(Path(spec_path).read_text())
    cfg = C.load(spec["argv"])
    train_rows, _ = train.load_task(cfg)
    tokenizer = M.load_tokenizer(cfg.model)
    template = task_template(cfg, tokenizer, train_rows[0])
    stream = data.PromptStream(train_rows, cfg.prompts_per_step, 0, 1, cfg.seed)
    rows = [r for _ in range(spec["steps"]) for r in stream.global_batch()]
    system = cfg.system_prompt or None
    texts = [data.format_prompt(r, tokenizer, template, system_prompt=system) for r in rows]
    ids = [data.encode_prompt(r, tokenizer, template, system_prompt=system) for r in rows]
    Path(out_path).write_text(json.dumps({"texts": texts, "ids": ids, "rows": rows, "template": template,
                                          "add_special_tokens": template == "raw"}, default=str))


# ---------------------------------------------------------------------------------------------- TRL (its own venv)


def trl_worker(spec_path: str, out_path: str) -> None:
    """In an interpreter that has trl, PYTHONPATH the measured checkout: GRPOTrainer on the recipe, timed per step."""
    import torch
    import trl
    import transformers
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from nanogrpo import config as C
    from nanogrpo import rewards
    try:  # where the measured checkout keeps it: grpo.py (since b6c4c78), optim.py before
        from nanogrpo.grpo import make_optimizer
    except ImportError:
        from nanogrpo.optim import make_optimizer
    from nanogrpo.rollout import run_scoring

    spec = json.loads(Path(spec_path).read_text())
    prep = json.loads(Path(spec["prepared"]).read_text())
    cfg = C.load(spec["argv"])
    steps, out_dir = spec["steps"], Path(spec["out_dir"])
    device = "cuda" if cfg.device == "cuda" or (cfg.device == "auto" and torch.cuda.is_available()) else "cpu"
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", torch.get_num_threads())))
    tok = AutoTokenizer.from_pretrained(cfg.model)
    if tok.pad_token_id is None:  # as nanogrpo's load_tokenizer
        tok.pad_token = tok.eos_token
    dtype = torch.float32 if device == "cpu" else torch.bfloat16
    model = AutoModelForCausalLM.from_pretrained(cfg.model, dtype=dtype, attn_implementation="sdpa")
    # TRL tokenizes the prompt text itself (processing_class(text=prompts): special tokens added as the tokenizer does)
    same_ids = sum(tok(t)["input_ids"] == i for t, i in zip(prep["texts"], prep["ids"])) / len(prep["ids"])

    scoring, rows, g = run_scoring(cfg), prep["rows"], cfg.group_size
    phase: dict[str, float] = {}
    record: list[dict] = []

    def add(key: str, v: float) -> None:
        phase[key] = phase.get(key, 0.0) + v

    def nanogrpo_verdict(completions, idx, **_):
        """nanogrpo's scoring of these completions on their rows (train.py's: rollout.run_scoring), through
        reward_funcs."""
        batch_rows = [rows[i] for i in idx]
        total, parts = scoring(rewards.Batch(list(completions), list(completions), batch_rows, group_size=g, cfg=cfg))
        acc = [x for x in parts["accuracy"] if x is not None]
        add("accuracy_sum", sum(acc))
        add("accuracy_n", len(acc))
        return total

    class Timed(GRPOTrainer):
        def _generate_single_turn(self, *a, **k):
            t = time.perf_counter()
            out = super()._generate_single_turn(*a, **k)
            add("time_generate", time.perf_counter() - t)
            add("generated_tokens", sum(len(c) for c in out[0]))
            return out

        def _calculate_rewards(self, *a, **k):
            t = time.perf_counter()
            out = super()._calculate_rewards(*a, **k)
            add("time_reward", time.perf_counter() - t)
            return out

        def _generate_and_score_completions(self, *a, **k):
            t = time.perf_counter()
            out = super()._generate_and_score_completions(*a, **k)
            add("time_prepare", time.perf_counter() - t)
            return out

    class StepTimer(TrainerCallback):
        def on_step_begin(self, args, state, control, **kw):
            phase.clear()
            self.t0 = time.perf_counter()

        def on_step_end(self, args, state, control, **kw):
            total = time.perf_counter() - self.t0
            prep_t = phase.get("time_prepare", 0.0)
            record.append({
                "step": state.global_step, "time_step": total,
                "time_generate": phase.get("time_generate", 0.0), "time_reward": phase.get("time_reward", 0.0),
                # the update: everything of the step after the rollouts (log-probs, loss, backward, clip, AdamW)
                "time_train": total - prep_t, "time_sync": 0.0,  # transformers generate reads the policy itself
                "time_other": prep_t - phase.get("time_generate", 0.0) - phase.get("time_reward", 0.0),
                "generated_tokens": phase.get("generated_tokens", 0.0),
                "accuracy": phase.get("accuracy_sum", 0.0) / max(phase.get("accuracy_n", 0.0), 1.0)})

    n = steps * cfg.prompts_per_step
    dataset = Dataset.from_dict({"prompt": prep["texts"][:n], "idx": list(range(n))})
    args = GRPOConfig(
        output_dir=str(out_dir / "trainer"), max_steps=steps, seed=cfg.seed, shuffle_dataset=False,
        per_device_train_batch_size=cfg.prompts_per_step * g, gradient_accumulation_steps=1, num_generations=g,
        steps_per_generation=1, num_iterations=cfg.mu, max_completion_length=cfg.max_new_tokens,
        temperature=cfg.temperature, top_p=cfg.top_p, beta=0.0, epsilon=cfg.clip_low, epsilon_high=cfg.clip_high,
        loss_type={"token": "dapo", "constant": "dr_grpo", "sequence": "grpo"}[cfg.loss_norm],
        scale_rewards={"group": "group", "batch": "batch", "none": "none"}[cfg.scale],
        mask_truncated_completions=cfg.mask_truncated, max_grad_norm=cfg.grad_clip,
        use_vllm=spec.get("trl_vllm", False), vllm_mode="colocate",  # one process, as nanogrpo's sampler=vllm
        use_cpu=device == "cpu", bf16=device == "cuda",
        report_to="none", save_strategy="no", logging_steps=1, disable_tqdm=True, dataloader_num_workers=0)
    # nanogrpo's own optimizer and schedule on TRL's model: the same AdamW (fused) and LambdaLR, step for step
    optimizer, scheduler = make_optimizer(model.parameters(), cfg, steps * cfg.mu)
    trainer = Timed(model=model, reward_funcs=nanogrpo_verdict, args=args, train_dataset=dataset,
                    processing_class=tok, callbacks=[StepTimer()], optimizers=(optimizer, scheduler))
    t0 = time.time()
    trainer.train()
    wall = time.time() - t0
    trainer.save_model(str(out_dir / "final"))
    tok.save_pretrained(str(out_dir / "final"))
    Path(out_path).write_text(json.dumps({
        "steps": record, "wall": wall, "same_prompt_ids": same_ids, "final": str(out_dir / "final"),
        "versions": {"trl": trl.__version__, "transformers": transformers.__version__, "torch": torch.__version__},
        "optimizer": f"{type(trainer.optimizer).__name__}", "loss_type": args.loss_type}))


# ---------------------------------------------------------------------------------------------- evaluation (nanogrpo's venv)


def eval_worker(spec_path: str, out_path: str) -> None:
    """Held-out accuracy of each model directory, by nanogrpo's own judge and held-out rows (as train.py's evals)."""
    import torch

    from nanogrpo import config as C
    from nanogrpo import data
    from nanogrpo import model as M
    from nanogrpo.evaluate import heldout_accuracy, heldout_rows
    from nanogrpo.rollout import make_sampler, run_scoring, task_template

    spec = json.loads(Path(spec_path).read_text())
    cfg = C.load(spec["argv"])
    rows = heldout_rows(cfg)
    out = {}
    for name, model_dir in spec["models"].items():
        tok = M.load_tokenizer(model_dir)
        cfg.template = task_template(cfg, tok, rows[0])
        think = data.format_prompt(rows[0], tok, cfg.template).rstrip().endswith("<think>")
        sampler = make_sampler("torch", model_dir, "cpu", torch.float32)
        try:
            got = heldout_accuracy(sampler, tok, rows, cfg, think, run_scoring(cfg))
        finally:
            sampler.close()
        out[name] = {**got, "rows": len(rows)}
    Path(out_path).write_text(json.dumps(out))


# ---------------------------------------------------------------------------------------------- the arms


def worker_cmd(python: str, mode: str, spec: dict, work: Path, name: str) -> tuple[list[str], Path]:
    sp, op = work / f"{name}.spec.json", work / f"{name}.out.json"
    sp.write_text(json.dumps(spec))
    op.unlink(missing_ok=True)
    return [python, str(Path(__file__).resolve()), mode, str(sp), str(op)], op


def run_nanogrpo(a, repo: Path, argv: list[str], steps: int, seed: int, work: Path) -> dict:
    out_dir = work / f"nanogrpo-s{seed}"
    cmd = [a.python, str(repo / "train.py"), *argv, f"steps={steps}", f"seed={seed}", f"out_dir={out_dir}",
           # no evaluation in the timed loop; the eval knobs back at their defaults (a knob with no effect is refused)
           "eval_every=0", "eval_size=500", "eval_temperature=1.0", "save_final=true", "keep_checkpoints=1",
           "resume=false"]
    if out_dir.exists():
        subprocess.run(["rm", "-rf", str(out_dir)], check=True)
    log = work / f"nanogrpo-s{seed}.log"
    rc, rss, wall = run_child(cmd, repo, log, {"PYTHONPATH": str(repo)})
    if rc:
        raise RuntimeError(f"nanogrpo exited {rc}:\n{tail(log)}")
    recs = [json.loads(line) for line in (out_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    recs = [r for r in recs if r.get("step", 0) >= 1 and "time_step" in r]
    for r in recs:
        r["time_other"] = r["time_step"] - sum(r.get(k, 0.0) for k in PHASES)
    return {"steps": recs, "rss": rss, "wall": wall, "final": str(out_dir / "checkpoints" / f"step_{steps:06d}"),
            "command": " ".join(cmd[1:])}


def run_trl(a, repo: Path, argv: list[str], steps: int, seed: int, work: Path, prepared: Path) -> dict:
    spec = {"argv": [*argv, f"seed={seed}"], "steps": steps, "out_dir": str(work / f"trl-s{seed}"),
            "prepared": str(prepared), "trl_vllm": a.trl_vllm}
    cmd, op = worker_cmd(a.trl_python, "--trl-worker", spec, work, f"trl-s{seed}")
    log = work / f"trl-s{seed}.log"
    rc, rss, wall = run_child(cmd, repo, log, {"PYTHONPATH": str(repo)})
    if rc or not op.exists():
        raise RuntimeError(f"TRL worker exited {rc}:\n{tail(log)}")
    return {**json.loads(op.read_text()), "rss": rss, "process_wall": wall}


def version_of(python: str, module: str) -> str:
    r = subprocess.run([python, "-c", f"import {module}; print({module}.__version__)"], capture_output=True, text=True)
    return r.stdout.strip() or "?"


def nanogrpo_version(repo: Path) -> str:
    r = subprocess.run(["git", "-C", str(repo), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    if r.returncode == 0:
        dirty = subprocess.run(["git", "-C", str(repo), "status", "--porcelain", "--", "nanogrpo", "train.py"],
                               capture_output=True, text=True).stdout.strip()
        return r.stdout.strip() + ("+dirty" if dirty else "")
    stamp = repo / ".bench_commit"  # a snapshot (git archive) says which commit it is
    return stamp.read_text().strip() if stamp.exists() else str(repo)


def bench_recipe(a, repo: Path, recipe: str, seeds: list[int], work_root: Path, saved=lambda res: None) -> dict:
    config, overrides = RECIPES[recipe]
    argv = repo_argv(repo, config, overrides + list(a.override))
    work = work_root / recipe
    work.mkdir(parents=True, exist_ok=True)
    res = {"recipe": recipe, "config": config, "overrides": overrides + list(a.override), "steps": a.steps,
           "warmup": a.warmup, "seeds": seeds, "runs": {}}
    for k, seed in enumerate(seeds):
        spec = {"argv": [*argv, f"seed={seed}"], "steps": a.steps}
        cmd, prepared = worker_cmd(a.python, "--prepare", spec, work, f"prepare-s{seed}")
        log = work / f"prepare-s{seed}.log"
        rc, _, _ = run_child(cmd, repo, log, {"PYTHONPATH": str(repo)})
        if rc:
            raise RuntimeError(f"prepare exited {rc}:\n{tail(log)}")
        order = ["nanogrpo", "trl"] if k % 2 == 0 else ["trl", "nanogrpo"]  # alternate who runs first
        got = {}
        for system in order:
            if system == "trl" and not a.trl_python:
                continue
            t0 = time.time()
            try:
                got[system] = (run_nanogrpo(a, repo, argv, a.steps, seed, work) if system == "nanogrpo"
                               else run_trl(a, repo, argv, a.steps, seed, work, prepared))
            except RuntimeError as e:
                if system == "nanogrpo":
                    raise
                print(f"  {recipe} seed {seed} TRL failed: {str(e)[-1500:]}", flush=True)
                continue
            ts = [r["time_step"] for r in got[system]["steps"][a.warmup:]]
            print(f"  {recipe} seed {seed} {system}: {len(ts)} timed steps, median {statistics.median(ts):.3f} s/step "
                  f"({time.time() - t0:.0f} s in all)", flush=True)
        models = {s: got[s]["final"] for s in got}
        if k == 0:  # the starting model once: the bar both runs are read against
            models["start"] = start_model(repo, argv)
        if a.eval:
            espec = {"argv": [*argv, f"seed={seed}"] + ([f"eval_size={a.eval_size}"] if a.eval_size else []),
                     "models": models}
            cmd, op = worker_cmd(a.python, "--eval-worker", espec, work, f"eval-s{seed}")
            log = work / f"eval-s{seed}.log"
            rc, _, _ = run_child(cmd, repo, log, {"PYTHONPATH": str(repo)})
            if rc:
                raise RuntimeError(f"evaluation exited {rc}:\n{tail(log)}")
            for s, v in json.loads(op.read_text()).items():
                got.setdefault(s, {})["heldout"] = v
                print(f"  {recipe} seed {seed} {s}: held-out accuracy {v['heldout_accuracy']:.3f} "
                      f"({v['rows']} rows)", flush=True)
        res["runs"][str(seed)] = got
        saved(res)  # a run stopped later keeps the seeds it finished
    return res


def start_model(repo: Path, argv: list[str]) -> str:
    """The recipe's starting model directory (config `model`, or an override)."""
    model = ""
    for line in Path(argv[0]).read_text().splitlines():
        if line.strip().startswith("model ="):
            model = line.split("=", 1)[1].split("#")[0].strip().strip('"')
    for o in argv[1:]:
        if o.startswith("model="):
            model = o.split("=", 1)[1]
    return str(repo / model) if model and not Path(model).is_absolute() else model


# ---------------------------------------------------------------------------------------------- the table


def summarise(res: dict) -> list[dict]:
    """One row per system: pooled step times after warm-up over all seeds, phases, tokens/s, RSS, accuracy, and
    the per-seed ratio TRL s/step / nanogrpo s/step (steps per hour, nanogrpo over TRL)."""
    warm = res["warmup"]
    rows = []
    for system in ("nanogrpo", "trl"):
        runs = {s: r[system] for s, r in res["runs"].items() if system in r and "steps" in r[system]}
        if not runs:
            continue
        steps = [st for r in runs.values() for st in r["steps"][warm:]]
        p25, med, p75 = quantiles([st["time_step"] for st in steps])
        phases = {k: statistics.median([st.get(k, 0.0) for st in steps]) for k in (*PHASES, "time_other")
                  if any(k in st for st in steps)}
        gen_t = sum(st.get("time_generate", 0.0) for st in steps)
        toks = sum(st.get("generated_tokens", 0.0) for st in steps)
        acc = {s: r[system]["heldout"]["heldout_accuracy"] for s, r in res["runs"].items()
               if system in r and "heldout" in r[system]}
        rows.append({"system": system, "n": len(steps), "median": med, "p25": p25, "p75": p75, "phases": phases,
                     "tokens_per_s": toks / gen_t if gen_t else float("nan"),
                     "rss_gb": max(r["rss"] for r in runs.values()) / 1e9,
                     "train_accuracy": statistics.mean(st.get("accuracy", float("nan")) for st in steps),
                     "heldout": acc, "seeds": len(runs),
                     "same_prompt_ids": min((r.get("same_prompt_ids", 1.0) for r in runs.values()), default=1.0)})
    ratios = []
    for s, r in res["runs"].items():
        if "nanogrpo" in r and "trl" in r and "steps" in r["trl"]:
            n = statistics.median(st["time_step"] for st in r["nanogrpo"]["steps"][warm:])
            t = statistics.median(st["time_step"] for st in r["trl"]["steps"][warm:])
            ratios.append(t / n)
    res["ratios"] = ratios
    return rows


def print_table(results: list[dict], meta: dict) -> None:
    print(f"\n# {meta.get('machine', '')}; nanogrpo {meta.get('nanogrpo', '?')} (torch {meta.get('torch', '?')}), "
          f"TRL {meta.get('trl', 'not run')} (transformers {meta.get('trl_transformers', '?')}, torch "
          f"{meta.get('trl_torch', '?')}); OMP_NUM_THREADS={meta.get('omp', '?')}")
    print(f"# command: {meta.get('command', '')}")
    print("\n| recipe | system | steps timed (seeds) | s / step median | (p25-p75) | generate | score | update | sync | "
          "checks | other | gen tokens/s | peak RSS GB | train acc | held-out acc (per seed) | steps/h vs TRL |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: |")
    for res in results:
        rows = summarise(res)
        ratios = res.get("ratios", [])
        for row in rows:
            ph = row["phases"]
            cell = lambda k: f"{ph[k]:.3f}" if k in ph else "-"  # noqa: E731
            acc = row["heldout"]
            acc_s = (f"{statistics.mean(acc.values()):.3f} ({', '.join(f'{v:.3f}' for v in acc.values())})"
                     if acc else "-")
            ratio = (f"{statistics.median(ratios):.2f}x ({', '.join(f'{r:.2f}' for r in ratios)})"
                     if row["system"] == "nanogrpo" and ratios else "-")
            name = "nanogrpo" if row["system"] == "nanogrpo" else "TRL GRPOTrainer"
            print(f"| {res['recipe']} ({res['steps']} steps) | {name} | {row['n']} ({row['seeds']}) | {row['median']:.3f} | "
                  f"{row['p25']:.3f}-{row['p75']:.3f} | {cell('time_generate')} | {cell('time_reward')} | "
                  f"{cell('time_train')} | {cell('time_sync')} | {cell('time_checks')} | {cell('time_other')} | "
                  f"{row['tokens_per_s']:.0f} | {row['rss_gb']:.2f} | {row['train_accuracy']:.3f} | {acc_s} | {ratio} |")
        start = [r.get("start", {}).get("heldout", {}).get("heldout_accuracy") for r in res["runs"].values()]
        start = [x for x in start if x is not None]
        if start:
            print(f"| {res['recipe']} | start model | - | - | - | - | - | - | - | - | - | - | - | - | {start[0]:.3f} | - |")
    print("\nPhases are medians per step (s); TRL's 'update' is the step after its rollouts (log-probs, loss, backward, "
          "clip, AdamW), its 'other' the rest of _generate_and_score_completions (tokenizing, padding, advantages); "
          "nanogrpo's 'other' the loop's own (gather, advantages, metrics). steps/h vs TRL: TRL's median s/step over "
          "nanogrpo's, per seed (pairs run one after the other), the median of those first.")
    for res in results:
        trl_rows = [r for r in summarise(res) if r["system"] == "trl"]
        if trl_rows and trl_rows[0]["same_prompt_ids"] < 1.0:
            print(f"note: {res['recipe']}: TRL's tokenization equals nanogrpo's prompt ids for "
                  f"{100 * trl_rows[0]['same_prompt_ids']:.0f}% of the prompts")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--recipes", default="tiny", help=f"comma list of {', '.join(RECIPES)}")
    ap.add_argument("--steps", type=int, default=60, help="GRPO steps per run (both systems)")
    ap.add_argument("--warmup", type=int, default=3, help="first steps of each run left out of the timings")
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--repo", default=str(ROOT), help="the checkout whose train.py and nanogrpo are measured")
    ap.add_argument("--python", default=sys.executable, help="nanogrpo's interpreter")
    ap.add_argument("--trl-python", default=str(ROOT / ".venv-trl" / "bin" / "python"))
    ap.add_argument("--no-trl", action="store_true", help="the nanogrpo arm only")
    ap.add_argument("--trl-vllm", action="store_true", help="TRL generates with vLLM (use_vllm, colocate)")
    ap.add_argument("--no-eval", dest="eval", action="store_false", help="skip held-out accuracy")
    ap.add_argument("--eval-size", type=int, default=0, help="held-out rows (0: the config's eval_size)")
    ap.add_argument("--out", default=str(ROOT / "runs" / "peer"), help="run directories and logs")
    ap.add_argument("--json", default="", help="write the results here (default: OUT/peer.json)")
    ap.add_argument("--from-json", default="", help="print the table of an earlier run and exit (a comma list: "
                    "the files' seeds merged per recipe, a seed's complete pair kept over an incomplete one)")
    ap.add_argument("override", nargs="*", help="key=value for both systems (e.g. device=cuda sampler=vllm)")
    a = ap.parse_args()
    if a.from_json:  # several files: their seeds merged per recipe, a complete pair kept over an incomplete one
        saved = [json.loads(Path(f).read_text()) for f in a.from_json.split(",")]
        merged: dict[str, dict] = {}
        for res in (r for s in saved for r in s["results"]):
            have = merged.setdefault(res["recipe"], {**res, "runs": {}})
            for seed, run in res["runs"].items():
                if not ({"nanogrpo", "trl"} - set(have["runs"].get(seed, {}))):
                    continue  # a complete pair already: the first file's stands
                have["runs"][seed] = run
        print_table(list(merged.values()), saved[0]["meta"])
        return
    repo = Path(a.repo).resolve()
    if a.no_trl or not Path(a.trl_python).is_file():
        if not a.no_trl:
            print(f"# TRL arm skipped: no interpreter at {a.trl_python} (see this script's docstring for its venv)")
        a.trl_python = ""
    unknown = [r for r in a.recipes.split(",") if r not in RECIPES]
    if unknown:
        ap.error(f"unknown recipe(s) {unknown}; known: {', '.join(RECIPES)}")
    if a.warmup >= a.steps:
        ap.error(f"--warmup {a.warmup} leaves no timed step of --steps {a.steps}")
    seeds = [int(s) for s in a.seeds.split(",") if s.strip()]
    meta = {"machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, {platform.node()}",
            "nanogrpo": nanogrpo_version(repo), "torch": version_of(a.python, "torch"),
            "omp": os.environ.get("OMP_NUM_THREADS", "unset"),
            "command": "python scripts/bench/bench_peer.py " + " ".join(sys.argv[1:])}
    cpu = Path("/proc/cpuinfo")
    if cpu.exists():
        model = next((ln.split(":", 1)[1].strip() for ln in cpu.read_text().splitlines() if ln.startswith("model name")), "")
        meta["machine"] = f"{model}, {os.cpu_count()} CPUs"
    if a.trl_python:
        meta.update(trl=version_of(a.trl_python, "trl"), trl_transformers=version_of(a.trl_python, "transformers"),
                    trl_torch=version_of(a.trl_python, "torch"))
    print(f"# nanogrpo {meta['nanogrpo']} at {repo}; TRL: {meta.get('trl', 'not run')}", flush=True)
    out = Path(a.out).resolve()  # the children run in the measured checkout
    out.mkdir(parents=True, exist_ok=True)
    results = []
    jpath = Path(a.json or out / "peer.json")
    for recipe in a.recipes.split(","):
        def saved(res, done=list(results)):
            jpath.write_text(json.dumps({"meta": meta, "results": [*done, res]}, indent=1))

        results.append(bench_recipe(a, repo, recipe, seeds, out, saved))
    print_table(results, meta)
    print(f"\nraw results: {jpath}")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--trl-worker":
        trl_worker(sys.argv[2], sys.argv[3])
    elif len(sys.argv) > 1 and sys.argv[1] == "--eval-worker":
        eval_worker(sys.argv[2], sys.argv[3])
    elif len(sys.argv) > 1 and sys.argv[1] == "--prepare":
        prepare(sys.argv[2], sys.argv[3])
    else:
        main()
