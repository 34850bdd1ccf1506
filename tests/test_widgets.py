"""normref.widgets: the explorer builds with no browser and its callbacks redraw the right numbers.

Every expected value comes from torch.nn.functional (float64) or from the seed's hand-worked
numbers, never from normref itself.
"""
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from normref.widgets import NormExplorer, fmt_vector, parse_readout


def ref_ln(x, gamma=1.0, beta=0.0, eps=1e-5):
    x = torch.tensor(x, dtype=torch.float64)
    d = x.shape[-1]
    return F.layer_norm(x, (d,), torch.full((d,), gamma, dtype=torch.float64),
                        torch.full((d,), beta, dtype=torch.float64), eps).numpy()


def ref_rms(x, gamma=1.0, eps=1e-6):
    x = torch.tensor(x, dtype=torch.float64)
    d = x.shape[-1]
    return F.rms_norm(x, (d,), torch.full((d,), gamma, dtype=torch.float64), eps).numpy()


def bars(ex):
    """Heights of the (input, output) bars drawn on the explorer's axes."""
    inp, out = ex.axes.containers
    return np.array([r.get_height() for r in inp]), np.array([r.get_height() for r in out])


@pytest.fixture
def ex():
    return NormExplorer(toggle=True)


def test_opens_on_the_seed_example_with_its_numbers(ex):
    got = parse_readout(ex.readout.value)
    assert got["norm"] == "LayerNorm"
    assert got["x"] == [1.0, 2.0, 3.0]
    assert got["y"] == [-1.225, 0.0, 1.225]  # the seed: (-1, 0, 1) / sqrt(2/3)
    assert got["mean(x)"] == 2.0 and got["std(x)"] == round(math.sqrt(2 / 3), 3)
    assert got["rms(x)"] == 2.160  # the seed: sqrt(14/3)
    assert got["mean(y)"] == 0.0 and got["std(y)"] == 1.0
    x_bars, y_bars = bars(ex)
    np.testing.assert_allclose(x_bars, [1, 2, 3])
    np.testing.assert_allclose(y_bars, ref_ln([1.0, 2.0, 3.0]), atol=1e-12)


def test_readout_has_the_documented_five_lines(ex):
    lines = ex.readout_text.splitlines()
    assert len(lines) == 5
    assert lines[0] == "norm = LayerNorm   gamma = 1.000   beta = 0.000   eps = 1.0e-05"
    assert lines[1] == "x = [1.000, 2.000, 3.000]"
    assert lines[3] == "y = [-1.225, 0.000, 1.225]"
    assert 'class="' not in ex.readout.value and ex.readout._dom_classes == ("normref-readout",)


def test_moving_a_feature_slider_redraws_bars_and_numbers(ex):
    png_before, n = ex.image.value, ex.renders
    ex.feature_sliders[0].value = 4.0
    want = ref_ln([4.0, 2.0, 3.0])
    assert ex.renders == n + 1 and ex.image.value != png_before
    np.testing.assert_allclose(ex.values["y"], want, atol=1e-12)
    x_bars, y_bars = bars(ex)
    np.testing.assert_allclose(x_bars, [4, 2, 3])
    np.testing.assert_allclose(y_bars, want, atol=1e-12)
    got = parse_readout(ex.readout.value)
    assert got["y"] == [round(v, 3) for v in want]  # [1.225, -1.225, 0.0]
    assert got["mean(x)"] == 3.0
    assert ex.values["mean_y"] == pytest.approx(0.0, abs=1e-12)
    assert ex.values["std_y"] == pytest.approx(1.0, abs=1e-5)


def test_gamma_and_beta_scale_and_shift_the_output(ex):
    ex.weight_slider.value = 2.0
    ex.bias_slider.value = 0.5
    want = ref_ln([1.0, 2.0, 3.0], gamma=2.0, beta=0.5)
    np.testing.assert_allclose(ex.values["y"], want, atol=1e-12)
    got = parse_readout(ex.readout.value)
    assert got["y"] == [round(v, 3) for v in want]  # 2 * (-1.225, 0, 1.225) + 0.5
    assert got["mean(y)"] == 0.5 and got["std(y)"] == 2.0


def test_large_eps_shrinks_the_output(ex):
    ex.eps_slider.value = 1.0
    want = ref_ln([1.0, 2.0, 3.0], eps=1.0)  # (-1, 0, 1) / sqrt(2/3 + 1) = +-0.775
    np.testing.assert_allclose(ex.values["y"], want, atol=1e-12)
    assert parse_readout(ex.readout.value)["y"] == [-0.775, 0.0, 0.775]


