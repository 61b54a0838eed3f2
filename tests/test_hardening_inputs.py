"""Round 5: every bad input is a named error before any compute (no step run, no file written), read within bounds.

Each test here failed on the code before it (a RecursionError, a ValueError, an ArrowInvalid, a KeyError from deep in
the run, or training on), checked by running it at that commit. scripts/bench/redteam.py --kind input runs the same inputs
through the entry points as a user does (tests/helpers/hardening.py).
"""
import json
import math

import pytest

import train
from nanogrpo import data, files, rollout
from nanogrpo.config import Config, ConfigError, load

from test_bad_input import small


def rows(tmp_path, *lines, name="rows.jsonl"):
    f = tmp_path / name
    f.write_text("".join((x if isinstance(x, str) else json.dumps(x)) + "\n" for x in lines))
    return f


def nothing_ran(out):
    assert not (out / "metrics.jsonl").exists()


# -- JSON within bounds: one reader (files.loads) for every file a user hands in ---------------------------------
@pytest.mark.parametrize("line,said", [
    ('{"problem": "1+1", "answer": ' + "[" * 100_000 + "]" * 100_000 + "}", "nested deeper than 100"),
    ('{"problem": "1+1", "answer": ' + "[" * 101 + "]" * 101 + "}", "nested deeper than 100"),  # parses; too deep
    ('{"problem": "1+1", "answer": ' + "7" * 5000 + "}", "a number too large to read"),
])
def test_jsonl_past_the_reader_bounds_is_named_with_its_line(tmp_path, line, said):
    f = rows(tmp_path, {"problem": "2+2", "answer": "4"}, line)
    with pytest.raises(data.DataError, match=rf"rows.jsonl:2: {said}"):
        data.load_rows(str(f), "math")


def test_the_reader_keeps_what_python_reads(tmp_path):
    assert files.loads('{"a": [1, 2.5, "x", null, NaN]}')["a"][:4] == [1, 2.5, "x", None]
    assert files.loads("[" * 100 + "]" * 100) is not None  # 100 levels: the bound itself
    with pytest.raises(files.JSONError, match="not valid JSON"):
        files.loads('{"a": 1')
    f = rows(tmp_path, {"problem": "a", "answer": 27.0}, {"problem": "b", "answer": 3}, {"problem": "c", "answer": "x"})
    assert [r["answer"] for r in data.load_rows(str(f), "math")] == ["27", "3", "x"]  # numbers and text stay golds


@pytest.mark.slow
def test_a_parquet_file_that_is_not_parquet_is_named(tmp_path):
    f = tmp_path / "rows.parquet"
    f.write_text("problem,answer\n1+1,2\n")
    with pytest.raises(data.DataError, match="rows.parquet: not a readable parquet file"):
        data.load_rows(str(f), "math")


def test_code_rows_without_a_problem_are_named(tmp_path):
    row = {"id": "x", "language": "python", "mode": "stdio", "tests": [{"input": "", "output": "1"}]}
    with pytest.raises(data.DataError, match=r"rows.jsonl:2: code row has no 'problem' text"):
        data.load_rows(str(rows(tmp_path, {**row, "problem": "Print 1."}, row)), "code")


@pytest.mark.parametrize("gold", ["NaN", "Infinity", "-Infinity", '{"value": 2}', "[2]"])
def test_a_gold_that_is_no_answer_is_refused_naming_the_row(tmp_path, gold):
    f = rows(tmp_path, {"problem": "2+2", "answer": "4"}, '{"problem": "1+1", "answer": ' + gold + "}")
    with pytest.raises(data.DataError, match=r"rows.jsonl:2: math row's 'answer': .*(finite number|no answer)"):
        data.load_rows(str(f), "math")


# -- config values: each field's own validation (config.ranged / listed) -------------------------------------------
@pytest.mark.parametrize("bad,good", [(f"seed={2 ** 64}", f"seed={2 ** 31 - 1}"), ("seed=-1", "seed=0"),
                                      ('stop=[""]', 'stop=["</answer>"]'), ("temperature=1e-300", "temperature=0.01"),
                                      ("temperature=0", "temperature=0.01"),
                                      ("eval_temperature=1e-300", "eval_temperature=0"),
                                      ('lora_targets=["q proj"]', 'lora_targets=["q_proj"]'),
                                      ('lora_targets=[""]', 'lora_targets=["down_proj"]'),
                                      ("reward_weights=[1e308]", "reward_weights=[1000000]")])
def test_a_value_its_field_cannot_take_is_named_and_the_bound_is_taken(bad, good):
    with pytest.raises(ConfigError, match=f"'{bad.split('=')[0]}'"):
        load([bad])
    load([good, *(["lora_rank=4"] if good.startswith("lora_") else [])])  # the value at (or next to) the bound is taken (lora_targets acts with adapters only)


