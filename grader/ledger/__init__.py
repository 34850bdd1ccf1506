"""The course's records: its folders (:mod:`.course`), nbgrader's apps run in process (:mod:`.apps`),
the gradebook (:mod:`.database`), the run lock and backups (:mod:`.state`), the records under
``logs/`` (:mod:`.store`), hand grades across resubmissions (:mod:`.handgrades`), ``clean`` and
``restore`` (:mod:`.reset`), and the work written in ``release/`` (:mod:`.release`)."""
