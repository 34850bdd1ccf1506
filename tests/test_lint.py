"""ruff keeps the code clean (pyflakes and pycodestyle at 120 columns; config in pyproject.toml)."""
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_ruff_check_finds_nothing():
    out = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", "--output-format", "concise",
                          "--extend-exclude", "*.ipynb", "normref", "grader", "tests", "tools",
                          "source", "release"],  # the assignment folders' grading.py, answer_bank.py, self-checks
                         cwd=REPO, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, f"ruff check found problems (fix them; `ruff check --fix` fixes some):\n" \
                                f"{out.stdout}{out.stderr}"
