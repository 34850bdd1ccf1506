"""The stages of a grading run, one file each, each a function of the run's
:class:`~grader.batch.Batch`; :data:`grader.pipeline.STAGES` lists them in order:

``check`` (refuse bad input, nothing written) -> ``canary`` (:mod:`grader.stages.canary`: the
instructor's solutions through this run's own stages) -> ``prepare`` (a backup, or starting
over) -> ``generate`` -> ``collect`` -> ``repair`` -> ``inputs`` (drawn from a secret seed) ->
``autograde`` -> ``scoring`` (outside the kernels) -> ``feedback`` -> ``export`` -> ``score`` ->
``report``.
"""
