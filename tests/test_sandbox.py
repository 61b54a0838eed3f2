"""Isolation of the local (bubblewrap) backend: each test is one thing an untrusted program tries."""
import dataclasses
import os
import socket
import subprocess
import sys
import threading
import time

import pytest

from helpers import attacks as A
from nanogrpo.sandbox import SandboxPool, judge_many
from nanogrpo.sandbox.local import bwrap_available

pytestmark = pytest.mark.skipif(not bwrap_available(), reason="bubblewrap (apt-get install bubblewrap) missing")


@pytest.fixture(scope="module")
def pool():
    p = SandboxPool(concurrency=2, isolation="bwrap").start()
    yield p
    p.close()


def stdio(expected="ok\n", stdin="", tl=2, **kw):
    return {"id": "t", "language": "python", "mode": "stdio", "time_limit_s": tl,
            "tests": [{"input": stdin, "output": expected}], **kw}


def run(pool, code, problem=None, **opts):
    return judge_many([code], [problem or stdio()], pool=pool, **opts)[0]


def test_isolation_probe_is_active(pool):
    assert pool.isolation["uid"] != 0
    assert pool.isolation["network"] is False and pool.isolation["root_writable"] is False


def test_correct_program_passes(pool):
    v = run(pool, "print('ok')")
    assert v.reward == 1.0 and v.status == "passed"


@pytest.mark.slow
def test_infinite_loop_times_out(pool):
    t = time.monotonic()
    v = run(pool, A.INFINITE_LOOP, stdio(tl=1))
    if v is None:  # the machine starved it past even the stretched backstop: honest "could not judge"
        pytest.skip("machine too loaded to give the program 1 s of CPU (the verdict was None, not a fake 0)")
    assert v.reward == 0.0 and v.status == "timeout"
    assert time.monotonic() - t < 10 or v.results[0].time_s > 6  # > 6 s: its backstop was stretched under load


@pytest.mark.slow
def test_sleeping_program_hits_wall_clock(pool):
    v = run(pool, A.SLEEP, stdio(tl=0.5), wall_factor=2.0)
    assert v.status == "timeout" and v.results[0].time_s < 5


@pytest.mark.slow
def test_fork_bomb_is_contained(pool):
    t = time.monotonic()
    v = run(pool, A.FORK_BOMB, stdio(tl=1))
    assert v.reward == 0.0 and v.status in ("timeout", "runtime_error")
    assert time.monotonic() - t < 20
    assert run(pool, "print('ok')").reward == 1.0  # the slot is clean afterwards


def test_memory_bomb_is_stopped(pool):
    v = run(pool, A.MEMORY_BOMB, stdio(memory_limit_mb=256))
    assert v.reward == 0.0 and v.status == "memory"


def test_one_gigabyte_write_is_stopped(pool):
    v = run(pool, A.BIG_WRITE)
    assert v.reward == 0.0 and v.status in ("output_limit", "runtime_error")


def test_network_is_unreachable(pool):
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    port = srv.getsockname()[1]
    def accept():
        try:
            srv.accept()
        except OSError:  # closed at the end of the test
            pass

    threading.Thread(target=accept, daemon=True).start()
    v = run(pool, A.NETWORK.format(port=port), stdio("blocked\nblocked\n"))
    srv.close()
    assert v.reward == 1.0, v.results[0].stdout


def test_cannot_write_outside_its_directory(pool, tmp_path):
    host = tmp_path / "pwned"
    v = run(pool, A.WRITE_OUTSIDE.format(host=str(host)))
    assert v.reward == 1.0, v.results[0].stdout
    assert not host.exists()


def test_cannot_read_another_executions_files(pool):
    secret = "s3cret-" + os.urandom(4).hex()
    writer, reader = A.FILE_WRITE.format(secret=secret), A.FILE_READ
    vs = judge_many([writer, reader, writer, reader], [stdio()] * 4, pool=pool)  # both slots, in turn
    vs += judge_many([reader, reader], [stdio()] * 2, pool=pool)                  # after the writers ended
    for v in vs[1::2] + vs[4:]:
        assert secret not in v.results[0].stdout


