"""``make bench``: figures, not tests (run from the repository root: ``python -m tools.bench``).

- :mod:`tools.bench.__main__`: ``make grade`` against plain sequential nbgrader on the demo class;
- :mod:`tools.bench.base`: the plain-nbgrader baseline and a scratch copy of the course;
- :mod:`tools.bench.kernels`: one graded notebook's start-up, cells and shutdown in core-seconds;
- :mod:`tools.bench.warm`: warm kernels against fresh ones, and the engines' CPU per notebook;
- :mod:`tools.bench.canary`: what the canary costs.
"""
