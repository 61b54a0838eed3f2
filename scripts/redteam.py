"""Run every attack program the tests keep (tests/helpers/attacks.py) against the local sandbox and print
a table: attacks tried, rejected, escapes, and host Shmem / MemAvailable before and after.

    python scripts/redteam.py [--kind memory|leak|channel|isolation|judge|correct] [--details]

An attack is "rejected" when it did not get what it wanted (attacks.py says, per attack, what that is:
host memory pinned past the cap, data carried to the next execution, a reward it should not have, a None
where the answer was simply wrong, a correct multiprocessing program failing). Every attack runs on ONE
slot, its programs in turn, as the trainer's executions follow each other; an attack between slots runs its
programs at the same time, one slot each. Needs bubblewrap; run as root
for the full isolation (per-slot uids). Exit status 1 if anything escaped.
"""
import argparse
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [ROOT, os.path.join(ROOT, "tests")]

from helpers.attacks import ATTACKS, meminfo, out  # noqa: E402
from nanogrpo.sandbox import SandboxPool  # noqa: E402
from nanogrpo.sandbox.local import bwrap_available  # noqa: E402


def settled_meminfo(before: dict, wait_s: float = 5.0) -> dict:
    """Host memory once namespaces torn down with the execution have been freed (asynchronously)."""
    end = time.monotonic() + wait_s
    while True:
        now = meminfo()
        if now["Shmem"] <= before["Shmem"] + 16 or time.monotonic() > end:
            return now
        time.sleep(0.1)


def describe(vs) -> str:
    return ", ".join("None" if v is None else f"{v.status} {v.reward:g}" for v in vs[:4]) + (" ..." if len(vs) > 4 else "")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--kind", default=None, choices=sorted({a.kind for a in ATTACKS}), help="only attacks of this kind")
    ap.add_argument("--details", action="store_true", help="print a row per attack")
    args = ap.parse_args(argv)
    if not bwrap_available():
        print("bubblewrap is missing (apt-get install bubblewrap)", file=sys.stderr)
        return 2
    from helpers.attacks import run_attack

    attacks = [a for a in ATTACKS if args.kind in (None, a.kind)]
    # One slot: each program runs where the last ran; an attack `together` gets a slot per program.
    pools = {}

    def pool_for(attack):
        n = len(attack.programs) if attack.together else 1
        if n not in pools:
            pools[n] = SandboxPool(concurrency=n, isolation="bwrap").start()
        return pools[n]

    pool_for(attacks[0])
    start = meminfo()
    rows, escapes, executions, peak_shmem = [], [], 0, start["Shmem"]
    t0 = time.monotonic()
    for a in attacks:
        before = meminfo()
        vs = run_attack(pool_for(a), a)
        executions += len(vs)
        after = settled_meminfo(before)
        peak_shmem = max(peak_shmem, after["Shmem"])
        escaped = bool(a.escaped(vs)) or after["Shmem"] > before["Shmem"] + 64  # pinned host memory counts too
        if escaped:
            escapes.append(a.name)
        result = ("FAILED" if escaped else "scored 1") if a.kind == "correct" else ("ESCAPED" if escaped else "rejected")
        pinned = out(vs[0]).strip() if a.kind == "memory" else ""  # what the program says it pinned, in MB
        rows.append((a.kind, a.name, describe(vs) + (f" (pinned {pinned} MB)" if pinned else ""), result,
                     after["Shmem"] - before["Shmem"], None in vs))
        if escaped:
            print(f"ESCAPED: {a.name}: {[out(v)[-200:] for v in vs]}", file=sys.stderr)
    for pool in pools.values():
        pool.close()
    end = settled_meminfo(start)
    if args.details:
        print("| kind | attack | verdicts | result | host Shmem change (MB) |\n|---|---|---|---|---|")
        for r in rows:
            print("| " + " | ".join(str(x) for x in r[:5]) + " |")
        print()
    kinds = sorted({a.kind for a in attacks})
    print("| kind | attacks tried | rejected | escapes | of which a verdict was None (sandbox / overload) |\n"
          "|---|---|---|---|---|")
    for k in kinds:
        mine = [r for r in rows if r[0] == k]
        bad = sum(r[3] in ("ESCAPED", "FAILED") for r in mine)
        print(f"| {k} | {len(mine)} | {len(mine) - bad} | {bad} | {sum(r[5] for r in mine)} |")
    print(f"| **all** | **{len(rows)}** | **{len(rows) - len(escapes)}** | **{len(escapes)}** | "
          f"**{sum(r[5] for r in rows)}** |")
    print(f"\n{executions} executions in {time.monotonic() - t0:.0f} s. Host memory (MB): "
          f"Shmem {start['Shmem']} before, {peak_shmem} highest after any attack, {end['Shmem']} after; "
          f"MemAvailable {start['MemAvailable']} before, {end['MemAvailable']} after.")
    return 1 if escapes else 0


if __name__ == "__main__":
    sys.exit(main())
