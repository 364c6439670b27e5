"""The report's Pilots section over the committed pilot records: every table cell and the positive-control
sentence are recomputed here from run.json (the oracle), a failed record shows its candidates' errors, the
study pilot its four candidates and the chosen one, and a record altered so that its candidate fails dev
retention, or so that it contradicts its own numbers, is marked or refused (no kernel: pilot_html is what
show_pilots displays)."""

from __future__ import annotations

import json
import shutil
from html.parser import HTMLParser
from pathlib import Path

import pytest
from support.evidence import evidence_path

from kit.evidence.report import pilots
from kit.evidence.report.format import fmt
from kit.evidence.report.page import build_report_notebook

REPO = Path(__file__).resolve().parents[1]
ADAPTIVE = "medium-pilot-2026-12-01-e83d0af3-b"  # 1 candidate, positive control recorded and not holding
FAILED = "medium-pilot-2026-12-01-e83d0af3"  # every prepare refused
STUDY = "study-pilot-2026-12-01-e83d0af3"  # 4 candidates, completed
OLDER = "medium-pilot-2026-12-01-b"  # before positive_control and warm-up; c2 fails dev retention


class _Page(HTMLParser):
    """The candidate table's header and rows as (text, class) cells, and the paragraphs' text."""

    def __init__(self):
        super().__init__()
        self.head, self.rows, self.paras, self._cell, self._p = [], [], [], None, None

    def handle_starttag(self, tag, attrs):
        if tag == "tr":
            self.rows.append([])
        elif tag in ("td", "th"):
            self._cell = [tag, dict(attrs).get("class", ""), ""]
        elif tag == "p":
            self._p = ""

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self._cell:
            kind, cls, text = self._cell
            (self.head if kind == "th" else self.rows[-1]).append(text if kind == "th" else (text, cls))
            self._cell = None
        elif tag == "p" and self._p is not None:
            self.paras.append(self._p)
            self._p = None

    def handle_data(self, data):
        if self._cell is not None:
            self._cell[2] += data
        if self._p is not None:
            self._p += data


def _record(run_id: str) -> dict:
    return json.loads((evidence_path(run_id) / "run.json").read_text())


def _render(runs: Path, run_id: str, also=()) -> tuple[_Page, dict]:
    found = {p.run_id: p for p in pilots.pilot_records(runs / "*", also)}
    page = _Page()
    page.feed(pilots.pilot_html(found[run_id]))
    page.rows = [r for r in page.rows if r]
    return page, found[run_id]


def _copy(tmp: Path, *run_ids, change=None) -> Path:
    runs = tmp / "runs"
    for r in run_ids:
        (runs / r).mkdir(parents=True)
        rec = _record(r)
        if change:
            change(rec)
        (runs / r / "run.json").write_text(json.dumps(rec))
    return runs


def _by_column(page: _Page) -> list[dict]:
    return [{h: text for h, (text, _) in zip(page.head, row)} for row in page.rows]


def _signed(v: float) -> str:
    return ("+" if v > 0 else "") + fmt(v)


def test_the_adaptive_record_s_cells_and_positive_control_come_from_its_numbers():
    rec = _record(ADAPTIVE)
    page, _ = _render(REPO / "runs", ADAPTIVE)
    rows = _by_column(page)
    cands = rec["results"]["candidates"]
    assert len(rows) == len(cands) == 1
    for c, row in zip(cands, rows):
        d = c["dev"]
        assert row["dev accuracy (pooled)"] == f"{100 * d['accuracy']:.1f}%" == "24.8%"
        assert row["seed"] == f"{100 * d['seed_accuracy']:.1f}%"
        assert row["change (points)"] == f"{100 * (d['accuracy'] - d['seed_accuracy']):+.1f}"
        for fam, f in d["accuracy_by_family"].items():
            assert row[f"{fam}: correct of n, candidate vs seed"] == \
                f"{f['candidate_correct']} vs {f['seed_correct']} of {f['n']}"
        assert row["task NLL change (nats/token)"] == _signed(d["tasks"]["change_nats_per_token"])
        assert row["retention NLL change (nats/token)"] == _signed(d["retention"]["change_nats_per_token"])
        assert row["retention upper bound"] == _signed(d["retention"]["bootstrap_upper"])
        assert row["threshold"] == f"+{d['retention_threshold']:g}"
        assert row["dev retention gate"].startswith("passes") and d["eligible"]
        assert row["values"] == ", ".join(f"{k} {v:g}" if isinstance(v, float) else f"{k} {v:,}"
                                          for k, v in c["overrides"].items())
    assert rows[0]["candidate"] == rec["results"]["chosen"]["candidate"] + " (chosen)"
    pc = rec["results"]["positive_control"]
    best = next(c for c in cands if c["name"] == pc["best_eligible"])
    expect = (f"Positive control: {'holds' if pc['holds'] else 'does not hold'} \u2014 seed "
              f"{100 * pc['seed_pooled_dev_accuracy']:.1f}% pooled (band {100 * pc['seed_band'][0]:g}\u2013"
              f"{100 * pc['seed_band'][1]:g}%: {'inside' if pc['seed_in_band'] else 'outside'}); best eligible "
              f"{pc['best_eligible']} at update {pc['until']} of {pc['cohort_A_updates']}: "
              f"{100 * best['dev']['accuracy']:.1f}%, {100 * pc['best_eligible_gain']:+.1f} points (at least "
              f"{100 * pc['min_gain']:g} needed).")
    assert expect in page.paras
    assert "does not hold \u2014 seed 20.3% pooled (band 5\u201340%: inside); best eligible c0 at update 128 of " \
           "128: 24.8%, +4.5 points (at least 15 needed)." in expect
    assert rec["parameters"]["rule"] in " ".join(page.paras)  # verbatim


