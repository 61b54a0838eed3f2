"""Hub ids (nanogrpo/hub.py) without a network: a model and a dataset put into a temporary HF cache load
with HF_HUB_OFFLINE=1; an id that is neither cached nor reachable is an error naming it; local paths
never touch the Hub; nothing Hub-related is imported until a Hub id is used.

Each check runs in a fresh interpreter: huggingface_hub and datasets read HF_HOME / HF_HUB_OFFLINE
when they are imported, so the temporary cache must be in the environment before that."""

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from nanogrpo import data, hub

ROOT = Path(__file__).parent.parent
COMMIT = "0123456789abcdef0123456789abcdef01234567"  # the snapshot's (made-up) revision
HAS_DATASETS = importlib.util.find_spec("datasets") is not None


def offline_python(hf_home: Path, code: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "TRANSFORMERS_", "HUGGINGFACE_"))}
    env.update(HF_HOME=str(hf_home), HF_HUB_OFFLINE="1", HF_HUB_DISABLE_TELEMETRY="1", TOKENIZERS_PARALLELISM="false")
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env, cwd=ROOT, capture_output=True,
                          text=True, timeout=300)


def cache_model(hf_home: Path, repo_id: str, model_dir: str) -> Path:
    """The layout a download leaves in HF_HUB_CACHE: refs/main -> commit, snapshots/<commit>/<files>."""
    repo = hf_home / "hub" / ("models--" + repo_id.replace("/", "--"))
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(COMMIT)
    snap = repo / "snapshots" / COMMIT
    shutil.copytree(model_dir, snap)
    return snap


