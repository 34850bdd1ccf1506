"""What comes in: collecting submissions (:mod:`.collect`; LMS file names, :mod:`.lms_names`; grading
``submitted/`` in place, :mod:`.inplace`), reading any file as a notebook (:mod:`.notebooks`),
repairing broken notebooks (:mod:`.repair`), the tamper scan (:mod:`.tamper`) and what was handed in
beside a notebook (:mod:`.handed_in`)."""
