"""Where a grading run's hand-back inputs are: one name each, for everyone who needs them.

The grader (:func:`grader.scoring.inputs.prepare_inputs` writes the file, :mod:`grader.autograde.cluster`
carries it to a Dask worker) and ``nbgrader_config.py``'s ``HandbackInputs`` preprocessor
(reads it and writes each question's inputs into its hidden test); no grading kernel reads it
(:mod:`grader.kernel.sandbox` gives a kernel neither the file nor the variable). Standard library only,
so that ``nbgrader_config.py`` imports it without numpy.
"""

#: Environment variable naming a run's inputs file, for nbgrader's autograde (outside the kernels).
HANDBACK_ENV = "NORMREF_HANDBACK_INPUTS"
#: The folder, in ``logs/``, of the run's seeds and inputs: outside every sandbox.
SCORING_DIR = "scoring"
#: The run's graded inputs (``{grade_id: text}``, :func:`normref.wire.dump_inputs`), in
#: :data:`SCORING_DIR`, mode 0600.
INPUTS_FILE = "handback-inputs.json"

__all__ = ["HANDBACK_ENV", "SCORING_DIR", "INPUTS_FILE"]
