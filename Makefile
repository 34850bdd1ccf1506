# Lesson 16 course: normalization in the transformer block.
# `make lab` (students), `make lab-instructor` and `make grade` (instructors), `make test` (everyone).
PYTHON ?= $(shell command -v python3.11 || command -v python3)
# The interpreter of the shared student environment (`make hub-env`): the first python3.11 (on
# PATH, then /usr/local/bin, /usr/bin) that every user can run, i.e. whose real file and each
# folder above it others may enter (a pyenv shim under a private home is skipped); if none is,
# PYTHON. The course's own .venv keeps PYTHON (only the instructor runs it).
HUB_PYTHON ?= $(shell for p in $$(command -v python3.11) /usr/local/bin/python3.11 /usr/bin/python3.11; do f=$$(readlink -f "$$p" 2>/dev/null) || continue; test -x "$$f" || continue; \
	ok=1; d="$$f"; while [ "$$d" != / ]; do case $$(stat -Lc %A "$$d") in (*x|*t) ;; (*) ok=;; esac; \
	d=$$(dirname "$$d"); done; [ -n "$$ok" ] && { echo "$$f"; exit 0; }; done; echo "$(PYTHON)")
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# nbgrader runs `alembic` from PATH when it creates a gradebook.
export PATH := $(CURDIR)/$(BIN):$(PATH)
SUBMISSIONS ?=
JOBS ?=
DUEDATE ?=
FRESH ?=
YES ?=
# a Dask scheduler (tcp://HOST:8786) for the autograde tasks; a gradebook database URL (PostgreSQL)
SCHEDULER ?=
DB ?=
LMS_GRADEBOOK ?=
# GROUPS=0: the class report without its groups of wrong answers (--no-groups)
GROUPS ?= 1

.PHONY: install lab lab-instructor test grade release bench clean student-repo screenshots notebooks hub-env site

install: $(STAMP)

