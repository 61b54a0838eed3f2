"""The question restated as its answer: every benchmark question's own expressions (`Compute $\\dbinom{8}{4}$` ->
`\\boxed{\\dbinom{8}{4}}`), boxed as they stand, against the gold: how many questions the judge pays for a copy of
themselves without the question and with it (a policy that copies the question would learn to); and every
reference solution in data/benchmarks/ with its question (each must stay right).

    python scripts/bench/judge_restated.py            # the table
    python scripts/bench/judge_restated.py --paid     # and each copy paid without the question
    python scripts/bench/judge_restated.py --probes   # the blind probes written without their question (5-14) given
                                                      # it where their gold names one: each verdict that changes
"""
from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
BENCH = ROOT / "data" / "benchmarks"
SETS = ("math500", "aime24", "amc23", "gsm8k_test")


def benchmark_rows(name: str) -> list[tuple[str, str, str, str]]:
    """(reward, question, gold, reference solution or "") of each row, golds spelled as the tasks read them."""
    out = []
    for line in (BENCH / f"{name}.jsonl").open():
        r = json.loads(line)
        if name == "gsm8k_test":  # the solution ends `#### 18`: a statement the judge reads
            out.append(("number", r["question"], r["answer"].split("####")[-1].strip(), r["answer"]))
            continue
        gold = r["answer"]
        gold = str(int(gold)) if isinstance(gold, float) and gold.is_integer() else str(gold)  # AMC23's 27.0
        out.append(("math", r["problem"], gold, r.get("solution") or ""))
    return out


def verdict(reward: str, text: str, gold: str, question: str | None) -> float | None:
    from nanogrpo import rewards
    if reward == "number":
        return rewards.number_reward(text, gold, question)
    return rewards.math_reward(text, gold, problem=question)


def measure(names=SETS) -> tuple[dict, list]:
    """name -> counts; and each (name, gold, copy) paid without the question."""
    from nanogrpo import answer
    table, paid = {}, []
    for name in names:
        c = Counter()
        for reward, question, gold, solution in benchmark_rows(name):
            c["questions"] += 1
            copies = [f"So the answer is $\\boxed{{{e}}}$." for e in sorted(answer._asked(question, gold))]
            before = [t for t in copies if verdict(reward, t, gold, None) == 1.0]
            paid += [(name, gold, t) for t in before]
            c["copy paid, no question"] += bool(before)
            c["copy paid, with it"] += any(verdict(reward, t, gold, question) == 1.0 for t in before)
            if solution:
                c["solutions"] += 1
                c["solution right, no question"] += verdict(reward, solution, gold, None) == 1.0
                c["solution right, with it"] += verdict(reward, solution, gold, question) == 1.0
        table[name] = c
    return table, paid


def probe_changes() -> list[tuple]:
    """(probe, class, reward, label, verdict without, verdict with the question, gold, answer's end) of each probe
    row whose verdict the question changes; a row gets the question its gold names, when it names one only."""
    from nanogrpo.answer import number_gold_error
    questions: dict[str, set] = {}
    for name in SETS:
        for _, question, gold, _ in benchmark_rows(name):
            questions.setdefault(gold, set()).add(question)
    out = []
    for line in (ROOT / "data" / "judge" / "probes.jsonl").open():
        r = json.loads(line)
        if r["ambiguous"] or "problem" in r or len(questions.get(r["gold"], ())) != 1:  # probes 5-14: no question
            continue
        question = next(iter(questions[r["gold"]]))
        for reward in ("math", "number") if number_gold_error(r["gold"]) is None else ("math",):
            without, with_it = verdict(reward, r["answer"], r["gold"], None), verdict(reward, r["answer"], r["gold"], question)
            if without != with_it:
                out.append((r["probe"], r["cls"], reward, r["label"], without, with_it, r["gold"], r["answer"][-80:]))
    return out


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--paid", action="store_true", help="list each copy paid without the question")
    p.add_argument("--probes", action="store_true", help="the blind probes' verdicts the question changes")
    args = p.parse_args(argv)
    if args.probes:
        changed = probe_changes()
        for row in changed:
            print("probe %s cls %s %s label %s: %s -> %s gold %r ...%r" % row)
        fixed = sum((label == 1) == (with_it == 1.0) for _, _, _, label, _, with_it, _, _ in changed)
        print(f"{len(changed)} verdicts change: {fixed} now agree with the label, {len(changed) - fixed} disagree")
        return
    table, paid = measure()
    cols = ["questions", "copy paid, no question", "copy paid, with it", "solutions", "solution right, no question",
            "solution right, with it"]
    print("| set | " + " | ".join(cols) + " |\n|---|" + "---:|" * len(cols))
    for name, c in table.items():
        print(f"| {name} | " + " | ".join(str(c[k]) for k in cols) + " |")
    for name, gold, text in paid if args.paid else []:
        print(f"{name} gold {gold!r}: {text}")


if __name__ == "__main__":
    main()
