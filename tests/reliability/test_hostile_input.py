"""Hostile input files (issue #48, the file half): crafted stores, seeds, configs, contracts, prepared
jobs, chat templates and paths. Each test is one reproduction of the issue; each must end in one line
on stderr naming the command and the file or field, exit 2 (or hold), never a traceback, a hang, an
allocation of what the input claims, or a file touched outside the store.

Cases that could hang or fill memory without their fix run under `deadline` (SIGALRM), so a
regression fails instead of stalling the suite.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import struct
from pathlib import Path

import pytest
from support.reliability import model_commit, write_seed

from kit.cli import main
from kit.store import commits
from kit.store.objects import ObjectStore


@contextlib.contextmanager
def deadline(seconds: float):
    """Fail (TimeoutError) instead of hanging when the code under test reads without end."""
    def expire(*_):
        raise TimeoutError(f"still running after {seconds} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def refused(capsys, argv: list[str], *needles: str, seconds: float = 20) -> str:
    """Run `kit ARGV` in-process: exit 2, one line `kit ...: error: ...` holding every needle."""
    capsys.readouterr()
    with deadline(seconds):
        rc = main(argv)
    err = capsys.readouterr().err
    assert rc == 2, (rc, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("kit ") and ": error: " in lines[0], err
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    return lines[0]


def store_with_commit(tmp_path: Path) -> tuple[Path, str]:
    """A store whose HEAD commit is a whole tiny model (its parameters match its config)."""
    home = tmp_path / "store"
    return home, model_commit(home, write_seed(tmp_path / "seed"), workers=1, seed=1)


def tensor_object(home: Path, root: str) -> Path:
    entry = commits.read_commit(home, root)["learned_state"]["params"][0]
    return ObjectStore(home).path(entry["param"])


# -- 1. gc deletes only the kit's own temporaries, never through a link ------------------------------


def test_gc_never_deletes_outside_the_store(tmp_path, capsys):
    home, _ = store_with_commit(tmp_path)
    victim = tmp_path / "V"
    victim.mkdir()
    for name in ("notes.txt", "object.host.1.abc.tmp", f"object.h.999999999.{'0' * 32}.tmp"):
        (victim / name).write_text("keep me")
    shutil.rmtree(home / "tmp", ignore_errors=True)
    (home / "tmp").symlink_to(victim)
    refused(capsys, ["checkpoint", "gc", "--home", str(home)], str(home / "tmp"), "symbolic link")
    assert sorted(p.name for p in victim.iterdir()) == sorted(
        ["notes.txt", "object.host.1.abc.tmp", f"object.h.999999999.{'0' * 32}.tmp"])


def test_gc_deletes_only_files_named_as_its_temporaries(tmp_path, capsys):
    home, _ = store_with_commit(tmp_path)
    tmp = home / "tmp"
    tmp.mkdir(exist_ok=True)
    dead = tmp / f"object.{os.uname().nodename.replace('.', '-')}.999999999.{'a' * 32}.tmp"
    dead.write_bytes(b"x")
    foreign = [tmp / "readme.txt", tmp / "a.b.c.d.e"]
    for p in foreign:
        p.write_bytes(b"someone else's")
    assert main(["checkpoint", "gc", "--home", str(home)]) == 0
    assert not dead.exists() and all(p.exists() for p in foreign)


def test_gc_objects_never_follows_a_linked_objects_folder(tmp_path, capsys):
    home, _ = store_with_commit(tmp_path)
    outside = tmp_path / "outside"
    outside.mkdir()
    planted = outside / ("ab" + "0" * 62)
    planted.write_bytes(b"not the store's")
    (home / "objects" / "ab").symlink_to(outside)
    refused(capsys, ["checkpoint", "gc", "--home", str(home), "--objects"], str(home / "objects" / "ab"))
    assert planted.exists()


# -- 4. special files and links inside a store -------------------------------------------------------


@pytest.mark.parametrize("kind", ["dev-zero", "fifo", "link-to-copy"])
def test_verify_refuses_an_object_that_is_not_a_regular_file(tmp_path, capsys, monkeypatch, kind):
    monkeypatch.setattr("kit.store.params.IO_THREADS", 1)  # reads in this thread, so `deadline` can stop a hang
    home, root = store_with_commit(tmp_path)
    obj = tensor_object(home, root)
    good = obj.read_bytes()
    obj.unlink()
    if kind == "dev-zero":
        obj.symlink_to("/dev/zero")
    elif kind == "fifo":
        os.mkfifo(obj)
    else:  # a link to intact bytes outside the store is still a link
        (tmp_path / "copy").write_bytes(good)
        obj.symlink_to(tmp_path / "copy")
    line = refused(capsys, ["checkpoint", "verify", "--home", str(home)], str(obj), seconds=10)
    assert ("symbolic link" in line) if kind != "fifo" else ("not a regular file" in line)


def test_head_linked_to_dev_zero_is_one_line(tmp_path, capsys):
    home, _ = store_with_commit(tmp_path)
    (home / "HEAD").unlink()
    (home / "HEAD").symlink_to("/dev/zero")
    for action in ("verify", "list", "show"):
        refused(capsys, ["checkpoint", action, "--home", str(home)], str(home / "HEAD"), seconds=10)


def test_reads_are_bounded_by_the_size_the_manifest_names(tmp_path):
    """An object longer than its tensor (here 64 MiB) is refused from its size, unread."""
    home, root = store_with_commit(tmp_path)
    obj = tensor_object(home, root)
    with open(obj, "r+b") as f:
        f.truncate(64 << 20)
    store = ObjectStore(home)
    with pytest.raises(commits.CommitError, match=rf"{obj}: object holds 67108864 bytes but the manifest needs \d+ bytes"):
        commits.verify_commit(home)
    assert store.bytes_read < 1 << 20


def test_migration_never_reads_a_source_object_through_a_link(tmp_path):
    from kit.store.objects import StoreError, fetch_objects

    home, root = store_with_commit(tmp_path)
    obj = tensor_object(home, root)
    obj.unlink()
    obj.symlink_to("/dev/zero")
    dest = ObjectStore(tmp_path / "dest")
    with deadline(10), pytest.raises(StoreError, match=f"{obj}.*symbolic link"):
        fetch_objects(ObjectStore(home), dest, [obj.name])
    assert not dest.has(obj.name)


# -- 5. safetensors headers are validated completely -------------------------------------------------


def write_safetensors(path: Path, header: dict, data: bytes) -> Path:
    raw = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + data)
    return path


HOSTILE_HEADERS = {  # name: (header of model.safetensors over 128 data bytes, what the refusal names)
    "huge shape": ({"w": {"dtype": "F32", "shape": [10**12, 10**12], "data_offsets": [0, 128]}}, "'w'"),
    "float shape": ({"w": {"dtype": "F32", "shape": [1e12, 1e12], "data_offsets": [0, 128]}}, "non-negative integers"),
    "negative shape": ({"w": {"dtype": "F32", "shape": [-1, 4], "data_offsets": [0, 16]}}, "non-negative integers"),
    "fractional shape": ({"w": {"dtype": "F32", "shape": [1.5, 2], "data_offsets": [0, 8]}}, "non-negative integers"),
    "shape smaller than its bytes": ({"w": {"dtype": "F32", "shape": [1], "data_offsets": [0, 128]}}, "needs 4 bytes"),
    "shared offsets": ({"w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]},
                        "v": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}}, "overlap"),
    "entry is a string": ({"w": "F32"}, "'w'"),
    "offsets past the end": ({"w": {"dtype": "F32", "shape": [64], "data_offsets": [0, 256]}}, "data_offsets"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE_HEADERS))
def test_hostile_safetensors_header_is_refused_by_digest(tmp_path, capsys, case):
    header, needle = HOSTILE_HEADERS[case]
    model = tmp_path / "m"
    model.mkdir()
    path = write_safetensors(model / "model.safetensors", header, bytes(128))
    refused(capsys, ["digest", str(model)], str(path), needle)


def test_hostile_safetensors_header_is_refused_before_loading(tmp_path):
    """A seed whose header lies about a tensor's shape is refused from the header, naming file and tensor."""
    from kit.store.start import start_from_seed

    seed = write_seed(tmp_path / "seed")
    f = seed / "model.safetensors"
    (n,) = struct.unpack("<Q", f.read_bytes()[:8])
    header = json.loads(f.read_bytes()[8:8 + n])
    header["model.norm.weight"]["shape"] = [1.5, 16]  # read as [1, 16] by a lenient reader
    write_safetensors(f, header, f.read_bytes()[8 + n:])
    with pytest.raises(ValueError, match=r"model.safetensors: tensor 'model.norm.weight': shape \[1.5, 16\]"):
        start_from_seed(seed)


