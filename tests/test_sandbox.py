"""The grading sandbox's housekeeping (grader/kernel/sandbox.py): what killed runs leave behind is swept
at the start of the next run, and nothing in use is touched."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from grader.kernel.sandbox import PIDS_CGROUP_ROOT, sweep_stale


def _dead_pid() -> int:
    """The pid of a process that has exited (and been reaped)."""
    p = subprocess.Popen(["true"])
    p.wait()
    return p.pid


def _mounts() -> set[str]:
    return {line.split()[1] for line in Path("/proc/self/mounts").read_text().splitlines()}


def test_stale_cgroups_and_socket_folders_of_killed_runs_are_swept_and_live_ones_kept(tmp_path):
    root = Path(os.environ.get("NORMREF_PIDS_CGROUP_ROOT", PIDS_CGROUP_ROOT))
    if not (root / "cgroup.procs").exists() or not os.access(root, os.W_OK):
        pytest.skip(f"no writable cgroup v1 pids hierarchy at {root} (needs root)")
    dead = _dead_pid()
    stale = root / f"normref-{dead}-5ca1e0"  # a run killed with kill -9: its kernel's cgroup inside
    live = root / f"normref-{os.getpid()}-11fe00"  # a run still going (this process)
    busy = root / f"normref-{dead}-b0570"  # its run is gone, but a sandbox outlived it: killed
    ipc_stale = tmp_path / f"nr-ipc-{dead}-abc"
    ipc_live = tmp_path / f"nr-ipc-{os.getpid()}-def"
    ipc_legacy_used = tmp_path / "nr-ipc-u5ed0"  # no pid in the name (older runs): named by a live process
    ipc_legacy_stale = tmp_path / "nr-ipc-01d0"
    made, sleeper, user = [], None, None
    try:
        for cg in (stale, stale / "kernel-a", live, busy, busy / "kernel-b"):
            cg.mkdir()
            made.append(cg)
        sleeper = subprocess.Popen(["sleep", "120"])
        (busy / "kernel-b" / "cgroup.procs").write_text(str(sleeper.pid))
        for d in (ipc_stale, ipc_live, ipc_legacy_used, ipc_legacy_stale):
            d.mkdir()
        mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(ipc_stale)],
                                 capture_output=True).returncode == 0
        (ipc_stale / "k-1").write_text("a socket left behind")
        user = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)",
                                 f"--KernelManager.ip={ipc_legacy_used}/k"])

        swept = sweep_stale(tmp=tmp_path)

        assert not stale.exists() and live.is_dir() and not busy.exists()
        assert sleeper.wait(timeout=10) == -9  # the sandbox left by the dead run was SIGKILLed
        assert not ipc_stale.exists() and not ipc_legacy_stale.exists()
        assert ipc_live.is_dir() and ipc_legacy_used.is_dir()
        if mounted:
            assert str(ipc_stale) not in _mounts()
        # the cgroups are gone (above), but who swept them is not this test's to say: a grading run
        # of the other pytest worker sweeps the cgroups of dead runs too, at the same time
        assert swept["ipc"] == 2, swept
        assert swept["in_use"] >= 1, swept  # the socket folder a live process names
    finally:
        for p in (sleeper, user):
            if p is not None:
                p.kill()
                p.wait()
        for cg in reversed(made):
            if cg.exists():
                try:
                    cg.rmdir()
                except OSError:
                    pass
        if str(ipc_stale) in _mounts():
            subprocess.run(["umount", "-l", str(ipc_stale)], capture_output=True)


@pytest.mark.slow
def test_kernels_are_killed_at_once_after_their_last_cell(course_copy, tmp_path):
    """nbgrader_config.py sets ``Execute.shutdown_kernel = "immediate"``: after the last cell,
    nbgrader's Execute (nbclient) kills the kernel instead of asking it to shut down and waiting
    for it (its graceful exit was 27-33% of a graded notebook). Seen from outside: what the
    notebook left to run at exit never runs; shut down gracefully, the same notebook's does."""
    import nbformat
    from nbgrader.preprocessors import Execute
    from traitlets.config import Config

    from grader.ledger.apps import Course

    config = Course(course_copy).config
    assert config.Execute.shutdown_kernel == "immediate"
    ran = {}
    for mode in ("immediate", "graceful"):
        marker = tmp_path / f"at-exit-{mode}"
        nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(
            f"import atexit\natexit.register(lambda: open({str(marker)!r}, 'w').write('ran'))\nprint('ok')")])
        cfg = Config(config)
        cfg.Execute.shutdown_kernel = mode
        nb, _ = Execute(config=cfg).preprocess(nb, {"metadata": {"path": str(tmp_path)}})
        assert nb.cells[0].outputs[0]["text"] == "ok\n"  # the cell ran, its output is in
        ran[mode] = marker.exists()
    assert ran == {"immediate": False, "graceful": True}
