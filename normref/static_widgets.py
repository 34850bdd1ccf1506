"""A widget as a page without a kernel shows it: its default state as plain HTML.

The explorers (:mod:`normref.widgets`) and the practice questions (:mod:`normref.practice`) are
ipywidgets: JupyterLab draws them from their ``application/vnd.jupyter.widget-view+json`` output
and a kernel answers every slider. A page with no kernel (the course website, an nbconvert HTML
export, GitHub's notebook viewer) cannot, so each of them also puts ``text/html`` in its output
(:func:`mimebundle`): what the widget shows as it starts (its chart, with the caption beneath it
as the chart's ``alt`` text; its readout; its prompt) and its controls listed in words, with a
line that says how to use it live. Each front end picks the richest type it can render: JupyterLab
the widget, the website (``nb_mime_priority_overrides`` in ``site/conf.py``) this HTML.

The HTML is built by walking the widget tree, so any box of ipywidgets can be shown this way:
``HTML`` and ``Label`` values as they are, an ``Image`` as a PNG ``<img>``, every control
(slider, toggle, radio buttons, text box, button) as one item of the controls list.
"""
from __future__ import annotations

import base64
import html

__all__ = ["static_html", "mimebundle", "LIVE_NOTE"]

#: What the static form says about the live one.
LIVE_NOTE = ("This is the widget as it starts. To use it, run the notebook in Jupyter (on the course "
             "website: the launch button at the top of the page opens it on Binder or the course's JupyterHub).")


def _control(w) -> str | None:
    """One control in words, e.g. ``gamma: 1.00 (from -2.00 to 3.00)``; None for a non-control."""
    name = type(w).__name__
    label = html.escape(getattr(w, "description", "") or name)
    if name == "Button":
        return f"the <b>{html.escape(w.description)}</b> button"
    if name == "AnswerForm":  # a practice question's form (normref.answer_form): its answer, then its buttons
        return _answer_form(w)
    if hasattr(w, "options") and hasattr(w, "label"):  # ToggleButtons, RadioButtons, SelectionSlider
        options = [str(o[0] if isinstance(o, tuple) else o) for o in w.options]
        chosen = "none chosen" if w.label is None else html.escape(str(w.label))
        listed = "; ".join(html.escape(o) for o in options)
        return f"{label}: {chosen} (choices: {listed})"
    if hasattr(w, "min") and hasattr(w, "max") and hasattr(w, "value"):  # sliders
        fmt = getattr(w, "readout_format", "") or ".3g"
        try:
            value, lo, hi = (format(v, fmt) for v in (w.value, w.min, w.max))
        except (TypeError, ValueError):
            value, lo, hi = str(w.value), str(w.min), str(w.max)
        if name == "FloatLogSlider":
            lo, hi = (format(w.base ** e, fmt) for e in (w.min, w.max))
        return f"{label}: {value} (from {lo} to {hi})"
    if name in ("Text", "Textarea", "IntText", "FloatText"):
        hint = f", for example {html.escape(w.placeholder)}" if getattr(w, "placeholder", "") else ""
        return f"{label}: a box to type your answer in{hint}"
    return None


def _answer_form(w) -> str:
    """A practice question's answer form in words: the options or the box, then Check and Show answer."""
    if w.kind == "choice":
        chosen = "none chosen" if w.value is None else html.escape(str(w.value))
        answer = f"answer: {chosen} (choices: {'; '.join(html.escape(o) for o in w.options)})"
    else:
        hint = f", for example {html.escape(w.hint)}" if w.hint else ""
        answer = f"answer: a box to type your answer in{hint}"
    return f"{answer}</li><li>the <b>Check</b> button (or Enter)</li><li>the <b>Show answer</b> button"


def _walk(w, alt: str, shown: list[str], controls: list[str]) -> None:
    name = type(w).__name__
    if hasattr(w, "children"):
        others = [c for c in w.children if type(c).__name__ not in ("HTML", "Label")]
        # a group of controls: its HTML only names them (a question's prompt beside its form is no such label)
        labels_only = bool(others) and all(_control(c) for c in others) and not any(
            type(c).__name__ == "AnswerForm" for c in others)
        for c in w.children:
            if labels_only and type(c).__name__ in ("HTML", "Label"):
                continue
            _walk(c, alt, shown, controls)
    elif name == "Image":
        b64 = base64.b64encode(bytes(w.value)).decode("ascii")
        width = f"width:min(100%,{int(w.width)}px)" if str(getattr(w, "width", "")).isdigit() else "max-width:100%"
        shown.append(f'<img src="data:image/{html.escape(w.format)};base64,{b64}" alt="{html.escape(alt, quote=True)}"'
                     f' style="{width};height:auto"/>')
    elif name in ("HTML", "Label", "HTMLMath"):
        if w.value:
            shown.append(f"<div>{w.value}</div>" if name != "Label" else f"<div>{html.escape(w.value)}</div>")
    else:
        item = _control(w)
        if item:
            controls.append(item)


def static_html(widget, *, alt: str = "", title: str = "Interactive widget") -> str:
    """The widget's current state as static HTML (see the module's docstring).

    Args:
        widget: an ipywidgets widget (a box of widgets, typically).
        alt: the ``alt`` text of every ``Image`` in it (what the chart shows, in words).
        title: the first words of the note, e.g. ``"Explorer"``.

    Returns:
        ``<div class="normref-static">``: the note, the widget's pictures and HTML in order,
        then its controls in words.
    """
    shown: list[str] = []
    controls: list[str] = []
    _walk(widget, alt, shown, controls)
    items = "".join(f"<li>{c}</li>" for c in controls)
    note = f'<p class="normref-static-note"><b>{html.escape(title)}.</b> {html.escape(LIVE_NOTE)}</p>'
    listed = f"<p>Its controls:</p><ul>{items}</ul>" if items else ""
    return f'<div class="normref-static">{note}{"".join(shown)}{listed}</div>'


def mimebundle(widget, *, alt: str = "", title: str = "Interactive widget", **kwargs) -> dict:
    """The widget's own mimebundle (its view, for JupyterLab) with :func:`static_html` added as
    ``text/html`` (for a page without a kernel)."""
    bundle = widget._repr_mimebundle_(**kwargs)
    data = bundle[0] if isinstance(bundle, tuple) else bundle
    data = dict(data or {})
    data["text/html"] = static_html(widget, alt=alt, title=title)
    return (data, bundle[1]) if isinstance(bundle, tuple) else data
