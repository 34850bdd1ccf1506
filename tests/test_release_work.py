"""Nothing lost (issue 30, item 4): no path that regenerates release/ destroys work written there.

Students are told to work in ``release/<assignment>/``. Work is what nbgrader itself tells apart
from what it generated (grader/ledger/release.py): a cell whose text no longer matches the checksum
nbgrader recorded when it generated it, a cell or file it did not generate. Each path that
rewrites release/ is driven here with a student's answers in it: ``make grade``'s generate stage
keeps the folder under ``logs/release-kept/<run>/`` and says where; ``make release`` refuses
(``KEEP=1`` keeps and regenerates); ``make student-repo`` refuses; the demo class no longer
copies the course's release/. A release that is only stale (source/ edited by the instructor)
is regenerated as before.
"""
import hashlib
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from grader import pipeline
from grader.ledger.course import CourseTree
from grader.ledger.release import written_work

REPO = Path(__file__).resolve().parents[1]
ANSWER = "def layer_norm(x, weight, bias, eps=1e-5):\n    return x  # my attempt\n"


def _files(folder: Path) -> dict:
    return {p.relative_to(folder): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _answer(release_nb: Path, grade_id: str | None, text: str = "") -> None:
    """Type ``text`` into answer cell ``grade_id`` (None: none), and run the notebook's first
    code cell (an output), as a student working in JupyterLab would leave it."""
    nb = nbformat.read(release_nb, as_version=4)
    if grade_id is not None:
        (cell,) = [c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == grade_id]
        assert cell.metadata["nbgrader"]["solution"], grade_id
        cell.source = text
    first = next(c for c in nb.cells if c.cell_type == "code")
    first.outputs, first.execution_count = [nbformat.v4.new_output("stream", text="ran\n")], 1
    nbformat.write(nb, release_nb)


def _answer_ids(release_nb: Path) -> list[str]:
    nb = nbformat.read(release_nb, as_version=4)
    return [c.metadata["nbgrader"]["grade_id"] for c in nb.cells if c.metadata.get("nbgrader", {}).get("solution")]


def test_written_work_is_what_differs_from_the_stubs_nbgrader_generated(course_copy):
    release, source = course_copy / "release" / "layernorm", course_copy / "source" / "layernorm"
    nb_path = release / "layernorm.ipynb"
    assert written_work(release, source) == []  # as generated, and as committed
    # run, not answered: outputs and a JupyterLab checkpoint are no work
    _answer(nb_path, None)
    (release / ".ipynb_checkpoints").mkdir()
    (release / ".ipynb_checkpoints" / "layernorm-checkpoint.ipynb").write_text("{}")
    assert written_work(release, source) == []
    # stale: the instructor edited source/ (a locked cell, and an answer cell's solution); the
    # release still holds nbgrader's own cells, so regenerating it loses nothing
    src = nbformat.read(source / "layernorm.ipynb", 4)
    for c in src.cells:
        meta = c.metadata.get("nbgrader", {})
        if meta.get("locked") or meta.get("solution"):
            c.source += "\n# edited by the instructor"
    nbformat.write(src, source / "layernorm.ipynb")
    assert written_work(release, source) == []
    # answers: each answer cell whose text is not its stub is named; added cells and files count
    first, *others = _answer_ids(nb_path)
    _answer(nb_path, first, ANSWER)
    assert written_work(release, source) == [
        f"layernorm.ipynb: answer cell {first} differs from the stub nbgrader generated"]
    nb = nbformat.read(nb_path, 4)
    nb.cells.append(nbformat.v4.new_code_cell("print('my scratch')"))
    nb.cells.append(nbformat.v4.new_markdown_cell(""))  # an empty cell holds nothing
    nbformat.write(nb, nb_path)
    (release / "notes.md").write_text("what I tried\n")
    assert written_work(release, source) == [
        f"layernorm.ipynb: answer cell {first} differs from the stub nbgrader generated; 1 cell added",
        "notes.md: a file source/ does not have"]
    # a notebook the student broke is still theirs
    nb_path.write_text(nb_path.read_text()[:-50])
    (broken,) = [w for w in written_work(release, source) if w.startswith("layernorm.ipynb")]
    assert broken.startswith("layernorm.ipynb: not a notebook nbgrader can read"), broken


def _stage(tree: CourseTree, lines: list, run_id: str = "run-1"):
    from grader.batch import Services
    from grader.options import GradeOptions

    b = pipeline.Batch(options=GradeOptions(course_root=tree.root, jobs=1, fresh=False, use_sandbox=False),
                       services=Services(tree=tree, log=lines.append, run_id=run_id, command="test", jobs=1),
                       run=pipeline.GradeRun(course_root=tree.root, assignments=["layernorm"]))
    pipeline.generate(b)
    return lines


def test_make_grades_generate_keeps_a_release_with_answers_under_logs_and_says_where(course_copy):
    tree = CourseTree(course_copy)
    release = course_copy / "release" / "layernorm"
    committed = _files(release)
    first = _answer_ids(release / "layernorm.ipynb")[0]
    _answer(release / "layernorm.ipynb", first, ANSWER)
    (release / "scratch.py").write_text("x = 1\n")
    students = _files(release)
    lines = _stage(tree, [])
    kept = course_copy / "logs" / "release-kept" / "run-1" / "layernorm"
    assert lines[1] == (f"generate: release/layernorm held work written in it (layernorm.ipynb: answer cell "
                        f"{first} differs from the stub nbgrader generated; scratch.py: a file source/ does "
                        "not have): moved to logs/release-kept/run-1/layernorm/, then release/layernorm was "
                        "generated again from source/layernorm"), lines
    assert _files(kept) == students  # the student's folder, byte for byte
    assert _files(release) == committed  # and release/ is what nbgrader generates
    # make clean keeps it (it is someone's work, not grading state)
    pipeline.clean(course_copy)
    assert _files(kept) == students
    # a stale release that holds no work: regenerated, and said so
    src = course_copy / "source" / "layernorm" / "layernorm.ipynb"
    nb = nbformat.read(src, 4)
    next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("locked")).source += "\n# changed"
    nbformat.write(nb, src)
    lines = _stage(tree, [], "run-2")
    assert lines[1:] == ["generate: release/layernorm was stale and has been regenerated from source/layernorm "
                         "(it held no work: every cell as nbgrader generated it)"], lines
    assert not (course_copy / "logs" / "release-kept" / "run-2").exists()


