"""Every lesson notebook runs top to bottom in a fresh kernel with no error output, shows the
seed's numbers computed by normref, renders its widgets and captioned figures, and hides the
self-check answers; notebooks are committed without outputs and equal what ``make notebooks``
(``tools/build_notebooks.py``) builds from their MyST Markdown sources ``notebooks/*.md``."""
import importlib.util
import re
import time
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

REPO = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((REPO / "notebooks").glob("*.ipynb"))
WIDGET_MIME = "application/vnd.jupyter.widget-view+json"

# The seed's numbers, as each lesson prints them (computed by normref in the cell), by notebook.
SEED_NUMBERS = {
    "00_start.ipynb": ["mean = 2.000", "variance = 0.6667", "its root = 2.160",
                       "LayerNorm(1, 2, 3) ~ [-1.225, 0.0, 1.225]", "RMSNorm(1, 2, 3)   ~ [0.463, 0.926, 1.389]",
                       "sqrt(2/3)", "n-1", "release/rmsnorm/rmsnorm.ipynb"],
    "01_layernorm.ipynb": ["mu = 2.000", "sigma^2 = 0.667 (2/3)",
                           "normref.layer_norm LN(1, 2, 3) ~ [-1.225, 0.0, 1.225]",
                           "output shape: [2, 3, 8]", "not implemented yet"],
    "02_rmsnorm.ipynb": ["RMS(1, 2, 3) = sqrt(14/3) ~ 2.160", "RMSNorm(1, 2, 3) ~ [0.463, 0.926, 1.389]",
                         "mean 0.926", "shape: [2, 3, 8] -> [2, 3, 8]", "identical to normref.rms_norm: True",
                         "output [1.0, -1.0, 1.0, -1.0] torch.float16", "x**2 = [inf, inf, inf, inf]",
                         "7%~64%"],
    "03_placement.ipynb": ["Pre-LN  Y = X + F(Norm(X))", "Post-LN Y = Norm(X + F(X))", "[2, 3, 8] -> [2, 3, 8]",
                           "std of each token after Post-LN: 1.000 to 1.000", "Adam, lr 0.015, 60 steps",
                           "Post-LN block: [2, 3, 8] -> [2, 3, 8], std of each output token 1.000 to 1.000"],
    # F(v) = v^2 on the seed token, by hand: Pre-LN x + LN(x)^2 = (1 + 3/2, 2, 3 + 3/2); Peri-LN
    # x + LN(3/2, 0, 3/2) = x + (1, -2, 1)/sqrt(2); a QK-normed logit of (1, 2, 3) is sqrt(3)
    "04_modern.ipynb": ["Pre-LN     x + F(Norm(x))        [2.5, 2.0, 4.5]",
                        "Peri-LN    x + Norm(F(Norm(x)))  [1.707, 0.586, 3.707]",
                        "= 8.083   (14 / sqrt(3))", "= 1.732   (3 / sqrt(3) = sqrt(3))",
                        "DyT(1, 2, 3), alpha 0.5 ~ [0.462, 0.762, 0.905]",
                        "at lr 0.1 Peri-LN ends below Pre-LN on every seed (0, 1, 2, 3, 4)",
                        "at lr 0.01 DeepNorm ends below Post-LN on every seed (0, 1, 2, 3, 4)", "no contrast here",
                        "largest loss of steps 1-10: Pre-LN", "on seeds [2, 4] of [0, 1, 2, 3, 4]"],
}
# How many widgets and captioned figures each lesson shows.
WIDGETS = {"00_start.ipynb": 0, "01_layernorm.ipynb": 1, "02_rmsnorm.ipynb": 3, "03_placement.ipynb": 7,
           "04_modern.ipynb": 1}
FIGURES = {"00_start.ipynb": 0, "01_layernorm.ipynb": 2, "02_rmsnorm.ipynb": 2, "03_placement.ipynb": 3,
           "04_modern.ipynb": 5}


def _text(nb) -> str:
    out = []
    for cell in nb.cells:
        for o in cell.get("outputs", []):
            if o.output_type == "stream":
                out.append(o.text)
            elif "data" in o:
                out.append(o.data.get("text/plain", ""))
                out.append(o.data.get("text/html", ""))
    return "\n".join(out)


@pytest.fixture(scope="module", params=NOTEBOOKS, ids=lambda p: p.name)
def executed(request):
    """(path, executed notebook, seconds): each notebook runs once for all the checks below."""
    path = request.param
    nb = nbformat.read(path, as_version=4)
    t0 = time.perf_counter()
    NotebookClient(nb, timeout=120, kernel_name="python3",
                   resources={"metadata": {"path": str(path.parent)}}).execute()
    seconds = time.perf_counter() - t0
    capman = request.config.pluginmanager.getplugin("capturemanager")
    with capman.global_and_fixture_disabled():
        print(f"\n[notebook run time] {path.name}: {seconds:.1f} s")
    return path, nb, seconds


