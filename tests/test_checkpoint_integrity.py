"""Round 5: a checkpoint whose bytes changed is never resumed, and a resume that does not fit its checkpoint is named.

The manifest holds each file's SHA-256; open_run checks every one (each rank its share) and skips a checkpoint whose
bytes changed, naming the file, for the one before it. check_resume refuses `steps` below the checkpoint's step and a
`model` other than the one it was made from. Each test failed on the code before (a resume from the tampered
checkpoint, a traceback, or silence), checked by running it at that commit.
"""
import json
import shutil

import pytest

import train
from conftest import DEFAULT_MODEL
from nanogrpo import checkpoint, files
from nanogrpo.config import ConfigError

from test_bad_input import small


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """A run of the committed tiny model with checkpoints at steps 1 and 2."""
    out = tmp_path_factory.mktemp("saved") / "run"
    train.main(small(DEFAULT_MODEL, out, "steps=2", "save_every=1", "keep_checkpoints=5"))
    return out


@pytest.fixture
def run(saved, tmp_path):
    out = tmp_path / "run"
    shutil.copytree(saved, out)
    return out


def args(out, *extra):
    return small(DEFAULT_MODEL, out, "resume=true", *extra)


def flip(path, at=-4096, n=256):
    with open(path, "r+b") as f:
        f.seek(at, 2)
        old = f.read(n)
        f.seek(at, 2)
        f.write(bytes(255 - b for b in old))  # same size, other bytes


def two_layers(path):  # the same size: the sizes in the manifest cannot tell
    text = path.read_text()
    assert '"num_hidden_layers": 4' in text
    path.write_text(text.replace('"num_hidden_layers": 4', '"num_hidden_layers": 2'))


@pytest.mark.slow
@pytest.mark.parametrize("victim,edit", [("model.safetensors", flip), ("optim/__0_0.distcp", flip),
                                         ("trainer_state.pt", lambda p: flip(p, -200, 8)),
                                         ("config.json", two_layers)])
def test_changed_bytes_in_the_newest_checkpoint_are_found_and_resume_falls_back(run, victim, edit, capsys):
    newest = run / "checkpoints" / "step_000002"
    edit(newest / victim)
    train.main(args(run, "steps=3"))
    out = capsys.readouterr()
    same_size = checkpoint.problem(newest) == ""  # sizes alone (the old check) cannot tell
    why = "is not the file that was saved" if same_size else "is"
    assert f"checkpoint {newest} is damaged: {victim} {why}" in out.err
    assert f"resumed from {run / 'checkpoints' / 'step_000001'}" in out.out


def test_the_only_checkpoint_changed_is_refused_naming_it(run, capsys):
    shutil.rmtree(run / "checkpoints" / "step_000002")
    flip(run / "checkpoints" / "step_000001" / "model.safetensors")
    log = (run / "metrics.jsonl").read_text()
    with pytest.raises(ConfigError, match="no complete checkpoint"):
        train.main(args(run, "steps=3"))
    assert "step_000001 is damaged: model.safetensors is not the file that was saved" in capsys.readouterr().err
    assert (run / "metrics.jsonl").read_text() == log


def test_each_file_is_hashed_in_the_manifest(saved):
    ckpt = saved / "checkpoints" / "step_000002"
    man = checkpoint.manifest(ckpt)
    assert set(man["sha256"]) == set(man["files"]) and "model.safetensors" in man["sha256"]
    assert checkpoint.problem(ckpt, lambda rel: True) == ""
    assert man["model"].endswith("models/tiny-arithmetic")


def test_steps_below_the_checkpoint_are_named(run):
    with pytest.raises(ConfigError, match=r"'steps': steps=1, but checkpoint .*step_000002 is at step 2"):
        train.main(args(run, "steps=1"))


def test_steps_at_the_checkpoint_say_the_run_is_finished(run, capsys):
    log = (run / "metrics.jsonl").read_text()
    train.main(args(run, "steps=2"))
    assert "is at step 2 = steps: this run is finished, nothing to train" in capsys.readouterr().out
    assert (run / "metrics.jsonl").read_text() == log


def test_resuming_with_another_model_directory_is_named(run, tmp_path):
    other = tmp_path / "other"
    shutil.copytree(checkpoint.manifest(run / "checkpoints" / "step_000002")["model"], other)
    with pytest.raises(ConfigError, match=r"'model': checkpoint .* was made from model .*tiny-arithmetic.*another "
                                          "directory"):
        train.main(args(run, "steps=3", f"model={other}"))


def test_a_model_of_another_architecture_is_named_for_a_checkpoint_without_a_recorded_model(run, tmp_path):
    from tiny import build_random_model_dir

    two = build_random_model_dir(tmp_path / "two_layers", num_hidden_layers=2)
    for step in (1, 2):
        man = run / "checkpoints" / f"step_{step:06d}" / "manifest.json"
        man.write_text(json.dumps({**json.loads(man.read_text()), "model": ""}))  # as an older checkpoint's
    with pytest.raises(ConfigError, match="'model': checkpoint .* was not made from this model: num_hidden_layers 4 "
                                          "in the checkpoint, 2 in model="):
        train.main(args(run, "steps=3", f"model={two}"))


@pytest.mark.slow
def test_a_moved_model_with_the_same_architecture_and_tokenizer_goes_on_saying_so(run, tmp_path, capsys):
    moved = tmp_path / "moved"
    shutil.copytree(checkpoint.manifest(run / "checkpoints" / "step_000002")["model"], moved)
    for step in (1, 2):
        man = run / "checkpoints" / f"step_{step:06d}" / "manifest.json"
        man.write_text(json.dumps({**json.loads(man.read_text()), "model": str(tmp_path / "gone")}))
    train.main(args(run, "steps=3", f"model={moved}"))
    assert "which is gone; model=" in capsys.readouterr().out


def test_a_manifest_nested_too_deep_is_unreadable_not_a_recursion(run):
    newest = run / "checkpoints" / "step_000002"
    (newest / "manifest.json").write_text("[" * 100_000 + "]" * 100_000)
    assert checkpoint.problem(newest) == "manifest.json is unreadable"


@pytest.mark.slow
def test_config_toml_is_the_runs_own_and_a_resume_rewrites_it(run):
    assert files.marked(run / "config.toml")
    train.main(args(run, "steps=3"))
    assert files.marked(run / "config.toml") and "steps = 3" in (run / "config.toml").read_text()


@pytest.mark.slow
def test_keep_checkpoints_prunes_the_oldest_complete_ones_and_leaves_a_damaged_one(run):
    """keep_checkpoints = 2: after each save the complete checkpoints beyond the newest 2 are deleted; one whose
    files do not match its manifest is never counted as complete, and is left for inspection."""
    damaged = run / "checkpoints" / "step_000001"
    (damaged / "trainer_state.pt").write_bytes(b"torn")  # another size than the manifest's
    train.main(args(run, "steps=4", "save_every=1", "keep_checkpoints=2"))
    # step 3: 1 (damaged), 2, 3: two complete, nothing goes; step 4: 2 goes, 3 and 4 stay; 1 is never counted
    assert sorted(p.name for p in (run / "checkpoints").glob("step_*")) == ["step_000001", "step_000003", "step_000004"]
    assert checkpoint.problem(damaged)
