"""Where the autograde tasks run: one task per submission (:mod:`.task`: nbgrader's autograde in a
scratch course, the clean room, the grade rows back) on one engine (:mod:`.engine`: this machine's
process pool, or a Dask cluster, :mod:`.cluster`)."""
