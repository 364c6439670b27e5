"""The reviewer's first screen, rendered from the committed medium runs and read in headless Chromium: at 1400x900
the scope and the first question rows are in view; at 390 px the first question card is, and nothing scrolls
sideways. And what the rows say: plain questions with the contract's identifier, lost vs gained with its sign-test p
(never the net against "<= gained"), not evaluable on no discordant answer, one interval per row, the earlier seeds'
verdicts, the scope and the demo's sentence computed from the evidence, failed runs with their recorded error."""

from __future__ import annotations

import html
import json
import re
import subprocess
from pathlib import Path

import pytest

from kit.cli import main
from kit.evidence.report.index import index
from kit.evidence.report.page import build_report_notebook, evidence_root_line
from kit.evidence.report.questions import NOT_EVALUABLE, question_rows, scope_sentences, what_sentence
from kit.evidence.report.runs import failure_rows
from kit.evidence.report.scope import accuracy_sentence

REPO = Path(__file__).resolve().parents[1]
CHROMIUM = Path("/usr/bin/chromium")
PROBE = """<script>window.addEventListener('load', () => {
  const box = e => { if (!e) return null; const r = e.getBoundingClientRect();
    return {top: r.top + window.scrollY, bottom: r.bottom + window.scrollY, left: r.left, right: r.right,
            width: r.width}; };
  const rows = [...document.querySelectorAll('#kit-verdict-summary tbody tr')];
  const out = document.createElement('pre'); out.id = 'kit-layout';
  out.textContent = JSON.stringify({width: window.innerWidth, scrollWidth: document.documentElement.scrollWidth,
    scope: box(document.querySelector('ul.kit-first-scope')), table: box(document.getElementById('kit-verdict-summary')),
    rows: rows.slice(0, 3).map(box), question: rows.length ? rows[0].querySelector('.kit-q').textContent : ''});
  document.body.appendChild(out); });</script>"""
# Chromium's window is at least 500 px wide: the phone is an iframe of 390 x 844 px in a page of the same folder
PHONE = """<html><body style="margin:0"><iframe id="f" src="probe.html" style="width:390px;height:844px;border:0">
</iframe><pre id="kit-phone"></pre><script>document.getElementById('f').addEventListener('load', () => setTimeout(
() => { document.getElementById('kit-phone').textContent = document.getElementById('f').contentDocument
.getElementById('kit-layout').textContent; }, 0));</script></body></html>"""


@pytest.fixture(scope="module")
def medium(tmp_path_factory):
    out = tmp_path_factory.mktemp("first-screen") / "report"
    assert main(["report", "--runs-dir", str(REPO / "runs"), "--select", "medium-*", "--out", str(out)]) == 0
    return out / "index.html"


def _layout(page: Path, tmp: Path, width: int, height: int) -> dict:
    if not CHROMIUM.exists():
        pytest.skip(f"{CHROMIUM} is missing: the layout is read in Debian's chromium (`make chromium` installs it)")
    probe = page.with_name("probe.html")
    probe.write_text(page.read_text(encoding="utf-8").replace("</body>", PROBE + "</body>"), encoding="utf-8")
    url, marker = probe.as_uri(), "kit-layout"
    if width < 500:
        wrapper = page.with_name("phone.html")
        wrapper.write_text(PHONE, encoding="utf-8")
        url, marker = wrapper.as_uri(), "kit-phone"
    done = subprocess.run([str(CHROMIUM), "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                           "--allow-file-access-from-files", f"--user-data-dir={tmp / f'profile-{width}'}",
                           f"--window-size={max(width, 800)},{height}", "--virtual-time-budget=10000", "--dump-dom",
                           url], capture_output=True, text=True, timeout=180, check=False)
    found = done.stdout.split(f'<pre id="{marker}">', 1)
    assert len(found) == 2, done.stderr[-2000:]
    return json.loads(html.unescape(found[1].split("</pre>", 1)[0]))


def test_at_1400_by_900_the_scope_and_the_first_questions_are_in_view(medium, tmp_path):
    wide = _layout(medium, tmp_path, 1400, 900)
    assert wide["scope"] is not None and wide["scope"]["bottom"] <= 900, wide
    assert len(wide["rows"]) == 3 and wide["rows"][2]["bottom"] <= 900, wide  # the first three questions
    assert wide["question"].startswith("Does ") and wide["question"].endswith("?"), wide
    assert wide["scrollWidth"] <= 1400 and wide["table"]["right"] <= 1400, wide


def test_at_390_px_the_first_question_card_is_in_view_and_nothing_scrolls_sideways(medium, tmp_path):
    phone = _layout(medium, tmp_path, 390, 844)
    assert phone["width"] == 390 and phone["scrollWidth"] <= 390, phone
    first = phone["rows"][0]
    assert first["bottom"] <= 844 and first["right"] <= 390 and phone["table"]["width"] <= 390, phone


