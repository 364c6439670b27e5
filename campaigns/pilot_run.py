"""What the two pilots share (campaigns/medium_pilot.py, campaigns/study_pilot.py): the run folder whose
kit-bench/1 record is rewritten after every step, so a deadline leaves a "partial" record; each step a
`python -m` process under its own timeout and the overall deadline; the seed, built with the pinned
deterministic settings or given, checked against the draft's `seed.parameter_digest`; and the candidates,
one after another or up to `parallel` at once.

Why threads drive concurrent candidates: every step is already its own process (its own interpreter, its own
numerics), so a thread only waits on it; what the threads share is this process's record, guarded by one lock
(`self.lock`) for every change to it and every rewrite of run.json, and the seed's scores, which `gate(key)`
lets the first candidate that needs them compute while the others wait (the seed scored once)."""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
import sys
import threading
import time
from pathlib import Path

from campaigns.phases import REPO, run_process, step_env
from kit.evidence.environment import relative_to_base

MIN_START_S = {"seed": 60, "prepare": 10, "train": 20, "evaluate": 10, "score": 10}  # the least worth starting
SEED_ENV = {"CUBLAS_WORKSPACE_CONFIG": ":4096:8", "KIT_GPU_DETERMINISTIC": "1"}  # the seed build's pinned settings


def now() -> str:
    return dt.datetime.now(dt.UTC).replace(microsecond=0).isoformat()


def sha256_or_none(path: Path) -> str | None:
    from kit.digest import sha256_file

    return sha256_file(path) if path.exists() else None


def candidates_at_once(text: str) -> int:
    """--parallel N: a whole number of candidates run at once, at least 1 (an argparse type)."""
    import argparse

    try:
        n = int(text)
    except ValueError:
        n = 0
    if n < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a whole number of candidates run at once, at least 1")
    return n


def repo_relative(p: Path) -> str:
    """`p` as a record names it: relative to the repository when inside it (the freeze reads it back)."""
    return relative_to_base(p, REPO)