@pytest.mark.slow
def test_notebook_runs_clean(executed):
    path, nb, _ = executed
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            assert out.output_type != "error", f"{path.name}: {out.get('ename')}: {out.get('evalue')}"
            assert not (out.output_type == "stream" and out.name == "stderr"), out.text


@pytest.mark.slow
def test_notebook_shows_the_seed_numbers(executed):
    path, nb, _ = executed
    text = _text(nb)
    for want in SEED_NUMBERS.get(path.name, []):
        assert want in text, f"{path.name}: expected {want!r} in the outputs"


@pytest.mark.slow
def test_widgets_and_captioned_figures_render(executed):
    path, nb, _ = executed
    n_widgets = sum(WIDGET_MIME in o.get("data", {}) for c in nb.cells for o in c.get("outputs", []))
    assert n_widgets == WIDGETS.get(path.name, n_widgets), path.name
    figures = [o.data["text/html"] for c in nb.cells for o in c.get("outputs", [])
               if "<img" in o.get("data", {}).get("text/html", "") and WIDGET_MIME not in o.data]
    assert len(figures) == FIGURES.get(path.name, len(figures)), path.name
    for html in figures:
        assert re.search(r'<img [^>]*alt="[^"]{40,} Takeaway: [^"]{20,}"', html), "alt text: what and takeaway"
        assert "<figcaption>" in html and "Takeaway:" in html


@pytest.mark.slow
def test_placement_notebook_shows_the_warmup_trend(executed):
    """The training plot's takeaway, as printed to the student: Post-LN without warmup stalls
    well above Pre-LN and above Post-LN with warmup (Xiong et al. 2020, Fig. 2)."""
    path, nb, _ = executed
    if path.name != "03_placement.ipynb":
        pytest.skip("the training run is in 03_placement")
    m = re.search(r"Pre-LN without warmup trains to (\d+\.\d+) nats.*; Post-LN without warmup stalls at "
                  r"(\d+\.\d+) nats.*; Post-LN with warmup gets to (\d+\.\d+) nats", _text(nb))
    assert m, "the training takeaway is missing"
    pre_cold, post_cold, post_warm = map(float, m.groups())
    assert pre_cold < 0.8  # near the optimum ln 2 = 0.693 (measured 0.75)
    assert post_cold > pre_cold + 1.0  # measured 2.40 vs 0.75
    assert post_cold > post_warm + 0.8  # measured 2.40 vs 0.95
    assert post_warm < 1.3


@pytest.mark.slow
def test_placement_notebook_says_what_the_stalled_curve_measures(executed):
    """Post-LN without warmup stalls (its loss stops falling), it does not diverge: the printed
    range after step 10 stays well under the first step's loss and well above ln 2."""
    path, nb, _ = executed
    if path.name != "03_placement.ipynb":
        pytest.skip("the training run is in 03_placement")
    m = re.search(r"Post-LN without warmup: loss (\d+\.\d+) nats at step 1, down to (\d+\.\d+) within 5 steps, "
                  r"then between (\d+\.\d+) and (\d+\.\d+) from step 11 to step 60", _text(nb))
    assert m, "the stalled curve's numbers are missing"
    first, early, low, high = map(float, m.groups())
    assert early < first and high < first  # it never comes back to where it started
    assert low > 0.693 + 1.0  # stays far above ln 2 = 0.693 (measured 2.25-2.64)
    source = "\n".join(c.source for c in nb.cells)
    assert "never recovers" not in source and "falls\napart" not in source and "falls apart" not in source


def test_no_lesson_prints_code_that_answers_a_graded_cell():
    """Lesson 03 printed inspect.getsource(TransformerBlock.forward), the answer to the block
    assignment's pre_ln, post_ln and PreNormBlock cells: no lesson prints normref's source."""
    for path in NOTEBOOKS:
        code = "\n".join(c.source for c in nbformat.read(path, as_version=4).cells if c.cell_type == "code")
        assert "getsource" not in code and "inspect" not in code, path.name
        assert "??" not in code, path.name  # IPython's source display


# Solution lines a lesson may show because the seed itself shows them: MiniMind's RMSNorm module,
# verbatim in lesson 02 ("Code checkpoint"), which is also the block assignment's RMSNorm.
SEED_CODE_SHOWN = {"self.eps = eps", "return (x.float() * rms * self.weight).to(dtype=x.dtype)"}


