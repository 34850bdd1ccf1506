"""`make student-repo`: the student tree has what a student needs and no solution."""
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

REPO = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("student_repo", REPO / "tools" / "student_repo.py")
student_repo = sys.modules["student_repo"] = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(student_repo)


@pytest.fixture(scope="module")
def export(tmp_path_factory) -> Path:
    dest = tmp_path_factory.mktemp("students") / "lesson16"
    out = subprocess.run([sys.executable, str(REPO / "tools" / "student_repo.py"), str(dest),
                          "--binder-repo", "my-org/lesson16-students"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return dest


def _source_notebook(tmp_path: Path) -> Path:
    """A one-assignment source/ whose solution and hidden test are known lines."""
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_code_cell(
            "def layer_norm(x):\n    ### BEGIN SOLUTION\n    mu = x.mean(dim=-1, keepdim=True)  # [B, T, 1]\n"
            "    return x - mu\n    ### END SOLUTION",
            metadata={"nbgrader": {"solution": True, "grade_id": "ln_impl"}}),
        nbformat.v4.new_code_cell(
            "assert layer_norm(x).shape == x.shape\n### BEGIN HIDDEN TESTS\n"
            "assert abs(float(layer_norm(x).mean())) < 1e-6\n### END HIDDEN TESTS",
            metadata={"nbgrader": {"grade": True, "grade_id": "ln_mean"}}),
        nbformat.v4.new_markdown_cell("Why subtract the mean before dividing by the std?",
                                      metadata={"nbgrader": {"solution": False, "grade_id": "q"}}),
        nbformat.v4.new_markdown_cell("Centering makes the output mean exactly zero for every token.",
                                      metadata={"nbgrader": {"solution": True, "grade_id": "q_answer"}}),
        nbformat.v4.new_markdown_cell(
            "**Does RMSNorm change the shape?** (graded by hand)\n### BEGIN SOLUTION\n"
            "No: one statistic per token, broadcast back over the features.\n### END SOLUTION",
            metadata={"nbgrader": {"solution": True, "grade_id": "shape_why"}}),
    ]
    path = tmp_path / "source" / "ln" / "ln.ipynb"
    path.parent.mkdir(parents=True)
    nbformat.write(nb, path)
    return path.parents[1]


def test_secret_lines_are_the_solution_hidden_test_and_written_answer(tmp_path):
    secrets = student_repo.secret_lines(_source_notebook(tmp_path))
    assert set(secrets) == {
        "mu = x.mean(dim=-1, keepdim=True)",
        "assert abs(float(layer_norm(x).mean())) < 1e-6",
        "Centering makes the output mean exactly zero for every token.",
        "No: one statistic per token, broadcast back over the features.",
    }  # `return x - mu` is too short to call a leak; the visible assert and question are not secret
    assert secrets["mu = x.mean(dim=-1, keepdim=True)"] == ("source/ln/ln.ipynb cell ln_impl", "answer")
    assert secrets["assert abs(float(layer_norm(x).mean())) < 1e-6"] == ("source/ln/ln.ipynb cell ln_mean", "hidden")



def test_a_standard_answer_is_secret_even_where_it_repeats_the_solution(tmp_path):
    # a markdown cell tagged standard-answer (feedback only) is not a visible line: the solution
    # lines it repeats stay secret, and so do its own
    source = _source_notebook(tmp_path)
    path = source / "ln" / "ln.ipynb"
    nb = nbformat.read(path, as_version=4)
    nb.cells.insert(1, nbformat.v4.new_markdown_cell(
        "Standard answer\n```python\nmu = x.mean(dim=-1, keepdim=True)\n```\n"
        "The mean is kept as [B, T, 1] to broadcast.",
        metadata={"tags": ["standard-answer"]}))
    nbformat.write(nb, path)
    secrets = student_repo.secret_lines(source)
    assert secrets["mu = x.mean(dim=-1, keepdim=True)"] == ("source/ln/ln.ipynb cell ln_impl", "answer")
    assert secrets["The mean is kept as [B, T, 1] to broadcast."][1] == "answer"

def test_lines_students_get_in_release_are_not_secret(tmp_path):
    source = _source_notebook(tmp_path)
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("mu = x.mean(dim=-1, keepdim=True)  # given as a hint")]
    (tmp_path / "release" / "ln").mkdir(parents=True)
    nbformat.write(nb, tmp_path / "release" / "ln" / "ln.ipynb")
    assert "mu = x.mean(dim=-1, keepdim=True)" not in student_repo.secret_lines(source)


def test_find_leaks_names_file_line_and_origin(tmp_path):
    source = _source_notebook(tmp_path)
    tree = tmp_path / "tree"
    (tree / "pkg").mkdir(parents=True)
    (tree / "pkg" / "demo.py").write_text("ok = 1\n        mu = x.mean(dim=-1, keepdim=True)   # copied\n")
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell("Centering makes the output mean exactly zero for every token.")]
    nbformat.write(nb, tree / "answers.ipynb")
    assert [str(leak) for leak in student_repo.find_leaks(tree, source=source)] == [
        "answers.ipynb:1: Centering makes the output mean exactly zero for every token.  "
        "(answer, from source/ln/ln.ipynb cell q_answer)",
        "pkg/demo.py:2: mu = x.mean(dim=-1, keepdim=True)  (answer, from source/ln/ln.ipynb cell ln_impl)",
    ]


