"""Bad config keys and types stop the run before any compute, with a message naming the key."""

import dataclasses
import tomllib

import pytest
import torch

from nanogrpo import config as C
from nanogrpo.config import Config, ConfigError, load, to_toml


def test_defaults_and_overrides(tmp_path):
    f = tmp_path / "x.toml"
    f.write_text('lr = 1e-3\ngroup_size = 4\nstop = ["\\n\\n"]\n')
    cfg = load([str(f), "steps=7", "beta=0.5", "resume=true", "stop=a,b"])
    assert (cfg.lr, cfg.group_size, cfg.steps, cfg.beta, cfg.resume, cfg.stop) == (1e-3, 4, 7, 0.5, True, ["a", "b"])
    assert load([]) == Config()


def test_integer_accepted_for_float():
    assert load(["beta=1"]).beta == 1.0
    assert isinstance(load(["beta=1"]).beta, float)


@pytest.mark.parametrize(
    "arg, match",
    [
        ("learning_rate=1e-4", "unknown config key 'learning_rate'"),
        ("grop_size=4", "did you mean 'group_size'"),
        ("group_size=four", "'group_size' expects int"),
        ("resume=maybe", "'resume' expects bool"),
        ("scale=zscore", "'scale' must be one of group, batch, none, rloo"),
        ("dual_clip=1.1", r"'dual_clip' must be 0 \(off\) or > 1 \+ clip_high = 1.28"),
        ("cispo_low=1.5", r"'cispo_low' must be in \[0, 1\]"),
        ("kl_clamp=-1", r"'kl_clamp' must be in \[0, inf\)"),
        ("group_size=1", r"'group_size' must be in \[2, inf\)"),
        ("steps", r"expected CONFIG.toml \(first\) or key=value"),
    ],
)
def test_bad_overrides_name_the_key(arg, match):
    with pytest.raises(ConfigError, match=match):
        load([arg])


def test_bad_toml_names_file_and_key(tmp_path):
    f = tmp_path / "bad.toml"
    f.write_text('micro_batch = 8\n')
    with pytest.raises(ConfigError, match=r"bad.toml: unknown config key 'micro_batch' \(did you mean 'micro_batch_size'\?\)"):
        load([str(f)])
    f.write_text('lr = "fast"\n')
    with pytest.raises(ConfigError, match="'lr' expects float"):
        load([str(f)])
    f.write_text("[optim]\nlr = 1.0\n")
    with pytest.raises(ConfigError, match="flat"):
        load([str(f)])
    with pytest.raises(ConfigError, match="not found"):
        load([str(tmp_path / "missing.toml")])


def test_resolved_config_round_trips_through_toml(tmp_path):
    cfg = load(["stop=[\"\\n\", \"x\"]", "system_prompt=say \"hi\"", "lr=3e-5"])
    f = tmp_path / "resolved.toml"
    f.write_text(to_toml(cfg))
    assert tomllib.loads(f.read_text())["stop"] == ["\n", "x"]
    assert load([str(f)]) == cfg


def test_every_recipe_parses():
    from pathlib import Path

    recipes = sorted((Path(__file__).parent.parent / "configs").glob("*.toml"))
    assert recipes, "configs/ has no recipes"
    for r in recipes:
        load([str(r)], here=False)  # GPU recipes say device = "cuda"


def test_auto_device_does_not_fall_back_to_cpu_past_a_gpu_it_cannot_use(monkeypatch):
    """A CUDA build of torch on a machine with an NVIDIA device that torch cannot use (a driver too old for
    its CUDA) is a named error at config time; a machine without an NVIDIA device runs on the CPU."""
    monkeypatch.setattr(torch.version, "cuda", "12.8")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(C, "nvidia_devices", lambda: ["/dev/nvidia0"])
    with pytest.raises(C.ConfigError, match="cannot use the GPU.*driver"):
        C.load([])
    assert C.load(["device=cpu"]).device == "cpu"  # on purpose: allowed
    monkeypatch.setattr(C, "nvidia_devices", lambda: [])
    assert C.load([]).device == "auto"  # no GPU here: the CPU is the machine


# -- knobs that need another knob (config.APPLIES, docs/grpo.md "Knobs that need another knob") --------------------

