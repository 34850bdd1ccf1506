"""The stages of a grading run, each a function of the run's :class:`~grader.batch.Batch`;
:data:`grader.pipeline.STAGES` lists them in order.

* :mod:`grader.stages.prepare`: ``prepare`` and ``generate``;
* :mod:`grader.stages.collect`: ``collect`` (and which submissions this run grades);
* :mod:`grader.stages.grade`: ``repair``, and ``scoring`` with the record of what is graded;
* :mod:`grader.stages.autograde`: ``autograde`` (its engine, the sandbox, hand grades carried over);
* :mod:`grader.stages.output`: ``feedback``, ``export``, ``score`` and ``report``.

``inputs`` is :func:`grader.scoring.inputs_stage`.
"""
