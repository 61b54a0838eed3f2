"""The answer judge on its labelled corpus (data/judge/corpus.jsonl, written by scripts/bench/judge_corpus.py): no wrong
answer scores 1.0, none scores None, at most 1% of the right ones score 0 and none outside Math-Verify's own
cases; the corpus is what the script writes."""

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
def test_the_corpus_is_what_the_script_writes():
    assert [json.dumps(r, ensure_ascii=False) for r in J.build()] == J.CORPUS.read_text().splitlines()
