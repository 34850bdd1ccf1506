"""Warm grading kernels (grader/kernel/warm.py, grader/kernel/zygote.py): a kernel forked from the worker's
zygote is, seen from inside, the fresh sandboxed kernel it replaces, keeps nothing of the kernel
before it, and grades exactly as a fresh one; without its zygote a notebook starts fresh.

Real parts only: bubblewrap, jupyter_client's KernelManager with the grading kernelspec (the
provisioner it names is loaded through its entry point, as nbgrader loads it), and the real
pipeline (grade_class) with the answer bank, whose expected points are hand-derived.
"""
import contextlib
import json
import os
import shutil
import signal
import threading
import time
from pathlib import Path

import nbformat
import pytest

from grader import grade_class
from grader.kernel import sandbox, warm
from grader.demo import fill_answers
from grader.demo.answer_bank import ANSWERS, EXPECTED

REPO = Path(__file__).resolve().parents[1]

PROBE = r'''
import json, os, random, resource, signal, sys
import numpy, torch
keep = ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb", "NoNewPrivs", "Seccomp", "Uid", "Gid", "Groups")
status = dict(line.split(":", 1) for line in open("/proc/self/status").read().splitlines())
mounts = []
for line in open("/proc/self/mountinfo").read().splitlines():
    f = line.split()
    sep = f.index("-")
    mounts.append([f[3], f[4], f[5], f[sep + 1], f[sep + 2], f[sep + 3]])  # root, point, options, type, source, super
print(json.dumps({
    "pid": os.getpid(), "uid": [os.getuid(), os.geteuid()], "gid": [os.getgid(), os.getegid()],
    "groups": os.getgroups(), "status": {k: status[k].strip() for k in keep},
    "mounts": sorted(mounts), "ns": {n: os.readlink("/proc/self/ns/" + n) for n in os.listdir("/proc/self/ns")},
    "root": sorted(os.listdir("/")), "cwd": os.getcwd(), "files": sorted(os.listdir(".")),
    "rlimits": {n: resource.getrlimit(getattr(resource, n)) for n in
                ("RLIMIT_AS", "RLIMIT_FSIZE", "RLIMIT_CORE", "RLIMIT_NPROC", "RLIMIT_NOFILE", "RLIMIT_STACK")},
    "umask": os.umask(0o022), "env": dict(os.environ), "path": sys.path, "argv": sys.argv,
    "cgroup": open("/proc/self/cgroup").read().split(), "hostname": os.uname().nodename,
    "signals": {n: repr(signal.getsignal(getattr(signal, n))) for n in
                ("SIGINT", "SIGPIPE", "SIGXFSZ", "SIGTERM", "SIGCHLD", "SIGHUP", "SIGUSR1")},
    "torch_randn": torch.randn(3).tolist(), "torch_seed": torch.initial_seed(),
    "threads_torch": torch.get_num_threads(),
    "np_first": float(numpy.random.random()), "py_first": random.random(), "hash": hash("normref"),
}))
'''

# The kernel before: leaves state of every kind behind, if anything could carry it.
DIRTY = r'''
import json, os, random, sys
import numpy, torch, normref, normref.functional
MARK = "{mark}"
before = "wave" in sys.modules
import wave
for p in ("/tmp/leak.txt", "leak.txt", os.path.expanduser("~/leak.txt")):
    open(p, "w").write(MARK)
first = {{"torch": torch.randn(3).tolist(), "np": float(numpy.random.random()), "py": random.random(),
         "seed": torch.initial_seed()}}
torch.randn(1000); numpy.random.random(1000); [random.random() for _ in range(1000)]
torch.add = lambda *a, **k: "patched"
torch.Tensor.__add__ = lambda *a, **k: "patched"
normref.rms_norm = normref.functional.rms_norm = lambda *a, **k: "patched"
numpy.mean = lambda *a, **k: "patched"
os.environ["LEAK"] = MARK
print(json.dumps({{"wave_before": before, "first": first, "hash": hash("normref")}}))
'''

