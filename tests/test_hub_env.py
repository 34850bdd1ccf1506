"""tools/hub_env.py, the last step of `make hub-env`: the shared environment's nbgrader config and
hub student view, and its refusals (an interpreter or exchange other users cannot reach)."""
import importlib.util
import os
import shutil
import stat
import sys
import tempfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("hub_env", REPO / "tools" / "hub_env.py")
hub_env = sys.modules["hub_env"] = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(hub_env)


def _venv(where: Path) -> Path:
    prefix = where / "env"
    (prefix / "bin").mkdir(parents=True)
    (prefix / "pyvenv.cfg").write_text("home = /usr/bin\n")
    if not os.path.exists("/usr/bin/python3"):
        pytest.skip("needs /usr/bin/python3, an interpreter every user can run")
    (prefix / "bin" / "python").symlink_to("/usr/bin/python3")
    return prefix


@pytest.fixture
def open_dir():
    path = Path(tempfile.mkdtemp(prefix="hub-env-test-"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path)


def test_writes_the_exchange_config_and_the_hub_view(open_dir):
    prefix = _venv(open_dir)
    exchange = open_dir / "exchange"
    done = hub_env.configure(prefix, exchange, "lesson16-normalization")
    assert stat.S_IMODE(exchange.stat().st_mode) == 0o777 and any("created the exchange" in d for d in done)
    ns = {}

    class C:
        def __getattr__(self, name):
            return ns.setdefault(name, type(name, (), {})())
    c = C()
    exec((prefix / "etc/jupyter/nbgrader_config.py").read_text(), {"get_config": lambda: c})
    assert ns["Exchange"].root == str(exchange)
    assert ns["CourseDirectory"].course_id == "lesson16-normalization"
    assert (prefix / "etc/jupyter-hub-student/labconfig/page_config.json").read_bytes() == \
        (REPO / "jupyter-hub-student/labconfig/page_config.json").read_bytes()
    assert (prefix / "etc/jupyterhub/jupyterhub_config.py").is_file()
    assert hub_env.course_id(REPO / "nbgrader_config.py") == "lesson16-normalization"


def test_refuses_an_environment_under_a_private_folder(tmp_path, open_dir):
    private = tmp_path / "home"
    private.mkdir()
    private.chmod(0o700)
    prefix = _venv(private)
    with pytest.raises(SystemExit, match="students cannot run .* is closed to other users"):
        hub_env.configure(prefix, open_dir / "exchange", "x")
    assert not (prefix / "etc").exists() and not (open_dir / "exchange").exists()


def test_refuses_an_exchange_students_cannot_write(open_dir):
    exchange = open_dir / "exchange"
    exchange.mkdir()
    os.chmod(exchange, 0o755)
    with pytest.raises(SystemExit, match="cannot write to the exchange"):
        hub_env.configure(_venv(open_dir), exchange, "x")


# -- the hub's configuration (tools/hub/jupyterhub_config.py): safe by default ------------------------

def _load_hub_config(tmp_path: Path, **env: str):
    """Run the hub's config file as JupyterHub loads it (traitlets' loader), in ``tmp_path``, with
    only the ``NORMREF_*`` variables given; returns ``(exit status or None, stderr, config)``."""
    import subprocess

    script = ("import sys; from traitlets.config.loader import PyFileConfigLoader as L\n"
              f"c = L('jupyterhub_config.py', path={str(REPO / 'tools' / 'hub')!r}).load_config()\n"
              "print(repr(dict(c.JupyterHub)), repr(dict(c.Authenticator)))\n")
    out = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=120,
                         env={"PATH": os.environ["PATH"], "HOME": str(tmp_path), **env})
    return out.returncode, out.stderr, out.stdout


def test_the_hub_does_not_start_without_its_users_or_with_passwords_in_clear(tmp_path):
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    cert.write_text("x")
    key.write_text("x")
    users = {"NORMREF_HUB_USERS": "ada,bob", "NORMREF_INSTRUCTORS": "ines"}
    code, err, _ = _load_hub_config(tmp_path, NORMREF_HUB_BIND="http://127.0.0.1:8000")
    assert code == 1 and "set NORMREF_HUB_USERS" in err, err
    code, err, _ = _load_hub_config(tmp_path, NORMREF_HUB_BIND="http://0.0.0.0:8000", **users)
    assert code == 1 and "would send passwords in clear" in err, err
    code, err, _ = _load_hub_config(tmp_path, **users)  # the default bind is https://: it needs the certificate
    assert code == 1 and "needs NORMREF_HUB_SSL_CERT and NORMREF_HUB_SSL_KEY" in err, err
    assert not (tmp_path / "jupyterhub.sqlite").exists()  # a refusal writes nothing
    code, err, out = _load_hub_config(tmp_path, NORMREF_HUB_BIND="https://0.0.0.0:443", NORMREF_HUB_SSL_CERT=str(cert),
                                      NORMREF_HUB_SSL_KEY=str(key), **users)
    assert code == 0, err
    assert f"'ssl_cert': '{cert}'" in out and f"'ssl_key': '{key}'" in out and "'allowed_users': {" in out
    assert "'ada'" in out and "'ines'" in out
    assert stat.S_IMODE((tmp_path / "jupyterhub.sqlite").stat().st_mode) == 0o600
    code, err, _ = _load_hub_config(tmp_path, NORMREF_HUB_BIND="http://127.0.0.1:8000", **users)  # behind a proxy
    assert code == 0, err
