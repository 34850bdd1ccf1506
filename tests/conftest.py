import os
import shutil
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

# nbgrader runs `alembic` from PATH: make the venv's bin/ visible even when pytest is run directly.
os.environ["PATH"] = os.pathsep.join([os.path.dirname(sys.executable), os.environ.get("PATH", "")])


@pytest.fixture
def course_copy(tmp_path: Path) -> Path:
    """A throwaway nbgrader course root: the repo's config, source/ and release/."""
    root = tmp_path / "course"
    root.mkdir()
    shutil.copy(REPO / "nbgrader_config.py", root)
    shutil.copytree(REPO / "source", root / "source")
    shutil.copytree(REPO / "release", root / "release")
    return root