# -- config files and tools files --------------------------------------------------------------------------------
def test_a_toml_file_that_is_not_utf8_is_named(tmp_path):
    f = tmp_path / "c.toml"
    f.write_bytes("# café\nlr = 3e-4\n".encode("latin-1"))
    with pytest.raises(ConfigError, match=r"c.toml: not UTF-8 text \(byte \d+ is b'\\xe9'\)"):
        load([str(f)])


def test_a_toml_file_nested_too_deep_is_named(tmp_path):
    f = tmp_path / "c.toml"
    f.write_text("stop = " + "[" * 100_000 + "]" * 100_000 + "\n")
    with pytest.raises(ConfigError, match="nested too deep"):
        load([str(f)])


def test_an_overlong_value_is_not_echoed_whole():
    with pytest.raises(ConfigError) as e:
        load(["reward_weights=[" + "1" * 5000 + "]"])
    assert "'reward_weights'" in str(e.value) and len(str(e.value)) < 300


@pytest.mark.parametrize("source", ["x = " + "-" * 200_000 + "1\n", "x = a" + ".b" * 200_000 + "\n",
                                    "x = " + "not " * 200_000 + "1\n"])
def test_a_tools_file_nested_200000_deep_is_named(tmp_path, source):
    f = tmp_path / "tools.py"
    f.write_text(source)
    with pytest.raises(ConfigError, match="'tools_file'.*nested too deep"):
        load(["tools=true", f"tools_file={f}"])


# -- train.py: named before any step, nothing written ----------------------------------------------------------
def test_template_chat_on_a_model_without_one_is_named_before_compute(warm_model_dir, tmp_path):
    with pytest.raises(data.DataError, match="'template': 'chat' needs a tokenizer with a chat template"):
        train.main(small(warm_model_dir, tmp_path / "out", "template=chat"))
    nothing_ran(tmp_path / "out")


def test_lora_targets_that_match_no_layer_are_named_before_compute(tiny_model_dir, tmp_path):
    with pytest.raises(ConfigError, match=r"'lora_targets': \['nope'\] match no linear layer"):
        train.main(small(tiny_model_dir, tmp_path / "out", "lora_rank=4", 'lora_targets=["nope"]'))
    nothing_ran(tmp_path / "out")


def test_prompts_longer_than_the_context_are_named_before_compute(warm_model_dir, tmp_path):
    f = rows(tmp_path, *[{"problem": "1+1=", "answer": "2"}] * 3, {"problem": "1+1=" * 750, "answer": "2"})
    with pytest.raises(ConfigError, match=r"task row 4 .*prompt is 3000 tokens.*context of 512 tokens"):
        train.main(small(warm_model_dir, tmp_path / "out", f"task={f}", 'rewards=["exact"]'))
    nothing_ran(tmp_path / "out")


def test_a_prompt_that_fits_only_without_its_completion_is_named(warm_model_dir, tmp_path):
    f = rows(tmp_path, {"problem": "1" * 500, "answer": "2"}, {"problem": "1+1=", "answer": "2"})
    with pytest.raises(ConfigError, match=r"task row 1 .*max_new_tokens = 20 it does not fit"):
        train.main(small(warm_model_dir, tmp_path / "out", f"task={f}", 'rewards=["exact"]', "max_new_tokens=20"))


def test_check_prompts_finds_the_longest_prompt_exactly(warm_model_dir):
    from nanogrpo import model as M

    tok = M.load_tokenizer(warm_model_dir)
    cfg = Config(template="raw")
    got = [{"problem": "1+" * k + "1=", "answer": "1"} for k in (3, 40, 7, 120, 2)]
    want = max(len(p) for p in rollout.encode_prompts(got, tok, cfg))
    assert rollout.check_prompts({"task": got}, tok, cfg, 512) == want
    with pytest.raises(ConfigError, match="task row 4"):
        rollout.check_prompts({"task": got}, tok, cfg, want + cfg.max_new_tokens - 1)


def test_golds_the_number_reward_cannot_read_stop_the_load_not_step_3(warm_model_dir, tmp_path):
    f = rows(tmp_path, *[{"problem": "1+1=", "answer": "two"}] * 4)
    with pytest.raises(data.DataError, match=r"rows.jsonl:1: .*'two' \(the number reward needs a number"):
        train.main(small(warm_model_dir, tmp_path / "out", f"task={f}", 'rewards=["number"]'))
    nothing_ran(tmp_path / "out")


def test_a_model_whose_weights_hold_a_nan_is_named(warm_model_dir, tmp_path):
    import shutil

    from safetensors.torch import load_file, save_file

    from nanogrpo import model as M

    model = tmp_path / "model"
    shutil.copytree(warm_model_dir, model)
    w = load_file(str(model / "model.safetensors"))
    next(t for k, t in w.items() if "layers.1.mlp.up_proj" in k)[0, 0] = math.nan
    save_file(w, str(model / "model.safetensors"), metadata={"format": "pt"})
    with pytest.raises(M.ModelError, match="up_proj.weight' holds values that are not finite"):
        train.main(small(model, tmp_path / "out"))
    nothing_ran(tmp_path / "out")
