"""Where a grading run's hand-back files are: one name each, for everyone who needs them.

The grader (:mod:`grader.scoring` writes the files, :mod:`grader.cluster` carries them to a
Dask worker, :mod:`grader.sandbox` binds the inputs read-only into the kernel's sandbox),
``nbgrader_config.py``'s ``HandbackKeys`` preprocessor (reads the keys) and the grading kernel
(:mod:`normref.handback` reads the inputs). Standard library only, so that
``nbgrader_config.py`` imports it without numpy.
"""
import os

#: Environment variable naming the folder of a run's graded inputs (``logs/handback``).
HANDBACK_ENV = "NORMREF_HANDBACK_DIR"
#: The folder, beside the inputs' folder (``logs/scoring``), of the run's seeds and keys: outside
#: every sandbox.
SCORING_DIR = "scoring"
#: The run's question keys (``{grade_id: hex}``), in :data:`SCORING_DIR`.
KEYS_FILE = "handback-keys.json"
#: The keys file relative to the inputs' folder: ``../scoring/handback-keys.json``.
KEYS_FROM_INPUTS = os.path.join(os.pardir, SCORING_DIR, KEYS_FILE)

__all__ = ["HANDBACK_ENV", "SCORING_DIR", "KEYS_FILE", "KEYS_FROM_INPUTS"]
