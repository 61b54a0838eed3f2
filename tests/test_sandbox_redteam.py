"""The red team's findings, one property each; the programs live in tests/helpers/attacks.py."""
import errno
import os
import signal
import struct
import subprocess
import sys
import threading
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


@pytest.mark.slow
@pytest.mark.parametrize("attack", by_kind("leak"))
def test_nothing_passes_from_one_execution_to_the_next(pool, attack):
    vs = run_attack(pool, attack)
    assert all(v is not None for v in vs), "the sandbox failed"
    assert not attack.escaped(vs), [out(v)[-200:] for v in vs]


@pytest.mark.parametrize("attack", by_kind("correct"))
def test_multiprocessing_programs_score_one(pool, attack):
    v = run_attack(pool, attack)[0]
    assert v is not None and v.reward == 1.0, (v.status, v.results[0].stderr[-500:]) if v else None


@pytest.mark.slow
@pytest.mark.parametrize("attack", by_kind("judge"))
def test_reward_hacks_and_unparseable_output_score_zero_not_none(pool, attack):
    t = time.monotonic()
    vs = run_attack(pool, attack)
    took = time.monotonic() - t
    assert vs[0] is not None, "None is for sandbox failures only"
    assert not attack.escaped(vs), (vs[0].reward, vs[0].status)
    assert not A.too_slow(attack, took), f"judged in {took:.1f} s"


@pytest.mark.slow
@pytest.mark.parametrize("attack", by_kind("channel"))
def test_nothing_passes_between_slots_running_at_once(pool2, attack):
    vs = run_attack(pool2, attack)
    assert all(v is not None for v in vs), "the sandbox failed"
    assert not attack.escaped(vs), [out(v)[-200:] for v in vs]


@pytest.mark.parametrize("attack", by_kind("isolation"))
@pytest.mark.slow
def test_isolation_attacks_are_contained(pool, pool2, attack):
    vs = run_attack(pool2 if attack.together else pool, attack)
    assert not attack.escaped(vs), [(v.status, out(v)[-300:]) if v else None for v in vs]


HOG = "while True: pass"


@pytest.mark.slow
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


def _running_as(uid):
    for pid in os.listdir("/proc"):
        try:
            with open(f"/proc/{pid}/status") as f:
                if any(line.startswith("Uid:") and int(line.split()[1]) == uid for line in f):
                    return True
        except (OSError, ValueError):
            continue
    return False


@pytest.mark.slow
def test_bursty_load_does_not_fake_a_timeout():
    """Ten CPU hogs (each its own session) that all pause for 0.35 s around the program's 2 s wall deadline: a load
    check that looks at the machine at that instant sees it idle and calls the starved program a timeout. Judged
    on the program's own run-queue wait over its whole run, it is stretched and passes (or, past the stretched
    backstop, None); never a timeout."""
    spin = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.8: pass\nprint('ok')"
    pool = SandboxPool(concurrency=1, retries=0).start()
    uid = pool._free._queue[0].uid
    hogs = [subprocess.Popen([sys.executable, "-c", HOG], start_new_session=True) for _ in range(10)]
    stop, paused = threading.Event(), []

    def pause_around_the_deadline():
        while not stop.is_set() and not _running_as(uid):  # the program's clock started just before this
            time.sleep(0.002)
        seen = time.monotonic()
        if stop.wait(max(0.0, seen + 1.8 - time.monotonic())):
            return
        for h in hogs:
            h.send_signal(signal.SIGSTOP)
        paused.append(time.monotonic() - seen)
        stop.wait(0.35)
        for h in hogs:
            h.send_signal(signal.SIGCONT)

    pauser = threading.Thread(target=pause_around_the_deadline)
    try:
        time.sleep(0.3)
        pauser.start()
        v = judge_many([spin], [stdio(tl=1)], pool=pool, wall_factor=1.0)[0]  # wall backstop 2 s
    finally:
        stop.set()
        pauser.join()
        for h in hogs:
            h.kill()
            h.wait()
    try:
        loop = judge_many([A.INFINITE_LOOP], [stdio(tl=1)], pool=pool, wall_factor=1.0)[0]  # alone again
    finally:
        pool.close()
    assert paused, "the hogs never paused: the test proves nothing"
    assert v is None or v.status == "passed", (v.status, v.results[0].time_s, v.results[0].cpu_s, paused)
    assert v is None or v.results[0].time_s > 2.0, "the hogs did not starve the program: the test proves nothing"
    assert loop is None or loop.status == "timeout", loop


class _Launcher:
    pid = None


@pytest.mark.parametrize("sched,others,starved", [
    # 0.5 s of CPU and 1.4 s waiting for one in 2 s, while at this instant the hogs pause (only the program and
    # the runner runnable): starved all the same
    ({"cpu": 0.5, "longest": 1.9}, 2, True),
    ({"cpu": 0.5, "longest": 1.9}, 12, True),    # the hogs running at this instant too
    ({"cpu": 1.95, "longest": 1.97}, 2, False),  # an endless loop alone: it had the CPU, used its limit
    ({"cpu": 0.01, "longest": 0.01}, 12, False),  # asleep or blocked, however busy the machine
    # 55 of its own processes queued on one CPU for 0.5 s: 27 s of waits added up, but no thread waited long
    ({"cpu": 0.6, "longest": 0.5}, 2, False),
    # it finished just as the deadline came (CI: 'ok' printed, exit 0, called a timeout): no thread is left, its
    # account is on the way, so the deadline is stretched for it, not a timeout
    ({"cpu": 0.0, "longest": 0.0, "threads": 0}, 12, True),
])
def test_the_starvation_verdict_reads_the_programs_whole_run(monkeypatch, sched, others, starved):
    """At the wall deadline, `starved_by_load` decides stretch (or None) against timeout from the program's own
    CPU time and its threads' run-queue wait over its run, not from how many tasks the machine runs at that
    instant."""
    from nanogrpo.sandbox import runner

    monkeypatch.setattr(runner.confine, "program_sched", lambda *a, **k: {"threads": 1, **sched, "lowered": False})
    monkeypatch.setattr(runner.confine, "others_running", lambda: others, raising=False)
    assert runner.starved_by_load(123456, _Launcher, elapsed=2.0, cpu_limit=1.0) is starved