def _code_line(line: str) -> str:
    return " ".join(line.split("#")[0].split())


def test_lessons_show_no_graded_solution_line_beyond_the_seeds_code():
    """Lessons teach, assignments assess: no code cell of a lesson contains a line of a graded
    solution (source/*/, between BEGIN and END SOLUTION), except the seed's own code."""
    solutions = {}
    for path in sorted(REPO.glob("source/*/*.ipynb")):
        for cell in nbformat.read(path, as_version=4).cells:
            for region in re.findall(r"### BEGIN SOLUTION\n(.*?)### END SOLUTION", cell.source, re.S):
                for line in map(_code_line, region.splitlines()):
                    if len(line) >= 12:  # not `return x` or `)`
                        solutions[line] = f"{path.parent.name}: {cell.metadata['nbgrader']['grade_id']}"
    assert len(solutions) > 20, "no solutions found: did source/ move?"
    shown = sorted({(path.name, line, solutions[line]) for path in NOTEBOOKS
                    for cell in nbformat.read(path, as_version=4).cells if cell.cell_type == "code"
                    for line in map(_code_line, cell.source.splitlines())
                    if line in solutions and line not in SEED_CODE_SHOWN})
    assert shown == [], f"lessons show graded solution lines (lesson, line, graded cell): {shown}"
    seed = "\n".join(p.read_text() for p in (REPO.parent / "shared" / "seed").glob("*.txt"))
    if seed:  # the allowance is the seed's code, word for word
        assert all(line in seed for line in SEED_CODE_SHOWN)


def test_placement_notebook_reports_this_model_before_comparing_with_xiong():
    """Section (b): what this small model shows comes before what Xiong et al. report."""
    text = "\n".join(c.source for c in nbformat.read(REPO / "notebooks" / "03_placement.ipynb", as_version=4).cells)
    b = text[text.index("## (b)"):text.index("## (c)")]
    assert b.index("What this small model shows") < b.index("How it relates to Xiong et al.")
    assert b.index("plot_grad_norms") < b.index("Fig. 3") and b.index("plot_grad_norms") < b.index("Theorem 1")


def test_modern_notebook_reports_this_model_before_each_paper_and_names_its_sources():
    """Lesson 04: in every section, what this small model shows comes before how it relates to
    the papers; the models' table says where each row was read."""
    text = "\n".join(c.source for c in nbformat.read(REPO / "notebooks" / "04_modern.ipynb", as_version=4).cells)
    for a, b in (("## (a)", "## (b)"), ("## (b)", "## Explore"), ("## (d)", "## What this small model")):
        part = text[text.index(a):text.index(b)]
        assert part.index("What this small model shows") < part.index("How it relates to the paper"), a
    table = text[text.index("## What the models do"):text.index("## The five placements")]
    for model in ("GPT-2", "Llama 3", "Gemma 2", "Gemma 3", "OLMo 2", "Qwen 2 / 2.5", "Qwen 3"):
        row = next(line for line in table.splitlines() if line.startswith(f"| {model} |"))
        assert "modeling_" in row or "modular_" in row, row  # the file it was read from
    assert "not confirmed" in table.lower()


@pytest.mark.slow
def test_self_check_answers_stay_hidden(executed):
    path, nb, _ = executed
    assert "Standard answer:" not in _text(nb), f"{path.name} prints a self-check answer"


@pytest.mark.parametrize("path", sorted(REPO.glob("notebooks/*.ipynb")) + sorted(REPO.glob("source/*/*.ipynb")),
                         ids=lambda p: str(p.relative_to(REPO)))