def test_the_failed_record_shows_each_candidate_s_error():
    rec = _record(FAILED)
    page, _ = _render(REPO / "runs", FAILED)
    rows = _by_column(page)
    cands = rec["results"]["candidates"]
    assert [r["candidate"] for r in rows] == [c["name"] for c in cands] and len(rows) == 4
    for c, row in zip(cands, rows):
        line = c["error"].splitlines()[0]
        assert row["status"] == c["status"] == "failed"
        assert row["error (first line)"] == (line if len(line) <= 200 else line[:200] + "\u2026")
        assert row["error (first line)"].startswith(f"kit adaptive prepare ({c['name']}-prepare) exited 2")
        assert row["dev accuracy (pooled)"] == "\u2014"
    done = sum(1 for c in cands if c.get("dev"))
    assert f"Positive control: not computed ({done} of 4 candidate(s) completed a development evaluation)." \
        in page.paras
    assert f"Chosen: none (results.chosen is null; the record's status is {rec['status']})." in page.paras


def test_the_study_record_shows_four_candidates_and_the_chosen_one():
    rec = _record(STUDY)
    page, p = _render(REPO / "runs", STUDY)
    assert p.kind == "study"
    rows = _by_column(page)
    cands = rec["results"]["candidates"]
    chosen = rec["results"]["chosen"]
    assert [r["candidate"].split()[0] for r in rows] == [c["name"] for c in cands] and len(rows) == 4
    assert [r["candidate"] for r in rows if r["candidate"].endswith("(chosen)")] == [f"{chosen['candidate']} (chosen)"]
    for c, row in zip(cands, rows):
        assert row["dev accuracy (pooled)"] == f"{100 * c['dev']['accuracy']:.1f}%"
        assert row["change (points)"] == f"{100 * (c['dev']['accuracy'] - c['dev']['seed_accuracy']):+.1f}"
        assert row["task NLL change (nats/token)"] == _signed(c["dev"]["tasks"]["change_nats_per_token"])
    assert not any("retention" in h for h in page.head)  # the study pilot has no retention gate
    values = ", ".join(f"{k} {v:g}" if isinstance(v, float) else f"{k} {v}" for k, v in chosen["values"].items())
    assert f"Chosen: {chosen['candidate']} ({values})." in page.paras
    assert not any(s.startswith("Positive control") for s in page.paras)


def test_an_older_record_says_it_predates_the_positive_control_and_marks_its_ineligible_candidate():
    rec = _record(OLDER)
    assert "positive_control" not in rec["results"]
    page, _ = _render(REPO / "runs", OLDER)
    assert "Positive control: no positive control recorded (record predates it)." in page.paras
    for c, cells in zip(rec["results"]["candidates"], page.rows, strict=True):
        up = c["dev"]["retention"]["bootstrap_upper"]
        gate = dict(zip(page.head, cells))["dev retention gate"]
        if c["dev"]["eligible"]:
            assert gate == (f"passes (eligible): upper bound {_signed(up)} \u2264 +0.02", "verdict-pass")
        else:
            assert gate == (f"fails dev retention: upper bound {_signed(up)} > +0.02", "verdict-fail")
    failing = [c["name"] for c in rec["results"]["candidates"] if not c["dev"]["eligible"]]
    assert failing == ["c2"]
    assert any(s.startswith("Dev retention gate: 1 of 3 evaluated candidate(s) fail dev retention") and "c2 (" in s
               for s in page.paras)