CHECK = r'''
import json, os, random, sys
import numpy, torch, normref
print(json.dumps({
    "wave": "wave" in sys.modules, "var": "MARK" in globals(), "env": os.environ.get("LEAK"),
    "files": [os.path.exists(p) for p in ("/tmp/leak.txt", "leak.txt", os.path.expanduser("~/leak.txt"))],
    "torch_add": torch.add(torch.ones(1), torch.ones(1)).tolist(),
    "tensor_add": (torch.ones(1) + torch.ones(1)).tolist(),
    "rms": normref.rms_norm(torch.full((1, 2), 3.0), torch.ones(2), eps=0.0).tolist(),
    "np_mean": float(numpy.mean([1.0, 3.0])),
    "first": {"torch": torch.randn(3).tolist(), "np": float(numpy.random.random()), "py": random.random(),
              "seed": torch.initial_seed()},
    "hash": hash("normref"),
}))
'''


@pytest.fixture
def session(bubblewrap, tmp_path, monkeypatch):
    """``session(warm)``: a SandboxSession whose kernelspec and worker environment are in force
    (this test process is the worker); its zygote is stopped afterwards."""
    if not sandbox.available():
        pytest.fail(f"{bubblewrap} is installed but cannot create namespaces on this machine")
    stack = contextlib.ExitStack()

    def start(warm_kernels: bool = True):
        monkeypatch.setenv(warm.SWITCH, "1" if warm_kernels else "0")
        for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
            monkeypatch.setenv(var, "1")
        sb = stack.enter_context(sandbox.SandboxSession(tmp_path / "course"))
        args, env = sb.worker(0)
        for k, v in env.items():
            monkeypatch.setenv(k, v)
        sb.ipc = args[-1].split("=", 1)[1]
        return sb

    with stack:
        yield start
        warm.stop_zygote()


@contextlib.contextmanager
def kernel(sb, cwd: Path):
    """A grading kernel (jupyter_client's KernelManager, the session's kernelspec) in ``cwd``:
    yields ``(run, km)``, ``run(code) -> stdout``."""
    from jupyter_client import KernelManager

    km = KernelManager(kernel_name=sandbox.KERNEL_NAME, transport="ipc", ip=sb.ipc)
    km.start_kernel(cwd=str(cwd), extra_arguments=["--HistoryManager.hist_file=:memory:"])
    kc = km.client()
    kc.start_channels()
    try:
        kc.wait_for_ready(timeout=120)

        def run(code: str) -> str:
            out = []

            def hook(msg):
                if msg["msg_type"] == "stream":
                    out.append(msg["content"]["text"])
                elif msg["msg_type"] == "error":
                    out.append("ERROR " + msg["content"]["ename"] + ": " + msg["content"]["evalue"])

            kc.execute_interactive(code, output_hook=hook, timeout=120)
            return "".join(out)

        yield run, km
    finally:
        kc.stop_channels()
        km.shutdown_kernel()


def test_the_instructor_install_registers_the_provisioner_the_kernelspec_names(tmp_path, monkeypatch):
    """jupyter_client finds ``normref-warm`` by entry point from any working directory (an
    nbgrader worker's is a course root, where ``grader`` is not importable), and the grading
    kernelspec names it unless warm kernels are switched off."""
    from importlib.metadata import entry_points

    monkeypatch.chdir(tmp_path)
    (ep,) = entry_points(group=warm.ENTRY_POINT_GROUP, name=warm.PROVISIONER)
    assert ep.load() is warm.WarmProvisioner
    monkeypatch.setenv(warm.SWITCH, "1")
    assert warm.unavailable() is None
    with sandbox.SandboxSession(tmp_path / "on") as sb:
        spec = json.loads((sb.jupyter_dir / "kernels" / sandbox.KERNEL_NAME / "kernel.json").read_text())
    assert spec["metadata"]["kernel_provisioner"] == {"provisioner_name": "normref-warm", "config": {}}
    monkeypatch.setenv(warm.SWITCH, "0")
    with sandbox.SandboxSession(tmp_path / "off") as sb:
        spec = json.loads((sb.jupyter_dir / "kernels" / sandbox.KERNEL_NAME / "kernel.json").read_text())
        assert sb.warm_off == "NORMREF_WARM_KERNELS=0"
    assert "kernel_provisioner" not in spec["metadata"]


