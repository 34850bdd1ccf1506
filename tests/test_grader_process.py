"""`python -m grader` as a process (issue 13): where the process itself is under test, a real
subprocess with real, sandboxed kernels. The demo is graded in a folder of its own and never
touches a real course; a run killed by a signal leaves nothing behind, and a second run in the
course is refused while one holds it; a rerun finishes the batch; a full disk ends a run with one
line and no half copy; a reader that closes the pipe does not stop the run.

(The tests of what a run records are in test_course_state.py, with kernel outputs replayed.)
"""
import csv
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest

from grader.demo import fill_answers
from test_course_state import grader, only_assignments, real_class, snapshot, submitted_tree


@pytest.mark.slow
def test_the_demo_is_graded_in_its_own_folder_and_never_touches_a_real_course(course_copy):
    before = real_class(course_copy)
    out = grader("--demo-students", 2, "--jobs", 2, course=course_copy)
    assert out.returncode == 0, out.stdout + out.stderr
    demo = course_copy / "build" / "demo-course"
    assert f"graded in its own course folder {demo}" in out.stdout
    assert snapshot(course_copy) == before  # not one byte of the real course changed
    with (demo / "grades.csv").open() as f:
        assert sorted({r["student_id"] for r in csv.DictReader(f)}) == ["ada", "bruno"]
    # the API refuses the demo in a real course, before writing anything
    from grader import grade_class
    from grader.ledger.state import CourseStateError

    with pytest.raises(CourseStateError, match="holds a real class"):
        grade_class(course_root=course_copy, log=lambda *_: None)
    assert snapshot(course_copy) == before


