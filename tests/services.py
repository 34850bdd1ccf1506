"""Real services for the tests: a PostgreSQL server and a Dask cluster, started and stopped here.

CI's machine runs no service, so the tests start their own, the way an instructor's machines
would: Debian's PostgreSQL 15 (``initdb`` into a temporary folder as the ``postgres`` user,
``pg_ctl start`` on a private port and Unix socket; the package is installed with apt-get when
missing, as bubblewrap and chromium are), and a ``dask scheduler`` with ``dask worker ADDRESS``
processes started through their own command lines. Every process started here is bounded
(start-up timeouts) and ended when its ``with`` block or fixture ends.
"""
from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PG_BIN = Path("/usr/lib/postgresql/15/bin")
#: Seconds a service may take to come up before the test fails.
START_TIMEOUT_S = 60


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Postgres:
    """A running PostgreSQL server (superuser ``postgres``, trust authentication on 127.0.0.1)."""

    port: int
    socket_dir: Path
    data_dir: Path
    log: Path

    def url(self, dbname: str = "postgres") -> str:
        """The SQLAlchemy URL of database ``dbname`` on this server."""
        return f"postgresql://postgres@127.0.0.1:{self.port}/{dbname}"

    def create_database(self, dbname: str) -> str:
        """``CREATE DATABASE dbname``; returns its URL."""
        import psycopg

        with psycopg.connect(host="127.0.0.1", port=self.port, user="postgres", dbname="postgres",
                             autocommit=True, connect_timeout=10) as conn:
            conn.execute(f'CREATE DATABASE "{dbname}"')
        return self.url(dbname)


def _as_postgres(*cmd: str, timeout: float = START_TIMEOUT_S) -> subprocess.CompletedProcess:
    # initdb and the server refuse to run as root
    prefix = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
    return subprocess.run([*prefix, *cmd], capture_output=True, text=True, timeout=timeout)


@contextlib.contextmanager
def postgres_server():
    """Start a private PostgreSQL 15 server for the ``with`` block; stop it and remove its files after.

    Yields:
        :class:`Postgres`.

    Raises:
        RuntimeError: ``initdb`` or ``pg_ctl start`` failed (their output is quoted).
    """
    top = Path(tempfile.mkdtemp(prefix="pg-test-"))
    top.chmod(0o755)  # the postgres user must reach its folders inside
    data, sock, log = top / "data", top / "socket", top / "server.log"
    for d in (data, sock):
        d.mkdir()
    if os.geteuid() == 0:
        shutil.chown(top, "postgres", "postgres")
        for d in (data, sock):
            shutil.chown(d, "postgres", "postgres")
    port = free_port()
    started = False
    try:
        out = _as_postgres(str(PG_BIN / "initdb"), "-D", str(data), "-U", "postgres", "--auth=trust",
                           "--encoding=UTF8", "--no-sync")
        if out.returncode != 0:
            raise RuntimeError(f"initdb failed:\n{out.stdout[-2000:]}{out.stderr[-2000:]}")
        opts = f"-p {port} -k {sock} -c listen_addresses=127.0.0.1 -c fsync=off"
        out = _as_postgres(str(PG_BIN / "pg_ctl"), "-D", str(data), "-l", str(log), "-o", opts,
                           "-w", "-t", str(START_TIMEOUT_S), "start", timeout=START_TIMEOUT_S + 10)
        started = True
        if out.returncode != 0:
            text = log.read_text(errors="replace") if log.exists() else ""
            raise RuntimeError(f"pg_ctl start failed:\n{out.stdout[-2000:]}{out.stderr[-2000:]}{text[-2000:]}")
        yield Postgres(port=port, socket_dir=sock, data_dir=data, log=log)
    finally:
        if started:
            _as_postgres(str(PG_BIN / "pg_ctl"), "-D", str(data), "-m", "immediate", "-w", "stop")
        shutil.rmtree(top, ignore_errors=True)