VALUE = {"resume_without_manifest": "true", "clip_low": "0.1", "clip_high": "0.5", "dual_clip": "3", "cispo_low": "0.5", "cispo_high": "2",
         "kl_estimator": "k2", "kl_clamp": "5", "skip_zero_advantage": "false", "adv_eps": "0.01", "tis_cap": "2",
         "exact_logprobs": "true", "lm_head_fp32": "true", "vllm_gpu_memory_utilization": "0.5",
         "vllm_kv_cache_gb": "2", "cpu_allocator": "reuse", "dynamic_metric": "reward", "dynamic_max_rounds": "3",
         "dynamic_top_up": "true", "gap_patience": "2", "tool_open": "<code>", "tool_close": "</code>",
         "tool_output_open": "<out>", "tool_output_close": "</out>", "max_tool_calls": "2", "tool_output_tokens": "64",
         "tool_timeout_s": "2", "tools_file": "TOOLS", "eval_task": "arithmetic", "eval_size": "10",
         "eval_temperature": "0.5", "eval_benchmarks": "gsm8k", "eval_benchmarks_n": "4", "sft_stop_accuracy": "0.5",
         "lora_alpha": "8", "lora_targets": "q_proj", "min_lr_ratio": "0.5", "wandb_run_name": "x",
         "cosine_min_value_wrong": "-2", "cosine_max_value_wrong": "-0.2", "cosine_min_value_correct": "0.4",
         "cosine_max_value_correct": "2", "cosine_max_len": "50", "repetition_n_grams": "2",
         "repetition_max_penalty": "-0.5", "max_completion_len": "100", "soft_punish_cache": "10"}
# per row (keyed by what it needs): a configuration that ignores its keys, and one in which they act
OFF_ON = {
    ("resume_without_manifest", "resume = true"): ([], ["resume=true"]),
    ("clip_low", "policy_loss=clip"): (["policy_loss=cispo"], []),
    ("dual_clip", "policy_loss=clip"): (["policy_loss=cispo"], []),
    ("cispo_low", "policy_loss=cispo"): ([], ["policy_loss=cispo"]),
    ("kl_estimator", "beta > 0"): ([], ["beta=0.1"]),
    ("skip_zero_advantage", "beta = 0"): (["beta=0.1"], []),
    ("adv_eps", "scale=group or scale=batch"): (["scale=rloo"], ["scale=batch"]),
    ("tis_cap", "exact_logprobs = false"): (["exact_logprobs=true"], []),
    ("exact_logprobs", "sampler=torch"): (["sampler=vllm"], []),
    ("lm_head_fp32", "sampler=torch"): (["sampler=vllm", "dtype=bfloat16"], ["dtype=bfloat16"]),
    ("lm_head_fp32", "dtype=bfloat16 or float16"): (["dtype=float32"], ["dtype=float16"]),
    ("vllm_gpu_memory_utilization", "sampler=vllm"): ([], ["sampler=vllm"]),
    ("vllm_gpu_memory_utilization", "device=auto or device=cuda (vLLM on a GPU)"): (["sampler=vllm", "device=cpu"],
                                                                                     ["sampler=vllm"]),
    ("vllm_kv_cache_gb", "device=auto or device=cpu (vLLM on the CPU)"): (["sampler=vllm", "device=cuda"],
                                                                          ["sampler=vllm", "device=cpu"]),
    ("cpu_allocator", "device=auto or device=cpu"): (["device=cuda"], ["device=cpu"]),
    ("dynamic_metric", "dynamic_sampling = true"): ([], ["dynamic_sampling=true"]),
    ("gap_patience", "max_logprob_gap != 0"): (["max_logprob_gap=0"], []),
    ("tool_open", "tools = true"): ([], ["tools=true"]),
    ("eval_benchmarks_n", "eval_benchmarks set"): ([], ["eval_benchmarks=gsm8k"]),
    ("lora_alpha", "lora_rank > 0"): ([], ["lora_rank=4"]),
    ("min_lr_ratio", "lr_schedule=cosine or linear (or min_lr_ratio = 1: no decay, as constant)"): (
        ["lr_schedule=constant"], ["lr_schedule=linear"]),
    ("wandb_run_name", "wandb_project set"): ([], ["wandb_project=p"]),
    ("cosine_min_value_wrong", "rewards names cosine"): ([], ["rewards=accuracy,cosine"]),
    ("repetition_n_grams", "rewards names repetition_penalty"): ([], ["rewards=accuracy,repetition_penalty"]),
    ("max_completion_len", "rewards names soft_overlong_punishment"): ([], ["rewards=accuracy,soft_overlong_punishment"]),
}
ROWS = [(row, key) for row in C.APPLIES for key in row.keys]