def _json(text: str) -> dict:
    assert text.strip().startswith("{"), text
    return json.loads(text)


def _memory_has(pid: int, needle: bytes) -> bool:
    """Whether ``needle`` is anywhere in the writable memory of process ``pid`` (read as root)."""
    with open(f"/proc/{pid}/maps") as maps, open(f"/proc/{pid}/mem", "rb", 0) as mem:
        for line in maps:
            fields = line.split()
            if "rw" not in fields[1] or (len(fields) > 5 and fields[5] in ("[vvar]", "[vsyscall]")):
                continue
            start, end = (int(x, 16) for x in fields[0].split("-"))
            try:
                mem.seek(start)
                if needle in mem.read(end - start):
                    return True
            except OSError:
                continue
    return False


def _folder(tmp_path: Path, name: str) -> Path:
    d = tmp_path / name
    d.mkdir()
    (d / "handed_in.txt").write_text("the student's own file\n")
    return d


def test_a_warm_kernel_sees_what_a_fresh_sandboxed_kernel_sees(session, tmp_path):
    """PID, uid and groups, capabilities (every set), no_new_privs, seccomp, the mount list,
    rlimits, umask, the environment, sys.path and argv, signal handlers, the cgroup, torch's
    threads; every namespace but time differs from the host's, in both."""
    seen = {}
    sb = session(warm_kernels=True)
    for mode in ("fresh", "warm"):  # one session: the same socket folder, records and environment
        sandbox.write_kernelspec(sb.jupyter_dir, sb.mem_mb, warm.PROVISIONER if mode == "warm" else None)
        with kernel(sb, _folder(tmp_path, "student")) as (run, km):
            seen[mode] = _json(run(PROBE))
            assert (getattr(km.provisioner, "warm", None) is not None) == (mode == "warm"), mode
        shutil.rmtree(tmp_path / "student")
    fresh, hot = seen["fresh"], seen["warm"]
    host = {n: os.readlink(f"/proc/self/ns/{n}") for n in os.listdir("/proc/self/ns")}
    for k in ("pid", "uid", "gid", "groups", "status", "mounts", "root", "cwd", "files", "rlimits", "umask",
              "env", "path", "argv", "cgroup", "hostname", "signals", "threads_torch"):
        assert hot[k] == fresh[k], (k, fresh[k], hot[k])
    assert fresh["pid"] == 2 and fresh["uid"] == [65534, 65534] and fresh["status"]["CapEff"] == "0" * 16
    assert fresh["status"]["CapBnd"] == "0" * 16 and fresh["status"]["NoNewPrivs"] == "1"
    assert fresh["files"] == ["handed_in.txt"] and fresh["threads_torch"] == 1
    for mode, ns in (("fresh", fresh["ns"]), ("warm", hot["ns"])):
        differs = {n for n in ns if ns[n] != host.get(n)}
        assert differs == {"mnt", "net", "ipc", "uts", "pid", "pid_for_children", "user", "cgroup"}, (mode, ns)
    assert hot["ns"] != fresh["ns"]  # each kernel its own sandbox


