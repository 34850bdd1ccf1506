"""The last step of ``make hub-env``: configure a JupyterHub's shared student environment.

``python tools/hub_env.py PREFIX [--exchange DIR] [--course-id ID]``, run with PREFIX's own
interpreter after the course is installed there (non-editable, with the ``[hub]`` extra). It

- writes ``PREFIX/etc/jupyter/nbgrader_config.py``: the exchange (``Exchange.root``) and the
  course id (``CourseDirectory.course_id``, read from the course's ``nbgrader_config.py``), which
  every server run from PREFIX reads (it is on ``jupyter_config_path()`` of PREFIX's interpreter);
  an instructor's nbgrader commands read it with ``JUPYTER_CONFIG_PATH=PREFIX/etc/jupyter``;
- copies ``jupyter-hub-student/`` to ``PREFIX/etc/jupyter-hub-student`` (the hub student view;
  ``tools/hub/jupyterhub_config.py`` puts it on students' ``JUPYTER_CONFIG_PATH``) and that hub
  configuration to ``PREFIX/etc/jupyterhub/jupyterhub_config.py``;
- creates the exchange (mode 777, as nbgrader's exchange needs) when it is missing;
- makes PREFIX readable by everyone, and checks that every user can run its interpreter and reach
  the exchange: each folder above them must let others in (a venv made from a Python under a
  private home, such as a pyenv shim under ``/root``, cannot be run by students).

Exits 1 with one line naming what to fix when a check fails; nothing else is changed then.
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import stat
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
COURSE_ID = re.compile(r"""^c\.CourseDirectory\.course_id\s*=\s*["']([^"']+)["']""", re.M)


def not_reachable(path: Path) -> Path | None:
    """The first of ``path`` (resolved) and the folders above it that other users cannot enter
    or run (no ``o+x``), or None when every user can reach it."""
    path = Path(os.path.abspath(path))
    real = Path(os.path.realpath(path))
    for p in [real, *real.parents, *path.parents]:
        if not os.stat(p).st_mode & stat.S_IXOTH:
            return p
    return None


def course_id(config: Path) -> str:
    """``CourseDirectory.course_id`` as the course's ``nbgrader_config.py`` sets it.

    Raises:
        SystemExit: the file sets none.
    """
    found = COURSE_ID.findall(config.read_text())
    if not found:
        raise SystemExit(f"hub-env: {config} sets no c.CourseDirectory.course_id")
    return found[-1]


def nbgrader_config(exchange: Path, course: str) -> str:
    """The shared environment's ``etc/jupyter/nbgrader_config.py``."""
    return (f'"""The course\'s nbgrader exchange, for every server of this environment (make hub-env)."""\n'
            f"c = get_config()  # noqa: F821\n"
            f"c.Exchange.root = {str(exchange)!r}\n"
            f"c.CourseDirectory.course_id = {course!r}\n")


def configure(prefix: Path, exchange: Path, course: str) -> list[str]:
    """Write the configuration into ``prefix`` and check it (module docstring).

    Returns:
        What was done, one line each.

    Raises:
        SystemExit: the interpreter or the exchange is not reachable by every user (nothing is
            written then), or ``prefix`` is not a virtual environment.
    """
    python = prefix / "bin" / "python"
    if not (prefix / "pyvenv.cfg").is_file() or not python.exists():
        raise SystemExit(f"hub-env: {prefix} is not a virtual environment (no pyvenv.cfg, bin/python)")
    prefix.chmod(prefix.stat().st_mode | 0o055)
    blocked = not_reachable(python)
    if blocked:
        raise SystemExit(f"hub-env: students cannot run {python}: {blocked} is closed to other users; "
                         "make the environment from a Python every user can run (HUB_PYTHON=/usr/bin/python3.11)")
    done = []
    if not exchange.exists():
        exchange.mkdir(parents=True)
        exchange.chmod(0o777)
        done.append(f"created the exchange {exchange} (mode 777)")
    blocked = not_reachable(exchange)
    if blocked or not exchange.stat().st_mode & stat.S_IWOTH:
        raise SystemExit(f"hub-env: students cannot write to the exchange {exchange}"
                         f"{f' ({blocked} is closed to other users)' if blocked else ''}: chmod 777 it")
    etc = prefix / "etc"
    (etc / "jupyter").mkdir(parents=True, exist_ok=True)
    (etc / "jupyter" / "nbgrader_config.py").write_text(nbgrader_config(exchange, course))
    done.append(f"{etc / 'jupyter' / 'nbgrader_config.py'}: Exchange.root = {exchange}, course_id = {course}")
    view = etc / "jupyter-hub-student"
    shutil.rmtree(view, ignore_errors=True)
    shutil.copytree(REPO / "jupyter-hub-student", view)
    (etc / "jupyterhub").mkdir(exist_ok=True)
    shutil.copy(REPO / "tools" / "hub" / "jupyterhub_config.py", etc / "jupyterhub" / "jupyterhub_config.py")
    done.append(f"{view}: the hub student view; {etc / 'jupyterhub' / 'jupyterhub_config.py'}: the hub's")
    for root, dirs, files in os.walk(prefix):
        for name in dirs + files:
            p = Path(root, name)
            if not p.is_symlink():
                mode = p.stat().st_mode
                p.chmod(mode | stat.S_IRGRP | stat.S_IROTH
                        | (stat.S_IXGRP | stat.S_IXOTH if mode & stat.S_IXUSR or p.is_dir() else 0))
    done.append(f"{prefix}: readable by every user")
    return done


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("prefix", type=Path, help="the shared environment (a venv), e.g. /opt/normref-env")
    p.add_argument("--exchange", type=Path, default=Path("/srv/nbgrader/exchange"))
    p.add_argument("--course-id", default=None, help="default: the course's nbgrader_config.py")
    args = p.parse_args(argv)
    try:
        done = configure(args.prefix.absolute(), args.exchange.absolute(),
                         args.course_id or course_id(REPO / "nbgrader_config.py"))
    except SystemExit as e:
        print(e, file=sys.stderr)
        return 1
    for line in done:
        print(f"hub-env: {line}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
