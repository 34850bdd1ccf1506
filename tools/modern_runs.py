"""Write lesson 04's trained runs, ``normref/data/modern_runs.json``: what
``normref.modern_experiments.lesson_runs()`` reads, so that the lesson runs in seconds.

    .venv/bin/python tools/modern_runs.py      # about 20 s of one core

Run it after changing anything the runs depend on (the tiny model, the learning rates, the
configurations, the seeds: ``lesson_runs`` refuses a file made with other settings), and commit
the file. ``tests/test_modern.py`` trains the runs again and checks the file against them.
"""
from __future__ import annotations

import sys

from normref.modern_experiments import write_lesson_runs

if __name__ == "__main__":
    path = write_lesson_runs()
    print(f"wrote {path} ({path.stat().st_size / 1024:.0f} KiB)")
    sys.exit(0)
