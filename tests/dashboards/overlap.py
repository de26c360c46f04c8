"""Overlapping text on a rendered page: every text box, HTML and SVG (Plotly's), compared pairwise.

A box is the rendered extent of a text node (a DOM Range, so a short word in a wide cell is
its own width) or of an SVG <text> element. Two boxes that share more than `TOLERANCE_PX` in
both directions overlap: one label is drawn on another.
"""

from __future__ import annotations

from typing import Any

TOLERANCE_PX = 1.5
# Run in the page: returns [{a, b, ax, ay, ...}] for each overlapping pair.
_COLLECT = """(tol) => {
  const boxes = [];
  const visible = (el) => {
    for (let e = el; e && e.nodeType === 1; e = e.parentElement) {
      const s = getComputedStyle(e);
      if (s.display === 'none' || s.visibility === 'hidden' || parseFloat(s.opacity) === 0) {
        return false;
      }
    }
    return true;
  };
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  for (let node = walker.nextNode(); node; node = walker.nextNode()) {
    const parent = node.parentElement;
    if (!parent || parent.closest('svg, script, style, title, noscript')) continue;
    if (!node.textContent.trim() || !visible(parent)) continue;
    const range = document.createRange();
    range.selectNodeContents(node);
    for (const r of range.getClientRects()) {
      if (r.width > 0 && r.height > 0) boxes.push({text: node.textContent.trim(), r, el: parent});
    }
  }
  for (const el of document.querySelectorAll('svg text')) {
    if (!el.textContent.trim() || !visible(el)) continue;
    const r = el.getBoundingClientRect();
    if (r.width > 0 && r.height > 0) boxes.push({text: el.textContent.trim(), r, el});
  }
  const where = (el) => {
    const graph = el.closest('.js-plotly-plot');
    return graph ? graph.id : el.tagName.toLowerCase();
  };
  const clipped = [];
  for (const box of boxes) {
    const svg = box.el.closest && box.el.closest('svg.main-svg');
    if (!svg) continue;
    const s = svg.getBoundingClientRect(), r = box.r;
    if (r.top < s.top - tol || r.left < s.left - tol || r.bottom > s.bottom + tol
        || r.right > s.right + tol) {
      clipped.push({text: box.text.slice(0, 80), where: where(box.el)});
    }
  }
  const out = [];
  for (let i = 0; i < boxes.length; i++) {
    for (let j = i + 1; j < boxes.length; j++) {
      const a = boxes[i].r, b = boxes[j].r;
      const w = Math.min(a.right, b.right) - Math.max(a.left, b.left);
      const h = Math.min(a.bottom, b.bottom) - Math.max(a.top, b.top);
      if (w > tol && h > tol) {
        out.push({a: boxes[i].text.slice(0, 80), b: boxes[j].text.slice(0, 80),
                  w: Math.round(w), h: Math.round(h), where: where(boxes[i].el),
                  at: [Math.round(a.left + window.scrollX), Math.round(a.top + window.scrollY)]});
      }
    }
  }
  return {boxes: boxes.length, overlaps: out, clipped};
}"""


def text_overlaps(page: Any) -> tuple[int, list[dict[str, Any]]]:
    """(number of text boxes, overlapping pairs) of the page as it is drawn now.

    A chart's text cut off by the edge of its own SVG counts as an overlap too (with the edge).
    """
    found: dict[str, Any] = page.evaluate(_COLLECT, TOLERANCE_PX)
    edges = [
        {"a": c["text"], "b": "(edge of the chart)", "where": c["where"]} for c in found["clipped"]
    ]
    return int(found["boxes"]), list(found["overlaps"]) + edges


def broken_words(page: Any, selector: str) -> list[str]:
    """Words under `selector` split across lines ("vLL" / "M"); paths wrap at "/", text at "-"."""
    result: list[str] = page.evaluate(
        """(sel) => {
          const bad = [];
          for (const el of document.querySelectorAll(sel)) {
            const walker = document.createTreeWalker(el, NodeFilter.SHOW_TEXT);
            for (let n = walker.nextNode(); n; n = walker.nextNode()) {
              const text = n.textContent;
              const re = /[^\\s\\/-]+/g;  // a path may wrap after "/", text after "-"
              let m;
              while ((m = re.exec(text)) !== null) {
                const range = document.createRange();
                range.setStart(n, m.index);
                range.setEnd(n, m.index + m[0].length);
                const rects = Array.from(range.getClientRects());
                const tops = new Set(rects.map(r => Math.round(r.top)));
                if (tops.size > 1) bad.push(m[0]);
              }
            }
          }
          return bad;
        }""",
        selector,
    )
    return result
