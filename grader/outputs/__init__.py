"""What goes out: the class report (:mod:`.report`, its plots :mod:`.report_plots`, its template in
``templates/``; groups of wrong answers :mod:`.groups`, similar submissions :mod:`.similarity`, the
review section :mod:`.review`), the LMS's files (:mod:`.lms`) and the terminal's table
(:mod:`.table`)."""
