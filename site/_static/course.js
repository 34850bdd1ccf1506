// The course website's search: a result's summary is the page's text, and a formula's text
// before MathJax typesets it is its LaTeX source ("\(\operatorname{Norm}(X)\)"). Summaries
// show "[formula]" in its place (Sphinx 9's searchtools.js, Search.htmlToText). This file loads
// before searchtools.js, so the patch waits for the document, before the search starts.
document.addEventListener("DOMContentLoaded", () => {
  if (typeof Search === "undefined" || !Search.htmlToText) return;
  const htmlToText = Search.htmlToText;
  Search.htmlToText = (htmlString, anchor) => {
    const doc = new DOMParser().parseFromString(htmlString, "text/html");
    doc.querySelectorAll(".math").forEach((m) => m.replaceWith("[formula]"));
    return htmlToText(doc.documentElement.outerHTML, anchor);
  };
});
