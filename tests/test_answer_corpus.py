"""The answer judge on its labelled corpus (data/judge/corpus.jsonl, written by scripts/bench/judge_corpus.py): no wrong
answer scores 1.0, none scores None, at most 1% of the right ones score 0 per reward and none in a named class;
on the tuning part and on the held-out part (a hash of the gold: no rule is written against it) alike; the
corpus is what the script writes."""

import json
import re

import pytest

import judge_corpus as J


def _rows(pattern: str = "") -> list[dict]:
    rows = [json.loads(line) for line in J.CORPUS.read_text().splitlines()]
    return [r for r in rows if re.search(pattern, r["class"])]


@pytest.mark.slow
def test_the_adversarial_classes_meet_the_targets():
    """The adversarial classes (each a rule over many numbers): every verdict equals its label."""
    rows = _rows(r"^(?!math-verify|math500|amc23|gsm8k|aime24)")
    assert len(rows) > 2000
    strict = J.strict_verdicts(rows)
    wrong = [(r["class"], r["answer"][:80], r["gold"], r["label"], v) for r, v in zip(rows, strict)
             if v != float(r["label"])]
    assert not wrong, wrong[:20]


@pytest.mark.slow
def test_the_whole_corpus_meets_the_targets():
    rows = _rows()
    assert len(rows) >= 1000 and {r["reward"] for r in rows} == {"math", "number"}
    assert J.targets(rows, J.strict_verdicts(rows)) == []


@pytest.mark.slow
@pytest.mark.parametrize("part", ["tuning", "held-out"])
def test_each_part_meets_the_targets(part):
    """The targets on each part alone: the held-out part is a quarter of the golds, in every place and
    spelling, that the rules were not written against."""
    rows = [r for r in _rows() if r["part"] == part]
    assert len(rows) > 4000 and {r["reward"] for r in rows} == {"math", "number"}
    assert {r["class"] for r in rows if r["class"].startswith("review:")} == {
        "review:" + c for c, *_ in J.ISSUE_CLASSES}
    assert J.targets(rows, J.strict_verdicts(rows)) == []


def test_the_split_is_by_the_gold():
    """Every spelling of one gold lands in one part, and the held-out part is about a quarter."""
    rows = _rows()
    parts = {}
    for r in rows:
        assert parts.setdefault(r["gold"], r["part"]) == r["part"] == J.part(r["gold"])
    held = sum(p == "held-out" for p in parts.values()) / len(parts)
    assert 0.15 < held < 0.35


@pytest.mark.slow
def test_the_corpus_is_what_the_script_writes():
    assert [json.dumps(r, ensure_ascii=False) for r in J.build()] == J.CORPUS.read_text().splitlines()


@pytest.mark.slow
def test_no_row_breaks_a_rule():
    """judge_math turns an exception in its rules into 0.0 (a reward never raises), which hides a broken rule behind
    a wrong answer's label: the rules themselves must raise nothing on any corpus or probe row (a gold they cannot
    read is the one exception, `_Unreadable`: None)."""
    import judge_probes
    from nanogrpo import answer as A

    rows = _rows() + judge_probes.scored_rows()
    broke = []
    for r in rows:
        try:
            A._plan(r["answer"], r["gold"], r["reward"] == "number")
        except A._Unreadable:
            pass
        except Exception as e:  # noqa: BLE001 - the test's point
            broke.append((r["gold"], r["answer"][-80:], repr(e)))
    assert not broke, broke[:10]