def test_committed_without_outputs(path):
    nb = nbformat.read(path, as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "code":
            assert cell.outputs == [] and cell.execution_count is None, path


def _builder():
    spec = importlib.util.spec_from_file_location("build_notebooks", REPO / "tools" / "build_notebooks.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_every_lesson_notebook_has_its_markdown_source():
    builder = _builder()
    assert [p.with_suffix(".ipynb").name for p in builder.sources()] == [p.name for p in NOTEBOOKS]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_lesson_notebook_equals_what_make_notebooks_builds_from_its_markdown(path):
    committed = nbformat.read(path, as_version=4)
    built = _builder().build(path.with_suffix(".md"))
    assert [(c.cell_type, c.id, c.source, c.metadata) for c in committed.cells] == [
        (c.cell_type, c.id, c.source, c.metadata) for c in built.cells], (
        f"{path.name} differs from {path.with_suffix('.md').name}: edit the .md, run `make notebooks`, commit both")
    assert committed.metadata == built.metadata


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_lesson_notebook_says_which_file_to_edit(path):
    nb = nbformat.read(path, as_version=4)
    md = path.with_suffix(".md").name
    assert nb.metadata["lesson_source"]["path"] == f"notebooks/{md}"
    first = next(c for c in nb.cells if c.cell_type == "markdown").source.splitlines()
    # An HTML comment (students do not see it rendered), then the lesson's own title.
    assert first[0] == f"<!-- Generated from {md} by `make notebooks`: edit {md}, not this notebook. -->"
    assert first[1].startswith("# ")
    # The kernel ipykernel installs as "python3": JupyterLab starts it without a "Select Kernel" dialog.
    assert nb.metadata["kernelspec"]["name"] == "python3"


def test_saving_a_lesson_source_in_jupyterlab_writes_only_its_inputs(tmp_path):
    """What the README's "For lesson authors" promises: JupyterLab (jupytext's contents manager,
    as `make lab-instructor` runs it) opens a lesson .md as a notebook; saving it with outputs
    writes the same .md back (inputs only) and leaves the .ipynb beside it alone (no pairing)."""
    import asyncio
    import shutil

    from jupyter_server.services.contents.largefilemanager import AsyncLargeFileManager
    from jupytext.async_contentsmanager import build_async_jupytext_contents_manager_class

    for suffix in (".md", ".ipynb"):
        shutil.copy(REPO / "notebooks" / f"01_layernorm{suffix}", tmp_path)
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    cm = build_async_jupytext_contents_manager_class(AsyncLargeFileManager)(root_dir=str(tmp_path))

    async def open_run_save():
        model = await cm.get("01_layernorm.md")
        assert model["type"] == "notebook"
        code = next(c for c in model["content"]["cells"] if c["cell_type"] == "code")
        code["outputs"] = [{"output_type": "stream", "name": "stdout", "text": "ran\n"}]
        code["execution_count"] = 1
        await cm.save(model, "01_layernorm.md")

    asyncio.run(open_run_save())
    after = {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()}
    assert after == before


def test_markdown_source_keeps_cell_metadata_and_gets_fixed_ids(tmp_path):
    """The round trip an author relies on, with text written here (not from jupytext): cell
    metadata in MyST (nbgrader's included) reaches the notebook unchanged; ids follow the cell
    order; a ```python fence inside prose stays prose; nothing is executed or output."""
    src = tmp_path / "07_demo.md"
    src.write_text(
        "---\nkernelspec:\n  display_name: Python 3 (ipykernel)\n  language: python\n  name: python3\n---\n\n"
        "# 07 · Demo\n\nProse with a fence that is not a cell:\n\n```python\nx = 1\n```\n\n"
        "```{code-cell}\n:tags: [hide-input]\n\nprint(2 + 2)\n```\n\n"
        '+++ {"nbgrader": {"grade": false, "grade_id": "demo_note", "locked": true, "schema_version": 3, '
        '"solution": false, "task": false}}\n\nA locked note.\n')
    nb = _builder().build(src)
    assert [(c.cell_type, c.id) for c in nb.cells] == [("markdown", "07_demo-00"), ("code", "07_demo-01"),
                                                       ("markdown", "07_demo-02")]
    assert nb.cells[0].source.splitlines()[1:] == ["# 07 · Demo", "", "Prose with a fence that is not a cell:", "",
                                                   "```python", "x = 1", "```"]
    assert nb.cells[1].source == "print(2 + 2)" and nb.cells[1].metadata == {"tags": ["hide-input"]}
    assert nb.cells[1].outputs == [] and nb.cells[1].execution_count is None
    assert nb.cells[2].metadata["nbgrader"]["grade_id"] == "demo_note" and nb.cells[2].source == "A locked note."
    assert nb.metadata["lesson_source"]["path"] == "notebooks/07_demo.md"


def test_the_readme_and_each_lessons_last_paragraph_give_one_memory_figure():
    """A lesson's kernel memory is stated twice, in its last paragraph and in the README: one
    measured figure (tools/lesson_times.py, the kernel's VmHWM after Run All)."""
    readme = " ".join((REPO / "README.md").read_text().split())
    for md in sorted((REPO / "notebooks").glob("[0-9][0-9]_*.md")):
        text = " ".join(md.read_text().split())
        m = re.search(r"keeps its kernel running \(([^)]*?MiB) for this one, measured\)", text)
        assert m, f"{md.name}: its last paragraph states no measured kernel memory"
        assert f"lesson {md.name[:2]}: {m.group(1)}" in readme, (md.name, m.group(1))