def test_every_row_of_the_table_has_a_case_here():
    assert {(row.keys[0], row.needs) for row in C.APPLIES} == set(OFF_ON)
    assert {key for row in C.APPLIES for key in row.keys} <= set(VALUE)


@pytest.mark.parametrize("row, key", ROWS, ids=[f"{k}-{r.needs}" for r, k in ROWS])
def test_a_knob_the_configuration_ignores_is_refused_naming_it(row, key, tmp_path):
    (tmp_path / "tools.py").write_text("def add(a, b):\n    return a + b\n")
    off, on = OFF_ON[(row.keys[0], row.needs)]
    value = VALUE[key].replace("TOOLS", str(tmp_path / "tools.py"))
    with pytest.raises(ConfigError) as e:
        load([*off, f"{key}={value}"], here=False)
    message = str(e.value)
    assert message.startswith(f"config key {key} = ") and f"needs {row.needs}; with " in message, message
    for k in row.against:  # the settings that turn it off, with their values
        assert f"{k}=" in message.split("; with ", 1)[1], message
    assert row.instead in message and "leave " + key + " at its default" in message, message
    default = C.FIELDS[key].default
    if default is not dataclasses.MISSING and str(default).strip() == str(default):  # at its default: never refused
        # (a command-line value is stripped: tool_output_open's default ends in a newline)
        cfg = load([*off, f"{key}={str(default).lower() if isinstance(default, bool) else default}"], here=False)
        assert getattr(cfg, key) == default
    cfg = load([*on, f"{key}={value}"], here=False)  # and in the configuration it acts in, it is taken
    assert getattr(cfg, key) != (C.FIELDS[key].default if default is not dataclasses.MISSING
                                 else C.FIELDS[key].default_factory())


def test_several_ignored_knobs_are_named_in_one_message():
    with pytest.raises(ConfigError) as e:
        load(["policy_loss=cispo", "clip_low=0.1", "dual_clip=3", "kl_clamp=5", "kl_estimator=k2",
              "dynamic_top_up=true", "tool_timeout_s=2", "lr_schedule=constant", "min_lr_ratio=0.5"])
    message = str(e.value)
    assert message.startswith("7 config keys have no effect in this configuration: ") and "\n" not in message
    for i, key in enumerate(["clip_low", "dual_clip", "kl_estimator", "kl_clamp", "dynamic_top_up", "tool_timeout_s",
                             "min_lr_ratio"], 1):
        assert f"[{i}] {key} = " in message, message


@pytest.mark.slow
def test_train_py_stops_with_exit_2_and_one_error_line(tmp_path):
    """The issue's case: six ignored knobs at once finished with exit 0; now train.py stops before any compute."""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).parent.parent
    r = subprocess.run([sys.executable, "train.py", "cispo_low=0.5", "clip_low=0.1", "kl_clamp=5", "kl_estimator=k2",
                        "dynamic_max_rounds=3", "gap_patience=2", "max_logprob_gap=0", f"out_dir={tmp_path / 'out'}"],
                       cwd=root, capture_output=True, text=True, timeout=300)
    assert r.returncode == 2, r.stderr[-2000:]
    errors = [line for line in r.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and errors[0].startswith("error: 5 config keys have no effect"), r.stderr[-2000:]
    for key in ("cispo_low", "kl_clamp", "kl_estimator", "dynamic_max_rounds", "gap_patience"):
        assert f"] {key} = " in errors[0]
    assert "] clip_low = " not in errors[0]  # it acts with the clip loss, the default
    assert not (tmp_path / "out").exists()


def test_the_table_in_docs_is_the_generated_one():
    from pathlib import Path

    page = (Path(__file__).parent.parent / "docs" / "grpo.md").read_text()
    start = page.index("<!-- applies: generated by nanogrpo.config.applies_markdown()")
    body = page[page.index("\n", start) + 1: page.index("<!-- /applies -->")]
    assert body == C.applies_markdown()
    for row in C.APPLIES:
        assert all(f"`{k}`" in body for k in row.keys)
