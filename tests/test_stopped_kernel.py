"""Nothing missing (issue 30, item 4 / Why 7): a kernel that stops answering is killed at its limit,
named, and its submission graded in the same run.

A real grading kernel SIGSTOPs itself (``kill -STOP`` of its own pid, from a shell, as any student
code can). Before, nbclient's time limit sent an interrupt that a stopped kernel never answers,
nbgrader gave up on the notebook, and a cell the dead-kernel regrade could not stub (one the student
added) left the submission without a grade row in that run. Now (``GradingExecute`` in
``nbgrader_config.py``) the kernel is killed once it has not answered the interrupt within
``iopub_timeout``, the cell is charged with an error that says so, and the notebook is run again
without that cell, as the time limit's rule has it: that cell's work is missing below it, the rest
keeps its points. One sandboxed ``grade_class`` run of three students, with a short cell time
limit (6 s) and grace (5 s) so the test's wall time stays small.
"""
import copy
import os
import shutil
import sys
import time
from pathlib import Path

import nbformat
import pytest

from grader import grade_class
from grader.demo.answer_bank import ANSWERS
from grader.kernel.sandbox import PIDS_CGROUP_ROOT
from grader.kernel.sandbox import available as sandbox_available

REPO = Path(__file__).resolve().parents[1]
CORRECT = ANSWERS["rmsnorm"]["correct"]["rms_norm_impl"]
# the kernel stops itself: SIGSTOP cannot be caught, blocked or answered
STOP = "import os, subprocess\nsubprocess.run(f'kill -STOP {os.getpid()}', shell=True)\n"
FULL = {"rms_norm_shape": 1.0, "rms_norm_battery": 4.0}
ZERO = {"rms_norm_shape": 0.0, "rms_norm_battery": 0.0}
SAID = "the grading kernel stopped answering while this cell ran"


def _stopped_kernels_since(t0: float) -> list[str]:
    """Command lines of stopped (state T) grading-kernel processes started after ``t0``."""
    ticks, boot = os.sysconf("SC_CLK_TCK"), time.time() - float(Path("/proc/uptime").read_text().split()[0])
    out = []
    for proc in Path("/proc").iterdir():
        try:
            stat = (proc / "stat").read_text()
            cmd = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if fields[0] == "T" and boot + int(fields[19]) / ticks >= t0 and ("kernel" in cmd or "ipykernel" in cmd):
            out.append(cmd)
    return out


@pytest.mark.slow
def test_a_kernel_that_sigstops_itself_is_killed_named_and_graded_in_the_same_run(bubblewrap, tmp_path):
    if not sandbox_available():
        pytest.fail(f"{bubblewrap} is installed but cannot create namespaces on this machine")
    root = tmp_path / "course"
    root.mkdir()
    # the course's configuration, with a 5 s grace to answer the time limit's interrupt (10 s in it)
    (root / "nbgrader_config.py").write_text((REPO / "nbgrader_config.py").read_text()
                                             + "\nc.Execute.iopub_timeout = 5\n")
    for sub in ("source", "release"):
        shutil.copytree(REPO / sub / "rmsnorm", root / sub / "rmsnorm")
    release = nbformat.read(root / "release" / "rmsnorm" / "rmsnorm.ipynb", 4)

    def submit(sid: str, answer: str, added: str | None = None) -> None:
        nb = copy.deepcopy(release)
        (at,) = [i for i, c in enumerate(nb.cells) if c.metadata.get("nbgrader", {}).get("grade_id") == "rms_norm_impl"]
        nb.cells[at].source = answer
        if added is not None:  # a cell the student added below the answer (no grade_id: nothing to stub)
            nb.cells.insert(at + 1, nbformat.v4.new_code_cell(added))
        (tmp_path / "submitted" / sid / "rmsnorm").mkdir(parents=True)
        nbformat.write(nb, tmp_path / "submitted" / sid / "rmsnorm" / "rmsnorm.ipynb")

    submit("stops_in_answer", STOP + CORRECT)  # the answer cell stops before it defines rms_norm
    submit("stops_in_added_cell", CORRECT, STOP)  # a correct answer, then a cell that stops the kernel
    submit("honest", CORRECT)
    lines: list[str] = []
    t0 = time.time()
    run = grade_class(course_root=root, submissions=tmp_path / "submitted", jobs=2, cell_timeout=6,
                      use_sandbox=True, log=lines.append)
    assert run.sandboxed
    # every submission has its grade row from this run: the stopped cell costs what it defines
    students = ("honest", "stops_in_added_cell", "stops_in_answer")
    assert sorted(run.autograde.graded) == [("rmsnorm", s) for s in students]
    assert not run.autograde.failed and not run.report.ungraded, (run.autograde.failed, run.report.ungraded)
    assert run.scores[("rmsnorm", "stops_in_answer")] == ZERO
    assert run.scores[("rmsnorm", "stops_in_added_cell")] == FULL
    assert run.scores[("rmsnorm", "honest")] == FULL
    # named, where it happened, in the run's log and the class report
    assert any(line.startswith(f"autograde: stops_in_answer (rmsnorm): cell 'rms_norm_impl': {SAID}")
               for line in lines), lines
    assert any(line.startswith(f"autograde: stops_in_added_cell (rmsnorm): a cell the student added: {SAID}")
               for line in lines), lines
    flags = run.report.flags
    assert [f for f in flags["stops_in_answer"] if SAID in f] == [
        f"rmsnorm: cell 'rms_norm_impl': {SAID}: it did not answer the interrupt sent at the time limit per cell "
        "(6 s, nbgrader's Execute.timeout) within 5 s (a kernel stopped, e.g. with SIGSTOP, or hung where "
        "interrupts do not reach). It was killed, and the notebook was run again in a new kernel without this "
        "cell: what it defines is missing for the cells below it, which may score 0"], flags["stops_in_answer"]
    assert "honest" not in flags, flags
    # the autograded notebook shows it in the cell that stopped, in place of the student's run
    nb = nbformat.read(root / "autograded" / "stops_in_answer" / "rmsnorm" / "rmsnorm.ipynb", 4)
    (cell,) = [c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == "rms_norm_impl"]
    assert [o.get("ename") for o in cell.outputs] == ["KernelStoppedAnswering"] and cell.source.startswith(STOP)
    # killed: no stopped kernel is left, nor any of this run's sandbox cgroups
    assert _stopped_kernels_since(t0) == []
    assert sorted(PIDS_CGROUP_ROOT.glob(f"normref-{os.getpid()}-*")) == []
    print(f"\ngraded 3 notebooks, two of them stopping their kernel, in {run.seconds:.0f} s ({sys.platform})")
