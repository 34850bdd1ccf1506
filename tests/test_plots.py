"""normref.plots: each figure draws the right numbers and carries title, axis labels, legend,
takeaway and alt text, in colour-blind-safe colours."""
import html

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from matplotlib.colors import to_hex

from normref import plots


def assert_readable(p: plots.Plot):
    """Every axes with data has a title, both axis labels and a legend or colour bar; the
    figure has a takeaway line and alt text; it renders to PNG and to an HTML <figure>."""
    main = [ax for ax in p.fig.axes if ax.get_label() != "<colorbar>"]
    colourbars = [ax for ax in p.fig.axes if ax.get_label() == "<colorbar>"]
    assert main
    for ax in main:
        assert ax.get_title(), ax
        assert ax.get_xlabel() and ax.get_ylabel(), ax
        assert "(" in ax.get_xlabel() + ax.get_ylabel()  # units or what the index counts
        if ax.images:  # a heat map is read through its labelled colour bar
            assert colourbars and "(" in colourbars[0].get_ylabel(), ax
        else:
            assert ax.get_legend() is not None, ax
    # the takeaway is not drawn in the image: the caption says it, and the image's alt text (a
    # reader who cannot see the image hears what it shows)
    drawn = [t.get_text() for t in [*p.fig.texts, p.fig._supxlabel, p.fig._suptitle] if t is not None]
    assert not any("Takeaway" in t for t in drawn), drawn
    assert_text_inside_figure(p.fig)
    assert len(p.alt) > 40
    assert p.png()[:8] == b"\x89PNG\r\n\x1a\n"
    h = p.to_html()
    assert "<figure" in h and "<figcaption>" in h
    assert f'alt="{html.escape(p.alt + " Takeaway: " + p.takeaway, quote=True)}"' in h
    assert h.count(html.escape(p.takeaway, quote=True)) == 2  # the alt text and the caption
    assert h.count("Takeaway") == 2 and p._repr_mimebundle_()["text/plain"].count("Takeaway") == 1
    assert "text/html" in p._repr_mimebundle_()