def test_killing_the_parent_fails_quietly(pool):
    code = A.KILL_PARENT
    procs = [id(w.proc) for w in pool._free._queue]
    v = run(pool, code)
    assert v is not None and v.status != "infra_error"
    assert run(pool, "print('ok')").reward == 1.0
    assert sorted(id(w.proc) for w in pool._free._queue) == sorted(procs)  # no worker had to restart


def test_huge_output_is_capped(pool):
    t = time.monotonic()
    v = run(pool, A.HUGE_OUTPUT, stdio(tl=5))
    assert v.status == "output_limit" and len(v.results[0].stdout) <= 8 << 20
    assert time.monotonic() - t < 15


def test_environment_is_scrubbed(pool, monkeypatch):
    monkeypatch.setenv("NANOGRPO_SECRET_TOKEN", "leak")
    v = run(pool, A.ENVIRONMENT)
    assert "NANOGRPO_SECRET_TOKEN" not in v.results[0].stdout and "leak" not in v.results[0].stdout


def test_oversubscribed_correct_programs_all_pass(pool):
    code = "n = int(input())\nprint(sum(i * i for i in range(n)))"
    problems = [stdio(str(sum(i * i for i in range(k * 1000))), stdin=str(k * 1000)) for k in range(16)]
    vs = judge_many([code] * 16, problems, pool=pool)
    assert [v.reward for v in vs] == [1.0] * 16


def test_unavailable_isolation_refuses_without_opt_in():
    from nanogrpo.sandbox import SandboxUnavailable

    with pytest.raises(SandboxUnavailable, match="ISOLATION IS NOT ACTIVE"):
        SandboxPool(concurrency=1, isolation="none").start()


FRESH_VS_FORKED = [
    "print(__name__, __file__.endswith('main.py'))",
    "import sys\nprint(sys.argv, sys.flags.isolated, sys.path[0] != '')",
    "import sys\nsys.exit(3)",
    "import sys\nsys.exit('bye')",
    "raise ValueError('boom')",
    "import atexit\natexit.register(lambda: print('at exit'))\nprint('main')",
    "import sys\nsys.stdout.write('no newline')",
    "import threading, time\nthreading.Thread(target=lambda: (time.sleep(0.2), print('thread'))).start()",
    "import sys\nprint(sys.stdin.read().split(), sys.stdin.encoding, sys.stdout.encoding)",
    "import os\nprint(sorted(os.environ), os.getcwd().startswith('/tmp/jobs/'))",
    "import pickle\nclass A: pass\nprint(type(pickle.loads(pickle.dumps(A()))).__name__)",
    "print(len('é'.encode()), 'é')",
]


@pytest.mark.parametrize("code", FRESH_VS_FORKED)
def test_forked_interpreter_behaves_like_a_fresh_one(pool, code):
    from nanogrpo.sandbox import ExecSpec

    async def both(session, _):
        out = []
        for fresh in (True, False):
            spec = ExecSpec(["/usr/bin/python3", "-I", "main.py"], {"main.py": code}, "1 2\n", fresh_interpreter=fresh)
            r = await session.exec(spec)
            out.append((r.status, r.exit_code, r.stdout, r.stderr.strip().splitlines()[-1:]))
        return out

    fresh, forked = pool.map(both, [0])[0]
    assert forked == fresh


def test_untrusted_code_has_no_capabilities(pool):
    v = run(pool, A.CAPABILITIES, stdio(A.NO_CAPS))
    assert v.reward == 1.0, v.results[0].stdout


def test_hash_seed_gives_every_slot_the_same_string_hashes(pool):
    """ExecSpec.hash_seed: a fresh interpreter with PYTHONHASHSEED, so str hashes and set order are the same on
    every slot (a forked warm interpreter has its slot's seed; tool sessions replay on any slot)."""
    from nanogrpo.sandbox import ExecSpec

    code = "print(hash('nanogrpo'), list({'a', 'b', 'c', 'd', 'e', 'f', 'g', 'h'}))"

    async def one(session, seed):
        r = await session.exec(ExecSpec(["/usr/bin/python3", "-s", "-c", code], hash_seed=seed))
        return r.status, r.stdout

    outs = pool.map(one, [5] * 6 + [6])  # six at once: both slots
    assert outs[0][0] == "ok" and len(set(outs[:6])) == 1
    assert outs[6] != outs[0]  # the seed is what decides