# -- 6. models are checked before they are allocated -------------------------------------------------


@pytest.mark.parametrize("field,value", [("vocab_size", 2**31), ("num_hidden_layers", 10**9),
                                         ("hidden_size", 2**40)])
def test_config_beyond_limits_is_refused_before_allocation(tmp_path, capsys, field, value):
    seed = write_seed(tmp_path / "seed")
    cfg = json.loads((seed / "config.json").read_text())
    (seed / "config.json").write_text(json.dumps({**cfg, field: value}))
    from kit.seed.build import (
        load_seed_model,  # what `kit seed show` and `evaluate --candidate seed:DIR` load
    )

    with deadline(10), pytest.raises(ValueError, match=rf"{seed / 'config.json'}: field '{field}' .*expected at most"):
        load_seed_model(seed)
    refused(capsys, ["plan", "--config", str(seed / "config.json"), "--worker", "80"],
            field, "expected at most", seconds=10)


def test_seed_tensors_contradicting_the_config_are_refused_before_allocation(tmp_path):
    """config.json says 4 layers, the tensors hold 2: refused from the headers, naming the missing tensor."""
    from kit.store.start import start_from_seed

    seed = write_seed(tmp_path / "seed")
    cfg = json.loads((seed / "config.json").read_text())
    (seed / "config.json").write_text(json.dumps({**cfg, "num_hidden_layers": 4, "vocab_size": 4096}))
    with pytest.raises(ValueError, match=rf"{seed}: tensor 'model.layers.2.*' is missing from the safetensors files"):
        start_from_seed(seed)
    (seed / "config.json").write_text(json.dumps({**cfg, "vocab_size": 4096}))
    with pytest.raises(ValueError, match=r"'model.embed_tokens.weight' has shape \[64, 16\]; expected \[4096, 16\]"):
        start_from_seed(seed)