# tools/grading-kernels: the grader's warm-kernel provisioner for jupyter_client (grader/kernel/warm.py);
# instructors only (the student repository has no tools/)
GRADING_KERNELS := $(wildcard tools/grading-kernels/pyproject.toml tools/grading-kernels/*.py)
$(STAMP): pyproject.toml $(GRADING_KERNELS)
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e ".[test]"
	@rm -rf tools/grading-kernels/build  # setuptools builds in the folder: a stale build/ would be reinstalled
	$(if $(GRADING_KERNELS),$(BIN)/python -m pip install --quiet --no-deps --force-reinstall tools/grading-kernels)
	@touch $(STAMP)

# The student view, as Binder serves it: `start` puts jupyter-student/ on JUPYTER_CONFIG_PATH
# (opens notebooks/00_start.ipynb; no nbgrader instructor panels or formgrader; lesson sources
# hidden). The instructor view: nbgrader's panels and formgrader, lesson .md files open as
# notebooks (jupyter-instructor/). Jupyter refuses to run as root without --allow-root.
ALLOW_ROOT := $(if $(filter 0,$(shell id -u)),--allow-root)
lab: $(STAMP)
	./start $(BIN)/jupyter lab --ServerApp.root_dir="$(CURDIR)" $(ALLOW_ROOT)

lab-instructor: $(STAMP)
	JUPYTER_CONFIG_PATH="$(CURDIR)/jupyter-instructor$${JUPYTER_CONFIG_PATH:+:$$JUPYTER_CONFIG_PATH}" \
		$(BIN)/jupyter lab --ServerApp.root_dir="$(CURDIR)" \
		--LabApp.default_url=/lab/tree/notebooks/00_start.ipynb $(ALLOW_ROOT)

test: $(STAMP)
	$(BIN)/python -m pytest

grade: $(STAMP)
	$(BIN)/python -m grader $(if $(SUBMISSIONS),--submissions "$(SUBMISSIONS)") $(if $(JOBS),--jobs $(JOBS)) \
		$(if $(DUEDATE),--duedate "$(DUEDATE)") $(if $(FRESH),--fresh) $(if $(YES),--yes) \
		$(if $(LMS_GRADEBOOK),--lms-gradebook "$(LMS_GRADEBOOK)") \
		$(if $(SCHEDULER),--scheduler "$(SCHEDULER)") $(if $(DB),--db "$(DB)") $(if $(filter 0 no,$(GROUPS)),--no-groups) \
		$(if $(and $(STUDENTS),$(if $(SUBMISSIONS),,1)),--demo-students $(STUDENTS))

# Figures, not a test: make grade vs plain sequential nbgrader on the demo class.
bench: $(STAMP)
	$(BIN)/python -m tools.bench $(if $(JOBS),--jobs $(JOBS)) $(if $(STUDENTS),--students $(STUDENTS)) \
		$(if $(KERNELS_ONLY),--kernels-only) $(if $(REPS),--kernel-reps $(REPS) --reps $(REPS)) \
		$(if $(ENGINES_ONLY),--engines-only)

# The lesson notebooks from their MyST Markdown sources (edit notebooks/NN_name.md, run this,
# commit both; a test fails if they drift). tools/build_notebooks.py: jupytext, fixed ids, no outputs.
notebooks: $(STAMP)
	$(BIN)/python tools/build_notebooks.py

# Regenerate release/ from source/ with nbgrader (commit the result; a test checks they agree).
# A release/<assignment>/ holding work written in it (a student's answers) is refused, nothing
# regenerated; KEEP=1 moves it to logs/release-kept/<run>/ first (grader/ledger/release.py).
KEEP ?=
release: $(STAMP)
	$(BIN)/python -m grader release $(if $(KEEP),--keep)

# The student-facing tree (no source/, no solutions: checked) for a separate student repository.
# BINDER_REPO=OWNER/NAME points its Binder badge at that repository. See tools/student_repo.py.
STUDENT_REPO ?= build/student-repo
# HUB=1: for a JupyterHub's nbgitpuller, without release/ (students fetch from the exchange).
student-repo: $(STAMP)
	$(BIN)/python tools/student_repo.py "$(STUDENT_REPO)" --replace $(if $(BINDER_REPO),--binder-repo "$(BINDER_REPO)") \
		$(if $(filter-out 0,$(HUB)),--hub)

# The README's screenshots, from the browser test (tests/test_browser.py saves every screenshot,
# and the server log, under build/browser/).
SCREENSHOTS := start lesson-01_layernorm self-check
screenshots: $(STAMP)
	$(BIN)/python -m pytest tests/test_browser.py -q
	@mkdir -p docs/screenshots
	cp $(foreach s,$(SCREENSHOTS),build/browser/$(s).png) docs/screenshots/

# All grading state (grader.pipeline.GRADING_STATE), after a backup under logs/backups/ (kept, with
# logs/runs.jsonl); with real students graded here it asks first, or needs YES=1.
clean: $(STAMP)
	$(BIN)/python -m grader clean $(if $(YES),--yes)


# A JupyterHub's shared student environment (docs/HUB.md, "Deploy on JupyterHub"), apart from the course
# folder: a venv in PREFIX with this course installed non-editable plus the [hub] extra
# (jupyterhub-singleuser, nbgitpuller), the hub student view (PREFIX/etc/jupyter-hub-student),
# the exchange in PREFIX/etc/jupyter/nbgrader_config.py, readable and runnable by every user.
# Run as root (or the owner of PREFIX): sudo make hub-env PREFIX=/opt/normref-env
PREFIX ?= /opt/normref-env
EXCHANGE ?= /srv/nbgrader/exchange
# The course is built from a copy in a temporary folder: pip's build of it in place would leave a
# build/ and normref.egg-info/ here owned by whoever ran this (root), which the instructor who owns
# the course folder could then not replace (make student-repo writes build/student-repo).
hub-env:
	@test -x "$(PREFIX)/bin/python" || $(HUB_PYTHON) -m venv "$(PREFIX)"
	"$(PREFIX)/bin/python" -m pip install --quiet --upgrade pip
	@src=$$(mktemp -d) && trap 'rm -rf "$$src"' EXIT && cp -r pyproject.toml README.md normref "$$src/" && \
		echo '"$(PREFIX)/bin/python" -m pip install --quiet "<a copy of this course>[hub]"' && \
		"$(PREFIX)/bin/python" -m pip install --quiet "$$src[hub]" && \
		"$(PREFIX)/bin/python" -m pip install --quiet --no-deps --force-reinstall "$$src"
	"$(PREFIX)/bin/python" tools/hub_env.py "$(PREFIX)" --exchange "$(EXCHANGE)"

# The course website in build/site/ (open build/site/index.html; .github/workflows/site.yml publishes it
# to GitHub Pages on each push to main): the lessons executed now, the assignments' student versions
# (release/ only), launch buttons to SITE_REPO (the student repository, make student-repo) on Binder
# and, with HUB_URL, on the course's JupyterHub via nbgitpuller. Needs npm (MathJax, axe-core from
# site/package-lock.json, installed under build/site-node/). tools/build_site.py.
SITE_REPO ?= YOUR-ORG/lesson16-normalization
HUB_URL ?=
site: $(STAMP)
	$(BIN)/python tools/build_site.py --out build/site --repo "$(SITE_REPO)" $(if $(HUB_URL),--hub-url "$(HUB_URL)")
