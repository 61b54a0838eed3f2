"""Bad config keys and types stop the run before any compute, with a message naming the key."""

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