def contradicting_commit(tmp_path: Path, edit) -> tuple[Path, str]:
    """A well-formed commit (roots recomputed by the writer) of a whole tiny model whose config object
    was swapped for `edit(config)`: the tensors keep the seed's shapes."""
    home, root = store_with_commit(tmp_path)
    manifest = commits.read_commit(home, root)
    cfg = json.loads((tmp_path / "seed" / "config.json").read_text())
    config = ObjectStore(home).put_bytes(json.dumps(edit(cfg)).encode())
    return home, commits.write_commit(home, manifest["learned_state"], {**manifest["layout"], "model_config": config},
                                      root, manifest["rng"])


def test_commit_whose_config_contradicts_its_tensors_fails_verify_and_export(tmp_path, capsys):
    home, root = contradicting_commit(tmp_path, lambda c: {**c, "intermediate_size": 40})
    refused(capsys, ["checkpoint", "verify", "--home", str(home)], "model.layers.0.mlp.down_proj.weight",
            "has shape [16, 24] but [16, 40] expected")
    out = tmp_path / "export"
    refused(capsys, ["checkpoint", "export", "--home", str(home), "--out", str(out)],
            f"commit {root}", "[16, 40] expected")
    assert not out.exists()


# -- 9. forged commit contents: extra or missing parameter entries -----------------------------------