def test_each_row_weighs_its_verdict_in_the_reviewer_s_words():
    rows = question_rows(REPO / "runs" / "medium-*")
    assert len(rows) == 17 and all(r.question.endswith("?") and "_vs_" not in r.question for r in rows)
    by = {r.key: r for r in rows}
    gates = json.loads((REPO / "runs/medium-adaptive-final-G/metrics/gates.json").read_text())["generated"]
    g = html.unescape(re.sub(r"<[^>]+>", "", by["growth_vs_control/generated"].tested))
    assert f"lost {gates['lost']} vs gained {gates['gained']}" in g and "\u2264 gained (" not in g
    assert "passes 53% of the time" in by["growth_vs_control/generated"].weighs  # near a coin flip
    # one interval per row: the gate's own one-sided bound, as recorded
    upper = json.loads((REPO / "runs/medium-adaptive-final-A/metrics/gates.json").read_text())["gain"]["upper"]
    a = by["A_vs_seed/gain"].tested
    assert f'data-value="{upper!r}"' in a and a.count('class="num"') == 2 and "interval" not in a
    # the earlier seeds, from the superseded records
    assert by["A_vs_seed/gain"].robustness.startswith("passed on all 3 seeds")
    assert by["growth_vs_control/gain"].robustness.startswith("failed on all 3 seeds")
    assert by["quality screen/quality screen (all parts)"].robustness.startswith("passed on this seed and 1 of 2")
    # the replicate reading slots in by question key
    rep = question_rows(REPO / "runs" / "medium-*", {"B_vs_A/gain": "holds in 3 of 3 replicates"})
    assert next(r for r in rep if r.key == "B_vs_A/gain").robustness.endswith("; holds in 3 of 3 replicates")


def test_no_pass_on_no_discordant_answer():
    rows = [r for r in question_rows(REPO / "runs" / "demo-*") if r.key.endswith("/generated")]
    empty = [r for r in rows if r.numbers.n == 0]
    assert empty and all(r.verdict == NOT_EVALUABLE and r.recorded == "pass" for r in empty)
    assert all("no data" in r.weighs for r in empty)


def test_the_scope_sentences_are_computed_from_the_evidence():
    seed = json.loads((REPO / "runs/medium-seed/metrics/seed_build.json").read_text())
    medium = scope_sentences(REPO / "runs" / "medium-*")
    assert medium[0] == f"Model size: the seed {seed['parameter_digest'][:8]} has 126M parameters ({seed['params']:,})."
    assert medium[1].startswith("Training data: 85% of its ") and "1.7B seed, 14 times this one" in medium[2]
    # the frozen contract's highest accuracy is a frozen run's, never a replicate's (the noise section reads those)
    idx = index(REPO / "runs" / "medium-*")
    said = [accuracy_sentence(idx, d) for d in {r.contract_digest for r in idx.runs} - {None}]
    assert all(s and not re.search(r"-r\d+,", s) for s in said), said
    demo = what_sentence(REPO / "runs" / "demo-*")
    assert demo.startswith("This is a tiny CPU run of every mechanism") and "not meant to learn" in demo
    assert what_sentence(REPO / "runs" / "medium-*") is None  # GPU runs of the medium contracts
    assert scope_sentences(REPO / "runs" / "demo-*")[0].startswith("Model size: the seed ")


def test_failed_runs_show_their_recorded_error_not_the_command():
    rows = [r for r in failure_rows(REPO / "runs" / "medium-*") if r["run"] == "medium-pilot-2026-12-01-e83d0af3"]
    assert rows and all("exited 2: " in r["message"] and "leave 463 eligible" in r["message"] for r in rows)
    assert all(not r["message"].startswith("benchmark: ") and r["failing cell or step"].startswith("candidate c") for r in rows)


def test_the_header_holds_the_evidence_root_when_given(tmp_path):
    assert evidence_root_line(None) == ""
    line = evidence_root_line(("ab" * 32, "cd" * 20))
    assert line == (f'<p class="kit-root">Evidence root {"ab" * 32} computed at commit '
                    f'<span title="{"cd" * 20}">{"cd" * 6}</span></p>')
    uncommitted = evidence_root_line(("ab" * 32, None))
    assert f"Evidence root {'ab' * 32}, of evidence that no commit holds" in uncommitted
    nb = build_report_notebook(REPO / "runs" / "demo-*", "t", evidence_root=("ab" * 32, "cd" * 20))
    assert line in nb.cells[0].source
    with pytest.raises(ValueError, match="expected"):
        evidence_root_line(("not hex", "cd" * 20))