def test_toggle_to_rmsnorm_shows_the_seed_numbers_and_disables_beta(ex):
    ex.eps_slider.value = 1e-6
    ex.norm_toggle.value = "rms"
    got = parse_readout(ex.readout.value)
    assert got["norm"] == "RMSNorm" and got["beta"] == "unused"
    assert got["y"] == [0.463, 0.926, 1.389]  # the seed: (1, 2, 3) / sqrt(14/3)
    assert got["mean(y)"] == 0.926  # not forced to zero
    assert got["rms(y)"] == 1.0
    assert ex.bias_slider.disabled
    np.testing.assert_allclose(bars(ex)[1], ref_rms([1.0, 2.0, 3.0]), atol=1e-12)
    ex.bias_slider.value = 1.5  # beta has no effect on RMSNorm
    np.testing.assert_allclose(ex.values["y"], ref_rms([1.0, 2.0, 3.0]), atol=1e-12)
    ex.norm_toggle.value = "layer"
    assert not ex.bias_slider.disabled
    np.testing.assert_allclose(ex.values["y"], ref_ln([1.0, 2.0, 3.0], beta=1.5, eps=1e-6), atol=1e-12)


def test_controls_have_stable_descriptions():
    ex = NormExplorer(x=(2.0, 2.0, 4.0, 4.0))
    descs = [s.description for s in ex.feature_sliders]
    assert descs == ["x[0]", "x[1]", "x[2]", "x[3]"]
    assert (ex.weight_slider.description, ex.bias_slider.description, ex.eps_slider.description,
            ex.norm_toggle.description) == ("gamma", "beta", "eps", "norm")
    assert parse_readout(ex.readout.value)["y"] == [-1.0, -1.0, 1.0, 1.0]  # the seed's practice answer


def test_toggle_is_hidden_unless_asked():
    plain = NormExplorer()
    flat = []

    def walk(w):
        flat.append(w)
        for c in getattr(w, "children", ()):
            walk(c)

    walk(plain.widget)
    assert plain.norm_toggle not in flat and plain.feature_sliders[0] in flat
    assert "Bar chart" in plain.caption.value


def test_widget_displays_as_a_widget_view(ex):
    bundle = ex._repr_mimebundle_()
    assert "application/vnd.jupyter.widget-view+json" in bundle


@pytest.mark.parametrize("x", [(1.0,), [[1.0, 2.0]], tuple(range(9))])
def test_rejects_tokens_it_cannot_show(x):
    with pytest.raises(ValueError, match="2 to 8 features"):
        NormExplorer(x=x)


def test_sliders_reach_the_lessons_add_3_to_every_feature(ex):
    """Lesson 02: "add 3 to every feature" of (1, 2, 3). By hand: (4, 5, 6) has mean 5 and the
    same deviations (-1, 0, 1), so LayerNorm's output does not move; its RMS is sqrt(77/3), so
    RMSNorm's becomes (4, 5, 6) / 5.066 = (0.790, 0.987, 1.184)."""
    assert all(s.max >= v + 3 for s, v in zip(ex.feature_sliders, (1.0, 2.0, 3.0)))
    for s, v in zip(ex.feature_sliders, (4.0, 5.0, 6.0)):
        s.value = v
    assert [s.value for s in ex.feature_sliders] == [4.0, 5.0, 6.0]  # not clamped
    got = parse_readout(ex.readout.value)
    assert got["x"] == [4.0, 5.0, 6.0] and got["y"] == [-1.225, 0.0, 1.225]
    ex.norm_toggle.value = "rms"
    assert parse_readout(ex.readout.value)["y"] == [0.79, 0.987, 1.184]
    with pytest.raises(ValueError, match="sliders' range"):
        NormExplorer(x=(1.0, 2.0, 30.0))


def test_trend_words():
    from normref.plots import trend

    assert trend(5.657, 5.657) == "stays at 5.66"
    assert trend(5.66, 11.02) == "grows from 5.66 to 11.02"
    assert trend(2.0, 1.0) == "shrinks from 2.00 to 1.00"


def test_fmt_vector_never_prints_negative_zero():
    assert fmt_vector([-0.0001, 1.23456]) == "[0.000, 1.235]"


# --------------------------------------------------------------------------- PlacementExplorer


@pytest.fixture(scope="module")
def placement():
    from normref.widgets import PlacementExplorer

    return PlacementExplorer(depth=4)


def test_placement_explorer_opens_on_pre_ln(placement):
    got = parse_readout(placement.readout.value)
    assert got["placement"] == "Pre-LN" and got["depth"] == 4.0 and got["norm"] == "LayerNorm"
    assert len(got["residual"]) == 4 and len(got["grad"]) == 4
    assert all(a < b for a, b in zip(got["residual"], got["residual"][1:]))  # the stream grows
    assert [c.description for c in (placement.placement_toggle, placement.depth_slider,
                                    placement.norm_toggle)] == ["placement", "depth", "norm"]