def test_hash_seed_is_refused_with_flags_that_ignore_it():
    from nanogrpo.sandbox import runner

    for argv in (["/usr/bin/python3", "-I", "main.py"], ["/usr/bin/python3", "-sE", "main.py"]):
        with pytest.raises(ValueError, match="ignore PYTHONHASHSEED"):
            runner.seeded({"argv": argv, "env": {}, "fresh_interpreter": False}, 5)


# -- what a program may not do to get memory, channels or host facts past the sandbox ----------------
NAMESPACES = """
import ctypes, errno, os, platform, threading
libc = ctypes.CDLL(None, use_errno=True)
def result(ret):
    return 'ok' if ret >= 0 else errno.errorcode[ctypes.get_errno()]
NEWUSER, NEWNS, NEWNET, SIGCHLD = 0x10000000, 0x00020000, 0x40000000, 17
SYS_CLONE = {'x86_64': 56, 'aarch64': 220}[platform.machine()]
got = []
for nr, args in ((SYS_CLONE, (NEWUSER | SIGCHLD, 0, 0, 0, 0)), (435, (ctypes.byref((ctypes.c_uint64 * 8)(NEWUSER, 0, 0, 0, SIGCHLD)), 64))):
    pid = libc.syscall(nr, *args)  # clone / clone3 into a new user namespace
    if pid == 0:
        os._exit(0)
    got.append(result(pid))
    if pid > 0:
        os.waitpid(pid, 0)
t = threading.Thread(target=print, args=('thread',), kwargs={'flush': True})
t.start()
t.join()
if os.fork() == 0:
    print('fork', flush=True)
    os._exit(0)
os.wait()
got.append(result(libc.unshare(NEWUSER | NEWNS | NEWNET)))  # last: once in a namespace of its own, clone would fail anyway
print(*got)
"""


def test_no_user_namespace_or_other_namespace(pool):
    """unshare / clone / clone3 into a new user namespace fail (root in one, a program could mount a tmpfs or
    make an IPC namespace with the kernel's default limits); threads and fork still work (clone3 answers ENOSYS,
    so the C library falls back to clone)."""
    v = run(pool, NAMESPACES, stdio("thread\nfork\nEPERM ENOSYS EPERM"))
    assert v.reward == 1.0, v.results[0].stdout + v.results[0].stderr[-500:]


BUFFERS = """
import ctypes, errno, fcntl, os, socket
libc = ctypes.CDLL(None, use_errno=True)
def result(f):
    try:
        f()
        return 'ok'
    except OSError as e:
        return errno.errorcode[e.errno]
r, w = os.pipe()
got = [result(lambda: fcntl.fcntl(w, 1031, 1 << 20)), result(lambda: fcntl.fcntl(w, 1031, 4096))]  # F_SETPIPE_SZ
page = ctypes.create_string_buffer(4096)
iov = (ctypes.c_void_p * 2)(ctypes.addressof(page), 4096)
got.append('ok' if libc.vmsplice(w, iov, 1, 0) >= 0 else errno.errorcode[ctypes.get_errno()])
made = 1
for _ in range(6):  # 100 pipes from each of several processes (under RLIMIT_NOFILE): the budget is per execution
    rep_r, rep_w = os.pipe()
    made += 1
    if os.fork() == 0:
        held = []
        while len(held) < 100 and result(lambda: held.append(os.pipe())) == 'ok':
            pass
        os.write(rep_w, str(len(held)).encode())
        os._exit(0)
    os.close(rep_w)
    os.wait()
    made += int(os.read(rep_r, 100))
    os.close(rep_r)
got.append(f'pipes {made}')
a, b = socket.socketpair()
got += [result(lambda: a.setsockopt(socket.SOL_SOCKET, o, 1 << 20)) for o in (socket.SO_SNDBUF, socket.SO_RCVBUF)]
pairs = [(a, b)]
while len(pairs) < 1000 and result(lambda: pairs.append(socket.socketpair())) == 'ok':
    pass
got.append(f'socket pairs {len(pairs)}')
got.append(result(lambda: socket.socket(socket.AF_INET, socket.SOCK_STREAM)))
print(*got)
"""