@pytest.mark.slow
def test_sleeping_program_still_times_out(pool):
    v = judge_many(["import time; time.sleep(30)"], [stdio(tl=0.5)], pool=pool, wall_factor=2.0)[0]
    assert v.status == "timeout" and v.results[0].time_s < 5


def test_probe_sees_a_fresh_ipc_namespace_per_execution(pool):
    assert pool.isolation["ipc_per_execution"] is True


def run_bpf(prog: bytes, arch: int, nr: int, *args: int) -> int:
    """Run a classic-BPF seccomp filter on one call (struct seccomp_data): its return value."""
    data = struct.pack("<iIQ6Q", nr, arch, 0, *args, *[0] * (6 - len(args)))
    ins = [struct.unpack("HBBI", prog[i:i + 8]) for i in range(0, len(prog), 8)]
    pc, a = 0, 0
    while True:
        code, jt, jf, k = ins[pc]
        if code == 0x20:  # A = data[k]
            a, pc = struct.unpack_from("<I", data, k)[0], pc + 1
        elif code == 0x06:  # return k
            return k
        elif code == 0x05:  # jump k
            pc += 1 + k
        else:  # JEQ / JGT / JGE / JSET against k
            taken = {0x15: a == k, 0x25: a > k, 0x35: a >= k, 0x45: a & k != 0}[code]
            pc += 1 + (jt if taken else jf)


ALLOW = 0x7FFF0000
ERRNO = 0x00050000
# (audit arch, numbers) as the kernel's tables have them, independent of the code under test
ABIS = {"x86_64": (0xC000003E, dict(read=0, unshare=272, clone=56, clone3=435, fcntl=72, flock=73, inotify_init1=294,
                                    socket=41, setsockopt=54, keyctl=250, memfd_create=319, vmsplice=278)),
        "aarch64": (0xC00000B7, dict(read=63, unshare=97, clone=220, clone3=435, fcntl=25, flock=32, inotify_init1=26,
                                     socket=198, setsockopt=208, keyctl=219, memfd_create=279, vmsplice=75))}


@pytest.mark.parametrize("machine", sorted(ABIS))
def test_seccomp_filter_decides_each_call(machine):
    """The filter, run on synthetic calls: namespaces, the buffer tricks, shared-file locks and notifications,
    socket families and buffer sizes are refused; the ordinary forms of the same calls are not."""
    from nanogrpo.sandbox import seccomp

    arch, nr = ABIS[machine]
    prog = seccomp.seccomp_program(machine)
    decide = lambda name, *args: run_bpf(prog, arch, nr[name], *args)  # noqa: E731
    eperm, eafnosupport, enosys = ERRNO | errno.EPERM, ERRNO | errno.EAFNOSUPPORT, ERRNO | errno.ENOSYS
    NEWUSER, NEWNS, NEWTIME, SIGCHLD, THREAD = 0x10000000, 0x20000, 0x80, 17, 0x3D0F00
    assert decide("read", 0) == ALLOW
    assert run_bpf(prog, 0x40000003, 3) == eperm                            # i386 on x86_64 / arm on arm64
    assert decide("keyctl") == eperm and decide("memfd_create") == eperm
    assert decide("unshare", NEWUSER) == eperm and decide("unshare", NEWTIME) == eperm
    assert decide("unshare", 0x400) == ALLOW                                 # CLONE_FILES: no namespace
    assert decide("clone", NEWUSER | SIGCHLD) == eperm and decide("clone", NEWNS | SIGCHLD) == eperm
    assert decide("clone", SIGCHLD) == ALLOW and decide("clone", THREAD) == ALLOW
    assert decide("clone3") == enosys                                         # its flags are in memory: fall back
    assert decide("fcntl", 3, 1031, 1 << 20) == eperm and decide("fcntl", 3, 1031, 65536) == ALLOW
    assert decide("fcntl", 3, 6) == eperm and decide("fcntl", 3, 5) == eperm  # F_SETLK, F_GETLK
    assert decide("fcntl", 3, 3) == ALLOW                                     # F_GETFL
    assert decide("flock", 3, 1) == eperm and decide("inotify_init1", 0) == eperm and decide("vmsplice") == eperm
    assert decide("socket", 2, 1) == eafnosupport and decide("socket", 1, 1) == ALLOW
    assert decide("setsockopt", 3, 1, 7) == eperm and decide("setsockopt", 3, 1, 8) == eperm  # SO_SNDBUF / RCVBUF
    assert decide("setsockopt", 3, 1, 2) == ALLOW and decide("setsockopt", 3, 6, 7) == ALLOW  # other options
    assert seccomp.seccomp_program("sparc") is None  # unknown machine: no filter (documented)


def test_redteam_refuses_an_unknown_kind():
    """A misspelt --kind used to run 0 attacks and report nothing escaped."""
    res = subprocess.run([sys.executable, "scripts/bench/redteam.py", "--kind", "nosuch"], capture_output=True, text=True,
                         cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    assert res.returncode == 2 and "invalid choice: 'nosuch'" in res.stderr