def assert_text_inside_figure(fig):
    """Nothing is cut off by the figure's edge (as the label "(unitless" was): each axes, as
    drawn with its title, axis labels, tick labels in view and legend, and each figure-level
    text (the takeaway), lies inside the canvas."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    canvas_agg = FigureCanvasAgg(fig)  # the renderer savefig uses (plots draw on no canvas)
    canvas_agg.draw()
    renderer = canvas_agg.get_renderer()
    canvas = fig.bbox
    parts = [(f"axes {ax.get_title()!r} / {ax.get_xlabel()!r}", ax.get_tightbbox(renderer))
             for ax in fig.axes if ax.get_visible()]
    parts += [(repr(t.get_text()[:60]), t.get_window_extent(renderer))
              for t in [*fig.texts, fig._supxlabel, fig._suptitle] if t is not None and t.get_text()]
    for what, box in parts:
        assert (box.x0 >= canvas.x0 - 1 and box.x1 <= canvas.x1 + 1 and box.y0 >= canvas.y0 - 1
                and box.y1 <= canvas.y1 + 1), (
            f"{what} is cut off: drawn at x {box.x0:.0f}..{box.x1:.0f}, y {box.y0:.0f}..{box.y1:.0f} "
            f"in a {canvas.width:.0f} x {canvas.height:.0f} px figure")


def used_colours(p: plots.Plot) -> set:
    out = set()
    for ax in p.fig.axes:
        for line in ax.get_lines():
            out.add(to_hex(line.get_color()))
        for c in ax.containers:
            for r in c:
                out.add(to_hex(r.get_facecolor()))
    return out


def test_token_plot_of_the_seed_example():
    p = plots.plot_token([1.0, 2.0, 3.0])
    assert_readable(p)
    np.testing.assert_allclose(p.data["y"], [-1.2247357, 0.0, 1.2247357], atol=1e-6)  # eps = 1e-5
    assert p.data["mean_x"] == 2.0 and p.data["std_x"] == pytest.approx(np.sqrt(2 / 3))
    assert "mean to 0.000 and the std to 1.000" in p.takeaway
    okabe = {c.lower() for c in plots.OKABE_ITO.values()}
    assert used_colours(p) - {"#000000"} <= okabe


def test_rms_token_plot_says_the_mean_is_not_zero():
    p = plots.plot_token([1.0, 2.0, 3.0], norm="rms")
    np.testing.assert_allclose(p.data["y"], np.array([1, 2, 3]) / np.sqrt(14 / 3), rtol=1e-6)
    assert "mean stays 0.926, not 0" in p.takeaway


def test_batch_plot_normalises_each_token_on_its_own():
    x = plots.demo_batch()
    assert x.shape == (2, 3, 8)
    p = plots.plot_batch_before_after(x)
    assert_readable(p)
    want = F.layer_norm(torch.tensor(x), (8,), eps=1e-5).numpy()
    np.testing.assert_allclose(p.data["y"], want, atol=1e-10)
    assert p.data["y"].shape == (2, 3, 8)
    np.testing.assert_allclose(p.data["mean_y"], 0, atol=1e-12)
    sx = x.reshape(6, 8).std(-1)
    np.testing.assert_allclose(p.data["std_y"], sx / np.sqrt(sx ** 2 + 1e-5), rtol=1e-10)  # ~1, eps
    assert np.ptp(p.data["std_x"]) > 1.0 and np.ptp(p.data["mean_x"]) > 2.0  # the input differs per token
    assert "shape [2, 3, 8] is unchanged" in p.takeaway
    # the heat maps show exactly the input and the output, one row per token
    ims = [ax.images[0].get_array() for ax in p.fig.axes if ax.images]
    np.testing.assert_allclose(ims[0], x.reshape(6, 8))
    np.testing.assert_allclose(ims[1], want.reshape(6, 8), atol=1e-10)


@pytest.mark.parametrize("norm, word, stat", [("layer", "std", "std_y"), ("rms", "RMS", "rms_y")])
def test_batch_plot_plots_the_statistic_its_takeaway_names(norm, word, stat):
    """The claim is computed from what is plotted: RMSNorm's figure says "ends with RMS ..."
    and plots each token's RMS (not its std), LayerNorm's says and plots the std."""
    x = plots.demo_batch()
    p = plots.plot_batch_before_after(x, norm=norm)
    assert_readable(p)
    ax = p.fig.axes[2]
    by_label = {line.get_label(): line.get_xdata() for line in ax.get_lines() if not line.get_label().startswith("_")}
    assert set(by_label) == {"mean before", f"{word} before", "mean after", f"{word} after"}, by_label
    y = p.data["y"].reshape(6, 8)
    want = y.std(-1) if norm == "layer" else np.sqrt((y ** 2).mean(-1))  # independently of the plot
    np.testing.assert_allclose(by_label[f"{word} after"], want, rtol=1e-12)
    assert f"ends with {'mean' if norm == 'layer' else 'RMS'} " in p.takeaway and word in ax.get_title()
    lo, hi = want.min(), want.max()
    assert (f"{lo:.3f}" in p.takeaway) and (f"{hi:.3f}" in p.takeaway or f"{lo:.3f}" == f"{hi:.3f}"), p.takeaway


def test_changing_one_token_changes_only_its_own_output():
    x = plots.demo_batch()
    for norm in ("layer", "rms"):
        for b, t in ((0, 0), (1, 2)):
            x2 = x.copy()
            x2[b, t, 0] += 5.0  # one feature of one token
            y = plots.plot_batch_before_after(x, norm=norm).data["y"]
            y2 = plots.plot_batch_before_after(x2, norm=norm).data["y"]
            changed = np.abs(y2 - y).max(axis=-1) > 0  # [B, T]
            want = np.zeros((2, 3), dtype=bool)
            want[b, t] = True
            assert changed.tolist() == want.tolist(), norm


def test_batch_plot_rms():
    p = plots.plot_batch_before_after(norm="rms")
    want = F.rms_norm(torch.tensor(p.data["x"]), (8,), eps=1e-6).numpy()
    np.testing.assert_allclose(p.data["y"], want, atol=1e-10)
    np.testing.assert_allclose(p.data["rms_y"], 1, atol=1e-5)
    assert np.abs(p.data["mean_y"]).max() > 0.3


@pytest.mark.parametrize("bad, match", [(np.zeros((2, 8)), r"\[B, T, D\]")])
def test_batch_plot_rejects_non_3d(bad, match):
    with pytest.raises(ValueError, match=match):
        plots.plot_batch_before_after(bad)


def test_timing_plot_reports_the_ratio_it_was_given():
    timing = {"shape": (8, 64, 256), "rows": [
        {"impl": "eager ops (normref)", "layer_us": 160.0, "rms_us": 80.0},
        {"impl": "fused (torch.nn.functional)", "layer_us": 60.0, "rms_us": 75.0}]}
    p = plots.plot_timing(timing)
    assert_readable(p)
    assert p.data["ratio"] == {"eager ops (normref)": 0.5, "fused (torch.nn.functional)": 1.25}
    assert "eager ops 0.50x, fused 1.25x" in p.takeaway
    heights = sorted(r.get_height() for c in p.fig.axes[0].containers for r in c)
    assert heights == [60.0, 75.0, 80.0, 160.0]


def test_placement_plots_compute_their_takeaways():
    p = plots.plot_grad_norms({"pre": [1.0, 1.1, 0.9, 1.0], "post": [0.1, 0.5, 1.0, 2.0]})
    assert_readable(p)
    assert p.data["ratio"] == {"pre": 1.0, "post": 20.0}
    assert "Post-LN 20.00x, Pre-LN 1.00x" in p.takeaway and "gets 2.0x more gradient" in p.takeaway
    assert p.fig.axes[0].get_yscale() == "log"
    r = plots.plot_residual_norms({"pre": [5.0, 7.0, 9.0], "post": [5.7, 5.7, 5.7]})
    assert_readable(r)
    assert "(5.0 -> 9.0)" in r.takeaway and "its norm stays at 5.70" in r.takeaway
    curves = {("pre", False): np.linspace(4, 2, 30), ("post", False): np.linspace(4, 3.5, 30),
              ("pre", True): np.linspace(4, 2.2, 30), ("post", True): np.linspace(4, 2.1, 30),
              "optimal": 2.0, "unigram": 3.6}
    t = plots.plot_training(curves)
    assert_readable(t)
    assert t.data["final"][("post", False)] == pytest.approx(np.linspace(4, 3.5, 30)[-10:].mean())
    # 3.5 + 0.5 * 4.5 / 29 = 3.578: within 0.15 of the frequency guess 3.6, so it "stalls"
    assert "Post-LN without warmup stalls at 3.58 nats" in t.takeaway
    assert "mean loss of the last 10 steps" in t.takeaway
    assert len(t.fig.axes[0].get_lines()) == 4 + 2  # the four runs, ln 2 and the frequency guess


@pytest.mark.parametrize("finals, says, never", [
    # depth 6 as measured: Post-LN stalls without warmup, gets partway with it
    ((0.75, 2.40, 1.06), ["Pre-LN without warmup trains to 0.75", "Post-LN without warmup stalls at 2.40",
                          "Post-LN with warmup gets to 1.06 nats, partway", "Warmup lets Post-LN train"],
     ["needs no warmup", "does not rescue"]),
    # depth 2 as measured: everything trains
    ((0.73, 0.75, 0.76), ["Post-LN without warmup trains to 0.75", "Post-LN needs no warmup"],
     ["stalls", "Warmup lets", "does not rescue"]),
    # depth 10 as measured: Post-LN stalls with warmup too
    ((0.76, 2.40, 2.40), ["Post-LN with warmup stalls at 2.40", "Warmup of this length does not rescue Post-LN"],
     ["Warmup lets", "needs no warmup", "gets to"]),
])
def test_the_training_takeaway_says_what_each_run_shows(finals, says, never):
    """Every branch of the template: what it says is what the numbers show, and nothing else."""
    final = dict(zip([("pre", False), ("post", False), ("post", True)], finals))
    take = plots.training_takeaway(final, float(np.log(2)), 2.40, 6)
    for s in says:
        assert s in take, take
    for s in never:
        assert s not in take, take


def test_grad_plot_takeaway_is_true_whichever_way_the_numbers_go():
    more_pre = plots.plot_grad_norms({"pre": [0.2, 0.3], "post": [0.2, 0.1]},
                                     {"depths": [1, 16], "pre": [0.2, 0.05], "post": [0.2, 0.05]})
    assert "gets 3.0x more gradient in Pre-LN" in more_pre.takeaway and "Post-LN's shrinks 4.0x" in more_pre.takeaway
    same = plots.plot_grad_norms({"pre": [0.2, 0.2], "post": [0.2, 0.201]})
    assert "about the same gradient in both" in same.takeaway


def test_grad_plot_with_the_depth_sweep_panel():
    sweep = {"depths": [1, 4, 16], "pre": [0.2, 0.1, 0.05], "post": [0.2, 0.2, 0.2]}
    p = plots.plot_grad_norms({"pre": [0.2, 0.1], "post": [0.2, 0.2]}, sweep)
    assert_readable(p)
    assert len(p.fig.axes) == 2 and p.fig.axes[1].get_xscale() == "log"
    assert p.data["post_over_pre_last"] == 4.0
    assert "shrinks 4.0x" in p.takeaway
    ref = p.fig.axes[1].get_lines()[-1]  # the 1/sqrt(L) guide starts at Pre-LN's first point
    np.testing.assert_allclose(ref.get_ydata(), [0.2, 0.1, 0.05])