def _descendants(pid: int) -> dict[int, str]:
    """``{pid: start time}`` of every live process below ``pid`` (from /proc)."""
    children: dict[int, list[int]] = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                fields = (d / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            children.setdefault(int(fields[1]), []).append(int(d.name))
    out, todo = {}, [pid]
    while todo:
        for c in children.get(todo.pop(), []):
            out[c] = _start_time(c)
            todo.append(c)
    return {p: t for p, t in out.items() if t}


def _start_time(pid: int) -> str:
    """The process's start time (to tell it from a later one with its PID); "" once it has ended
    (gone, or a zombie: exited, waiting for its parent to read its status)."""
    try:
        fields = (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return ""
    return "" if fields[0] in ("Z", "X") else fields[19]


def _of_course(course: Path) -> dict[int, str]:
    """Live processes, anywhere, whose command line or environment names the course folder
    (a kernel started just as the run was killed is in no snapshot of its descendants)."""
    out = {}
    for d in Path("/proc").iterdir():
        if not d.name.isdigit() or int(d.name) == os.getpid():
            continue
        try:
            text = (d / "cmdline").read_bytes() + (d / "environ").read_bytes()
        except OSError:
            continue
        if str(course).encode() in text and _start_time(int(d.name)):
            out[int(d.name)] = _cmdline(int(d.name))
    return out


def _cwd(pid: int) -> str:
    """The process's working directory ("" once it has gone): a grading sandbox's is the
    student's autograded folder, ``.../autograded/<student>/<assignment>``."""
    try:
        return os.readlink(f"/proc/{pid}/cwd")
    except OSError:
        return ""


def _cmdline(pid: int) -> str:
    try:
        return (Path("/proc") / str(pid) / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


#: How long the processes of a killed run may take to go: generous, so that no load makes a run
#: that cleans up fail (the verdict is whether any is *left*, not how fast they went: a process of
#: the run that survived is kept in dee's hour-long cell, under the killed run's 10-minute timeout).
GONE_S = 180


def test_sigterm_and_sighup_stop_a_run_as_ctrl_c_does():
    """One handler for the three (so the SIGINT run below stands for SIGTERM, what a hub or a
    batch system sends, and SIGHUP, a closed terminal); SIGKILL, which no handler sees, has its own run."""
    code = ("import signal\nfrom grader.__main__ import _stop_on_signals\n_stop_on_signals()\n"
            "h = {signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}\n"
            "print(len(h), callable(h.pop()))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=Path(__file__).resolve().parents[1])
    assert out.stdout.split() == ["1", "True"], out.stderr


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGKILL], ids=lambda s: s.name)
def test_a_killed_run_leaves_nothing_behind_and_a_rerun_finishes_the_batch(course_copy, tmp_path, sig):
    only_assignments(course_copy, {"rmsnorm"})
    tree = submitted_tree(tmp_path / "in", {"ada": "correct", "bo": "unbiased_variance", "cy": "correct",
                                            "dee": "correct"})
    # dee's answer cell sleeps for an hour: the signal comes while dee's kernel runs it (the killed
    # run's cells may take 10 minutes), so a worker, sandbox or kernel of the run that outlived the
    # signal would still be there when the wait below ends; the rerun interrupts it after 30 s
    dee = next((tree / "dee" / "rmsnorm").glob("*.ipynb"))
    nbformat.write(fill_answers(dee, {"rms_norm_impl": "import time\n\ntime.sleep(3600)\n"}), dee)
    cmd = [sys.executable, "-m", "grader", "--submissions", str(tree), "--course-root", str(course_copy),
           "--jobs", "2", "--cell-timeout"]
    first = subprocess.Popen([*cmd, "600"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                             stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 300
        while not any("/autograded/dee/" in _cwd(p) for p in _descendants(first.pid)):  # dee's sandbox
            assert first.poll() is None, first.stdout.read()
            assert time.monotonic() < deadline, "dee's grading kernel did not start in 300 s"
            time.sleep(0.2)
        if sig == signal.SIGINT:  # a second run in the same course is refused, naming the first
            second = subprocess.run([*cmd, "600"], capture_output=True, text=True, timeout=300,
                                    stdin=subprocess.DEVNULL)
            assert second.returncode == 1 and "another grading run is in progress" in second.stderr
            assert f"pid {first.pid} " in second.stderr and "--submissions" in second.stderr, second.stderr
        procs = _descendants(first.pid)  # workers (processes or Dask), bwrap, kernels
        os.kill(first.pid, sig)
        deadline = time.monotonic() + GONE_S  # wait for them to go, then say which are left
        while time.monotonic() < deadline:
            alive = {p: t for p, t in procs.items() if _start_time(p) == t}
            if first.poll() is not None and not alive and not _of_course(course_copy):
                break
            time.sleep(0.5)
        alive = {p: t for p, t in procs.items() if _start_time(p) == t}
        assert not alive, {p: _cmdline(p) for p in alive}
        assert first.poll() is not None, f"python -m grader still running {GONE_S} s after the signal"
        assert _of_course(course_copy) == {}
    finally:
        if first.poll() is None:
            first.kill()
        first.wait()
    if sig != signal.SIGKILL:  # the killed run is in the run log as interrupted, by that signal
        (killed,) = [json.loads(ln) for ln in (course_copy / "logs" / "runs.jsonl").read_text().splitlines()]
        assert (killed["status"], killed["error"]) == ("interrupted", sig.name), killed
    rerun = subprocess.run([*cmd, "30"], capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL)
    assert rerun.returncode == 0, rerun.stdout[-3000:] + rerun.stderr[-3000:]
    out = rerun.stdout + rerun.stderr
    if sig == signal.SIGKILL:
        assert "did not finish; its lock is taken over" in out
    assert "replaces that student's earlier submission" not in out  # the same notebooks again
    with (course_copy / "grades.csv").open() as f:
        scores = {r["student_id"]: float(r["score"]) for r in csv.DictReader(f)}
    assert scores == {"ada": 5.0, "bo": 0.0, "cy": 5.0, "dee": 0.0}  # dee's rms_norm never defined: 0


def test_a_full_disk_ends_the_run_with_one_line_and_no_half_copy(course_copy, tmp_path):
    """The course on a 4 MiB tmpfs (a private mount namespace, `unshare -rm`); a submission with a
    6 MiB data file fills it while the batch is kept as received."""
    if subprocess.run(["unshare", "-rm", "true"], capture_output=True).returncode != 0:
        pytest.skip("this machine cannot make a private mount namespace (unshare -rm)")
    only_assignments(course_copy, {"rmsnorm"})
    tree = submitted_tree(tmp_path / "in", {"ada": "correct"})
    (tree / "ada" / "rmsnorm" / "data.bin").write_bytes(b"\0" * (6 * 2**20))
    mnt = tmp_path / "small"
    mnt.mkdir()
    script = (f"mount -t tmpfs -o size=4m tmpfs {mnt} && cp -r {course_copy} {mnt}/course && "
              f"{sys.executable} -m grader --submissions {tree} --course-root {mnt}/course; echo rc=$?; "
              f"find {mnt}/course/logs {mnt}/course/submitted -type f 2>/dev/null")
    out = subprocess.run(["unshare", "-rm", "sh", "-c", script], capture_output=True, text=True, timeout=600)
    err = [ln for ln in out.stderr.splitlines() if ln.startswith("error:")]
    assert len(err) == 1 and err[0].startswith("error: the disk is full (writing ") and \
        err[0].endswith("free some space and run again"), out.stderr[-2000:]
    assert "Traceback" not in out.stderr and "rc=1" in out.stdout
    left = [ln for ln in out.stdout.splitlines() if ln.startswith("/")]
    # no half-copied batch or submission: only the run log and the record of the generate step
    # that finished before the copy (logs/generated.json, whole JSON) are left
    assert sorted(left) == [f"{mnt}/course/logs/generated.json", f"{mnt}/course/logs/runs.jsonl"], left


@pytest.mark.slow
def test_a_reader_that_stops_reading_does_not_stop_the_run(course_copy, tmp_path):
    """`make grade | head -1`: the reader closes the pipe after one line; the run finishes (it
    used to end "failed" with BrokenPipeError at its next print) and records its grades."""
    only_assignments(course_copy, {"rmsnorm"})
    subs = submitted_tree(tmp_path / "in", {"ada": "correct", "bo": "eps_outside_sqrt"})
    proc = subprocess.Popen([sys.executable, "-m", "grader", "--submissions", str(subs), "--jobs", "1",
                             "--course-root", str(course_copy)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True)
    first = proc.stdout.readline()
    proc.stdout.close()  # as `head -1` exits
    err = proc.stderr.read()
    assert proc.wait(timeout=600) == 0, first + err
    assert first.strip() and "BrokenPipe" not in err and "Traceback" not in err, err
    (run,) = [json.loads(ln) for ln in (course_copy / "logs" / "runs.jsonl").read_text().splitlines()]
    assert run["status"] == "ok", run
    with (course_copy / "grades.csv").open() as f:
        scores = {r["student_id"]: float(r["score"]) for r in csv.DictReader(f)}
    # rms_norm_shape (1) + rms_norm_battery (4): all for ada; bo's eps outside the root fails the
    # battery's eps = 1e-4 case only, 5 of 6 cases: 1 + 3.33
    assert scores == pytest.approx({"ada": 5.0, "bo": 4.33}), scores
