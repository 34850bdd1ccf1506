"""Scores computed outside the kernels: the course's questions (:mod:`.questions`, read from the
assignment folders), this run's graded inputs drawn from a secret seed (:mod:`.inputs`, the batteries'
shared draws in :mod:`.batteries`), and the scoring of the handed-back outputs through the same
checkers (:mod:`.scores`, with :mod:`.replay`'s stand-ins for the student's code)."""