@pytest.mark.parametrize("forgery", ["extra", "missing"])
def test_forged_parameter_entries_refuse_the_resume(tmp_path, forgery):
    from support.reliability import random_states

    from kit.store.params import save_param_states
    from kit.store.start import start_from_commit

    home, root = store_with_commit(tmp_path)
    manifest = commits.read_commit(home, root)
    params = manifest["learned_state"]["params"]
    if forgery == "extra":
        params = sorted(params + save_param_states(ObjectStore(home), random_states(3, {"model.extra.weight": (4,)})),
                        key=lambda e: e["name"])
        needle = r"unexpected \['model.extra.weight'\]"
    else:
        params = [e for e in params if e["name"] != "model.embed_tokens.weight"]
        needle = r"missing \['model.embed_tokens.weight'\]"
    forged = commits.write_commit(home, {**manifest["learned_state"], "params": params}, manifest["layout"], root,
                                  manifest["rng"])
    with pytest.raises(ValueError, match=rf"commit {forged} learned_state.params: parameters do not match .*{needle}"):
        start_from_commit(str(home), forged)


# -- 7. contracts that escaped the validator ---------------------------------------------------------

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("text,needle", [("[" * 100000, "nested too deeply"),
                                         ("[" * 70 + "]" * 70, "nested 65 levels deep; expected at most 64")])
def test_deeply_nested_contract_is_one_line(tmp_path, capsys, text, needle):
    contract = tmp_path / "contract.json"
    contract.write_text(text)
    out = tmp_path / "out"
    for argv in (["adaptive", "prepare", "--contract", str(contract), "--seed", str(tmp_path), "--replay",
                  str(contract), "--public-source", str(contract), "--out", str(out)],
                 ["study", "prepare", "--contract", str(contract), "--seed", str(tmp_path), "--public-source",
                  str(contract), "--out", str(out)]):
        refused(capsys, argv, str(contract), needle)


def edited_contract(tmp_path: Path, name: str, edit, text_edit=None) -> Path:
    c = json.loads((REPO / "contracts" / name).read_text())
    edit(c)
    text = json.dumps(c)
    path = tmp_path / name
    path.write_text(text_edit(text) if text_edit else text)
    return path


def test_huge_counts_in_a_contract_are_refused(tmp_path):
    from kit.adaptive.schema import load_adaptive_contract
    from kit.study.schema import load_study_contract

    def dev(c):
        c["evaluation"]["dev"]["tasks"] = 10**9

    def final(c):
        c["evaluation"]["final"]["tasks"] = 10**12

    def study(c):
        c["data"]["final_test"]["count"] = 10**9

    for edit, field in ((dev, "evaluation.dev.tasks"), (final, "evaluation.final.tasks")):
        with deadline(10), pytest.raises(ValueError, match=rf"field '{field}' = \d+; expected within \[1, 1000000\]"):
            load_adaptive_contract(edited_contract(tmp_path, "adaptive-shards.tiny.json", edit))
    with deadline(10), pytest.raises(ValueError, match=r"field 'data.final_test.count' = \d+; expected within"):
        load_study_contract(edited_contract(tmp_path, "shared-gradient.tiny.json", study))


def test_overflowing_number_in_a_contract_names_the_field(tmp_path):
    from kit.adaptive.schema import load_adaptive_contract

    path = edited_contract(tmp_path, "adaptive-shards.tiny.json",
                           lambda c: c["training"]["optimizer"]["default"].update(lr="LR"),
                           lambda text: text.replace('"LR"', "1e999"))
    with pytest.raises(ValueError, match=rf"{path}: field 'training.optimizer.default.lr' = inf: the number "
                                         "overflows; expected a finite number"):
        load_adaptive_contract(path)


# -- 8. paths named by a prepared job are confined to its folder -------------------------------------


@pytest.fixture(scope="module")
def tokenizer_seed(tmp_path_factory):
    from support.adaptive import make_seed

    return make_seed(tmp_path_factory.mktemp("tok"), [], layers=2)


