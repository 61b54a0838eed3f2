"""The committed math benchmarks (data/benchmarks/) are the upstream bytes, and each math task also loads
from a Hub dataset id (`NAME=hub` or `NAME=OWNER/NAME[:SUBSET][@SPLIT]`) through nanogrpo/hub.py, from a
local HF cache with HF_HUB_OFFLINE=1 (a fresh interpreter, as in tests/test_hub.py)."""

import hashlib
import importlib.util
import json

import pytest

from nanogrpo.tasks import benchmarks
from nanogrpo.tasks.benchmarks import HubSource, hub_source

DATA = benchmarks.REPO_DATA_DIR
HAS_DATASETS = importlib.util.find_spec("datasets") is not None


def test_committed_files_are_the_upstream_bytes_with_readme_and_licence():
    sums = dict(reversed(line.split("  ", 1)) for line in (DATA / "SHA256SUMS").read_text().splitlines())
    assert sorted(sums) == sorted(benchmarks.MATH_FILES.values())
    for name, digest in sums.items():
        assert hashlib.sha256((DATA / name).read_bytes()).hexdigest() == digest, f"{name} changed"
    readme = (DATA / "README.md").read_text()
    assert all(name in readme for name in sums) and "MIT" in readme
    assert "Permission is hereby granted" in (DATA / "LICENSE-simplelr-math-eval.txt").read_text()


def test_hub_specs_parse_and_local_paths_win(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert hub_source("aime24", "hub") == HubSource("HuggingFaceH4/aime_2024", None, "train")
    assert hub_source("gsm8k", "openai/gsm8k") == HubSource("openai/gsm8k", "main", "test")  # the default's subset
    assert hub_source("gsm8k", "openai/gsm8k@train") == HubSource("openai/gsm8k", "main", "train")
    assert hub_source("aime24", "someone/aime:2024@validation") == HubSource("someone/aime", "2024", "validation")
    assert hub_source("heldout", "someone/probs") == HubSource("someone/probs", None, "test")
    assert hub_source("x", "data/probs.jsonl") is None and hub_source("x", "/abs/probs.jsonl") is None
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "probs").write_text("")
    assert hub_source("x", "mine/probs") is None  # an existing path is never looked up on the Hub
    with pytest.raises(ValueError, match="no default Hub dataset for 'heldout'"):
        benchmarks.load_task("heldout=hub")


def test_lcb_missing_export_says_how_to_get_it(tmp_path):
    with pytest.raises(FileNotFoundError) as e:
        benchmarks.load_task("lcb", data_dir=tmp_path)
    msg = str(e.value)
    assert "hf download livecodebench/code_generation_lite --repo-type dataset" in msg and "lcb=lcb.jsonl" in msg


CACHE_DATASET = """
    # What datasets.load_dataset leaves in HF_DATASETS_CACHE after an online load: the prepared Arrow
    # files under owner___name/<config>/<version>/<hash>/, named <name>-<split>.arrow.
    import json, pathlib, shutil
    from datasets import config
    from datasets.packaged_modules.json.json import Json

    def cache_dataset(repo_id, subset, splits):
        owner, name = repo_id.split("/")
        files = {{}}
        for split, rows in splits.items():
            files[split] = pathlib.Path("{tmp}") / f"{{name}}-{{split}}.jsonl"
            files[split].write_text("".join(json.dumps(r) + "\\n" for r in rows))
        build = pathlib.Path("{tmp}") / "build"
        Json(cache_dir=str(build), dataset_name=name, config_name=subset, config_id=subset,
             data_files={{k: str(v) for k, v in files.items()}}, hash="0123abcd").download_and_prepare()
        dest = pathlib.Path(config.HF_DATASETS_CACHE) / f"{{owner}}___{{name}}"
        dest.mkdir(parents=True, exist_ok=True)
        shutil.move(str(build / name / subset), dest / subset)

    cache_dataset("HuggingFaceH4/aime_2024", "default",
                  {{"train": [{{"id": 60 + i, "problem": f"What is {{i}}+{{i}}?", "answer": str(2 * i)}} for i in range(3)]}})
    cache_dataset("openai/gsm8k", "main", {{"train": [{{"question": "Train q?", "answer": "so #### 1,000"}}],
                                            "test": [{{"question": f"Q{{i}}?", "answer": f"so #### {{i}}"}} for i in range(4)]}})
"""


needs_datasets = pytest.mark.skipif(not HAS_DATASETS, reason="the `datasets` package is not installed")


@pytest.mark.slow
@needs_datasets
def test_math_tasks_load_from_a_cached_hub_dataset_offline(tmp_path):
    from test_hub import offline_python

    res = offline_python(tmp_path / "hf", CACHE_DATASET.format(tmp=tmp_path) + """
    from nanogrpo import hub
    from nanogrpo.tasks import benchmarks
    aime = benchmarks.load_task("aime24=hub")
    gsm = benchmarks.load_task("gsm8k=openai/gsm8k", limit=2)
    train = benchmarks.load_task("gsm8k=openai/gsm8k:main@train")
    try:
        benchmarks.load_task("amc23=hub")
    except hub.HubError as e:
        missing = str(e)
    print(json.dumps({"aime": [aime.rows, aime.default_n, aime.meta], "gsm": [gsm.rows, gsm.meta],
                      "train": train.rows, "missing": missing}))
    """)
    assert res.returncode == 0, res.stderr[-3000:]
    got = json.loads(res.stdout.strip().splitlines()[-1])
    rows, n, meta = got["aime"]
    assert rows == [{"problem": f"What is {i}+{i}?", "answer": str(2 * i), "id": str(60 + i)} for i in range(3)]
    assert n == 64 and meta["source"] == "hub:HuggingFaceH4/aime_2024@train"
    rows, meta = got["gsm"]
    assert rows == [{"problem": "Q0?", "answer": "0", "id": "0"}, {"problem": "Q1?", "answer": "1", "id": "1"}]
    assert meta["source"] == "hub:openai/gsm8k:main@test"
    assert got["train"] == [{"problem": "Train q?", "answer": "1000", "id": "0"}]
    assert got["missing"].startswith("dataset 'math-ai/amc23' split 'test'")


@needs_datasets
@pytest.mark.slow  # loads torch and a model in a fresh interpreter
def test_eval_cli_takes_a_hub_task(tmp_path, tiny_model_dir):
    from test_hub import offline_python

    out = tmp_path / "r.json"
    res = offline_python(tmp_path / "hf", CACHE_DATASET.format(tmp=tmp_path) + f"""
    import eval
    eval.main(["--model", "{tiny_model_dir}", "--tasks", "aime24=hub", "--limit", "2", "--n", "1",
               "--max-new-tokens", "2", "--device", "cpu", "--sampler", "torch", "--out", "{out}"])
    """)
    assert res.returncode == 0, res.stderr[-3000:]
    task = json.loads(out.read_text())["tasks"]["aime24"]
    assert task["problems"] == 2 and task["source"] == "hub:HuggingFaceH4/aime_2024@train"
    samples = [json.loads(line) for line in out.with_suffix(".samples.jsonl").read_text().splitlines()]
    assert [(s["id"], s["answer"]) for s in samples] == [("60", "0"), ("61", "2")]
