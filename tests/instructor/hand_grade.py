"""Enter hand grades as formgrader's Manual Grading page does (nbgrader's Gradebook API:
the same Grade.manual_score / Comment.manual_comment formgrader's REST handler writes)."""
import sys
from nbgrader.api import Gradebook

db, assignment, notebook, grade_id = sys.argv[1:5]
with Gradebook(f"sqlite:///{db}") as gb:
    for pair in sys.argv[5:]:
        student, score = pair.split("=")
        g = gb.find_grade(grade_id, notebook, assignment, student)
        g.manual_score = float(score)
        g.needs_manual_grade = False  # formgrader apihandlers.GradeHandler.put does this
        c = gb.find_comment(grade_id, notebook, assignment, student)
        c.manual_comment = f"hand-graded {score} by the instructor for {student}"
        gb.db.commit()
        print(student, grade_id, g.score, "/", g.max_score, "needs_manual_grade:", g.needs_manual_grade)