def test_pipe_and_socket_buffers_are_bounded(pool):
    """A pipe stays at its 64 KB default and holds only pages it was written (no F_SETPIPE_SZ growth, no
    vmsplice); socket buffers stay at the kernel's default (no SO_SNDBUF / SO_RCVBUF) and only AF_UNIX sockets
    exist; pipes and sockets are counted per execution, over all its processes (Limits.pipes, Limits.sockets)."""
    from nanogrpo.sandbox import Limits

    lim = Limits()
    v = run(pool, BUFFERS)
    got = v.results[0].stdout.split()
    want = ["EPERM", "ok", "EPERM", "pipes", str(lim.pipes), "EPERM", "EPERM", "socket", "pairs",
            str(lim.sockets // 2), "EAFNOSUPPORT"]
    assert got == want, v.results[0].stdout + v.results[0].stderr[-500:]


@pytest.mark.slow
def test_pids_start_afresh_in_every_execution(pool):
    """A fresh pid namespace per execution: the pid counter carries nothing from one execution to the next."""
    vs = judge_many([A.PID_READ, A.PID_WRITE, A.PID_READ, A.PID_READ], [stdio(tl=5)] * 4, pool=pool)
    pids = [vs[i].results[0].stdout.strip() for i in (0, 2, 3)]
    assert len(set(pids)) == 1, pids


PROC = """
import json, os
print(json.dumps({'entries': sorted(e for e in os.listdir('/proc') if not e.isdigit()),
                  'pids': sorted(int(e) for e in os.listdir('/proc') if e.isdigit()), 'me': os.getpid(),
                  'mountinfo': open('/proc/self/mountinfo').read(), 'cwd': os.getcwd(), 'uid': os.getuid()}))
"""


def test_proc_shows_nothing_of_the_host(pool):
    """Only the program's own processes, none of the machine-wide files (kernel command line, ...), no host path
    in the mount table, and neither the uid nor the working directory encodes the trainer's pid."""
    import json

    v = run(pool, PROC)
    seen = json.loads(v.results[0].stdout)
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    assert set(seen["entries"]) <= {"self", "thread-self"}, seen["entries"]
    assert seen["pids"] == [seen["me"]], seen["pids"]
    assert root not in seen["mountinfo"], seen["mountinfo"]
    assert f"j{os.getpid()}-" not in seen["cwd"] and (seen["uid"] - 100000) // 256 != os.getpid()


SHARED_FILES = """
import ctypes, errno, fcntl, os, struct
libc = ctypes.CDLL(None, use_errno=True)
def result(f):
    try:
        ret = f()
    except OSError as e:
        return errno.errorcode[e.errno]
    return 'ok' if not isinstance(ret, int) or ret >= 0 else errno.errorcode[ctypes.get_errno()]
fd = os.open('/usr/lib/os-release', os.O_RDONLY)
usr = os.open('/usr', os.O_RDONLY)
print(*[result(f) for f in (
    lambda: fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB),
    lambda: fcntl.lockf(fd, fcntl.LOCK_SH | fcntl.LOCK_NB),
    lambda: fcntl.fcntl(fd, fcntl.F_GETLK, struct.pack('hh4xqqi4x', fcntl.F_WRLCK, 0, 0, 0, 0)),
    lambda: fcntl.fcntl(usr, fcntl.F_NOTIFY, fcntl.DN_ACCESS),
    lambda: libc.inotify_init1(0),
    lambda: libc.fanotify_init(0x200, 0),  # FAN_REPORT_FID: what an unprivileged process may ask for
    lambda: os.mkfifo('fifo'),
)])
"""


def test_no_locks_or_notifications_on_shared_files(pool):
    """Every slot sees the same read-only /usr: file locks (flock, fcntl record locks), inotify, fanotify and
    dnotify on it would pass data between slots running at once, and show the host's file activity; named pipes
    would be pipes outside the per-execution count. All are refused."""
    v = run(pool, SHARED_FILES, stdio(" ".join(["EPERM"] * 7)))
    assert v.reward == 1.0, v.results[0].stdout + v.results[0].stderr[-500:]


EXECD_LOUD = """
import sys
from nanogrpo.sandbox import ExecSpec, Limits, SandboxPool
pool = SandboxPool(concurrency=1).start()
async def one(session, _):
    r = await session.exec(ExecSpec(['/usr/bin/python3', '-c', "print('x' * 1000000)"], limits=Limits(cpu_s=2, wall_s=10)))
    return r.status, len(r.stdout)
print(*pool.map(one, [0])[0])
pool.close()
"""


@pytest.mark.slow
def test_an_execd_program_may_print_more_than_a_pipe_holds():
    """An exec'd program (a fresh python3 here; C++ and node programs always are) printing 1 MB. A descriptor
    received over a socket is not close-on-exec: the program used to keep the runner's "did exec fail" pipe
    open, the runner waited on that pipe while the program waited on its full stdout, and the slot hung. Run in
    a child process, so that a hang fails the test instead of stopping the suite."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    p = subprocess.run([sys.executable, "-c", EXECD_LOUD], capture_output=True, text=True, timeout=60, cwd=root)
    assert p.stdout.split() == ["ok", "1000001"], p.stderr[-1000:]


def test_a_sandbox_failure_before_exec_is_never_the_programs_fault(tmp_path, monkeypatch):
    """Only the program's own binary failing to exec (it may have deleted it) is its fault; the sandbox failing
    to set the program up (here: a limit the kernel refuses) is an infrastructure error, a compiled program
    included."""
    from nanogrpo.sandbox import Limits, runner

    monkeypatch.setattr(runner, "JOBS_ROOT", str(tmp_path))
    uid = os.getuid()  # unconfined: the runner's own uid, no namespaces
    ok = dataclasses.asdict(Limits(cpu_s=2, wall_s=5))
    missing = runner.run_exec({"job": "a", "argv": ["./main"], "stdin": "", "limits": ok}, uid)
    assert missing["status"] == "runtime_error", missing  # no ./main: the program's fault
    refused = dict(ok, nofile=1 << 40)  # setrlimit fails before exec
    rep = runner.run_exec({"job": "b", "argv": ["./main"], "stdin": "", "limits": refused}, uid)
    assert "infra_error" in rep, rep


def test_steps_count_only_whole_announcement_lines_and_only_as_many_as_allowed(monkeypatch):
    """runner.Steps reads the program's stderr as it grows: a step starts at each complete line that begins with
    the mark (a line split over two reads counts once, when whole), and only the first `steps` of them count."""
    from nanogrpo.sandbox import runner

    clock = iter(range(100))
    monkeypatch.setattr(runner.time, "monotonic", lambda: float(next(clock)))
    s = runner.Steps({"step_s": 2.0, "step_mark": "M cell ", "steps": 2})
    assert s.deadline == float("inf")
    buf = bytearray(b"noise\nM ce")
    s.read(buf)
    assert s.deadline == float("inf") and s.left == 2  # half a line: not yet
    buf += b"ll 0\nM cell 1\nM cell 2\n"
    s.read(buf)
    assert s.left == 0 and s.deadline == 1.0 + 2.0  # two counted (clock 0 and 1); the third is past the budget
    off = runner.Steps({"cpu_s": 1, "wall_s": 2})  # an execution that announces nothing: no step deadline
    off.read(bytearray(b"M cell 0\n"))
    assert off.deadline == float("inf")


def test_the_runner_ends_a_step_past_its_wall_clock_whatever_the_program_does_with_sigalrm(tmp_path, monkeypatch):
    """A program that ignores SIGALRM and announces two steps, then sleeps: stopped step_s after the second line
    (a timeout), long before its wall deadline; the steps it announces past `steps` give it no more time."""
    from nanogrpo.sandbox import Limits, runner

    monkeypatch.setattr(runner, "JOBS_ROOT", str(tmp_path))
    prog = ("import signal, sys, time\nsignal.signal(signal.SIGALRM, signal.SIG_IGN)\n"
            "for i in range(20):\n    sys.stderr.write(f'M cell {i}\\n'); sys.stderr.flush(); time.sleep(0.1)\n"
            "time.sleep(60)\n")
    lim = dict(dataclasses.asdict(Limits(cpu_s=5, wall_s=20)), step_s=0.3, step_mark="M cell ", steps=2)
    t = time.monotonic()
    rep = runner.run_exec({"job": "s", "argv": [sys.executable, "-c", prog], "stdin": "", "limits": lim}, os.getuid())
    took = time.monotonic() - t
    assert rep["status"] == "timeout" and rep["stderr"].startswith("M cell 0\nM cell 1\n"), rep
    assert took < 1.5, took  # the second line at ~0.1 s, its step 0.3 s: not 20 lines of steps (2.3 s), nor 20 s