def test_a_warm_kernel_keeps_no_trace_of_the_kernel_before_it(session, tmp_path):
    """The kernel before wrote files, imported a module, patched torch, numpy and normref, set a
    variable and an environment variable, and drew from every RNG; the next kernel of the same
    zygote sees none of it, its RNGs are seeded anew, and neither it nor the zygote holds the
    earlier student's folder name anywhere in its memory."""
    sb = session(warm_kernels=True)
    mark = "st-" + os.urandom(6).hex()
    with kernel(sb, _folder(tmp_path, mark)) as (run, km):
        first = _json(run(DIRTY.format(mark=mark)))
        assert km.provisioner.warm is not None
        assert _memory_has(km.provisioner.warm.kernel_pid, mark.encode())  # the scan finds what is there
    assert first["wave_before"] is False  # `wave` is not preloaded: its import is the earlier kernel's
    zygote = warm._WORKER["zygote"].proc.pid
    with kernel(sb, _folder(tmp_path, "st-second")) as (run, km):
        after = _json(run(CHECK))
        pid = km.provisioner.warm.kernel_pid
        assert not _memory_has(pid, mark.encode()) and not _memory_has(zygote, mark.encode())
    assert after["wave"] is False and after["var"] is False and after["env"] is None
    assert after["files"] == [False, False, False]
    assert after["torch_add"] == [2.0] and after["tensor_add"] == [2.0] and after["np_mean"] == 2.0
    assert after["rms"] == [[1.0, 1.0]]  # 3 / sqrt(mean(9, 9)) = 1
    # every RNG seeded anew, as in a fresh interpreter (torch's too): no draw is the earlier kernel's
    assert all(after["first"][k] != first["first"][k] for k in ("torch", "np", "py", "seed")), (first, after)
    assert after["hash"] == first["hash"]  # shared by one zygote's kernels (docs/SECURITY.md, warm kernels)


def test_without_its_zygote_or_when_it_refuses_a_notebook_starts_fresh_and_says_why(session, tmp_path, monkeypatch):
    """A zygote killed between two kernels, and an environment the zygote was not started with:
    each next kernel is a fresh one that works, and the counts say why, once per reason."""
    sb = session(warm_kernels=True)
    with kernel(sb, _folder(tmp_path, "a")) as (run, km):
        assert run("print(6 * 7)") == "42\n" and km.provisioner.warm is not None
    monkeypatch.setenv("OMP_NUM_THREADS", "2")  # imported torch reads it: the zygote cannot serve this
    with kernel(sb, _folder(tmp_path, "b")) as (run, km):
        assert run("import os; print(os.environ['OMP_NUM_THREADS'])") == "2\n" and km.provisioner.warm is None
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    os.kill(warm._WORKER["zygote"].proc.pid, signal.SIGKILL)
    warm._WORKER["zygote"].proc.wait(timeout=10)
    for name in ("c", "d"):
        with kernel(sb, _folder(tmp_path, name)) as (run, km):
            assert run("print(6 * 7)") == "42\n" and km.provisioner.warm is None
    counts = warm.kernel_counts(sb.records)
    assert counts["warm"] == 1 and counts["fresh"] == 3, counts
    assert len(counts["why"]) == 2, counts
    assert "OMP_NUM_THREADS" in counts["why"][0] and counts["why"][1] == "the zygote died (signal 9)", counts
    line = warm.describe(counts)
    assert line.startswith("autograde: 3 of 4 notebooks started a fresh kernel") and "signal 9" in line


def _answer_bank_class(course: Path, dest: Path) -> dict:
    """One student per (assignment, variant) of the answer bank, for the assignments the course has:
    ``{(assignment, student): expected points}``."""
    want = {}
    for a, variants in sorted(ANSWERS.items()):
        if not (course / "release" / a).is_dir():
            continue
        for variant, answers in variants.items():
            sid = f"{a}-{variant}".replace("_", "-")
            out = dest / sid / a
            out.mkdir(parents=True)
            for nb_path in sorted((course / "release" / a).glob("*.ipynb")):
                nbformat.write(fill_answers(nb_path, answers), out / nb_path.name)
            want[(a, sid)] = EXPECTED[a][variant]
    return want