def _forget(rec: dict, upper: float = 0.05) -> None:
    """The adaptive record's one candidate made to forget: its retention bound over the threshold."""
    c = rec["results"]["candidates"][0]
    c["dev"]["retention"]["bootstrap_upper"] = upper
    c["dev"]["eligible"] = False
    rec["results"]["positive_control"].update(best_eligible=None, best_eligible_gain=None, holds=False)


def test_a_fixture_candidate_that_fails_dev_retention_is_marked(tmp_path):
    runs = _copy(tmp_path, ADAPTIVE, change=_forget)
    page, _ = _render(runs, ADAPTIVE)
    gate = dict(zip(page.head, page.rows[0]))["dev retention gate"]
    assert gate == ("fails dev retention: upper bound +0.05000 > +0.02", "verdict-fail")
    assert any(s.startswith("Dev retention gate: 1 of 1 evaluated candidate(s) fail dev retention") for s in page.paras)
    assert any(s.startswith("Positive control: does not hold") and "no eligible candidate at update 128 of 128" in s
               for s in page.paras)


def test_the_sentence_follows_the_record_when_the_control_holds(tmp_path):
    def gain(rec):
        c = rec["results"]["candidates"][0]
        c["dev"]["accuracy"] = 0.453125  # seed 0.203125 + 0.25
        rec["results"]["positive_control"].update(best_eligible_gain=0.25, holds=True)

    page, _ = _render(_copy(tmp_path, ADAPTIVE, change=gain), ADAPTIVE)
    assert ("Positive control: holds \u2014 seed 20.3% pooled (band 5\u201340%: inside); best eligible c0 at update "
            "128 of 128: 45.3%, +25.0 points (at least 15 needed).") in page.paras


@pytest.mark.parametrize("lie, field", [
    (lambda r: r["results"]["candidates"][0]["dev"]["retention"].update(bootstrap_upper=0.05), "eligible"),
    (lambda r: r["results"]["positive_control"].update(holds=True), "results.positive_control.holds"),
    (lambda r: r["results"]["positive_control"].update(seed_in_band=False), "results.positive_control.seed_in_band"),
    (lambda r: r["results"]["positive_control"].update(best_eligible_gain=0.3),
     "results.positive_control.best_eligible_gain"),
    (lambda r: r["results"].update(candidates={"c0": 1}), "results.candidates"),
])
def test_a_record_that_contradicts_its_numbers_is_refused_naming_the_file_and_field(tmp_path, lie, field):
    runs = _copy(tmp_path, ADAPTIVE, change=lie)
    with pytest.raises(ValueError, match=rf"{ADAPTIVE}/run\.json: field '[^']*{field}'"):
        _render(runs, ADAPTIVE)


def test_the_medium_report_has_a_collapsed_pilots_section_after_the_verdicts_reading_the_study_pilot_too(tmp_path):
    runs = _copy(tmp_path, ADAPTIVE, STUDY)
    shutil.copytree(REPO / "runs" / "demo-seed", runs / "demo-seed")
    nb = build_report_notebook(runs / "medium-*", "t", relative_to=tmp_path / "reports" / "medium")
    sources = [c.source for c in nb.cells]
    i = sources.index("## Pilots")
    # the verdicts and the accuracy open the report; the pilots come after them, in a collapsed section of their own
    assert sources.index("## Verdicts") < sources.index("## Accuracy by family") < i
    assert nb.cells[i].id == "kit-details-pilots" and sources[i + 2] == "## Runs"
    assert sources[i + 1] == "show_pilots('../../runs/medium-*', also=['../../runs/study-pilot-*'])"
    found = pilots.pilot_records(runs / "medium-*", pilots.beside(runs / "medium-*"))
    assert [(p.run_id, p.kind, p.linked) for p in found] == [(STUDY, "study", False),
                                                                    (ADAPTIVE, "adaptive", True)]
    # a selection without pilot records has no such section
    demo = build_report_notebook(runs / "demo-*", "t", relative_to=tmp_path / "reports" / "demo")
    assert "## Pilots" not in [c.source for c in demo.cells]


def test_show_pilots_displays_every_record(tmp_path, monkeypatch):
    import IPython.display

    shown = []
    monkeypatch.setattr(IPython.display, "display", lambda obj: shown.append(obj.data))
    runs = _copy(tmp_path, ADAPTIVE, FAILED, STUDY)
    pilots.show_pilots(str(runs / "medium-*"), also=[str(runs / "study-pilot-*")])
    assert len(shown) == 1
    assert "3 pilot record(s): 2 adaptive, 1 study" in shown[0]
    for r in (ADAPTIVE, FAILED, STUDY):
        assert f'id="pilot-{r}"' in shown[0]
    assert f'<a href="#run-{ADAPTIVE}">' in shown[0] and f'<a href="#run-{STUDY}">' not in shown[0]
