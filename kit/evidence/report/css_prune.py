"""The report page's stylesheets cut to the rules the page can use.

nbconvert's lab template inlines JupyterLab's whole stylesheet (about 265 KB: widgets, menus, the file
browser, code mirror themes) into every page, and the three committed reports travel with the repository to
the GPU hosts. A rule whose every selector names a class that no element of the page carries (and that no
script adds: the page's only script opens <details>) can never apply, so it is dropped; a rule with one
usable selector keeps all of them. Custom properties (`:root`, `body` variables), element selectors,
@font-face and @keyframes are kept as they are; an @media block keeps the rules inside it that are kept.
Nothing is rewritten, so what remains renders exactly as before.
"""

from __future__ import annotations

import re

_CLASS = re.compile(r"\.(-?(?:\\.|[_a-zA-Z])(?:\\.|[_a-zA-Z0-9-])*)")  # `\/` escapes: td.verdict-n\/a
_STYLE = re.compile(r"(<style[^>]*>)(.*?)(</style>)", re.DOTALL)
_COMMENT = re.compile(r"/\*.*?\*/", re.DOTALL)


def page_classes(page: str) -> set[str]:
    """Every class name an element of the page carries."""
    out: set[str] = set()
    for attr in re.findall(r'class\s*=\s*"([^"]*)"', page) + re.findall(r"class\s*=\s*'([^']*)'", page):
        out.update(attr.split())
    return out


def _blocks(css: str):
    """Top-level (prelude, body) pairs of a stylesheet without comments; body None for a statement (@import)."""
    i, n = 0, len(css)
    while i < n:
        brace, semi = css.find("{", i), css.find(";", i)
        if brace == -1:
            return
        if semi != -1 and semi < brace and css[i:semi].strip().startswith("@"):
            yield css[i:semi + 1].strip(), None
            i = semi + 1
            continue
        depth, j = 1, brace + 1
        while j < n and depth:
            depth += {"{": 1, "}": -1}.get(css[j], 0)
            j += 1
        yield css[i:brace].strip(), css[brace + 1:j - 1]
        i = j


def _split_top(selector_list: str) -> list[str]:
    """The selectors of a list, split at commas outside parentheses (`:is(.a, .b)` stays whole)."""
    out, depth, start = [], 0, 0
    for i, ch in enumerate(selector_list):
        depth += {"(": 1, ")": -1}.get(ch, 0)
        if ch == "," and depth == 0:
            out.append(selector_list[start:i])
            start = i + 1
    return out + [selector_list[start:]]


def _required_classes(selector: str) -> list[str]:
    """Classes an element must carry for `selector` to match: none from inside a functional pseudo-class
    (`:not(.x)` matches where .x is absent; `:is()` and `:where()` are kept whole, conservatively)."""
    depth, plain = 0, []
    for ch in selector:
        depth += {"(": 1, ")": -1}.get(ch, 0)
        plain.append(ch if depth == 0 and ch != ")" else " ")
    return [re.sub(r"\\(.)", r"\1", c) for c in _CLASS.findall("".join(plain))]


def _usable(selector_list: str, classes: set[str]) -> bool:
    return any(all(c in classes for c in _required_classes(sel)) for sel in _split_top(selector_list))


def prune_css(css: str, classes: set[str]) -> str:
    out = []
    for prelude, body in _blocks(_COMMENT.sub("", css)):
        if body is None:
            out.append(prelude)
        elif prelude.startswith(("@media", "@supports")):
            inner = prune_css(body, classes)
            if inner.strip():
                out.append(f"{prelude}{{{inner}}}")
        elif prelude.startswith("@") or _usable(prelude, classes):
            out.append(f"{prelude}{{{body}}}")
    return "\n".join(out)


def prune_page_styles(page: str) -> str:
    """`page` with each <style> block's rules cut to those that can apply to it (see the module)."""
    classes = page_classes(page)
    return _STYLE.sub(lambda m: m.group(1) + prune_css(m.group(2), classes) + m.group(3), page)
