"""Search highlights as safe HTML: every character escaped, then only ``<mark>`` put back.

The incident store returns fragments such as ``rank 5 先 <mark>OOM</mark>`` in which the text is
already HTML-escaped. The page does not trust that: the fragment is split on the literal
``<mark>``/``</mark>`` tags, each piece is un-escaped once and escaped again (so any other tag,
attribute or entity becomes visible text), and balanced ``<mark>`` elements are re-inserted.
"""

from __future__ import annotations

import html
import re

from markupsafe import Markup, escape

_TAG = re.compile(r"(<mark>|</mark>)")


def safe_highlight(fragment: str | None) -> Markup:
    """``fragment`` with only balanced ``<mark>`` elements kept as HTML; everything else is text."""
    if not fragment:
        return Markup("")
    out: list[str] = []
    open_mark = False
    for piece in _TAG.split(str(fragment)):
        if piece == "<mark>":
            if not open_mark:
                out.append("<mark>")
                open_mark = True
        elif piece == "</mark>":
            if open_mark:
                out.append("</mark>")
                open_mark = False
        elif piece:
            out.append(str(escape(html.unescape(piece))))
    if open_mark:
        out.append("</mark>")
    return Markup("".join(out))
