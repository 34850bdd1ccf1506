"""The answer form of a practice quiz (:func:`normref.practice.quiz`): a box (or options), Check and
Show answer, where pressing Check, or Enter in the box, sends the answer the form shows *with* the
request to check it.

Why not ipywidgets' ``Text`` and ``Button``: a ``Text`` sends its value to the kernel as a state
update on blur or Enter, and ipywidgets' front end holds a model's state update back while an
earlier one of that model is unanswered, while a button's click is a message of its own that is
never held back. Typing an answer and pressing Check at once could thus reach the kernel as
"click" before "the new text": the previous answer was judged (seen 3 times in about 30 quick
checks), and Enter, a ``Text``'s own message, comes before its value too. Here the browser sends
one message, ``{"event": "check", "value": <what the box shows>}``; the kernel judges exactly that
(:mod:`anywidget`: a widget whose front end is the few lines of JavaScript below).
"""
from __future__ import annotations

import functools

#: The front end: a form whose submit (the Check button, or Enter in the box) sends the answer.
ESM = r"""
function render({ model, el }) {
  const form = document.createElement("form");
  form.className = "normref-answer-form";
  let read;
  if (model.get("kind") === "choice") {
    const group = document.createElement("div");
    group.setAttribute("role", "radiogroup");
    group.setAttribute("aria-label", "answer");
    const name = "normref-" + Math.random().toString(36).slice(2);
    const radios = model.get("options").map((text) => {
      const label = document.createElement("label");
      const radio = document.createElement("input");
      radio.type = "radio";
      radio.name = name;
      radio.value = text;
      radio.checked = model.get("value") === text;
      label.append(radio, " " + text);
      group.append(label);
      return radio;
    });
    form.append(group);
    read = () => { const on = radios.find((r) => r.checked); return on ? on.value : null; };
    model.on("change:value", () => radios.forEach((r) => { r.checked = r.value === model.get("value"); }));
  } else {
    const label = document.createElement("label");
    label.textContent = "answer ";
    const box = document.createElement("input");
    box.type = "text";
    box.placeholder = model.get("hint");
    box.value = model.get("value") || "";
    box.setAttribute("aria-label", "answer");
    // keys typed here are the answer's, not JupyterLab's shortcuts (as ipywidgets' own Text does)
    box.addEventListener("keydown", (e) => e.stopPropagation());
    label.append(box);
    form.append(label);
    read = () => box.value;
    model.on("change:value", () => {
      const v = model.get("value") || "";
      if (box.value !== v && document.activeElement !== box) box.value = v;
    });
  }
  const buttons = document.createElement("div");
  buttons.className = "normref-answer-buttons";
  const check = document.createElement("button");
  check.type = "submit";
  check.textContent = "Check";
  check.className = "jupyter-widgets jupyter-button widget-button mod-primary";
  const reveal = document.createElement("button");
  reveal.type = "button";
  reveal.textContent = "Show answer";
  reveal.className = "jupyter-widgets jupyter-button widget-button";
  const revealable = () => {
    reveal.disabled = !model.get("revealable");
    reveal.title = reveal.disabled ? "available after your first attempt" : "";
  };
  revealable();
  model.on("change:revealable", revealable);
  reveal.addEventListener("click", () => model.send({ event: "reveal" }));
  buttons.append(check, reveal);
  form.append(buttons);
  // one message: the request and the answer it is about, so the kernel judges what the form shows
  form.addEventListener("submit", (e) => { e.preventDefault(); model.send({ event: "check", value: read() }); });
  el.append(form);
}
export default { render };
"""

CSS = """
.normref-answer-form { display: flex; flex-direction: column; gap: 6px; margin: 4px 0; }
.normref-answer-form input[type="text"] { width: 340px; font: inherit; padding: 2px 6px;
  color: var(--jp-ui-font-color1); background: var(--jp-layout-color1);
  border: var(--jp-border-width, 1px) solid var(--jp-border-color1); }
.normref-answer-form [role="radiogroup"] { display: flex; flex-direction: column; gap: 2px; }
.normref-answer-buttons { display: flex; gap: 6px; }
"""

#: The longest answer text the kernel reads from the browser (anything beyond is cut).
MAX_ANSWER_CHARS = 2000


@functools.cache
def answer_form_class():
    """The widget class (anywidget and traitlets are imported on first use: ``import normref``
    stays cheap).

    Traits (synced with the browser): ``kind`` (``"text"`` or ``"choice"``), ``options`` (a choice
    question's option texts), ``hint`` (the box's placeholder), ``value`` (the answer last sent:
    the box's text, an option's text, or None), ``revealable`` (Show answer enabled).
    """
    import anywidget
    import traitlets

    class AnswerForm(anywidget.AnyWidget):
        """A practice question's answer form; see the module docstring."""

        _esm = ESM
        _css = CSS
        kind = traitlets.Unicode("text").tag(sync=True)
        options = traitlets.List(traitlets.Unicode()).tag(sync=True)
        hint = traitlets.Unicode("").tag(sync=True)
        value = traitlets.Any(None, allow_none=True).tag(sync=True)
        revealable = traitlets.Bool(False).tag(sync=True)

        def __init__(self, **kwargs):
            super().__init__(**kwargs)
            self._on_check, self._on_reveal = [], []
            self.on_msg(self._message)

        def on_check(self, callback) -> None:
            """Call ``callback(value)`` when Check is pressed (or Enter in the box)."""
            self._on_check.append(callback)

        def on_reveal(self, callback) -> None:
            """Call ``callback()`` when Show answer is pressed."""
            self._on_reveal.append(callback)

        def check(self, *value) -> None:
            """What pressing Check does: judge the answer given (made the form's :attr:`value`
            first), or without one, :attr:`value` as the kernel has it."""
            if value:
                (self.value,) = value
            for callback in self._on_check:
                callback(self.value)

        def reveal(self) -> None:
            """What pressing Show answer does (nothing while it is disabled)."""
            if self.revealable:
                for callback in self._on_reveal:
                    callback()

        def _message(self, _widget, content, _buffers) -> None:
            if not isinstance(content, dict):
                return
            if content.get("event") == "check":
                value = content.get("value")
                if self.kind == "choice":
                    value = value if value in self.options else None
                else:
                    value = "" if value is None else str(value)[:MAX_ANSWER_CHARS]
                self.check(value)
            elif content.get("event") == "reveal":
                self.reveal()

    return AnswerForm


def answer_form(**traits):
    """A new answer form (:func:`answer_form_class`) with these traits."""
    return answer_form_class()(**traits)


__all__ = ["answer_form", "answer_form_class", "ESM", "CSS", "MAX_ANSWER_CHARS"]
