"""Binder's build inputs: environment.yml agrees with pyproject.toml; postBuild and start work.

repo2docker cannot run here (no Docker engine), so each thing it would read is checked on its
own: the environment file's pins, the scripts it runs, and the Jupyter configuration `start`
puts in front of students. The browser test (tests/test_browser.py) then drives JupyterLab
started through `start`.
"""
import json
import os
import re
import subprocess
import sys
import tomllib
import urllib.parse
from pathlib import Path

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.version import Version

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())
ENV = yaml.safe_load((REPO / "environment.yml").read_text())
STUDENT_CONFIG = REPO / "jupyter-student"
PAGE_CONFIG = json.loads((STUDENT_CONFIG / "labconfig" / "page_config.json").read_text())
SERVER_CONFIG = json.loads((STUDENT_CONFIG / "jupyter_server_config.json").read_text())
NBGRADER_LAB_PLUGINS = ("formgrader", "create-assignment", "course-list", "assignment-list", "menu")


def _conda_deps():
    return [d for d in ENV["dependencies"] if isinstance(d, str)]


def _pip_lines():
    (pip,) = [d["pip"] for d in ENV["dependencies"] if isinstance(d, dict)]
    return pip


def _pip_pins() -> dict[str, Version]:
    pins = {}
    for line in _pip_lines():
        if line.startswith("-"):
            continue
        req = Requirement(line)
        (spec,) = req.specifier
        assert spec.operator == "==", f"environment.yml: pin {line!r} exactly (==), as pyproject.toml does"
        pins[req.name.lower()] = Version(spec.version)
    return pins


def test_environment_pins_equal_pyproject_pins():
    want = {}
    for line in PYPROJECT["project"]["dependencies"]:
        req = Requirement(line)
        (spec,) = req.specifier
        want[req.name.lower()] = Version(spec.version)
    got = _pip_pins()
    assert sorted(got) == sorted(want), (
        f"environment.yml and pyproject.toml list different packages: only in environment.yml "
        f"{sorted(set(got) - set(want))}, only in pyproject.toml {sorted(set(want) - set(got))}")
    drift = {n: (str(got[n]), str(want[n])) for n in want if got[n].public != want[n].public}
    assert not drift, f"versions drifted (environment.yml, pyproject.toml): {drift}"


