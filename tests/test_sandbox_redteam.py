"""The red team's findings, one property each; the programs live in tests/helpers/attacks.py."""
import os
import subprocess
import sys
import time

import pytest

from helpers import attacks as A
from helpers.attacks import ATTACKS, PIN_CAP_MB, meminfo, out, run_attack, stdio
from nanogrpo.sandbox import SandboxPool, judge_many
from nanogrpo.sandbox.local import bwrap_available

pytestmark = pytest.mark.skipif(not bwrap_available(), reason="bubblewrap (apt-get install bubblewrap) missing")


@pytest.fixture(scope="module")
def pool():
    p = SandboxPool(concurrency=1, isolation="bwrap").start()  # one slot: every program runs where the last ran
    yield p
    p.close()


@pytest.fixture(scope="module")
def pool2():
    p = SandboxPool(concurrency=2, isolation="bwrap").start()  # attacks `together`: two programs at once, a slot each
    yield p
    p.close()


def by_kind(kind):
    return [pytest.param(a, id=a.name) for a in ATTACKS if a.kind == kind]


def shmem_settles(before_mb, slack_mb=64, wait_s=5.0):
    """Host Shmem back within slack of `before` (namespaces are torn down asynchronously)."""
    end = time.monotonic() + wait_s
    while True:
        now = meminfo()["Shmem"]
        if now <= before_mb + slack_mb or time.monotonic() > end:
            return now
        time.sleep(0.1)


@pytest.mark.parametrize("attack", by_kind("memory"))
def test_memory_pinned_outside_rlimit_as_is_capped_and_freed(pool, attack):
    before = meminfo()["Shmem"]
    vs = run_attack(pool, attack)
    assert vs[0] is not None, "the sandbox failed"
    assert int(out(vs[0]).strip() or 0) <= PIN_CAP_MB, f"pinned {out(vs[0]).strip()} MB"
    after = shmem_settles(before)
    assert after <= before + 64, f"host Shmem {before} -> {after} MB after the execution ended"


@pytest.mark.parametrize("attack", by_kind("leak"))
def test_nothing_passes_from_one_execution_to_the_next(pool, attack):
    vs = run_attack(pool, attack)
    assert all(v is not None for v in vs), "the sandbox failed"
    assert not attack.escaped(vs), [out(v)[-200:] for v in vs]


@pytest.mark.parametrize("attack", by_kind("correct"))
def test_multiprocessing_programs_score_one(pool, attack):
    v = run_attack(pool, attack)[0]
    assert v is not None and v.reward == 1.0, (v.status, v.results[0].stderr[-500:]) if v else None


@pytest.mark.parametrize("attack", by_kind("judge"))
def test_reward_hacks_and_unparseable_output_score_zero_not_none(pool, attack):
    vs = run_attack(pool, attack)
    assert vs[0] is not None, "None is for sandbox failures only"
    assert not attack.escaped(vs), (vs[0].reward, vs[0].status)


@pytest.mark.parametrize("attack", by_kind("channel"))
def test_nothing_passes_between_slots_running_at_once(pool2, attack):
    vs = run_attack(pool2, attack)
    assert all(v is not None for v in vs), "the sandbox failed"
    assert not attack.escaped(vs), [out(v)[-200:] for v in vs]


@pytest.mark.parametrize("attack", by_kind("isolation"))
def test_isolation_attacks_are_contained(pool, pool2, attack):
    vs = run_attack(pool2 if attack.together else pool, attack)
    assert not attack.escaped(vs), [(v.status, out(v)[-300:]) if v else None for v in vs]


HOG = "while True: pass"


def test_load_does_not_fake_a_timeout():
    """A program using 0.6 s of a 1 s CPU limit, starved by 10 CPU hogs on this 2-core machine (each hog
    in its own session, so the scheduler's autogroups give each as much CPU as the program: it needs
    >= 3.3 s of wall time, over the 2 s backstop) passes; or, if the machine is so loaded that even the
    stretched backstop (4 x 2 s) runs out, it is an infrastructure error (None), never a timeout (0).
    A program that starves itself (renice 19, spin) under the same load is still a timeout: only other
    work's load stretches the backstop."""
    spin = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.6: pass\nprint('ok')"
    pool = SandboxPool(concurrency=2, retries=0).start()  # retries=0: bounded time (< 10 s) even at worst
    hogs = [subprocess.Popen([sys.executable, "-c", HOG], start_new_session=True) for _ in range(10)]
    try:
        time.sleep(0.3)
        t = time.monotonic()
        v, cheat = judge_many([spin, A.SELF_STARVE], [stdio(tl=1)] * 2, pool=pool, wall_factor=1.0)  # backstop 2 s
        wall = time.monotonic() - t
    finally:
        for h in hogs:
            h.kill()
            h.wait()
        pool.close()
    assert v is None or v.status == "passed", (v.status, v.results[0].time_s, v.results[0].cpu_s, wall)
    assert v is None or v.results[0].time_s > 2.0, "the hogs did not starve the program: the test proves nothing"
    assert cheat is not None and cheat.status == "timeout", cheat


def test_sleeping_program_still_times_out(pool):
    v = judge_many(["import time; time.sleep(30)"], [stdio(tl=0.5)], pool=pool, wall_factor=2.0)[0]
    assert v.status == "timeout" and v.results[0].time_s < 5


def test_probe_sees_a_fresh_ipc_namespace_per_execution(pool):
    assert pool.isolation["ipc_per_execution"] is True


def test_seccomp_filter_denies_the_listed_calls_and_foreign_abis():
    from nanogrpo.sandbox import confine

    prog = confine.seccomp_program("x86_64")
    assert len(prog) % 8 == 0 and len(prog) // 8 == 5 + len(confine._ARCH["x86_64"][1]) + 2
    assert confine.seccomp_program("sparc") is None  # unknown machine: no filter (documented)