class PilotRun:
    """The shared machinery; a pilot sets `a` (its arguments: device, seed, tiny), `scale`, `draft`, `out`,
    `work`, `deadline`, `timeouts` and `record` (with `results.seed`), then calls `start()`; its `ROW_VALUES`
    names the key under which a candidate's row carries its values."""

    ROW_VALUES = "values"

    def start(self) -> None:
        self.t0 = time.perf_counter()
        self.lock = threading.RLock()  # the record and run.json, changed from every candidate's thread
        self.gates: dict = {}
        self.save()

    def save(self, row: dict | None = None, **fields) -> None:
        """Rewrite run.json, first setting `fields` on `row` (a candidate's row), all under the lock."""
        with self.lock:
            if row is not None:
                row.update(fields)
            # a step's file being written at this moment (kit's atomic writes: ".NAME.tmp-PID") is not output
            self.record["raw_output"] = sorted(
                str(p.relative_to(self.out)) for p in self.out.rglob("*")
                if p.is_file() and p.name not in ("run.json", "run.json.tmp") and ".tmp-" not in p.name)
            self.record["duration_s"] = round(time.perf_counter() - self.t0, 2)
            tmp = self.out / "run.json.tmp"
            tmp.write_text(json.dumps(self.record, indent=1, sort_keys=True) + "\n")
            os.replace(tmp, self.out / "run.json")

    def gate(self, key) -> threading.Lock:
        """The one lock of `key` (what the seed's scores depend on): held by the first candidate that scores
        the seed for `key`, so concurrent candidates wait for those scores instead of computing them again."""
        with self.lock:
            return self.gates.setdefault(key, threading.Lock())

    def env(self, deterministic: bool = False) -> dict:
        e = step_env(self.a.device)
        if deterministic:
            e.update(SEED_ENV)
        return e

    def run_module(self, kind: str, module_args: list, log: str, deterministic: bool = False) -> dict:
        """`python -m MODULE ARGS` under the `kind` step's timeout and the overall deadline; a timeout or a
        non-zero exit raises, naming the command and its log."""
        left = self.deadline.left() - 5
        if left < MIN_START_S[kind]:
            raise TimeoutError(f"{left:.0f}s left before --deadline-s; a {kind} step needs at least {MIN_START_S[kind]}s")
        r = run_process([sys.executable, "-m", *map(str, module_args)], self.env(deterministic),
                        min(self.timeouts[kind], left), self.out / "logs" / log)
        what = " ".join(map(str, module_args[:3]))
        if r["timed_out"]:
            raise TimeoutError(f"{what} ({log}) timed out after {r['seconds']:.0f}s")
        if r["returncode"] != 0:
            raise RuntimeError(f"{what} ({log}) exited {r['returncode']}: {r['stderr_tail'][-1500:]}")
        return r

    def seed(self) -> Path:
        """The seed directory (--seed, or built under `work` by `kit seed build`), its digest recorded and
        checked against the draft's pin."""
        from kit.inventory import parameter_digest

        t0 = time.perf_counter()
        if self.a.seed:
            seed, built = Path(self.a.seed).resolve(), None
        else:
            seed = self.work / "seed"
            if seed.exists():
                shutil.rmtree(seed)
            scale = ["--scale", "medium", "--device", self.a.device] if self.scale == "medium" else []
            r = self.run_module("seed", ["kit", "seed", "build", *scale, "--out", seed], "seed-build",
                                deterministic=True)
            built = {"seconds": r["seconds"], "command": f"kit seed build {' '.join(scale)} --out DIR",
                     "env": " ".join(f"{k}={v}" for k, v in SEED_ENV.items())}
            if (seed / "seed_build.json").exists():
                shutil.copyfile(seed / "seed_build.json", self.out / "seed_build.json")
        digest = parameter_digest(seed)
        pinned = self.draft.terms.seed.parameter_digest
        self.record["results"]["seed"] = {"dir": str(seed), "parameter_digest": digest, "pinned": pinned,
                                          "matches_pin": None if pinned is None else digest == pinned, "built": built,
                                          "seconds": round(time.perf_counter() - t0, 2)}
        self.save()
        if pinned is not None and digest != pinned:
            raise RuntimeError(f"{seed}: parameter digest {digest}; the draft's field 'seed.parameter_digest' pins "
                               f"{pinned} (rebuild with the recorded deterministic settings)")
        return seed

    def run_candidates(self, parallel: int = 1) -> None:
        """The seed, then every candidate (the pilot's `candidate(i, values, seed, row)`), up to `parallel` at
        once, started in order: `results.candidates[i]` is candidate i whatever the finishing order (each row
        is added when its candidate starts, under the lock). A failed candidate marks its own row and the
        others still run; a deadline (TimeoutError) makes the record "partial" and no candidate starts after
        it (the running ones finish or meet their own timeouts); a failed seed makes it "failed"."""
        res = self.record["results"]
        try:
            seed = self.seed()
        except TimeoutError as e:
            self.record["errors"].append({"deadline": str(e)})
            self.record["status"] = "partial"
            return
        except Exception as e:  # noqa: BLE001 -- the seed failed: nothing else can run
            self.record["errors"].append({"seed": str(e)[-2000:]})
            self.record["status"] = "failed"
            return
        queue = list(enumerate(self.record["parameters"]["candidates"]))
        escaped: list[BaseException] = []

        def drive() -> None:
            while True:
                with self.lock:
                    if not queue or self.record["status"] == "partial":
                        return
                    i, values = queue.pop(0)
                    row = {"name": f"c{i}", self.ROW_VALUES: values, "status": "running", "seconds": {}}
                    res["candidates"].append(row)
                try:
                    self.candidate(i, values, seed, row)
                except TimeoutError as e:  # the row stays "running": a step was cut by the deadline
                    with self.lock:
                        self.record["errors"].append({"deadline": str(e)})
                        self.record["status"] = "partial"
                    self.save()
                except Exception as e:  # noqa: BLE001 -- recorded on its own row; the other candidates still run
                    with self.lock:
                        self.record["errors"].append({"candidate": row["name"], "error": str(e)[-2000:]})
                    self.save(row, status="failed", error=str(e)[-2000:])

        def guarded() -> None:
            try:
                drive()
            except BaseException as e:  # noqa: BLE001 -- raised again in the calling thread
                escaped.append(e)

        if parallel <= 1:
            drive()
            return
        threads = [threading.Thread(target=guarded, name=f"candidates-{k}", daemon=True)
                   for k in range(min(parallel, len(queue)))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if escaped:
            raise escaped[0]

    def final_roles_result(self, found: list[str], checked, found_key: str) -> dict:
        """results.final_roles: opened when any of the files kit writes on opening final roles exists
        (`found`) or the ledger's bytes changed since the pilot began."""
        before = self.record["parameters"]["ledger"]["sha256_before"]
        after = sha256_or_none(self.ledger)
        return {"opened": bool(found) or before != after, found_key: found, "ledger_sha256_after": after,
                "ledger_unchanged": before == after, "checked": list(checked)}

    def settle(self, dev_key) -> None:
        """After the candidates: the final-roles check (the pilot's `final_roles_check`), whether every
        candidate scored the same development data (`dev_key(candidate)`: a hashable digest or None), and the
        status: "failed" if final roles were opened or a candidate did not complete, else "completed"."""
        res = self.record["results"]
        res["final_roles"] = self.final_roles_check()
        keys = {dev_key(c) for c in res["candidates"]} - {None}
        res["dev_roles_identical_across_candidates"] = len(keys) == 1 if keys else None
        if res["final_roles"]["opened"]:
            self.record["errors"].append({"final_roles": "final roles were opened or the ledger changed"})
            self.record["status"] = "failed"
        if self.record["status"] == "running":
            done = [c for c in res["candidates"] if c["status"] == "completed"]
            self.record["status"] = "completed" if len(done) == len(self.record["parameters"]["candidates"]) else "failed"