def prepared_naming(tmp_path: Path, role_file: str) -> Path:
    """A prepared job (what `records_for_cohort` reads) whose A.new role file is `role_file`, with the
    pinned sha256 of what that name reaches: a forger re-hashes what he points at."""
    from kit.data.conversations import Conversation, Message, write_jsonl
    from kit.digest import write_canonical_json

    prepared = tmp_path / "prepared"
    (prepared / "roles").mkdir(parents=True)
    conv = Conversation("x", (Message("user", "hi"), Message("assistant", "outside")), "synthetic")
    sha = write_jsonl(tmp_path / "outside.jsonl", [conv])
    write_canonical_json(prepared / "prepared.json", {"schedule": {"file": "schedule.json"},
                                                      "roles": {"A.new": {"file": role_file, "sha256": sha}}})
    write_canonical_json(prepared / "schedule.json",
                         {"cohorts": {"A": {"steps": [[{"id": "x", "role": "A.new", "replay": False}]]}}})
    return prepared


@pytest.mark.parametrize("how", ["dot-dot", "absolute", "link"])
def test_prepared_role_paths_are_confined(tmp_path, tokenizer_seed, how):
    from kit.adaptive.evaluation import role_file
    from kit.adaptive.train import records_for_cohort

    name = {"dot-dot": "../outside.jsonl", "absolute": str(tmp_path / "outside.jsonl"), "link": "roles/A.jsonl"}[how]
    prepared = prepared_naming(tmp_path, name)
    if how == "link":
        (prepared / "roles" / "A.jsonl").symlink_to(tmp_path / "outside.jsonl")
    needle = rf"{prepared / 'prepared.json'} field 'roles.A.new.file' = '{name}'.*inside {prepared}"
    with deadline(10), pytest.raises(ValueError, match=needle):
        records_for_cohort(prepared, "A", str(tokenizer_seed), 64)
    with pytest.raises(ValueError, match=needle):
        role_file(prepared, "A.new")


def test_prepared_schedule_path_is_confined(tmp_path, tokenizer_seed):
    """The issue's `/dev/zero` drove workers to MemoryError; any absolute path is refused before it is
    opened (here an intact copy of the schedule outside the folder, so the test is safe to run unfixed)."""
    from kit.adaptive.train import records_for_cohort
    from kit.digest import load_json_strict, write_canonical_json

    prepared = prepared_naming(tmp_path, "roles/A.new.jsonl")
    shutil.copy(prepared / "schedule.json", tmp_path / "schedule.json")
    pj = load_json_strict(prepared / "prepared.json")
    for name in (str(tmp_path / "schedule.json"), "/dev/zero"):
        write_canonical_json(prepared / "prepared.json", {**pj, "schedule": {"file": name}})
        with deadline(10), pytest.raises(ValueError, match=rf"field 'schedule.file' = '{name}': expected a relative"):
            records_for_cohort(prepared, "A", str(tokenizer_seed), 64)


# -- 10. hostile chat templates ----------------------------------------------------------------------


@pytest.mark.parametrize("template,error", [
    ("{{ '{0.__class__.__mro__}'.format(messages) }}", "SecurityError"),
    ("{% for i in range(10**12) %}x{% endfor %}", "OverflowError"),
    ("{{ messages[7]['content'] }}", "UndefinedError"),
])
def test_hostile_chat_template_is_one_refusal(tmp_path, tokenizer_seed, template, error):
    from kit.data.chat import encode_conversation, load_tokenizer
    from kit.data.conversations import Conversation, Message

    seed = tmp_path / "seed"
    shutil.copytree(tokenizer_seed, seed)
    config = json.loads((seed / "tokenizer_config.json").read_text())
    (seed / "tokenizer_config.json").write_text(json.dumps({**config, "chat_template": template}))
    conv = Conversation("c", (Message("user", "hi"), Message("assistant", "ok")), "synthetic")
    with deadline(10), pytest.raises(ValueError, match=rf"{seed}: its chat template does not render a conversation "
                                                       rf"\({error}: "):
        encode_conversation(load_tokenizer(seed), conv, 64)


# -- 12. bad paths on the command line ---------------------------------------------------------------

