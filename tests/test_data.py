import json

import pytest

from nanogrpo.data import (
    DataError,
    PromptStream,
    encode_prompt,
    format_prompt,
    last_boxed,
    load_rows,
    normalise_math_row,
)
from nanogrpo.tasks.arithmetic import arithmetic_rows
from nanogrpo.tasks.benchmarks import REPO_DATA_DIR

BENCHMARKS = REPO_DATA_DIR  # data/benchmarks/, committed


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


# --- arithmetic task ---------------------------------------------------------------------------


def test_arithmetic_rows_are_correct_and_deterministic():
    rows = arithmetic_rows("train", 300, seed=3)
    assert rows == arithmetic_rows("train", 300, seed=3)
    assert rows != arithmetic_rows("train", 300, seed=4)
    for r in rows:
        a, b = r["problem"].rstrip("=").split("+")
        assert r["problem"].endswith("=") and len(a) == len(b) == 3
        assert r["answer"] == str(int(a) + int(b))


def test_arithmetic_splits_are_disjoint():
    from nanogrpo.tasks.arithmetic import heldout_pairs

    heldout = {f"{a}+{b}=" for a, b in heldout_pairs()}
    assert 0.04 < len(heldout) / 900**2 < 0.06  # about 5% of all pairs are held out
    test = [r["problem"] for r in arithmetic_rows("test", 2000)]
    assert len(set(test)) == 2000 and set(test) <= heldout  # distinct held-out rows
    for seed in (0, 1, 2):
        train = {r["problem"] for r in arithmetic_rows("train", 20_000, seed=seed)}
        assert not train & heldout  # the held-out set does not depend on the seed
    with pytest.raises(ValueError, match="distinct test rows"):
        arithmetic_rows("test", len(heldout) + 1)


def test_arithmetic_bad_split():
    from nanogrpo import tasks

    with pytest.raises(ValueError, match="split"):
        tasks.load_rows("arithmetic", split="valid", n=10)


# --- normalisation -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "row, expected",
    [
        ({"problem": "p", "answer": "3/4"}, {"problem": "p", "answer": "3/4"}),
        ({"question": "q", "answer": "so 2+2=4\n#### 1,234"}, {"problem": "q", "answer": "1234"}),
        ({"problem": "p", "answer": 27.0}, {"problem": "p", "answer": "27"}),
        ({"problem": "p", "answer": 2.5}, {"problem": "p", "answer": "2.5"}),
        ({"problem": "p", "solution": "first \\boxed{1} then \\boxed{\\frac{1}{2}}."}, {"problem": "p", "answer": "\\frac{1}{2}"}),
    ],
)
def test_normalise_math_row(row, expected):
    assert normalise_math_row(row)[0] == expected


def test_last_boxed_balanced_braces():
    assert last_boxed("x \\boxed{a^{2}+\\sqrt{b}} y") == "a^{2}+\\sqrt{b}"
    assert last_boxed("no box") is None
    assert last_boxed("\\boxed{unclosed {") is None


def test_bad_row_names_file_line_and_field(tmp_path, capsys):
    path = write_jsonl(tmp_path / "d.jsonl", [{"problem": "a", "answer": "1"}, {"problem": "b", "answer": "2"}, {"problem": "c"}])
    with pytest.raises(DataError, match=r"d\.jsonl:3: .*'answer'"):
        load_rows(path)
    path = write_jsonl(tmp_path / "e.jsonl", [{"answer": "1"}])
    with pytest.raises(DataError, match=r"e\.jsonl:1: .*'problem'"):
        load_rows(path)
    path = write_jsonl(tmp_path / "f.jsonl", [{"problem": "p", "solution": "no box here"}])
    with pytest.raises(DataError, match=r"f\.jsonl:1: .*boxed"):
        load_rows(path)
    bad = tmp_path / "g.jsonl"
    bad.write_text('{"problem": "a", "answer": "1"}\n{not json\n')
    with pytest.raises(DataError, match=r"g\.jsonl:2: not valid JSON"):
        load_rows(str(bad))


def test_empty_and_missing_dataset(tmp_path):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n")
    with pytest.raises(DataError, match="empty"):
        load_rows(str(empty))
    with pytest.raises(DataError, match="no such file"):
        load_rows(str(tmp_path / "nope.jsonl"))
    with pytest.raises(DataError, match="empty"):
        PromptStream([], 4)


def test_mapping_is_reported_once(tmp_path, capsys):
    path = write_jsonl(tmp_path / "gsm.jsonl", [{"question": f"q{i}", "answer": f"#### {i}"} for i in range(5)])
    rows = load_rows(path)
    assert [r["answer"] for r in rows] == ["0", "1", "2", "3", "4"]
    out = capsys.readouterr().out
    assert out.count("problem<-question") == 1 and "####" in out and "5 rows" in out


def test_code_rows_pass_through(tmp_path):
    row = {"id": "x", "problem": "p", "language": "python", "mode": "stdio", "tests": [{"input": "1", "output": "1"}]}
    assert load_rows(write_jsonl(tmp_path / "c.jsonl", [row]), kind="code") == [row]


def test_parquet_or_clear_error(tmp_path):
    try:
        import pyarrow  # noqa: F401
    except ImportError:
        pyarrow = None
    path = tmp_path / "d.parquet"
    if pyarrow is None:
        path.write_bytes(b"PAR1")
        with pytest.raises(DataError, match="pyarrow"):
            load_rows(str(path))
        return
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_pylist([{"question": "q", "answer": "#### 7"}, {"question": "r"}]), path)
    with pytest.raises(DataError, match=r"row 2: .*'answer'"):
        load_rows(str(path))


