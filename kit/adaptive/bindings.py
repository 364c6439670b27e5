"""What a training run is bound to, checked before any worker starts: the prepared job's input
commitments (and the kit's own source), the prepared seed, a fresh home for a new cohort, cohort B's
reference (the committed phase-A endpoint of this job), and the phase-A records cohort B replays.
Every refusal is a `TrainRefused` naming the file, the field and what was expected.
(The driver that calls these is kit/adaptive/train.py.)"""

from __future__ import annotations

import os
from pathlib import Path

from kit.adaptive.continued_schema import JobTerms
from kit.adaptive.formats import (
    AnyPreparedJob,
    ContinuedPreparedJob,
    load_attempt,
    load_job_files,
    prepared_job_from_json,
)
from kit.adaptive.lineage import lineage_rows
from kit.adaptive.schema import Cohort
from kit.data.conversations import read_jsonl
from kit.digest import load_json_strict, sha256_file
from kit.inventory import parameter_digest
from kit.paths import inside
from kit.provenance import check_commitments
from kit.store.commits import CommitError, read_head, read_manifest
from kit.store.in_use import IN_USE_NAME, in_use_by
from kit.store.manifest import Manifest

COHORTS = ("A", "B")


class TrainRefused(ValueError):
    pass


def check_inputs(prepared: Path) -> dict:
    """Every digest in adaptive-shards-inputs.json against what is on disk, and the kit's source."""
    commitments = load_json_strict(prepared / "adaptive-shards-inputs.json")
    check_commitments(commitments, lambda p: Path(p) if os.path.isabs(p) else prepared / p)
    return commitments


def check_seed(prepared: Path, pj: AnyPreparedJob, seed_dir: str) -> None:
    """--seed must be the prepared seed: its parameter digest, config.json and tokenizer files (the
    committed inputs pin the directory prepare read, not the one passed now)."""
    seed = Path(seed_dir)
    if not (seed / "config.json").is_file():
        raise TrainRefused(f"--seed {seed}: no config.json; expected the prepared seed directory")
    actual = parameter_digest(seed)
    if actual != pj.seed.parameter_digest:
        raise TrainRefused(f"--seed {seed}: parameter digest {actual}; {prepared / 'prepared.json'} field "
                           f"'seed.parameter_digest' expects {pj.seed.parameter_digest}")
    files = {"config.json": pj.seed.config_sha256, **pj.tokenizer}
    for name, want in sorted(files.items()):
        got = sha256_file(seed / name) if (seed / name).is_file() else "absent"
        if got != want:
            field = "seed.config_sha256" if name == "config.json" else f"tokenizer.{name}"
            raise TrainRefused(f"--seed {seed / name}: sha256 {got}; {prepared / 'prepared.json'} field "
                               f"{field!r} expects {want}")


def check_fresh_home(home: str, cohort: str, resume: str | None, resume_cursor: dict | None,
                     order=COHORTS) -> None:
    """The trial's "fresh --home": a cohort starts in a new or empty store. Only an attempt that continues
    its own cohort from a commit (--resume with the same cohort in the cursor) may use an existing home."""
    continues = resume is not None and resume_cursor is not None and \
        resume_cursor.get("cohort", 0) == list(order).index(cohort)
    h = Path(home)
    if not continues and h.exists() and (not h.is_dir() or any(h.iterdir())):
        what = "starts from the seed" if resume is None else f"starts from {resume} (another cohort's endpoint)"
        raise TrainRefused(f"--home {h}: not empty; cohort {cohort} {what} and needs a fresh --home (a new or "
                           "empty directory); only --resume within the same cohort continues in an existing home"
                           + _earlier_attempts(h))


def _earlier_attempts(home: Path) -> str:
    """What an earlier attempt left in `home` and how to go on from it: resume from its HEAD, or, when it
    committed nothing (interrupted before its first commit), remove the home and start again."""
    records = sorted(home.glob("attempts/*/attempt.json")) if home.is_dir() else []
    holder = in_use_by(home) if home.is_dir() else None
    if holder is not None:  # never tell anyone to remove a home a training is writing
        running = [p.parent.name for p in records if _state(p) == "running"]
        return (f"; it is in use by {holder} ({home / IN_USE_NAME} is held"
                + (f"; attempt {', '.join(running)} is running" if running else "")
                + "): wait for that training to end, or choose another --home")
    if not records:
        return ""
    states = ", ".join(f"{p.parent.name} ({_state(p)})" for p in records)
    head = read_head(home)
    if head is None:
        return (f"; it holds attempt(s) {states} that committed nothing: remove them with `rm -r {home}` and run "
                "the same command again")
    return f"; it holds attempt(s) {states}: resume the last with `--resume HEAD` (HEAD is {head})"


def _state(record: Path) -> str:
    try:
        rec = load_json_strict(record)
    except (OSError, ValueError):
        return "unreadable record"
    return " ".join(str(x) for x in (rec.get("status"), rec.get("signal")) if x)


def a_endpoint_of(resume_home: str, resume: str, terms: JobTerms, depth: int) -> str | None:
    """The phase-A endpoint a cohort-B lineage continues: --resume itself at the B start, else the nearest
    ancestor (parent links in `resume_home`) at the A endpoint's cursor and the seed's depth (a growth
    commit keeps the A cursor with more blocks, so its parent is the one). None when the chain breaks."""
    want = {"step": terms.endpoints["A"], "cohort": 0, "cohort_step": terms.endpoints["A"]}
    root = resume
    for _ in range(100_000):
        try:
            m = read_manifest(resume_home, root)
        except (CommitError, ValueError):
            return None
        cursor = m.learned_state.cursor
        if {k: cursor.get(k) for k in want} == want and max(b for _, b in m.layout.blocks) == depth:
            return root
        if m.parent is None:
            return None
        root = m.parent
    return None