def test_jsonschema_checks_no_iri_format_and_nbgrader_does_not_build_its_parser():
    """jsonschema stays below 4.25 (pinned in both files, so a fresh `make install` gets it): from
    4.25 its format-nongpl extra, which jupyter-events asks for, brings rfc3987-syntax, whose import
    builds a Lark grammar for the "iri" formats in every process that imports nbgrader (1-3 s)."""
    from importlib.metadata import version

    assert Version(version("jsonschema")) < Version("4.25"), version("jsonschema")
    assert _pip_pins()["jsonschema"] == Version(version("jsonschema"))
    code = ("import sys, nbgrader.api, nbformat, jupyter_events.validators as v\n"
            "import jsonschema\n"
            "print(sorted(set(sys.modules) & {'rfc3987_syntax', 'lark'}), "
            "sorted(f for f in ('iri', 'iri-reference') if f in v.draft7_format_checker.checkers))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["[]", "[]"], out.stdout


def test_environment_python_satisfies_requires_python():
    (python,) = [d for d in _conda_deps() if d.startswith("python")]
    version = python.split("=", 1)[1].lstrip("=")
    assert Version(version) in SpecifierSet(PYPROJECT["project"]["requires-python"]), python
    assert Version(version).release[:2] == sys.version_info[:2], "Binder's Python is not the one tested here"
    assert ENV["channels"] == ["conda-forge"]


def test_torch_is_the_cpu_wheel_from_the_cpu_index():
    assert _pip_pins()["torch"].local == "cpu", "pin torch==X+cpu: the PyPI wheel pulls in the CUDA libraries"
    assert "--extra-index-url https://download.pytorch.org/whl/cpu" in _pip_lines()
    conda_names = {re.split(r"[=<>! ]", d)[0] for d in _conda_deps()}
    assert not conda_names & {"pytorch", "torch", "cudatoolkit", "cuda-version"}, conda_names


def test_environment_has_no_local_path_so_repo2docker_can_cache_it():
    # With `-e .` or a file path, repo2docker must copy the whole repository first and rebuilds
    # the (large) environment on every commit; postBuild installs normref instead.
    local = [line for line in _pip_lines() if line.startswith(("-e", "--editable", ".", "/", "file:"))]
    assert local == [], f"environment.yml: move {local} to postBuild"
    assert "pip install --no-deps --editable ." in (REPO / "postBuild").read_text()


def test_no_binder_folder_hides_the_top_level_files():
    # repo2docker ignores every top-level config file when binder/ or .binder/ exists.
    assert not (REPO / "binder").exists() and not (REPO / ".binder").exists()


@pytest.mark.parametrize("name", ["postBuild", "start"])
def test_binder_script_is_executable_bash_that_stops_on_error(name):
    path = REPO / name
    text = path.read_text()
    assert os.access(path, os.X_OK), f"chmod +x {name}"
    assert text.startswith("#!/usr/bin/env bash\n") and "set -euo pipefail" in text
    staged = subprocess.run(["git", "ls-files", "-s", name], cwd=REPO, capture_output=True, text=True).stdout
    if staged:  # committed or staged: git must carry the executable bit to Binder
        assert staged.startswith("100755"), f"git update-index --chmod=+x {name}"


def test_start_puts_the_student_config_first_and_runs_the_command():
    env = {**os.environ, "JUPYTER_CONFIG_PATH": "/elsewhere"}
    out = subprocess.run([str(REPO / "start"), "sh", "-c", 'echo "$JUPYTER_CONFIG_PATH"; exit 7'],
                         env=env, capture_output=True, text=True, timeout=30, cwd="/")
    assert out.returncode == 7, "start must exec its command (and pass on its exit status)"
    assert out.stdout.strip() == f"{STUDENT_CONFIG}:/elsewhere"


def test_student_config_hides_nbgrader_instructor_panels_and_keeps_widgets():
    out = subprocess.run([str(REPO / "start"), str(BIN / "jupyter"), "labextension", "list"],
                         capture_output=True, text=True, timeout=120)
    text = re.sub(r"\x1b\[[0-9;]*m", "", out.stdout + out.stderr)
    disabled = text.split("Disabled extensions:", 1)[1].split()
    for plugin in NBGRADER_LAB_PLUGINS:
        assert f"@jupyter/nbgrader:{plugin}" in disabled, text
    assert "@jupyter/nbgrader:validate-assignment" not in disabled  # students keep "Validate"
    assert re.search(r"@jupyter-widgets/jupyterlab-manager v\S+ enabled OK", text), text
    assert re.search(r"@jupyter/nbgrader v\S+ enabled OK", text), text


def test_student_config_names_plugins_that_exist():
    # A renamed plugin would silently stay enabled: every disabled id must be in a built extension.
    labext = Path(sys.prefix) / "share" / "jupyter"
    bundles = "".join(p.read_text(errors="ignore") for p in (labext / "labextensions").rglob("*.js"))
    bundles += "".join(p.read_text(errors="ignore") for p in (labext / "lab" / "static").glob("*.js"))
    for plugin in PAGE_CONFIG["disabledExtensions"]:
        assert f'"{plugin}"' in bundles, f"{plugin} is not a JupyterLab plugin of this install"


def test_student_server_config_turns_off_only_nbgrader_instructor_and_exchange_extensions():
    shipped = json.loads((Path(sys.prefix) / "etc/jupyter/jupyter_server_config.d/nbgrader.json").read_text())
    nbgrader_exts = shipped["ServerApp"]["jpserver_extensions"]
    ours = SERVER_CONFIG["ServerApp"]["jpserver_extensions"]
    assert set(ours) <= set(nbgrader_exts), "a name nbgrader does not register would change nothing"
    assert {k for k, on in ours.items() if not on} == {
        "nbgrader.server_extensions.formgrader",
        "nbgrader.server_extensions.course_list",
        "nbgrader.server_extensions.assignment_list",
    }
    assert "nbgrader.server_extensions.validate_assignment" not in ours
    assert SERVER_CONFIG["LabApp"]["default_url"] == "/lab/tree/notebooks/00_start.ipynb"
    assert (REPO / "notebooks" / "00_start.ipynb").exists()


@pytest.mark.slow
def test_postbuild_runs_with_the_venvs_packages(tmp_path):
    # A throwaway venv that sees .venv's packages through a .pth file: postBuild's editable
    # install lands there, and the shared .venv is left alone.
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    (site,) = (venv / "lib").glob("python3*/site-packages")
    (site / "course-venv.pth").write_text(str(Path(yaml.__file__).parents[1]) + "\n")
    env = {**os.environ, "PATH": os.pathsep.join([str(venv / "bin"), str(BIN), os.environ["PATH"]]),
           "MPLCONFIGDIR": str(tmp_path / "mpl"), "VIRTUAL_ENV": str(venv)}
    out = subprocess.run([str(REPO / "postBuild")], env=env, capture_output=True, text=True, timeout=300, cwd="/")
    assert out.returncode == 0, out.stdout + out.stderr
    assert list(site.glob("normref-0.1.0.dist-info")), "postBuild did not install normref"
    assert list((tmp_path / "mpl").glob("fontlist-*.json")), "the matplotlib font cache was not built"
    assert "widgets extension enabled" in out.stdout

    # Without the widgets front end, the build fails (instead of a class seeing plain text).
    fake = tmp_path / "fake-bin"
    fake.mkdir()
    (fake / "jupyter").write_text("#!/bin/sh\necho '  @jupyter/nbgrader v0.9.6 enabled OK'\n")
    (fake / "jupyter").chmod(0o755)
    env["PATH"] = os.pathsep.join([str(fake), env["PATH"]])
    out = subprocess.run([str(REPO / "postBuild")], env=env, capture_output=True, text=True, timeout=300, cwd="/")
    assert out.returncode == 1 and "the ipywidgets JupyterLab extension is missing" in out.stderr, out.stderr


def test_student_file_browser_hides_the_lesson_sources_and_keeps_jupyters_hidden_files_hidden():
    from fnmatch import fnmatch

    from jupyter_server.services.contents.manager import ContentsManager

    globs = SERVER_CONFIG["ContentsManager"]["hide_globs"]
    assert set(ContentsManager().hide_globs) <= set(globs), "replacing hide_globs must keep Jupyter's own"
    lesson_files = [p.name for p in (REPO / "notebooks").iterdir()]
    hidden = sorted(n for n in lesson_files if any(fnmatch(n, g) for g in globs))
    assert hidden == sorted(p.name for p in (REPO / "notebooks").glob("*.md")) != []
    assert not any(fnmatch("README.md", g) or fnmatch("00_start.ipynb", g) for g in globs)
    # jupytext's launcher items and the RISE slideshow button are authors' tools
    for plugin in ("jupyterlab-jupytext:plugin", "jupyterlab-rise:plugin"):
        assert PAGE_CONFIG["disabledExtensions"][plugin] is True


def test_instructor_view_opens_lesson_markdown_as_a_jupytext_notebook():
    overrides = json.loads((REPO / "jupyter-instructor" / "labconfig" / "default_setting_overrides.json").read_text())
    viewers = overrides["@jupyterlab/docmanager-extension:plugin"]["defaultViewers"]
    assert viewers == {"markdown": "Jupytext Notebook", "myst": "Jupytext Notebook"}
    # The factory name jupytext's JupyterLab extension registers (a rename would silently open text).
    bundles = "".join(p.read_text(errors="ignore") for p in
                      (Path(sys.prefix) / "share/jupyter/labextensions/jupyterlab-jupytext").rglob("*.js"))
    assert '"Jupytext Notebook"' in bundles
    makefile = (REPO / "Makefile").read_text()
    assert "./start $(BIN)/jupyter lab" in makefile, "make lab is the student view (through start)"
    assert 'JUPYTER_CONFIG_PATH="$(CURDIR)/jupyter-instructor' in makefile


def test_readme_binder_badge_opens_the_start_notebook():
    readme = (REPO / "README.md").read_text()
    (url,) = re.findall(r"\]\((https://mybinder\.org/v2/gh/[^)]+)\)", readme)
    m = re.fullmatch(r"https://mybinder\.org/v2/gh/([\w.-]+)/([\w.-]+)/([\w./-]+)\?labpath=([\w.%-]+)", url)
    assert m, f"not a Binder launch link with a labpath: {url}"
    assert (REPO / urllib.parse.unquote(m[4])).is_file(), f"the badge opens {m[4]}, which does not exist"
    assert urllib.parse.unquote(m[4]) == "notebooks/00_start.ipynb"


def test_readme_screenshots_exist_and_are_small_pngs():
    readme = (REPO / "README.md").read_text()
    shots = re.findall(r'src="(docs/screenshots/[^"]+)"', readme)
    assert len(shots) >= 3, "the README shows the start page, a lesson and a self-check"
    for rel in shots:
        data = (REPO / rel).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n", rel
        assert len(data) < 300_000, f"{rel} is {len(data) // 1000} KB: keep screenshots under 300 KB"


def test_hub_student_view_keeps_the_exchange_and_hides_the_instructor_panels():
    """jupyter-hub-student/ (the hub's student view): the Assignment List (its server extension,
    its lab plugin, nbgrader's menu, which alone adds its command) and Validate stay on;
    formgrader, Create Assignment and the course list are off; no landing page of its own (the
    hub sets it); the same hidden lesson sources as the Binder view."""
    hub = REPO / "jupyter-hub-student"
    server = json.loads((hub / "jupyter_server_config.json").read_text())
    page = json.loads((hub / "labconfig" / "page_config.json").read_text())
    exts = server["ServerApp"]["jpserver_extensions"]
    assert exts == {"nbgrader.server_extensions.formgrader": False,
                    "nbgrader.server_extensions.course_list": False,
                    "nbgrader.server_extensions.assignment_list": True}
    off = {k for k, v in page["disabledExtensions"].items() if v}
    assert {f"@jupyter/nbgrader:{p}" for p in ("formgrader", "create-assignment", "course-list")} <= off
    assert not off & {f"@jupyter/nbgrader:{p}" for p in ("assignment-list", "menu", "validate-assignment")}
    assert off - {"@jupyter/nbgrader:formgrader", "@jupyter/nbgrader:create-assignment",
                  "@jupyter/nbgrader:course-list"} == set(PAGE_CONFIG["disabledExtensions"]) - {
        "@jupyter/nbgrader:formgrader", "@jupyter/nbgrader:create-assignment", "@jupyter/nbgrader:course-list",
        "@jupyter/nbgrader:assignment-list", "@jupyter/nbgrader:menu"}
    assert "LabApp" not in server
    assert server["ContentsManager"] == SERVER_CONFIG["ContentsManager"]