@pytest.mark.parametrize(
    "name, n, field_map",
    [("math500.jsonl", 500, "answer"), ("aime24.jsonl", 30, "answer"), ("amc23.jsonl", 40, "answer"),
     ("gsm8k_test.jsonl", 1319, "####")],
)
def test_committed_eval_files_load(name, n, field_map, capsys):
    rows = load_rows(str(BENCHMARKS / name))
    assert len(rows) == n
    assert all(set(r) == {"problem", "answer"} and r["problem"] and r["answer"] for r in rows)
    assert field_map in capsys.readouterr().out
    if name == "gsm8k_test.jsonl":
        assert rows[0]["answer"] == "18"
    if name == "amc23.jsonl":
        assert rows[0]["answer"] == "27"
    if name == "aime24.jsonl":
        assert all(r["answer"].isdigit() for r in rows)


# --- prompts -----------------------------------------------------------------------------------


class ChatTok:
    """A stand-in with a chat template, so the test needs no downloaded tokenizer."""

    chat_template = "fake"

    def apply_chat_template(self, messages, tokenize, add_generation_prompt):
        assert tokenize is False and add_generation_prompt is True
        return "".join(f"<{m['role']}>{m['content']}" for m in messages) + "<assistant>"


def test_format_prompt_raw_and_chat():
    from tiny import build_tokenizer

    row = {"problem": "347+589=", "answer": "936"}
    tok = build_tokenizer()
    assert format_prompt(row, tok, "raw") == "347+589="
    assert tok.decode(encode_prompt(row, tok, "raw")) == "347+589="
    with pytest.raises(ValueError, match="chat template"):
        format_prompt(row, tok, "chat")
    with pytest.raises(ValueError, match="template"):
        format_prompt(row, tok, "alpaca")
    text = format_prompt({"problem": "1+1?"}, ChatTok(), "chat", system_prompt="Be brief.")
    assert text == "<system>Be brief.<user>1+1?\nPlease reason step by step, and put your final answer within \\boxed{}.<assistant>"
    assert format_prompt({"problem": "1+1?"}, ChatTok(), "chat", instruction=None) == "<user>1+1?<assistant>"
    # a code row (it has tests) is asked for code in its language, not for a boxed answer
    code = {"problem": "Print 1.", "tests": [{"input": "", "output": "1"}], "language": "cpp"}
    text = format_prompt(code, ChatTok(), "chat")
    assert "boxed" not in text and text.endswith("in one ```cpp code block at the end of your answer.<assistant>")


# --- the prompt stream -------------------------------------------------------------------------


def rows_n(n):
    return [{"problem": str(i), "answer": str(i)} for i in range(n)]


def test_stream_shards_are_disjoint_and_cover_the_global_batch():
    rows = rows_n(50)
    world = 4
    streams = [PromptStream(rows, 8, rank=r, world_size=world, seed=1) for r in range(world)]
    reference = PromptStream(rows, 8, seed=1)
    for _ in range(20):  # crosses several epochs (50 rows, 8 per step)
        glob = reference.global_batch()
        parts = [s.next_batch() for s in streams]
        assert all(len(p) == 2 for p in parts)
        assert sum(parts, []) == glob  # disjoint slices in rank order, together the global batch
    # each epoch visits every row exactly once
    ref = PromptStream(rows, 10, seed=1)
    assert sorted(int(r["problem"]) for _ in range(5) for r in ref.global_batch()) == list(range(50))
    # and epochs are shuffled differently
    a = [r["problem"] for _ in range(5) for r in ref.global_batch()]
    b = [r["problem"] for _ in range(5) for r in ref.global_batch()]
    assert a != b and sorted(a) == sorted(b)


def test_stream_resume_reproduces_batches():
    rows = rows_n(37)
    full = PromptStream(rows, 6, rank=1, world_size=2, seed=5)
    expected = [full.next_batch() for _ in range(15)]
    first = PromptStream(rows, 6, rank=1, world_size=2, seed=5)
    got = [first.next_batch() for _ in range(7)]
    state = json.loads(json.dumps(first.state_dict()))  # survives a JSON round trip
    resumed = PromptStream(rows, 6, rank=1, world_size=2, seed=5)
    resumed.load_state_dict(state)
    got += [resumed.next_batch() for _ in range(8)]
    assert got == expected
    with pytest.raises(DataError, match="resume"):
        PromptStream(rows_n(36), 6, seed=5).load_state_dict(state)


def test_stream_rejects_indivisible_batch():
    with pytest.raises(ValueError, match="divisible by world size 4"):
        PromptStream(rows_n(10), 6, rank=0, world_size=4)


def test_math_eval_template_is_the_prompt_eval_py_scores():
    """template="math_eval" trains on exactly the token ids eval.py gives the same row (gsm8k task)."""
    import eval as eval_cli
    from nanogrpo import rewards
    from nanogrpo.tasks import benchmarks
    from tiny import build_tokenizer

    tok = build_tokenizer()
    tok.chat_template = ("{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}\n{% endfor %}"
                         "{% if add_generation_prompt %}<|assistant|>{% endif %}")
    row = {"problem": "Ava has 3 apples and gets 4 more. How many apples does she have?", "answer": "7"}
    task = benchmarks.Task("gsm8k", rewards.math, [row], 1, benchmarks.math_prompt)
    ids, _ = eval_cli.prompt_ids(task, row, tok)
    assert encode_prompt(row, tok, "math_eval") == ids
    assert "Think step by step" in format_prompt(row, tok, "math_eval")
    assert encode_prompt(row, tok, "chat") != ids  # the default chat prompt is a different one