def _b_reference(terms: JobTerms) -> str:
    """The contract's `cohorts.B.reference` (only an adaptive job has a cohort B)."""
    b = terms.cohorts["B"]
    assert isinstance(b, Cohort), "cohort B is an adaptive job's"
    return b.reference


def check_reference(prepared: Path, pj: AnyPreparedJob | dict, terms: JobTerms, reference: str, resume: str, ref_home: str,
                    resume_home: str | None = None) -> Manifest:
    """Cohort B's --reference is the committed phase-A endpoint the B lineage continues: --resume at the B
    start (or the A-endpoint ancestor of a --resume inside B), at the contract's A endpoint, and committed
    by an attempt of this prepared job (`pj`: the job, or its prepared.json as loaded)."""
    if isinstance(pj, dict):
        pj = prepared_job_from_json(pj, str(Path(prepared) / "prepared.json"))
    endpoint = a_endpoint_of(resume_home or ref_home, resume, terms, pj.seed.num_hidden_layers)
    if reference != endpoint:
        raise TrainRefused(f"--reference {reference}: expected the committed phase-A endpoint that cohort B "
                           f"continues from --resume {resume}: {endpoint or 'none found along its parents'} "
                           f"(contract field 'cohorts.B.reference' = {_b_reference(terms)!r})")
    manifest = read_manifest(ref_home, reference)
    cursor = dict(manifest.learned_state.cursor)
    want = {"step": terms.endpoints["A"], "cohort": 0, "cohort_step": terms.endpoints["A"]}
    if {k: cursor.get(k) for k in want} != want:
        raise TrainRefused(f"--reference {ref_home}:{reference}: cursor {cursor}; expected the phase-A endpoint "
                           f"{want} (contract field 'endpoints.A' = {terms.endpoints['A']})")
    made = []
    for path in sorted(Path(ref_home).glob("attempts/*/attempt.json")):
        rec = load_attempt(path)
        if any(c.full_root == reference for c in rec.commits or ()) and rec.status == "completed":
            made.append((path, rec.prepared_job_digest))
    if not any(job == pj.job_digest for _, job in made):
        found = ", ".join(f"{p} (prepared_job_digest {j})" for p, j in made) or "no completed attempt committed it"
        raise TrainRefused(f"--reference {ref_home}:{reference}: not committed by an attempt of this prepared job "
                           f"({prepared / 'prepared.json'} field 'job_digest' = {pj.job_digest}); found: {found}; "
                           "if a cohort-A run of this job committed it and died before recording it, record it "
                           f"with `kit adaptive train --prepared {prepared} --seed SEED --cohort A --home {ref_home} "
                           f"--resume {reference}`, then run this command again")
    return manifest


def check_a_trained(a_home: str, prepared: Path, a_endpoint: int) -> int:
    """Phase B replays examples *actually trained* in phase A: every B.replay_a id must appear in an
    update of A's logs at a step within A's endpoint. Returns how many were checked."""
    info = load_job_files(prepared).roles["B.replay_a"]
    wanted = {c.id for c in read_jsonl(inside(prepared, info.file, f"{prepared / 'prepared.json'} field "
                                              "'roles.B.replay_a.file'"), info.sha256)}
    seen = set()

    for row in lineage_rows(a_home):  # own logs and the lineage's inherited ones
        if row["cohort"] == "A" and row["cohort_step"] <= a_endpoint:
            seen.update(row["ids"])
    missing = sorted(wanted - seen)
    if missing:
        raise TrainRefused(f"{a_home}: {len(missing)} B.replay_a record(s) were never trained in phase A "
                           f"(e.g. {missing[0]!r}); phase B replays only examples actually trained")
    return len(wanted)


def check_cohort(pj: AnyPreparedJob, terms: JobTerms, cohort: str, resume: str | None, reference: str | None,
                 grow: bool) -> None:
    order = terms.cohort_order
    if cohort not in order:
        raise TrainRefused(f"--cohort {cohort!r}; this prepared job ({pj.contract.kind}) has cohorts {order}")
    if cohort != order[0] and (not reference or not resume):
        raise TrainRefused(f"cohort {cohort} needs --reference (the committed phase-A endpoint) and --resume")
    if grow and terms.growth.cohort != cohort:
        raise TrainRefused(f"--grow: the contract grows cohort {terms.growth.cohort!r} only "
                           f"(growth forbidden in cohort {cohort})")


def check_bindings(prepared: Path, pj: AnyPreparedJob, terms: JobTerms, seed_dir: str, home: str, cohort: str,
                   resume: str | None, reference: str | None, source_home: str | None,
                   reference_home: str | None) -> None:
    """Inputs bound to the prepared job, before anything is created: the seed, cohort B's reference, a
    fresh home for a new cohort."""
    check_seed(prepared, pj, seed_dir)
    if cohort == "B":
        assert reference is not None and resume is not None, "check_cohort refuses cohort B without both"
        check_reference(prepared, pj, terms, reference, resume, reference_home or source_home or home,
                        source_home or home)
    if cohort == "C" and isinstance(pj, ContinuedPreparedJob):  # the prepared job names its start endpoint
        want = pj.start.full_root
        for flag, value in (("--resume", resume), ("--reference", reference)):
            if value != want:
                raise TrainRefused(f"{flag} {value}: {prepared / 'prepared.json'} field 'start.full_root' expects "
                                   f"{want} (the phase-A endpoint this continued job starts from)")
    cursor = dict(read_manifest(source_home or home, resume).learned_state.cursor) if resume else None
    check_fresh_home(home, cohort, resume, cursor, terms.cohort_order)
