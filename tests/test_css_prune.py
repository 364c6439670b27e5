"""The report page's stylesheet pruning (kit/evidence/report/css_prune.py) keeps every rule that can apply:
escaped class names, `:not()`, selector lists, @media blocks; and drops the rules no element can match."""

from __future__ import annotations

from kit.evidence.report.css_prune import page_classes, prune_css, prune_page_styles

CSS = """
:root { --x: 1px; }
body { margin: 0; }
/* a comment { with braces } */
td.verdict-n\\/a { color: grey; }
.used .unused-child { color: red; }
.unused, .used { padding: 1px; }
.a:not(.absent) { margin: 2px; }
.only-in-a-widget { display: none; }
@media (max-width: 500px) { .used { width: 1px; } .gone { width: 2px; } }
@media print { .gone { width: 3px; } }
@font-face { font-family: x; src: url(x.woff); }
"""


def test_rules_that_can_apply_are_kept_and_the_others_dropped():
    out = prune_css(CSS, {"used", "a", "verdict-n/a"})
    for kept in (":root", "body", "td.verdict-n\\/a", ".unused, .used", ".a:not(.absent)", "@font-face",
                 "@media (max-width: 500px){.used{ width: 1px; }}"):
        assert kept in out, kept
    for dropped in (".used .unused-child", ".only-in-a-widget", ".gone", "@media print", "comment"):
        assert dropped not in out, dropped


def test_a_page_keeps_its_markup_and_loses_only_unusable_rules():
    page = ('<html><head><style>' + CSS + '</style></head><body><table><tr><td class="verdict-n/a used">n/a</td>'
            '</tr></table><p class="a">x</p></body></html>')
    assert page_classes(page) == {"verdict-n/a", "used", "a"}
    pruned = prune_page_styles(page)
    assert pruned.split("</style>")[1] == page.split("</style>")[1]
    assert "td.verdict-n\\/a" in pruned and ".only-in-a-widget" not in pruned
