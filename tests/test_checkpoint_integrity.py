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


@pytest.mark.slow
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


# -- round 6: a checkpoint is trusted only with its manifest -----------------------------------
# Each failed on the code before: a checkpoint without manifest.json (or with a manifest that sizes but does not
# hash its files) was taken as one from before manifests, unverified; a save of a step already there replaced it.

def test_a_checkpoint_without_its_manifest_is_damaged_and_the_resume_falls_back(run, capsys):
    newest = run / "checkpoints" / "step_000002"
    (newest / "manifest.json").unlink()
    assert checkpoint.problem(newest).startswith("no manifest.json, so none of its files can be verified")
    assert checkpoint.open_run(str(run), True) == run / "checkpoints" / "step_000001"
    assert f"checkpoint {newest} is damaged: no manifest.json" in capsys.readouterr().err
    assert checkpoint.latest(str(run)) == run / "checkpoints" / "step_000001"
    # asked for by name (config key resume_without_manifest): taken as it is
    assert checkpoint.problem(newest, unverified=True) == ""
    assert checkpoint.open_run(str(run), True, unverified=True) == newest


@pytest.mark.slow
def test_train_takes_a_checkpoint_without_its_manifest_only_when_asked_by_name(run, capsys):
    """Through train.py: the key resume_without_manifest reaches open_run (the newest checkpoint, unverified); without
    it the run resumes from the older, verified one."""
    (run / "checkpoints" / "step_000002" / "manifest.json").unlink()
    train.main(args(run, "steps=3", "save_final=false"))
    assert "resumed from " + str(run / "checkpoints" / "step_000001") in capsys.readouterr().out
    shutil.rmtree(run / "checkpoints" / "replaced", ignore_errors=True)
    train.main(args(run, "steps=3", "save_final=false", "resume_without_manifest=true"))
    assert "resumed from " + str(run / "checkpoints" / "step_000002") in capsys.readouterr().out


def test_the_only_checkpoint_without_its_manifest_is_refused(run, capsys):
    shutil.rmtree(run / "checkpoints" / "step_000002")
    (run / "checkpoints" / "step_000001" / "manifest.json").unlink()
    with pytest.raises(ConfigError, match="no complete checkpoint"):
        checkpoint.open_run(str(run), True)
    assert "step_000001 is damaged: no manifest.json" in capsys.readouterr().err


def _manifest(ckpt, edit):
    man = ckpt / "manifest.json"
    man.write_text(json.dumps(edit(json.loads(man.read_text()))))


@pytest.mark.parametrize("edit,why", [
    (lambda m: {k: v for k, v in m.items() if k != "sha256"}, "manifest.json does not hash every file it lists"),
    (lambda m: {**m, "sha256": {k: v for k, v in m["sha256"].items() if k != "model.safetensors"}},
     "manifest.json does not hash every file it lists (not model.safetensors)"),
], ids=["no sha256", "one file unhashed"])
def test_a_manifest_that_does_not_hash_every_file_is_damaged(run, capsys, edit, why):
    newest = run / "checkpoints" / "step_000002"
    _manifest(newest, edit)
    assert checkpoint.problem(newest, lambda rel: True).startswith(why)
    assert checkpoint.open_run(str(run), True) == run / "checkpoints" / "step_000001"
    assert f"step_000002 is damaged: {why}" in capsys.readouterr().err


def test_a_file_added_to_a_checkpoint_is_damage(run):
    newest = run / "checkpoints" / "step_000002"
    (newest / "model.safetensors.index.json").write_text("{}")  # would change what from_pretrained reads
    assert checkpoint.problem(newest) == ("model.safetensors.index.json is not a file it was saved with (added since: "
                                          "the manifest does not list it)")


def test_a_checkpoint_already_at_the_step_is_moved_aside_never_saved_over(tmp_path, capsys):
    root = tmp_path / "checkpoints"
    for name, text in (("step_000002", "old"), (".tmp_step_000002", "new")):
        (root / name).mkdir(parents=True)
        (root / name / "a").write_text(text)
    checkpoint._publish(root / ".tmp_step_000002", root / "step_000002", keep=2)
    assert (root / "step_000002" / "a").read_text() == "new"
    assert (root / "replaced" / "step_000002" / "a").read_text() == "old"
    err = capsys.readouterr().err
    assert f"checkpoint {root / 'step_000002'} already existed (no trainer_state.pt" in err
    assert f"moved to {root / 'replaced' / 'step_000002'}, not overwritten" in err
    (root / ".tmp_step_000002").mkdir()
    checkpoint._publish(root / ".tmp_step_000002", root / "step_000002", keep=2)  # a second time: beside it
    assert (root / "replaced" / "step_000002.1" / "a").read_text() == "new"


@pytest.mark.slow
def test_changed_weights_without_their_manifest_are_not_trained_on_nor_saved_over(run, capsys):
    """The round-6 attack: the newest checkpoint's weights changed (same size) and its manifest removed."""
    newest = run / "checkpoints" / "step_000002"
    flip(newest / "model.safetensors")
    (newest / "manifest.json").unlink()
    changed = (newest / "model.safetensors").read_bytes()
    train.main(args(run, "steps=3", "save_every=1", "keep_checkpoints=5"))
    out = capsys.readouterr()
    assert f"checkpoint {newest} is damaged: no manifest.json" in out.err
    assert f"resumed from {run / 'checkpoints' / 'step_000001'}" in out.out
    aside = run / "checkpoints" / "replaced" / "step_000002"
    assert f"checkpoint {newest} already existed (no manifest.json" in out.err and f"moved to {aside}" in out.err
    assert (aside / "model.safetensors").read_bytes() == changed  # kept for inspection
    assert checkpoint.problem(newest, lambda rel: True) == ""  # step 2 again, whole
