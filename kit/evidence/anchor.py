"""Anchored verification: the evidence held to something outside its files (docs/formats/verify-evidence.md,
"The evidence root and its anchors").

- `root_report(runs, ledger, expected)`: `kit verify-evidence --root SHA256`, the working tree's evidence root
  (kit.evidence.root) equal to a root a reviewer holds.
- `at_report(runs, ledger, commit)`: `kit verify-evidence --at COMMIT`, the working tree's evidence file for file
  equal to that commit's (read from git's objects), and a root the commit states for itself (a line
  `Evidence root <64 hex>` in its message, or in the message of the tag `COMMIT` names) recomputed from the
  commit's files; a tag signed with git's SSH signing verified by `git verify-tag` (`ssh-keygen -Y verify`)
  against an allowed-signers file.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

from kit.evidence.checks import report_json
from kit.evidence.root import (
    EvidenceRootError,
    commit_leaves,
    compare_leaves,
    default_ledger_dir,
    evidence_leaves,
    root_of,
)

ROOT_RE = re.compile(r"[0-9a-f]{64}")
STATED_RE = re.compile(r"^Evidence root:? ([0-9a-f]{64})\b", re.MULTILINE)
SSH_SIGNATURE = "-----BEGIN SSH SIGNATURE-----"


def _check(name: str, problems: list[str], ok: str, skipped: str | None = None) -> dict:
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        return {"check": name, "result": "fail", "detail": problems[0] + more}
    if skipped is not None:
        return {"check": name, "result": "skipped", "detail": skipped}
    return {"check": name, "result": "pass", "detail": ok}


def _report(where, checks: list[dict]) -> dict:
    return report_json(str(where), None, checks)


def root_report(runs_dir, ledger_dir, expected: str) -> dict:
    """The `evidence root` check: the working tree's root equals `expected` (64 lowercase hex)."""
    runs_dir = Path(runs_dir)
    ledger_dir = Path(ledger_dir) if ledger_dir is not None else default_ledger_dir(runs_dir)
    if not ROOT_RE.fullmatch(expected or ""):
        return _report(runs_dir, [_check("evidence root", [(f"--root {expected!r}: expected 64 lowercase hex "
                                                            "characters (`kit evidence-root`)")], "")])
    try:
        have = root_of(evidence_leaves(runs_dir, ledger_dir))
    except EvidenceRootError as e:
        return _report(runs_dir, [_check("evidence root", [str(e)], "")])
    problem = [] if have == expected else [(f"{runs_dir} and {ledger_dir}: evidence root {have}; --root expects "
                                           f"{expected} (a file was added, removed, moved, linked or edited)")]
    return _report(runs_dir, [_check("evidence root", problem, f"{have} equals --root")])


def _git(base: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "-C", str(base), *args], capture_output=True, text=True, check=False)


def _relative(path: Path, base: Path) -> str:
    try:
        return Path(os.path.abspath(path)).relative_to(base).as_posix()
    except ValueError:
        return ""


def at_report(runs_dir, ledger_dir, commit: str, allowed_signers: str | None = None) -> dict:
    """The `at commit`, `commit root` and `tag signature` checks of `kit verify-evidence --at COMMIT`."""
    runs_dir = Path(runs_dir)
    ledger_dir = Path(ledger_dir) if ledger_dir is not None else default_ledger_dir(runs_dir)
    top = _git(runs_dir, "rev-parse", "--show-toplevel")
    if top.returncode != 0:
        return _report(runs_dir, [_check("at commit", [(f"{runs_dir}: not in a git repository; --at needs the "
                                                       "repository holding the runs")], "")])
    base = Path(top.stdout.strip())
    runs_rel, ledger_rel = _relative(runs_dir, base), _relative(ledger_dir, base)
    if not runs_rel or not ledger_rel:
        return _report(runs_dir, [_check("at commit", [(f"{runs_dir}, {ledger_dir}: expected both inside the "
                                                       f"repository {base}")], "")])
    resolved = _git(base, "rev-parse", "--verify", "--quiet", f"{commit}^{{commit}}")
    if resolved.returncode != 0:
        return _report(runs_dir, [_check("at commit", [f"--at {commit!r}: not a commit of {base}"], "")])
    sha = resolved.stdout.strip()
    checks = []
    try:
        want = commit_leaves(base, sha, runs_rel, ledger_rel)
        have = evidence_leaves(runs_dir, ledger_dir)
    except EvidenceRootError as e:
        return _report(runs_dir, [_check("at commit", [str(e)], "")])
    source = f"{commit} ({sha[:12]})"
    checks.append(_check("at commit", compare_leaves(have, want, source),
                         f"{len(have)} evidence file(s) equal to {source}'s"))
    commit_root = root_of(want)
    messages = [_git(base, "cat-file", "commit", sha).stdout]
    is_tag = _git(base, "cat-file", "-t", f"refs/tags/{commit}").stdout.strip() == "tag"
    tag_text = _git(base, "cat-file", "tag", f"refs/tags/{commit}").stdout if is_tag else ""
    messages.append(tag_text)
    stated = [m.group(1) for text in messages for m in STATED_RE.finditer(text)]
    checks.append(_check("commit root", [f"{source}: states evidence root {s}; its files give {commit_root}"
                                         for s in stated if s != commit_root],
                         f"{commit_root}, the root {source} states", skipped=None if stated else
                         f"{commit_root} ({source} states no 'Evidence root' line to recompute)"))
    checks.append(_signature_check(base, commit, is_tag, tag_text, allowed_signers))
    return _report(runs_dir, checks)


def _signature_check(base: Path, tag: str, is_tag: bool, tag_text: str, allowed_signers: str | None) -> dict:
    """A tag signed with an SSH key (git's SSH signing) verified against the allowed signers: `--allowed-signers`
    or the repository's gpg.ssh.allowedSignersFile. An unsigned commit or tag is `skipped`: it anchors only
    as far as the reviewer trusts where it came from."""
    if not is_tag:
        return _check("tag signature", [], "", skipped=f"{tag} is not an annotated tag: no signature to verify")
    if SSH_SIGNATURE not in tag_text:
        kind = "a signature other than SSH" if "-----BEGIN" in tag_text else "no signature"
        return _check("tag signature", [f"tag {tag}: {kind}; expected one made with git's SSH signing"]
                      if kind != "no signature" else [], "", skipped=f"tag {tag} is unsigned")
    signers = allowed_signers or _git(base, "config", "gpg.ssh.allowedSignersFile").stdout.strip()
    if not signers or not Path(signers).is_file():
        return _check("tag signature", [(f"tag {tag}: signed, but no allowed-signers file to verify it against "
                                        f"({signers or 'none'}); give --allowed-signers FILE")], "")
    done = _git(base, "-c", "gpg.format=ssh", "-c", f"gpg.ssh.allowedSignersFile={signers}", "verify-tag", tag)
    if done.returncode != 0:
        why = [line for line in (done.stderr or done.stdout).splitlines() if line.strip()]
        return _check("tag signature", [(f"tag {tag}: SSH signature does not verify against {signers}: "
                                        f"{why[-1] if why else 'rc ' + str(done.returncode)}")], "")
    who = [line for line in done.stderr.splitlines() if "Good" in line]
    return _check("tag signature", [], who[0].strip() if who else f"tag {tag}: good SSH signature ({signers})")