def _course_repo(tmp_path: Path, normref_init: str) -> Path:
    """A minimal course work tree (git, no commit needed): source/, release/, normref/."""
    repo = tmp_path / "course"
    shutil.copytree(_source_notebook(tmp_path), repo / "source")
    (repo / "release" / "ln").mkdir(parents=True)
    nbformat.write(nbformat.v4.new_notebook(), repo / "release" / "ln" / "ln.ipynb")
    (repo / "normref").mkdir()
    (repo / "normref" / "__init__.py").write_text(normref_init)
    (repo / "README.md").write_text("# course\n")
    subprocess.run(["git", "init", "-q"], cwd=repo, check=True)
    return repo


def test_export_refuses_a_hidden_test_and_notes_an_answer(tmp_path):
    hidden = _course_repo(tmp_path / "a", "assert abs(float(layer_norm(x).mean())) < 1e-6\n")
    refused = r"(?s)hidden tests would reach students.*normref/__init__.py:1: assert abs"
    with pytest.raises(student_repo.ExportError, match=refused):
        student_repo.export_student_repo(tmp_path / "a" / "out", repo=hidden)
    assert not (tmp_path / "a" / "out" / "normref").exists(), "a refused export must leave nothing behind"

    answer = _course_repo(tmp_path / "b", "mu = x.mean(dim=-1, keepdim=True)\n")
    export = student_repo.export_student_repo(tmp_path / "b" / "out", repo=answer)
    assert [(n.path, n.kind) for n in export.notes] == [("normref/__init__.py", "answer")]
    assert sorted(map(str, export.files)) == ["README.md", "normref/__init__.py", "release/ln/ln.ipynb"]


def test_the_grader_would_leak_and_no_student_path_reaches_it():
    # grader/'s demo class holds correct answers: the detector sees them there, and the export
    # leaves the grader out because no student path includes it (no special rule).
    leaks = student_repo.find_leaks(REPO / "grader", source=REPO / "source")
    assert leaks
    assert not any(p == "grader" or p.startswith("grader/") for p in student_repo.STUDENT_PATHS)
    assert not any(p.parts[0] == "grader" for p in student_repo.student_files(repo=REPO))


def test_export_has_lessons_assignments_and_binder_files_but_no_source(export):
    files = {p.relative_to(export).as_posix() for p in export.rglob("*") if p.is_file()}
    for need in ["README.md", "environment.yml", "postBuild", "start", "pyproject.toml",
                 "jupyter-student/jupyter_server_config.json", "jupyter-student/labconfig/page_config.json",
                 "normref/__init__.py", "notebooks/00_start.ipynb", "release/rmsnorm/rmsnorm.ipynb"]:
        assert need in files, need
    for path in files:
        assert not path.startswith(("source/", "tests/", "tools/", "grader/", "autograded/",
                                    "submitted/", "feedback/")), path
        assert "__pycache__" not in path and path not in {"gradebook.db", "nbgrader_config.py"}, path
    assert os.access(export / "start", os.X_OK) and os.access(export / "postBuild", os.X_OK)
    hits = student_repo.find_leaks(export, source=REPO / "source")
    assert [str(h) for h in hits if h.kind == "hidden"] == []
    released = {p.relative_to(REPO).as_posix() for p in (REPO / "release").rglob("*.ipynb")}
    assert released <= files


def test_the_exported_readme_links_resolve_in_the_export(export):
    """The README links its docs/ pages and screenshots: each one is in the student tree too."""
    readme = (export / "README.md").read_text()
    links = [a or b for a, b in re.findall(r"\]\(([^)\s#]+)[^)]*\)|src=\"([^\"]+)\"", readme)]
    local = [link for link in links if not re.match(r"[a-z][a-z0-9+.-]*:", link)]
    assert any(link.startswith("docs/") and link.endswith(".md") for link in local), local
    assert [link for link in local if not (export / link).exists()] == []


def test_export_points_the_binder_badge_at_the_student_repo(export):
    readme = (export / "README.md").read_text()
    assert "https://mybinder.org/v2/gh/my-org/lesson16-students/" in readme
    assert readme.replace("my-org/lesson16-students", "X") != readme


@pytest.mark.slow
def test_exported_normref_imports_without_the_grader(export):
    code = "import normref, json; print(json.dumps(normref.__file__))"
    out = subprocess.run([sys.executable, "-c", code], env={**os.environ, "PYTHONPATH": str(export)},
                         capture_output=True, text=True, cwd="/", timeout=120)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == str(export / "normref" / "__init__.py")


def test_export_refuses_to_overwrite_a_folder_it_did_not_write(tmp_path):
    dest = tmp_path / "mine"
    dest.mkdir()
    (dest / "thesis.tex").write_text("keep me")
    with pytest.raises(student_repo.ExportError, match="not empty"):
        student_repo.export_student_repo(dest)
    with pytest.raises(student_repo.ExportError, match="thesis.tex"):
        student_repo.export_student_repo(dest, replace=True)
    assert (dest / "thesis.tex").read_text() == "keep me"
    with pytest.raises(student_repo.ExportError, match="inside the course"):
        student_repo.export_student_repo(REPO / "notebooks" / "students")
    with pytest.raises(student_repo.ExportError, match="OWNER/NAME"):
        student_repo.export_student_repo(tmp_path / "new", binder_repo="https://github.com/x/y")


def test_replace_updates_a_previous_export_and_keeps_its_git(tmp_path):
    dest = tmp_path / "published"
    student_repo.export_student_repo(dest)
    (dest / ".git").mkdir()
    (dest / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    (dest / "notebooks" / "stale.ipynb").write_text("{}")
    student_repo.export_student_repo(dest, replace=True)
    assert (dest / ".git" / "HEAD").read_text() == "ref: refs/heads/main\n"
    assert not (dest / "notebooks" / "stale.ipynb").exists()
    assert (dest / "notebooks" / "00_start.ipynb").exists()