def _grader(course: Path, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PATH=os.pathsep.join([os.path.dirname(sys.executable), os.environ["PATH"]]))
    return subprocess.run([sys.executable, "-m", "grader", "release", "--course-root", str(course), *args],
                          cwd=REPO, capture_output=True, text=True, env=env, timeout=300)


def test_make_release_refuses_a_release_with_answers_and_keeps_it_with_keep(course_copy):
    release = course_copy / "release" / "layernorm"
    committed = _files(release)
    first = _answer_ids(release / "layernorm.ipynb")[0]
    _answer(release / "layernorm.ipynb", first, ANSWER)
    students = _files(release)
    out = _grader(course_copy, "layernorm")
    assert out.returncode == 1, out.stdout + out.stderr
    assert out.stderr.startswith("error: release/layernorm holds work written in it, which this would destroy:\n"
                                 f"  layernorm.ipynb: answer cell {first} differs from the stub nbgrader "
                                 "generated\nNothing was written. Move release/layernorm somewhere outside "
                                 "release/, then run `make release` again; or run `make release KEEP=1`"), out.stderr
    assert _files(release) == students
    out = _grader(course_copy, "layernorm", "--keep")
    assert out.returncode == 0, out.stdout + out.stderr
    (kept,) = (course_copy / "logs" / "release-kept").glob("*/layernorm")
    assert f"moved to {kept.relative_to(course_copy)}/ before it was regenerated" in out.stdout, out.stdout
    assert _files(kept) == students and _files(release) == committed
    # with nothing written there, make release regenerates as nbgrader would
    out = _grader(course_copy, "layernorm")
    assert out.returncode == 0 and _files(release) == committed, out.stdout + out.stderr


def _student_repo():
    spec = importlib.util.spec_from_file_location("student_repo", REPO / "tools" / "student_repo.py")
    mod = sys.modules.setdefault("student_repo", importlib.util.module_from_spec(spec))
    spec.loader.exec_module(mod)
    return mod


def _git_course(tmp_path: Path) -> Path:
    import shutil

    repo = tmp_path / "repo"
    repo.mkdir()
    for name in ("source", "release", "normref"):
        shutil.copytree(REPO / name, repo / name, ignore=shutil.ignore_patterns("__pycache__"))
    (repo / "README.md").write_text("# course\n")
    subprocess.run(["git", "init", "-q"], cwd=repo, check=True)
    return repo


def test_make_student_repo_refuses_to_publish_or_replace_answers(tmp_path):
    sr = _student_repo()
    repo = _git_course(tmp_path)
    nb_path = repo / "release" / "rmsnorm" / "rmsnorm.ipynb"
    pristine = nb_path.read_bytes()
    first = _answer_ids(nb_path)[0]
    _answer(nb_path, first, "def rms_norm(x, weight, eps=1e-6):\n    return x\n")
    with pytest.raises(sr.ExportError, match=r"(?s)exporting it would hand that work to every student.*"
                       f"release/rmsnorm/rmsnorm.ipynb: answer cell {first} differs.*Nothing was exported"):
        sr.export_student_repo(tmp_path / "out", repo=repo)
    assert not (tmp_path / "out").exists()
    nb_path.write_bytes(pristine)
    sr.export_student_repo(tmp_path / "out", repo=repo)
    # a student worked in the export (a clone of the published repository): --replace refuses
    exported = tmp_path / "out" / "release" / "rmsnorm" / "rmsnorm.ipynb"
    _answer(exported, first, "def rms_norm(x, weight, eps=1e-6):\n    return x * 2\n")
    digest = hashlib.sha256(exported.read_bytes()).hexdigest()
    with pytest.raises(sr.ExportError, match=r"(?s)replacing this export would delete it.*answer cell"):
        sr.export_student_repo(tmp_path / "out", repo=repo, replace=True)
    assert hashlib.sha256(exported.read_bytes()).hexdigest() == digest


def test_the_demo_class_never_copies_the_courses_release(tmp_path):
    """``make grade`` (the demo) grades in build/demo-course/: its release/ is generated there from
    source/, so a student's answers in the course's release/ are neither copied nor graded."""
    import shutil

    from grader.demo import demo_course

    root = tmp_path / "course"
    root.mkdir()
    shutil.copy(REPO / "nbgrader_config.py", root)
    for name in ("source", "release"):
        shutil.copytree(REPO / name, root / name)
    demo = demo_course(root)
    (demo / "release" / "old").mkdir(parents=True)  # left by an earlier demo run: build output
    demo = demo_course(root)
    assert _files(demo / "source") == _files(root / "source")
    assert not (demo / "release").exists()
