"""release/ is exactly what `nbgrader generate_assignment` makes from source/."""
import subprocess
import sys

import pytest


@pytest.mark.slow
def test_release_is_generated_from_source(course_copy):
    committed = {p.relative_to(course_copy): p.read_bytes()
                 for p in (course_copy / "release").rglob("*") if p.is_file()}
    for a in sorted(p.name for p in (course_copy / "source").iterdir() if p.is_dir()):
        subprocess.run([sys.executable, "-m", "nbgrader", "generate_assignment", a, "--force"],
                       cwd=course_copy, check=True, capture_output=True)
    fresh = {p.relative_to(course_copy): p.read_bytes() for p in (course_copy / "release").rglob("*") if p.is_file()}
    assert fresh == committed, "release/ drifted from source/: run `make release` and commit"