@pytest.mark.slow
def test_the_answer_bank_scores_the_same_with_fresh_and_warm_kernels(course_copy, tmp_path, monkeypatch):
    """Every variant (right, partial, blank and each kind of mistake) of a torch assignment, a numpy
    one and the short answers, graded by the real pipeline with fresh kernels: every score the
    answer bank's hand-derived points. The same variants graded with warm kernels get the same
    points: the session's demo class, graded with warm kernels for every notebook
    (test_assignments::test_the_class_was_graded_with_warm_kernels), holds every variant of every
    assignment, each at exactly the bank's points
    (test_assignments::test_each_variant_gets_exactly_the_expected_points). (Every assignment with
    fresh kernels took 466 s of make test's 15 minutes; a kernel starts the same way for each.)"""
    for sub in ("source", "release"):
        for d in (course_copy / sub).iterdir():
            if d.is_dir() and d.name not in ("rmsnorm", "layernorm", "practice"):
                shutil.rmtree(d)
    want = _answer_bank_class(course_copy, tmp_path / "submitted")
    monkeypatch.setenv(warm.SWITCH, "0")
    log = []
    run = grade_class(course_root=course_copy, submissions=tmp_path / "submitted", jobs=2, fresh=True,
                      yes=True, log=log.append)
    assert not run.autograde.failed, run.autograde.failed
    assert {pr: run.scores.get(pr) for pr in want} == want
    assert any("warm kernels are off" in line for line in log), log


@pytest.mark.slow
def test_a_zygote_killed_mid_run_changes_no_grade(course_copy, tmp_path):
    """A Dask worker's zygote is killed while the run grades (a kernel it forked is then
    running): that kernel finishes, the worker's later notebooks start fresh kernels, the run
    says so once, and every score is the answer bank's."""
    for sub in ("source", "release"):  # two assignments: 27 notebooks
        for d in (course_copy / sub).iterdir():
            if d.is_dir() and d.name not in ("rmsnorm", "layernorm"):
                shutil.rmtree(d)
    want = _answer_bank_class(course_copy, tmp_path / "submitted")
    killed, stop = [], threading.Event()

    def kill_one_zygote():  # once the run has graded a few notebooks
        while not stop.is_set() and not killed:
            done = list((course_copy / "autograded").glob("*/*/*.ipynb"))
            zygotes = [p for p in Path("/proc").iterdir() if p.name.isdigit() and _is_zygote_of_this_run(p)]
            busy = [z for z in zygotes if _children(int(z.name))]  # a kernel it forked is running
            if len(done) >= 3 and busy:
                os.kill(int(busy[0].name), signal.SIGKILL)
                killed.append(int(busy[0].name))
            time.sleep(0.05)

    watcher = threading.Thread(target=kill_one_zygote, daemon=True)
    watcher.start()
    log = []
    try:
        run = grade_class(course_root=course_copy, submissions=tmp_path / "submitted", jobs=2, engine="dask",
                          log=log.append)
    finally:
        stop.set()
        watcher.join(timeout=10)
    assert killed, "no zygote was found to kill while a kernel it forked ran"
    assert {pr: run.scores.get(pr) for pr in want} == want
    assert not run.autograde.failed, run.autograde.failed
    fell_back = [line for line in log if "started a fresh kernel instead of a warm one" in line]
    assert len(fell_back) == 1 and "the zygote died (signal 9)" in fell_back[0], log


def _is_zygote_of_this_run(proc: Path) -> bool:
    """A zygote (``python .../grader/kernel/zygote.py FD PID``) whose worker is a process of this test."""
    try:
        cmd = (proc / "cmdline").read_bytes().split(b"\0")
        if len(cmd) < 2 or not cmd[1].endswith(b"/grader/kernel/zygote.py"):
            return False
        worker = int(cmd[3])
        if _ppid(int(proc.name)) != worker:  # its forked children (one per kernel) have its command line
            return False
        ancestors, pid = set(), worker
        while pid > 1 and pid not in ancestors:
            ancestors.add(pid)
            pid = _ppid(pid)
        return os.getpid() in ancestors
    except (OSError, ValueError, IndexError, StopIteration):
        return False


def _children(pid: int) -> list[int]:
    with contextlib.suppress(OSError):
        return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    return []


def _ppid(pid: int) -> int:
    return int(next(line.split()[1] for line in Path(f"/proc/{pid}/status").read_text().splitlines()
                    if line.startswith("PPid:")))