@dataclass
class DaskCluster:
    """A ``dask scheduler`` and its ``dask worker`` processes (each started as its own command)."""

    address: str
    scheduler: subprocess.Popen
    workers: list[subprocess.Popen] = field(default_factory=list)
    logs: Path | None = None

    def kill_worker(self, i: int) -> None:
        """SIGKILL worker ``i`` with its nanny and everything under it (a lost machine)."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.workers[i].pid, signal.SIGKILL)
        self.workers[i].wait(timeout=30)

    def n_workers(self) -> int:
        from distributed import Client

        with Client(self.address, timeout=10) as c:
            return len(c.scheduler_info(n_workers=-1)["workers"])


def worker_env() -> dict[str, str]:
    """The environment ``dask worker`` runs with: this project importable (and tests/, so that a
    test can send a task function of its own), this venv first on PATH."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), str(REPO / "tests"), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env["PATH"] = os.pathsep.join([os.path.dirname(sys.executable), env.get("PATH", "")])
    return env


def start_worker(address: str, name: str, logdir: Path, env: dict[str, str]) -> subprocess.Popen:
    """``dask worker ADDRESS`` (one process, one thread), in its own process group."""
    dask = str(Path(sys.executable).with_name("dask"))
    fh = (logdir / f"{name}.log").open("w")
    return subprocess.Popen([dask, "worker", address, "--name", name, "--nworkers", "1", "--nthreads", "1",
                             "--no-dashboard", "--death-timeout", "60",
                             "--local-directory", str(logdir / name)],
                            stdout=fh, stderr=subprocess.STDOUT, env=env, cwd=REPO, start_new_session=True)


@contextlib.contextmanager
def dask_cluster(n_workers: int = 2, allowed_failures: int = 1):
    """Start ``dask scheduler`` and ``n_workers`` ``dask worker ADDRESS`` processes on 127.0.0.1.

    Args:
        allowed_failures: the scheduler's ``distributed.scheduler.allowed-failures`` (how many
            workers may die running one task before it is given up), set through its
            environment as an operator would.

    Yields:
        :class:`DaskCluster` once every worker has joined.

    Raises:
        RuntimeError: the cluster did not come up within :data:`START_TIMEOUT_S` (logs quoted).
    """
    from distributed import Client

    logdir = Path(tempfile.mkdtemp(prefix="dask-test-"))
    port = free_port()
    address = f"tcp://127.0.0.1:{port}"
    env = worker_env()
    env["DASK_DISTRIBUTED__SCHEDULER__ALLOWED_FAILURES"] = str(allowed_failures)
    # a worker holds only the task it runs, so a worker's death counts against that task alone
    env["DASK_DISTRIBUTED__SCHEDULER__WORKER_SATURATION"] = "1.0"
    dask = str(Path(sys.executable).with_name("dask"))
    sched = subprocess.Popen([dask, "scheduler", "--host", "127.0.0.1", "--port", str(port), "--no-dashboard",
                              "--idle-timeout", "3600"],
                             stdout=(logdir / "scheduler.log").open("w"), stderr=subprocess.STDOUT, env=env,
                             cwd=REPO, start_new_session=True)
    cluster = DaskCluster(address=address, scheduler=sched, logs=logdir)
    try:
        cluster.workers = [start_worker(address, f"w{i}", logdir, env) for i in range(n_workers)]
        deadline = time.monotonic() + START_TIMEOUT_S
        try:
            with Client(address, timeout=START_TIMEOUT_S) as client:
                client.wait_for_workers(n_workers, timeout=max(1.0, deadline - time.monotonic()))
        except (OSError, TimeoutError) as e:
            logs = "".join(f"--- {p.name}\n{p.read_text(errors='replace')[-1500:]}" for p in logdir.glob("*.log"))
            raise RuntimeError(f"the test Dask cluster did not come up ({e}):\n{logs}") from e
        yield cluster
    finally:
        for p in [*cluster.workers, sched]:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGTERM)
        for p in [*cluster.workers, sched]:
            try:
                p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(p.pid, signal.SIGKILL)
                p.wait(timeout=15)
        shutil.rmtree(logdir, ignore_errors=True)
