"""The warm-kernel tests, again as a normal user: an instructor need not be root.

The session's grading runs already run as a user the tests make (README's ``make grade`` for the
demo class, tests/graded_class.py; docs/HUB.md's and SCALE.md's, tests/test_hub.py and
tests/test_docs_grade.py). Here tests/test_warm.py's side-by-side comparison of a warm and a fresh
kernel (PID, uid, every capability set, no_new_privs, seccomp, mounts, namespaces, rlimits,
environment, sys.path, signal handlers) and its fallback to fresh kernels run in a pytest of
their own as such a user (``runuser``, a login shell's environment): a non-root zygote's child
must enter the sandbox's namespaces (it could not: ``setns(0x20000)`` was refused, every
notebook started fresh, and the sandboxes' ``sleep infinity`` pairs were left running). The
tests that read another process's memory (/proc/PID/mem) stay root's.
"""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

import docrun
import pytest
from hubkit import unix_users

REPO = Path(__file__).resolve().parents[1]
USER = "nrwarm-" + os.environ.get("PYTEST_XDIST_WORKER", "main")
#: test_warm's tests that need no root (those that scan a process's memory do).
AS_A_USER = "sees_what_a_fresh or without_its_zygote"

pytestmark = pytest.mark.slow


def test_warm_kernels_as_a_normal_user(bubblewrap):
    with unix_users([USER]), docrun.reachable(USER, [REPO / ".venv" / "bin" / "python"]):
        python = REPO / ".venv" / "bin" / "python"
        cmd = f"{python} -m pytest -n 0 -q -p no:cacheprovider tests/test_warm.py -k '{AS_A_USER}'"
        out = subprocess.run(docrun.argv(USER, cmd, REPO), capture_output=True, text=True, timeout=1200)
        assert out.returncode == 0 and "2 passed" in out.stdout, out.stdout[-4000:] + out.stderr[-2000:]
        left = docrun.processes_of(USER)
        assert not left, f"the warm-kernel tests left processes of {USER} running: {left}"
