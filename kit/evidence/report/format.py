"""The report's one way of writing values: the number format, UTC times, short roots with the full
root in a monospace tooltip, run links, tables inside their own scroll box and images with alt text.
Every cell of the page is written through these.

fmt(value, key): integers with thousands separators, other numbers with 4 significant digits in
fixed notation (scientific only below 1e-9 or at 1e15 and above), epoch seconds in `*_at`/`now`
fields as UTC times, None as an em dash.
"""

from __future__ import annotations

import base64
import datetime as _dt
import html
import io
import json
import math
import re
from typing import Any, TypeGuard

import numpy as np

HEX64 = re.compile(r"^[0-9a-f]{64}$")
TIME_KEYS = re.compile(r"(_at|^now)$")
NONE = "\u2014"
NOT_EVALUABLE = "not evaluable"  # a verdict whose test has no data (kit.study.screens.NOT_EVALUABLE)


# --- formatting ------------------------------------------------------------------------------
def is_number(v: Any) -> TypeGuard[int | float]:
    """A JSON number (not a boolean); the type checker takes `v` as one where this holds."""
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def fmt_time(v: float) -> str:
    return _dt.datetime.fromtimestamp(v, _dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def fmt_iso(text: str | None) -> str:
    """A run record's ISO-8601 time as "YYYY-MM-DD HH:MM:SS UTC" (as recorded when it does not parse)."""
    if not text:
        return NONE
    try:
        t = _dt.datetime.fromisoformat(str(text))  # Python 3.11 reads a trailing Z
    except ValueError:
        return str(text)
    if t.tzinfo is None:
        return str(text)
    return fmt_time(t.timestamp())


def fmt(v: Any, key: str | None = None) -> str:
    """One format for every number on the page (see the module docstring)."""
    if v is None:
        return NONE
    if isinstance(v, bool):
        return "yes" if v else "no"
    if is_number(v) and key is not None and TIME_KEYS.search(key) and v > 1e9:
        return fmt_time(v)
    if isinstance(v, int):
        return f"{v:,}"
    if isinstance(v, float):
        if not math.isfinite(v):
            return str(v)
        if v == 0:
            return "0"
        a = abs(v)
        if a < 1e-9 or a >= 1e15:
            return f"{v:.3e}"
        decimals = max(0, 3 - math.floor(math.log10(a)))
        return f"{v:,.{decimals}f}"
    return str(v)


def short(root: str) -> str:
    return root[:12]


def root_html(root: str, runs_by_root: dict | None = None) -> str:
    """A root as the run(s) that produced it, linked, with the short root in a monospace tooltip."""
    names = (runs_by_root or {}).get(root, [])
    code = f'<code class="kit-root" title="{html.escape(root)}">{short(root)}</code>'
    if not names:
        return code
    return ", ".join(run_link(n) for n in names) + " " + code


def run_link(name: str) -> str:
    return f'<a href="#run-{html.escape(name)}">{html.escape(name)}</a>'


def cell_html(v: Any, key: str | None = None, runs_by_root: dict | None = None) -> str:
    if isinstance(v, str) and HEX64.match(v):
        return root_html(v, runs_by_root)
    if isinstance(v, str) and v.startswith("seed:"):
        return html.escape(v)
    if isinstance(v, (dict, list)):
        text = json.dumps(v, sort_keys=True)
        text = re.sub(r"[0-9a-f]{64}", lambda m: short(m.group(0)) + "\u2026", text)
        return f'<span class="kit-json">{html.escape(text)}</span>'
    return html.escape(fmt(v, key))


def table_html(columns: list[str], rows: list[list[Any]], *, table_id: str | None = None,
               classes: str = "kit-table kit-metric", runs_by_root: dict | None = None,
               index: bool = False, caption: str | None = None) -> str:
    """A table in its own scroll box; cells through cell_html (roots as run names, one number format)."""
    head = "".join(f"<th>{html.escape(str(c))}</th>" for c in columns)
    body = []
    for row in rows:
        cells = []
        for i, (c, v) in enumerate(zip(columns, row)):
            tag = "th" if index and i == 0 else "td"
            num = ' class="num"' if is_number(v) else ""
            key = str(row[0]) if index else str(c)  # a table on its side: the field is the row's label
            cells.append(f"<{tag}{num}>{cell_html(v, key, runs_by_root)}</{tag}>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    tid = f' id="{table_id}"' if table_id else ""
    cap = f"<caption>{caption}</caption>" if caption else ""
    return (f'<div class="kit-scroll"><table{tid} class="{classes}">{cap}<thead><tr>{head}</tr></thead>'
            f'<tbody>{"".join(body)}</tbody></table></div>')


def records_table(recs: list[dict], **kw) -> str:
    """Records as a table; one with many fields and few records is turned on its side (fields as rows)."""
    cols: list[str] = []
    for r in recs:
        cols += [k for k in r if k not in cols]
    if len(cols) > 8 and len(recs) <= len(cols) // 2:
        label = next((k for k in ("row", "arm", "rank", "family", "name", "method") if k in cols), None)
        heads = [f"{label} {fmt(r.get(label))}" if label else str(i) for i, r in enumerate(recs)]
        rows = [[k] + [r.get(k) for r in recs] for k in cols if k != label]
        return table_html(["field"] + heads, rows, index=True, **kw)
    return table_html(cols, [[r.get(c) for c in cols] for r in recs], **kw)


def kv_table(obj: dict, **kw) -> str:
    return table_html(["field", "value"], [[k, v] for k, v in obj.items()], index=True, **kw)


def img_html(png: bytes, alt: str) -> str:
    data = base64.b64encode(png).decode()
    return f'<img class="kit-figure" src="data:image/png;base64,{data}" alt="{html.escape(alt)}">'


# A figure's lines, bars and text need a few dozen colours; the rest are anti-aliasing shades, which the nearest
# kept colour replaces. 64 leaves four times finer anti-aliasing steps than 32 at 19% fewer bytes than 256
# (the medium report's 38 figures, 2026-12-04: 256 colours 1,039,932 bytes, 64: 841,960, 32: 710,642).
PALETTE_COLOURS = 64


def png_bytes(fig) -> bytes:
    """The figure as a palette PNG on the page's white background: its PALETTE_COLOURS most frequent colours kept
    exactly (ties broken by the colour's value), every other pixel (rare anti-aliasing shades) given the nearest of them
    (squared distance in RGB; ties to the more frequent). A figure of lines, bars and text has few colours
    beyond anti-aliasing, so it looks the same at about a third of the bytes of matplotlib's RGBA PNG; the
    reports embed every figure, and the committed reports travel with the repository to the GPU hosts, inside
    the device tool's limit (docs/gpu-hosts.md, "Sizes"). The mapping is computed here, not by Pillow's
    palette conversion, which maps through a reduced-precision colour cache and moves even exact colours; no
    dithering and no PNG metadata: the same figure gives the same bytes."""
    from PIL import Image  # noqa: PLC0415 - optional: the notebook runtime (kit/evidence/runtime.py)

    buf = io.BytesIO()
    fig.savefig(buf, format="png", metadata={"Software": None})
    rgba = Image.open(io.BytesIO(buf.getvalue())).convert("RGBA")
    rgb = np.asarray(Image.alpha_composite(Image.new("RGBA", rgba.size, (255, 255, 255, 255)), rgba).convert("RGB"))
    pixels = rgb.reshape(-1, 3).astype(np.int64)
    codes = (pixels[:, 0] << 16) | (pixels[:, 1] << 8) | pixels[:, 2]  # ordered as (r, g, b)
    colours, inverse, counts = np.unique(codes, return_inverse=True, return_counts=True)
    kept = colours[np.lexsort((colours, -counts))[:PALETTE_COLOURS]]

    def as_rgb(c):
        return np.stack([(c >> 16) & 255, (c >> 8) & 255, c & 255], axis=1)

    distance = ((as_rgb(colours)[:, None, :] - as_rgb(kept)[None, :, :]) ** 2).sum(axis=2)
    index = distance.argmin(axis=1).astype(np.uint8)[inverse.reshape(-1)]  # an exact colour: distance 0
    image = Image.frombytes("P", (rgb.shape[1], rgb.shape[0]), index.tobytes())
    image.putpalette(as_rgb(kept).astype(np.uint8).reshape(-1).tolist())
    out = io.BytesIO()
    image.save(out, format="PNG", optimize=True)
    return out.getvalue()