def test_is_hub_id_and_local_paths(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert hub.is_hub_id("Qwen/Qwen2.5-1.5B-Instruct") and hub.is_hub_id("open-r1/OpenR1-Math-220k")
    assert not hub.is_hub_id("model") and not hub.is_hub_id("/abs/path") and not hub.is_hub_id("a/b/c")
    assert not hub.is_hub_id("data/train.jsonl")  # a missing data file is reported as a missing file
    (tmp_path / "runs" / "tiny-model").mkdir(parents=True)
    assert not hub.is_hub_id("runs/tiny-model")  # an existing local path always wins
    assert hub.model_dir("runs/tiny-model") == "runs/tiny-model"
    with pytest.raises(data.DataError, match="no such file"):
        data.load_rows("data/missing.jsonl")


@pytest.mark.slow
def test_model_from_the_cache_offline_and_unknown_id_named(tmp_path, tiny_model_dir):
    snap = cache_model(tmp_path / "hf", "nanogrpo-test/tiny-qwen", tiny_model_dir)
    res = offline_python(tmp_path / "hf", """
        import sys
        from nanogrpo import hub, model
        path = hub.model_dir("nanogrpo-test/tiny-qwen")
        tok, m = model.load_tokenizer(path), model.load_model(path)
        print(path)
        print(sum(p.numel() for p in m.parameters()), len(tok("1+2=")["input_ids"]))
        try:
            hub.model_dir("nanogrpo-test/not-there")
        except hub.HubError as e:
            print("ERROR", e)
    """)
    assert res.returncode == 0, res.stderr
    path, sizes, err = res.stdout.strip().splitlines()[-3:]
    assert Path(path) == snap
    from transformers import AutoModelForCausalLM

    want = sum(p.numel() for p in AutoModelForCausalLM.from_pretrained(tiny_model_dir).parameters())
    assert int(sizes.split()[0]) == want
    assert err.startswith("ERROR model directory not found: 'nanogrpo-test/not-there'") and "local cache" in err


@pytest.mark.slow
def test_train_main_takes_a_cached_hub_model(tmp_path, tiny_model_dir):
    """train.py with model = a Hub id: the run starts from the cached snapshot (one tiny step)."""
    cache_model(tmp_path / "hf", "nanogrpo-test/tiny-qwen", tiny_model_dir)
    out = tmp_path / "run"
    res = offline_python(tmp_path / "hf", f"""
        import train
        train.main(["model=nanogrpo-test/tiny-qwen", "out_dir={out}", "steps=1", "prompts_per_step=2",
                    "group_size=2", "max_new_tokens=2", "eval_every=0", "save_final=false"])
    """)
    assert res.returncode == 0, res.stderr[-2000:]
    assert json.loads((out / "metrics.jsonl").read_text().splitlines()[0])["step"] == 1


@pytest.mark.slow
def test_nothing_hub_related_is_imported_before_a_hub_id_is_used(tmp_path):
    res = offline_python(tmp_path / "hf", """
        import sys
        import train, sft, eval
        from nanogrpo import data, hub, tasks
        tasks.load_rows("arithmetic", n=3)
        print(sorted(m for m in ("datasets", "huggingface_hub.hf_api") if m in sys.modules))
    """)
    assert res.returncode == 0, res.stderr
    # transformers imports huggingface_hub itself; the datasets package is never imported
    assert "datasets" not in res.stdout.strip().splitlines()[-1]
    assert not (tmp_path / "hf" / "datasets").exists()


PREPARE_DATASET = """
    # What datasets.load_dataset leaves in HF_DATASETS_CACHE after an online load of a Hub dataset:
    # the prepared Arrow files under owner___name/<config>/<version>/<hash>/, named <name>-<split>.arrow.
    import json, os, pathlib
    from datasets.packaged_modules.json.json import Json
    src = pathlib.Path("{tmp}") / "rows.jsonl"
    src.write_text("".join(json.dumps({{"question": f"What is {{i}}+{{i}}?", "gold": str(2 * i)}}) + "\\n" for i in range(5)))
    b = Json(dataset_name="nanogrpo-test___tiny_math", config_name="main", config_id="main",
             data_files={{"train": str(src), "test": str(src)}}, hash="0123abcd")
    b.download_and_prepare()
    d = pathlib.Path(b.cache_dir)
    for f in d.glob("nanogrpo-test___tiny_math-*.arrow"):
        f.rename(d / f.name.replace("nanogrpo-test___", ""))
"""


@pytest.mark.skipif(not HAS_DATASETS, reason="the `datasets` package is not installed")
@pytest.mark.slow
def test_dataset_from_the_cache_offline_with_subset_split_and_columns(tmp_path):
    res = offline_python(tmp_path / "hf", PREPARE_DATASET.format(tmp=tmp_path) + """
    import train
    from nanogrpo import config, data, hub
    rows = data.load_rows("nanogrpo-test/tiny_math", "math", split="test", subset="main",
                          columns=data.parse_columns("problem=question,answer=gold"), verbose=False)
    cfg = config.load(["task=nanogrpo-test/tiny_math", "task_subset=main", "task_columns=problem=question,answer=gold"])
    errors = []
    for source, split, subset in (("nanogrpo-test/tiny_math", "train", "nope"), ("nanogrpo-test/tiny_math", "validation", "main"),
                                  ("nanogrpo-test/never-cached", "train", None)):
        try:
            data.load_rows(source, split=split, subset=subset)
        except hub.HubError as e:
            errors.append(str(e))
    print(json.dumps({"rows": rows, "train": len(train.load_task(cfg)[0]), "errors": errors}))
    """)
    assert res.returncode == 0, res.stderr[-3000:]
    got = json.loads(res.stdout.strip().splitlines()[-1])
    assert got["rows"] == [{"problem": f"What is {i}+{i}?", "answer": str(2 * i)} for i in range(5)]
    assert got["train"] == 5
    bad_subset, bad_split, unknown = got["errors"]
    assert "'nanogrpo-test/tiny_math' (subset 'nope')" in bad_subset
    assert "split 'validation'" in bad_split
    assert unknown.startswith("dataset 'nanogrpo-test/never-cached'")


@pytest.mark.skipif(HAS_DATASETS, reason="checks the message given when `datasets` is missing")
def test_hub_dataset_without_the_datasets_package_is_a_named_error():
    with pytest.raises(hub.HubError, match=r"'open-r1/OpenR1-Math-220k'.*pip install datasets"):
        data.load_rows("open-r1/OpenR1-Math-220k")
