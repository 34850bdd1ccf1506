"""bubblewrap's command line as the grader writes it, reads it and hides it: what every sandbox
starts with (:func:`head`), the whole environment its command gets (:func:`sandbox_env`, after
``--clearenv``), what a command line gives its command (:func:`bwrap_env`), and how it is started
so that the sandbox's PID 1 shows none of it (:func:`hidden`).

Standard library only, imported by path beside :mod:`grader.kernel.sandbox` (the kernelspec's launcher)
and :mod:`grader.kernel.zygote`.
"""
from __future__ import annotations

import os
import sys

#: What a kernel (or clean room) takes of the environment it is started from; nothing else of the
#: grader's environment reaches a sandbox (its command starts with ``--clearenv``).
PASSED_ENV = ("LANG", "LC_ALL", "LC_CTYPE", "TZ", "PYTHONWARNINGS", "PYTHONHASHSEED", "PYTHONPATH", "LD_LIBRARY_PATH",
              "NBGRADER_EXECUTION", "NORMREF_MAX_OUTPUT_BYTES", "OMP_NUM_THREADS", "MKL_NUM_THREADS",
              "OPENBLAS_NUM_THREADS")

#: bubblewrap 0.8's options and how many arguments each takes (anything else: refused).
_ARITY = {**dict.fromkeys(
    ("--unshare-all", "--share-net", "--unshare-user", "--unshare-user-try", "--unshare-ipc", "--unshare-pid",
     "--unshare-net", "--unshare-uts", "--unshare-cgroup", "--unshare-cgroup-try", "--disable-userns",
     "--assert-userns-disabled", "--clearenv", "--new-session", "--die-with-parent", "--as-pid-1"), 0),
    **dict.fromkeys(
    ("--args", "--userns", "--userns2", "--pidns", "--uid", "--gid", "--hostname", "--chdir", "--unsetenv",
     "--lock-file", "--sync-fd", "--remount-ro", "--exec-label", "--file-label", "--proc", "--dev", "--tmpfs",
     "--mqueue", "--dir", "--seccomp", "--add-seccomp-fd", "--block-fd", "--userns-block-fd", "--info-fd",
     "--json-status-fd", "--cap-add", "--cap-drop", "--perms", "--size"), 1),
    **dict.fromkeys(
    ("--setenv", "--bind", "--bind-try", "--dev-bind", "--dev-bind-try", "--ro-bind", "--ro-bind-try",
     "--bind-fd", "--ro-bind-fd", "--file", "--bind-data", "--ro-bind-data", "--symlink", "--chmod"), 2)}


def head(bwrap: str, max_write_bytes: int, work: str, binds: list[str]) -> list[str]:
    """bwrap and the options every sandbox of the grader's starts with: new namespaces, uid 65534,
    no capability, its own /proc and a read-only /dev, one tmpfs of ``max_write_bytes`` for all it
    writes (``work`` and a home in it), then ``binds`` (the system, read-only)."""
    return [bwrap, "--unshare-all", "--unshare-user", "--uid", "65534", "--gid", "65534",
            "--cap-drop", "ALL", "--die-with-parent", "--new-session",
            "--proc", "/proc", "--dev", "/dev", "--remount-ro", "/dev",
            "--size", str(max_write_bytes), "--tmpfs", "/tmp", "--dir", work, "--dir", "/tmp/home", *binds]


def sandbox_env(environ, own: dict[str, str], work: str) -> dict[str, str]:
    """The whole environment of a sandbox's command: :data:`PASSED_ENV` of ``environ``, the
    notebook's name as it is in there (``JPY_SESSION_NAME`` in ``work``), a ``PATH`` of the system's
    and Python's folders, and ``own`` (the sandbox's variables). Nothing else of the grader's
    environment (its paths and cgroups, the inputs file, the instructor's secrets) goes in."""
    env = {k: environ[k] for k in PASSED_ENV if k in environ}
    if environ.get("JPY_SESSION_NAME"):
        env["JPY_SESSION_NAME"] = f"{work}/{os.path.basename(environ['JPY_SESSION_NAME'])}"
    env["PATH"] = os.pathsep.join([os.path.dirname(sys.executable), "/usr/local/bin", "/usr/bin", "/bin"])
    env.update(own)
    return env


def env_args(env: dict[str, str]) -> list[str]:
    """``--clearenv`` then a ``--setenv`` per variable of ``env``."""
    out = ["--clearenv"]
    for k, v in env.items():
        out += ["--setenv", k, v]
    return out


def bwrap_env(env: dict[str, str], argv: list[str]) -> tuple[dict[str, str], str | None, int]:
    """What bubblewrap gives the command of ``argv`` (a ``bwrap ...`` list) started with ``env``.

    Returns:
        ``(environment, working directory or None, index in argv where the command starts)``;
        bubblewrap applies ``--setenv``/``--unsetenv``/``--clearenv`` in order and sets ``PWD``.

    Raises:
        ValueError: an option this does not know (so it cannot say what it does).
    """
    env, cwd, i = dict(env), None, 1
    while i < len(argv) and argv[i].startswith("--"):
        opt = argv[i]
        if opt not in _ARITY:
            raise ValueError(f"unknown bubblewrap option {opt}")
        args = argv[i + 1:i + 1 + _ARITY[opt]]
        if opt == "--setenv":
            env[args[0]] = args[1]
        elif opt == "--unsetenv":
            env.pop(args[0], None)
        elif opt == "--clearenv":
            env.clear()
        elif opt == "--chdir":
            cwd = args[0]
        i += 1 + _ARITY[opt]
    if cwd:
        env["PWD"] = cwd
    return env, cwd, i


def hidden(cmd: list[str]) -> tuple[list[str], int]:
    """``cmd`` (``bwrap OPTIONS... COMMAND...``) as it is to be started so that the sandbox's PID 1
    (bubblewrap's own process, whose command line and environment every process in the sandbox
    can read in /proc) shows none of it: the options are read from a memfd (``--args FD``); start
    it with an empty environment (every variable of the command is a ``--setenv``).

    Returns:
        ``(argv, fd)``: ``[bwrap, "--args", fd, COMMAND...]`` and the inheritable memfd, which
        bubblewrap closes once read (close it here once bubblewrap has started).
    """
    _, _, at = bwrap_env({}, cmd)
    fd = os.memfd_create("bwrap-args", 0)
    os.write(fd, b"".join(a.encode() + b"\0" for a in cmd[1:at]))
    os.lseek(fd, 0, os.SEEK_SET)
    os.set_inheritable(fd, True)
    return [cmd[0], "--args", str(fd), *cmd[at:]], fd


__all__ = ["PASSED_ENV", "head", "sandbox_env", "env_args", "bwrap_env", "hidden"]