def test_switching_to_post_ln_shows_a_normalised_stream(placement):
    n = placement.renders
    placement.placement_toggle.value = "post"
    got = parse_readout(placement.readout.value)
    assert placement.renders == n + 1
    assert got["placement"] == "Post-LN"
    assert got["residual"] == [round(math.sqrt(32), 3)] * 4  # LayerNorm output: norm sqrt(d)
    lines = placement.readout_text.splitlines()
    assert lines[3].startswith("grad last/first = ") and "grad last vs Pre-LN = " in lines[3]
    # the grey comparison line and the coloured line are both drawn
    assert [len(ax.get_lines()) for ax in placement._axes] == [2, 2]
    # the caption says what the chart shows: the norm stays at sqrt(32) = 5.657, it does not "grow"
    assert "token norm stays at 5.66 from layer 1 to layer 4" in placement.caption.value
    placement.placement_toggle.value = "pre"
    r = parse_readout(placement.readout.value)["residual"]
    assert f"token norm grows from {r[0]:.2f} to {r[-1]:.2f}" in placement.caption.value


def test_depth_and_norm_redraw_with_the_right_numbers(placement):
    from normref.experiments import probe_stack

    placement.depth_slider.value = 6
    placement.norm_toggle.value = "rms"
    got = parse_readout(placement.readout.value)
    assert got["depth"] == 6.0 and got["norm"] == "RMSNorm"
    want = probe_stack("pre", depth=6, norm="rms", seed=0)
    assert got["grad"] == [round(v, 3) for v in want["grad"]]
    assert got["grad last/first"] == round(want["grad"][-1] / want["grad"][0], 3)
    placement.norm_toggle.value = "layer"
    placement.depth_slider.value = 4


def test_placement_explorer_speaks_of_every_depth_in_good_english_and_sharply(placement):
    """"an 8-layer" (not "a 8-layer"), no "from layer 1 to layer 1" at depth 1, and a PNG of two
    image pixels per CSS pixel of the shown width (it was 900 px shown at 860)."""
    import struct

    for depth, article in ((1, "a 1-layer"), (8, "an 8-layer"), (11, "an 11-layer"), (12, "a 12-layer"),
                           (16, "a 16-layer")):
        placement.depth_slider.value = depth
        caption = placement.caption.value
        assert f"for {article} " in caption, caption
        assert "from layer 1 to layer 1 " not in caption and "from layer 1 to layer 1;" not in caption
        if depth > 1:
            assert f"from layer 1 to layer {depth};" in caption
    png = placement.image.value
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    width_px = struct.unpack(">I", png[16:20])[0]
    assert width_px >= 2 * int(placement.image.width), (width_px, placement.image.width)
    placement.depth_slider.value = 4


@pytest.mark.parametrize("kwargs, match", [({"depth": 0}, "depth"), ({"placement": "mid"}, "placement"),
                                           ({"norm": "batch"}, "norm")])
def test_placement_explorer_refuses_bad_settings(kwargs, match):
    from normref.widgets import PlacementExplorer

    with pytest.raises(ValueError, match=match):
        PlacementExplorer(**kwargs)


def _all_widgets(w):
    out = [w]
    for c in getattr(w, "children", ()):
        out.extend(_all_widgets(c))
    return out


def test_no_widget_has_a_tooltip_without_a_description():
    """ipywidgets 8.1.9's front end fails to render such a widget ("Click to show javascript
    error", jupyter-widgets/ipywidgets#3921); every widget we build must avoid it."""
    from normref import practice
    from normref.widgets import PlacementExplorer

    roots = [NormExplorer(toggle=True).widget, PlacementExplorer(depth=2).widget]
    roots += [practice.quiz(q).widget for q in practice.QUESTIONS]
    for root in roots:
        for w in _all_widgets(root):
            if getattr(w, "tooltip", None):
                assert w.has_trait("description") and w.description, type(w).__name__


def test_an_explorer_and_a_question_carry_their_static_form_for_a_page_without_a_kernel():
    """Beside the widget view (JupyterLab), text/html shows the widget as it starts (the course
    website, nbconvert): the chart with its caption as alt text, the readout, the controls in words."""
    import html as html_lib
    import re

    from normref import practice

    w = NormExplorer()
    bundle = w._repr_mimebundle_()
    assert "application/vnd.jupyter.widget-view+json" in bundle
    page = bundle["text/html"]
    alt = re.search(r'<img src="data:image/png;base64,[^"]+" alt="([^"]+)"', page).group(1)
    assert html_lib.unescape(alt) == " ".join(re.sub(r"<[^>]+>", " ", html_lib.unescape(w.caption.value)).split())
    assert "y = [-1.225, 0.000, 1.225]" in html_lib.unescape(page)  # the readout, as it starts
    assert "<li>gamma: 1.00 (from -2.00 to 3.00)</li>" in page and "<li>eps: 1.0e-05" in page
    assert "Token x (drag a feature)" not in page  # a group's label names controls listed in words
    q = practice.quiz("retrieval_axis")._repr_mimebundle_()["text/html"]
    assert "Which axis supplies the mean and variance" in q  # the prompt
    assert "answer: none chosen (choices: the batch axis B" in q and "the <b>Check</b> button" in q
