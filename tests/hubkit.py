"""The real parts of tests/test_hub.py: unix users, the shared student environment, a git server
for the lessons, JupyterHub with configurable-http-proxy. Each is started here and ended (users
removed, processes stopped by their id, folders deleted) when its ``with`` block ends, also on a
failure.

What is missing is installed, as conftest.py does with apt: configurable-http-proxy with ``npm
install -g`` (npm from Debian's package). The shared environment is docs/HUB.md's ``make hub-env``
into :data:`HUB_ENV` (kept for the next run: ``make hub-env`` there only brings it up to date).
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import pwd
import secrets
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import ensure_debian_package
from services import free_port

REPO = Path(__file__).resolve().parents[1]


def _reachable(path: Path) -> bool:
    """True when every folder above ``path`` lets other users in (``o+x``)."""
    return all(os.stat(p).st_mode & 0o001 for p in Path(os.path.realpath(path)).parents)


#: The shared student environment the test builds with ``make hub-env`` (kept between runs):
#: build/hub-env, or, for a checkout under a private folder (a clone in ``mktemp -d``, mode 700,
#: which the students' servers could not enter and ``make hub-env`` rightly refuses), a folder
#: of /var/tmp named after the checkout.
HUB_ENV = (REPO / "build" / "hub-env" if _reachable(REPO) else
           Path("/var/tmp") / f"normref-hub-env-{hashlib.sha256(str(REPO).encode()).hexdigest()[:12]}")
CHP_VERSION = "5.3.0"
#: Seconds the hub (and a user's server) may take to answer.
START_S = 180


def run(cmd: list[str], *, timeout: float = 600, check: bool = True, **kw) -> subprocess.CompletedProcess:
    """``subprocess.run`` with text output captured; a non-zero exit fails with its output."""
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, **kw)
    if check and out.returncode != 0:
        pytest.fail(f"`{' '.join(map(str, cmd))}` exited {out.returncode}:\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}",
                    pytrace=False)
    return out


def as_user(user: str, cmd: list[str], cwd: Path, *, timeout: float = 600, check: bool = True,
            env: dict | None = None) -> subprocess.CompletedProcess:
    """``cmd`` run as unix user ``user`` (``runuser``, a login-less shell), in ``cwd``."""
    home = pwd.getpwnam(user).pw_dir
    base = {"HOME": home, "USER": user, "LOGNAME": user, "PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8"}
    envs = [f"{k}={v}" for k, v in {**base, **(env or {})}.items()]
    return run(["runuser", "-u", user, "--", "env", "-i", "-C", str(cwd), *envs, *map(str, cmd)],
               timeout=timeout, check=check)


def ensure_chp() -> Path:
    """configurable-http-proxy (the hub's proxy), ``npm install -g``-ed when missing."""
    found = shutil.which("configurable-http-proxy")
    if found:
        return Path(found)
    if os.geteuid() != 0:
        pytest.skip("the hub test needs configurable-http-proxy, and root to install it (npm install -g)")
    npm = ensure_debian_package("npm", "/usr/bin/npm")
    run([str(npm), "install", "-g", f"configurable-http-proxy@{CHP_VERSION}"], timeout=900)
    found = shutil.which("configurable-http-proxy")
    if not found:
        pytest.fail("npm installed configurable-http-proxy, but it is not on PATH", pytrace=False)
    return Path(found)


@contextlib.contextmanager
def unix_users(names: list[str]):
    """New unix users (``useradd -m``, homes mode 700, a random password each by ``chpasswd``); yields
    ``{name: password}``; afterwards every process they still run is killed (by pid) and
    ``userdel -r`` removes them and their homes."""
    made: list[str] = []
    passwords = {n: secrets.token_urlsafe(12) for n in names}
    try:
        for name in names:
            with contextlib.suppress(KeyError):  # left by a run that was killed: start clean
                pwd.getpwnam(name)
                _remove_user(name)
            run(["useradd", "-m", "-K", "HOME_MODE=0700", "-s", "/bin/bash", name])
            made.append(name)
        run(["chpasswd"], input="".join(f"{n}:{p}\n" for n, p in passwords.items()))
        yield passwords
    finally:
        for name in made:
            _remove_user(name)


def _remove_user(name: str) -> None:
    uid = pwd.getpwnam(name).pw_uid
    for _ in range(3):
        pids = [int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit() and _owner(p) == uid]
        if not pids:
            break
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.5)
    subprocess.run(["userdel", "-r", "-f", name], capture_output=True, timeout=60)


def _owner(proc: Path) -> int | None:
    try:
        return proc.stat().st_uid
    except OSError:
        return None


@contextlib.contextmanager
def scratch(prefix: str):
    """A temporary folder every user can enter (pytest's tmp_path is private to root), deleted after."""
    path = Path(tempfile.mkdtemp(prefix=prefix))
    path.chmod(0o755)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@contextlib.contextmanager
def git_server(base: Path, log: Path):
    """``git daemon`` on 127.0.0.1 serving the bare repositories under ``base`` (push included:
    the instructor publishes the lessons to it); yields its ``git://`` URL prefix."""
    port = free_port()
    with open(log, "w") as out:
        proc = subprocess.Popen(["git", "daemon", "--export-all", "--enable=receive-pack", "--reuseaddr",
                                 f"--base-path={base}",
                                 "--listen=127.0.0.1", f"--port={port}", str(base)],
                                stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        _wait_port(port, proc, "git daemon", log)
        yield f"git://127.0.0.1:{port}"
    finally:
        stop(proc)


@dataclass
class Hub:
    """A running JupyterHub: its URL and process."""

    url: str
    proc: subprocess.Popen
    log: Path

    def log_tail(self) -> str:
        return self.log.read_text(errors="replace")[-4000:]


def wait_for_hub(proc: subprocess.Popen, url: str, log: Path, cafile: Path | None = None) -> Hub:
    """The hub ``proc`` (started from docs/HUB.md's line, tests/docrun.py) once its API answers at
    ``url`` (over TLS verified against ``cafile``)."""
    import ssl

    context = ssl.create_default_context(cafile=str(cafile)) if cafile else None
    hub = Hub(url, proc, log)
    deadline = time.monotonic() + START_S
    while True:
        if proc.poll() is not None:
            pytest.fail(f"jupyterhub exited with {proc.returncode}:\n{hub.log_tail()}", pytrace=False)
        try:
            with urllib.request.urlopen(f"{url}/hub/api/", timeout=10, context=context) as r:
                if "version" in json.loads(r.read()):
                    return hub
        except (urllib.error.URLError, ConnectionError, OSError):
            pass
        if time.monotonic() > deadline:
            pytest.fail(f"jupyterhub did not answer within {START_S} s:\n{hub.log_tail()}", pytrace=False)
        time.sleep(0.5)


def _wait_port(port: int, proc: subprocess.Popen, what: str, log: Path) -> None:
    import socket

    deadline = time.monotonic() + 60
    while True:
        if proc.poll() is not None:
            pytest.fail(f"{what} exited with {proc.returncode}:\n{log.read_text()[-2000:]}", pytrace=False)
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        if time.monotonic() > deadline:
            pytest.fail(f"{what} did not listen on {port} within 60 s", pytrace=False)
        time.sleep(0.2)


def stop(proc: subprocess.Popen, grace_s: float = 15) -> None:
    """SIGTERM to the process group started with ``proc`` (its own session), SIGKILL if needed."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            pass
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=10)