PATH_COMMANDS = {  # command words, then the arguments around the path under test ("{}")
    "digest": ["digest", "{}"],
    "seed show": ["seed", "show", "{}"],
    "checkpoint verify": ["checkpoint", "verify", "--home", "{}"],
    "checkpoint gc": ["checkpoint", "gc", "--home", "{}"],
    "plan": ["plan", "--config", "{}", "--worker", "80"],
    "verify-evidence": ["verify-evidence", "{}"],
    "report": ["report", "--out", "{}", "runs"],
    "adaptive prepare": ["adaptive", "prepare", "--contract", "{}", "--seed", ".", "--replay", "x",
                         "--public-source", "x", "--out", "x"],
    "study prepare": ["study", "prepare", "--contract", "{}", "--seed", ".", "--public-source", "x", "--out", "x"],
}


@pytest.mark.parametrize("command", sorted(PATH_COMMANDS))
def test_overlong_paths_are_one_line(tmp_path, capsys, command):
    for path in (str(tmp_path / ("n" * 300)), str(tmp_path) + "/d" * 2500):
        argv = [path if a == "{}" else a for a in PATH_COMMANDS[command]]
        refused(capsys, argv, f"kit {command}: error:", path[:200], "File name too long")


@pytest.mark.parametrize("command", sorted(PATH_COMMANDS))
def test_unreadable_folder_is_one_line(tmp_path, capsys, monkeypatch, command):
    """The tests run as root here, for whom mode 000 is no barrier, so the refusal is the kernel's
    EACCES injected for every path under `locked`."""
    locked = tmp_path / "locked"
    locked.mkdir()
    real_stat = os.stat

    def stat(path, *a, **k):
        if str(path).startswith(str(locked)):
            raise PermissionError(13, "Permission denied", str(path))
        return real_stat(path, *a, **k)

    monkeypatch.setattr(os, "stat", stat)
    argv = [str(locked / "x") if a == "{}" else a for a in PATH_COMMANDS[command]]
    refused(capsys, argv, f"kit {command}: error:", str(locked / "x"), "Permission denied")


def test_unknown_device_is_one_line(tmp_path, capsys):
    refused(capsys, ["seed", "build", "--scale", "medium", "--device", "tpu:9", "--out", str(tmp_path / "s")],
            "--device", "'tpu:9': expected cpu, cuda or cuda:N")


def test_non_utf8_ledger_names_the_file_and_line(tmp_path):
    from kit.evidence.ledger import read_ledger

    ledger = tmp_path / "exposed.jsonl"
    ledger.write_bytes(b"\n\xff\xfe{}\n")
    with pytest.raises(ValueError, match=rf"{ledger}:2: not UTF-8 \(byte 0: invalid start byte\)"):
        read_ledger(ledger)


# -- 13. export on a full disk -----------------------------------------------------------------------


@pytest.mark.parametrize("where", ["weights", "config"])
@pytest.mark.parametrize("out_exists", [False, True])
def test_export_on_a_full_disk_removes_what_it_wrote(tmp_path, capsys, monkeypatch, where, out_exists):
    """ENOSPC half-way through model.safetensors (safetensors' own SafetensorError, as on a real full
    disk) or while writing config.json: one line naming the file, and nothing left behind."""
    from safetensors import SafetensorError

    from kit.store import export

    home, _ = store_with_commit(tmp_path)
    out = tmp_path / "export"
    if out_exists:
        out.mkdir()
    real_save = export.save_file

    def full_disk_save(tensors, filename, metadata=None):
        real_save(tensors, filename, metadata=metadata)
        if where == "weights":
            with open(filename, "r+b") as f:
                f.truncate(100)
            raise SafetensorError('Error while serializing: IoError(Os { code: 28, kind: StorageFull, '
                                  'message: "No space left on device" })')

    real_write = Path.write_bytes

    def full_disk_write(self, data):
        if where == "config" and self.name == "config.json":
            real_write(self, data[:10])
            raise OSError(28, "No space left on device", str(self))
        return real_write(self, data)

    monkeypatch.setattr(export, "save_file", full_disk_save)
    monkeypatch.setattr(Path, "write_bytes", full_disk_write)
    file = out / ("model.safetensors" if where == "weights" else "config.json")
    refused(capsys, ["checkpoint", "export", "--home", str(home), "--out", str(out)], f"{file}: export failed",
            "No space left on device", f"removed what the export wrote under {out}")
    assert (out.is_dir() and not any(out.iterdir())) if out_exists else not out.exists()
