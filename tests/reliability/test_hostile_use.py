"""Hostile input and daily use, second round (issue #64, items 1, 2, 4 and 5): gc and damaged stores,
learning rates and weight decay out of bounds, non-finite parameters, chat templates, and the messages
of a full disk, a busy home, a CPU build asked for CUDA, a report title and a hostile run.json.

Each test reproduces one case of the issue; a refusal is one line `kit ...: error: ...` naming the file or
field, exit 2, never a traceback, and nothing committed is lost or changed.
"""

from __future__ import annotations

import errno
import json
import math
import shutil
from pathlib import Path

import pytest
import torch
from support.reliability import commit, model_commit, random_states, write_seed

from kit.cli import main
from kit.store import commits
from kit.store.objects import ObjectStore


def refused(capsys, argv: list[str], *needles: str, rc: int = 2) -> str:
    """Run `kit ARGV` in-process: exit `rc`, one line `kit ...: error: ...` holding every needle."""
    capsys.readouterr()
    code = main(argv)
    err = capsys.readouterr().err
    assert code == rc, (code, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("kit ") and ": error: " in lines[0], err
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    return lines[0]


# -- 1. gc never deletes what HEAD or a manifest names ------------------------------------------------


def two_commits(tmp_path: Path) -> tuple[Path, str, str, set[str]]:
    """A store with commits first <- second (HEAD) and one stray object; returns (home, first, second,
    every object present)."""
    home = tmp_path / "store"
    first = commit(home, seed=1, parent=None)
    second = commit(home, seed=2, parent=first)
    ObjectStore(home).put_bytes(b"an object no manifest names")
    return home, first, second, set(ObjectStore(home).digests())


def test_gc_objects_refuses_when_heads_manifest_is_missing(tmp_path, capsys):
    home, _, second, before = two_commits(tmp_path)
    (home / "commits" / f"{second}.json").unlink()
    refused(capsys, ["checkpoint", "gc", "--home", str(home), "--objects"], str(home / "HEAD"), second,
            "does not exist", "refused")
    assert set(ObjectStore(home).digests()) == before  # not one object of HEAD's commit deleted


def test_gc_objects_refuses_when_every_manifest_is_gone(tmp_path, capsys):
    home, _, _, before = two_commits(tmp_path)
    for path in (home / "commits").glob("*.json"):
        path.unlink()
    refused(capsys, ["checkpoint", "gc", "--home", str(home), "--objects"], "refused")
    (home / "HEAD").unlink()  # HEAD gone too: objects but no record of any commit
    refused(capsys, ["checkpoint", "gc", "--home", str(home), "--objects"], str(home / "commits"),
            "no commit manifest", "refused")
    assert set(ObjectStore(home).digests()) == before


@pytest.mark.parametrize("objects", [False, True])
def test_gc_refuses_a_linked_commits_folder(tmp_path, capsys, objects):
    home, _, _, before = two_commits(tmp_path)
    empty = tmp_path / "empty"
    empty.mkdir()
    shutil.rmtree(home / "commits")
    (home / "commits").symlink_to(empty)
    refused(capsys, ["checkpoint", "gc", "--home", str(home), *(["--objects"] if objects else [])],
            str(home / "commits"), "symbolic link")
    assert set(ObjectStore(home).digests()) == before


def test_gc_objects_keeps_every_object_a_manifest_or_head_names(tmp_path, capsys):
    home, first, second, before = two_commits(tmp_path)
    stray = before - set(commits.object_digests(commits.read_commit(home, first))) \
        - set(commits.object_digests(commits.read_commit(home, second)))
    assert main(["checkpoint", "gc", "--home", str(home), "--objects"]) == 0
    assert set(ObjectStore(home).digests()) == before - stray and len(stray) == 1
    assert commits.verify_commit(home, first)["full_root"] == first
    assert commits.verify_commit(home)["full_root"] == second


# -- 2. learning rate and weight decay bounded; nothing non-finite committed or exported ------------------

CONTRACTS = Path(__file__).resolve().parents[2] / "contracts"


def edited_contract(tmp_path: Path, name: str, edit) -> Path:
    data = json.loads((CONTRACTS / name).read_text())
    edit(data)
    out = tmp_path / name
    out.write_text(json.dumps(data))
    return out


def set_group(field: str, value: float):
    def edit(data):
        training = data["training"]
        for group in training["optimizer"].values() if "default" in training["optimizer"] else [training["optimizer"]]:
            group[field] = value
    return edit


def contract_loader(name: str):
    from kit.adaptive.continued_schema import load_continued_contract
    from kit.adaptive.schema import load_adaptive_contract
    from kit.study.schema import load_study_contract

    return {"adaptive": load_adaptive_contract, "continued": load_continued_contract,
            "shared": load_study_contract}[name.split("-")[0]]


@pytest.mark.parametrize("name", ["adaptive-shards.tiny.json", "continued-learning.tiny.json", "shared-gradient.tiny.json"])
@pytest.mark.parametrize("field,value", [("lr", 1e308), ("lr", -0.0), ("lr", 5e-324), ("lr", 0), ("lr", 1e-11),
                                         ("lr", 1.5), ("weight_decay", 1e308), ("weight_decay", -0.0),
                                         ("weight_decay", -1e-9), ("weight_decay", 2.0)])
def test_contract_refuses_learning_rate_and_weight_decay_out_of_bounds(tmp_path, name, field, value):
    from kit.contract import ContractError

    path = edited_contract(tmp_path, name, set_group(field, value))
    with pytest.raises(ContractError) as e:
        contract_loader(name)(path)
    message = str(e.value)
    assert str(path) in message and field in message and "expected within" in message and "\n" not in message


@pytest.mark.parametrize("name", ["adaptive-shards.tiny.json", "shared-gradient.tiny.json"])
def test_contract_accepts_the_bounds_themselves(tmp_path, name):
    from kit.contract import LR_MAX, LR_MIN, WEIGHT_DECAY_MAX

    for field, value in (("lr", LR_MIN), ("lr", LR_MAX), ("weight_decay", 0), ("weight_decay", WEIGHT_DECAY_MAX)):
        contract_loader(name)(edited_contract(tmp_path, name, set_group(field, value)))


def test_every_committed_contract_loads_unchanged():
    from kit.digest import sha256_json

    for path in sorted(CONTRACTS.glob("*.json")):
        data = json.loads(path.read_text())
        loader = {"adaptive-shards": "adaptive", "continued-learning": "continued",
                  "shared-gradient-study": "shared"}[data["kind"]]
        assert contract_loader(loader)(path).digest == sha256_json(data), path


def test_optimizer_group_from_json_refuses_the_same_values():
    from kit.train.optim import GroupConfig

    for bad in ({"lr": 1e308}, {"lr": 5e-324}, {"lr": 1e-3, "weight_decay": 1e308}, {"lr": 1e-3, "weight_decay": -0.0},
                {"lr": 1e-3, "eps": math.inf}):
        with pytest.raises(ValueError, match="out of range"):
            GroupConfig.from_json(bad, "training.optimizer.default")


@pytest.fixture(scope="module")
def seed_dir(tmp_path_factory):
    return write_seed(tmp_path_factory.mktemp("hostile-use") / "seed", layers=2)


def nan_session(home: Path, seed_dir: Path):
    from support.engine import OPT
    from support.engine_workers import engine_config

    from kit.distributed.group import Group
    from kit.engine.session import Session
    from kit.model.shard import even_layout
    from kit.store.start import start_from_commit
    from kit.train.optim import GroupConfig

    root = model_commit(home, seed_dir, workers=1, seed=1)
    session = Session(Group(0, 1, torch.device("cpu")), str(home), even_layout(2, 1), start_from_commit(str(home), root),
                      engine_config({"microbatch_size": 2, "max_grad_norm": 1.0}), {"default": GroupConfig(**OPT)})
    name, param = next(iter(session.engine.optimizer.params.items()))
    with torch.no_grad():
        param.view(-1)[0] = float("inf")  # what lr 1e308 makes of a weight after one update
    return session, root, name


@pytest.mark.parametrize("background", [False, True])
def test_a_non_finite_parameter_is_never_committed(tmp_path, seed_dir, background):
    home = tmp_path / "home"
    session, root, name = nan_session(home, seed_dir)
    before = set(ObjectStore(home).digests())
    with pytest.raises(commits.CommitError) as e:
        session.commit(background=background)
        session.wait_commit()
    assert "HEAD unchanged" in str(e.value) and name in str(e.value) and "not finite" in str(e.value)
    assert commits.read_head(home) == root and commits.list_commits(home) == [root]
    assert set(ObjectStore(home).digests()) == before  # refused before any object was written


def test_export_refuses_non_finite_parameters(tmp_path, capsys, seed_dir):
    from kit.store.params import save_param_states

    home = tmp_path / "home"
    states = random_states(3, {"x": (4,)})
    states["x"]["param"][1] = float("nan")
    with pytest.raises(ValueError, match="not finite"):
        save_param_states(ObjectStore(home), states)  # the store refuses to hold it
    out = tmp_path / "export"
    shape = json.loads((seed_dir / "config.json").read_text())["hidden_size"]
    nan = torch.full((shape,), float("nan")).numpy().tobytes()
    bad = model_commit(tmp_path / "bad", seed_dir, workers=1, seed=2, replace_objects={"model.norm.weight.param": nan})
    refused(capsys, ["checkpoint", "export", bad, "--home", str(tmp_path / "bad"), "--out", str(out)],
            f"{bad}.json", "model.norm.weight", "not finite")
    assert not out.exists()


# -- 4. chat templates: failures named as such, output bounded before tokenizing -------------------------


@pytest.fixture(scope="module")
def prepare_base(tmp_path_factory):
    """A seed with a tokenizer and the inputs the tiny contract prepares from (as tests/reliability/test_bad_data.py)."""
    from support.adaptive import PUBLIC, distinct, make_seed, planted, seed_tasks

    from kit.data.conversations import synthetic_conversations, write_jsonl

    root = tmp_path_factory.mktemp("templates")
    replay = distinct(synthetic_conversations(200, 11))[:29] + planted(PUBLIC) + seed_tasks()
    seed = make_seed(root, replay)
    dev = root / "dev_retention.jsonl"
    write_jsonl(dev, distinct(synthetic_conversations(300, 12), {c.digest for c in replay})[:40])
    return {"seed": seed, "replay": seed / "trained_conversations.jsonl", "dev": dev}


def with_template(base_seed: Path, tmp_path: Path, template: str) -> Path:
    seed = tmp_path / "seed"
    shutil.copytree(base_seed, seed)
    config = json.loads((seed / "tokenizer_config.json").read_text())
    (seed / "tokenizer_config.json").write_text(json.dumps({**config, "chat_template": template}))
    (seed / "chat_template.jinja").unlink(missing_ok=True)
    return seed


CHATML = "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
HOSTILE_TEMPLATES = {
    # fails on the task records only (their assistant answers are short): today "task ... exceeds max_tokens"
    "raises on tasks": "{% for m in messages %}{% if m.role == 'assistant' and m.content|length < 12 %}"
                       "{{ raise_exception('no short answers') }}{% endif %}<|im_start|>{{ m.role }}\n{{ m.content }}"
                       "<|im_end|>\n{% endfor %}",
    "undefined": "{{ messages[9].content.x }}" + CHATML,
    "repeats a string": "{{ 'x' * 10**9 }}" + CHATML,
    "nested loops": "{% for i in range(100000) %}{% for j in range(100000) %}xy{% endfor %}{% endfor %}" + CHATML,
    "a huge power": "{{ 9 ** 99999999 }}" + CHATML,
}


@pytest.mark.parametrize("case", sorted(HOSTILE_TEMPLATES))
def test_a_failing_chat_template_is_named_as_one(prepare_base, tmp_path, case):
    from support.adaptive import PUBLIC, TINY

    from kit.adaptive import prepare as prep

    seed = with_template(prepare_base["seed"], tmp_path, HOSTILE_TEMPLATES[case])
    out = tmp_path / "out"
    with pytest.raises(ValueError) as e:
        prep.prepare(TINY, seed, prepare_base["replay"], prepare_base["dev"], PUBLIC, out)
    message = str(e.value)
    assert message.startswith(f"{seed}: its chat template ") and "max_tokens" not in message, message
    assert "\n" not in message and not out.exists()


@pytest.mark.parametrize("case", ["repeats a string", "nested loops", "a huge power"])
def test_unbounded_template_output_is_refused_before_the_tokenizer(prepare_base, tmp_path, monkeypatch, case):
    from kit.data.chat import ChatTemplateError, encode_conversation, load_tokenizer
    from kit.data.conversations import Conversation, Message

    seed = with_template(prepare_base["seed"], tmp_path, HOSTILE_TEMPLATES[case])
    tokenizer = load_tokenizer(seed)
    called = []
    monkeypatch.setattr(type(tokenizer), "__call__", lambda *a, **k: called.append(a) or pytest.fail("tokenized"))
    conv = Conversation("c", (Message("user", "hi"), Message("assistant", "ok")), "synthetic")
    with pytest.raises(ChatTemplateError, match="renders without bound"):
        encode_conversation(tokenizer, conv, 64)
    assert called == []


def test_a_long_conversation_is_still_only_too_long(prepare_base, tmp_path):
    from kit.data.chat import encode_conversation, load_tokenizer
    from kit.data.conversations import Conversation, Message

    tokenizer = load_tokenizer(with_template(prepare_base["seed"], tmp_path, CHATML))
    conv = Conversation("c", (Message("user", "word " * 40000), Message("assistant", "ok")), "synthetic")
    assert encode_conversation(tokenizer, conv, 64) is None  # over max_tokens, not a template failure


# -- 5. messages: a full disk, a busy home, CUDA on a CPU build, a report's title, a hostile run.json ---------


def half_then_enospc(monkeypatch, victim: str):
    """`open` (builtins and io, so pathlib and pandas too) writes half of what goes to a file whose name contains
    `victim`, then raises ENOSPC: a disk that fills while the file is written, without root or a real full disk."""
    import builtins
    import io

    real_open = io.open

    class Filling:
        def __init__(self, f):
            self.f = f

        def write(self, data):
            self.f.write(data[: len(data) // 2])
            self.f.flush()
            raise OSError(errno.ENOSPC, "No space left on device")

        def __getattr__(self, name):
            return getattr(self.f, name)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.f.close()

    def fake_open(path, mode="r", *args, **kwargs):
        f = real_open(path, mode, *args, **kwargs)
        return Filling(f) if "w" in mode and victim in Path(path).name else f

    monkeypatch.setattr(builtins, "open", fake_open)
    monkeypatch.setattr(io, "open", fake_open)


def test_results_on_a_full_disk_leave_nothing_and_name_the_file(tmp_path, capsys, monkeypatch):
    runs = tmp_path / "runs"
    runs.mkdir()
    out = tmp_path / "r.csv"
    half_then_enospc(monkeypatch, "r.csv")
    refused(capsys, ["results", str(runs), "--out", str(out)], str(out), "No space left on device", "disk is full")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["runs"]  # no truncated r.csv, no temporary


def test_report_on_a_full_disk_leaves_no_partial_output(tmp_path, capsys, monkeypatch):
    import nbclient

    runs = tmp_path / "runs"
    runs.mkdir()
    out = tmp_path / "report"
    out.mkdir()
    (out / "index.html").write_text("the earlier page")
    monkeypatch.setattr(nbclient.NotebookClient, "execute", lambda self, **k: self.nb)  # no kernel: the writes matter
    half_then_enospc(monkeypatch, "index.html")
    refused(capsys, ["report", "--runs-dir", str(runs), "--out", str(out)], str(out / "index.html"), "disk is full")
    assert sorted(p.name for p in out.iterdir() if p.name != "kernel.log") == ["index.html"]
    assert (out / "index.html").read_text() == "the earlier page"  # what was there stays whole


def test_report_title_is_escaped_in_the_page(tmp_path, capsys, monkeypatch):
    import nbclient

    runs = tmp_path / "runs"
    runs.mkdir()
    out = tmp_path / "report"
    monkeypatch.setattr(nbclient.NotebookClient, "execute", lambda self, **k: self.nb)
    title = "<script>alert(1)</script> [x](javascript:alert(2)) <img src=x onerror=alert(3)>"
    assert main(["report", "--runs-dir", str(runs), "--out", str(out), "--title", title]) == 0
    page = (out / "index.html").read_text()
    assert "<script>alert" not in page and "<img src=x" not in page and 'href="javascript' not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page


def fake_papermill(monkeypatch, fail_record: bool = False):
    """papermill that leaves a truncated executed notebook and raises ENOSPC (the disk filled while it wrote
    it); its prepare-only call (the parameterised notebook) is the real one. No kernel starts."""
    import papermill

    real = papermill.execute_notebook

    def execute(notebook, output, *args, prepare_only=False, **kwargs):
        if prepare_only:
            return real(notebook, output, *args, prepare_only=True, **kwargs)
        Path(output).write_text('{"cells": [{"cell_type": "code", "source": "x = ')
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(papermill, "execute_notebook", execute)
    if fail_record:
        half_then_enospc(monkeypatch, "run.json")


def test_kit_run_on_a_full_disk_names_it_and_records_the_run(tmp_path, capsys, monkeypatch):
    from support.notebooks import write_notebook

    nb = write_notebook(tmp_path / "nb.ipynb", "x = 1")
    fake_papermill(monkeypatch)
    capsys.readouterr()
    assert main(["run", str(nb), "--runs-dir", str(tmp_path / "runs"), "--run-id", "r1", "--no-progress"]) == 1
    out = capsys.readouterr()
    assert "disk is full" in out.out and "invalid JSON" not in out.out + out.err, out
    run_dir = tmp_path / "runs" / "r1"
    record = json.loads((run_dir / "run.json").read_text())
    assert record["status"] == "failed" and "disk is full" in record["reason"]
    json.loads((run_dir / "nb.ipynb").read_text())  # the truncated notebook is gone: the parameterised one is there
    assert not (run_dir / ".disk-reserve").exists() and ".disk-reserve" not in record["manifest"]


def test_kit_run_leaves_no_notebook_without_a_record(tmp_path, capsys, monkeypatch):
    from support.notebooks import write_notebook

    nb = write_notebook(tmp_path / "nb.ipynb", "x = 1")
    fake_papermill(monkeypatch, fail_record=True)
    refused(capsys, ["run", str(nb), "--runs-dir", str(tmp_path / "runs"), "--run-id", "r1", "--no-progress"],
            str(tmp_path / "runs" / "r1" / "run.json"), "disk is full", "removed")
    assert not list((tmp_path / "runs" / "r1").glob("*.ipynb")) and not (tmp_path / "runs" / "r1" / "run.json").exists()


def test_cuda_on_a_cpu_build_is_one_line(capsys):
    if torch.cuda.is_available():
        pytest.skip("a GPU is visible: --device cuda is valid here")
    refused(capsys, ["study", "evaluate", "--device", "cuda"], "--device", "'cuda'", "expected cpu")
    refused(capsys, ["adaptive", "evaluate", "--device", "cuda:3"], "'cuda:3'", "expected cpu")


def test_a_second_trainer_is_told_the_home_is_in_use_not_to_remove_it(tmp_path):
    import subprocess
    import sys

    from kit.adaptive.bindings import TrainRefused, check_fresh_home

    home = tmp_path / "home"
    (home / "attempts" / "20260101T000000-aaaaaaaa").mkdir(parents=True)
    (home / "attempts" / "20260101T000000-aaaaaaaa" / "attempt.json").write_text(json.dumps({"status": "running"}))
    holder = subprocess.Popen([sys.executable, "-c", ("import fcntl, os, sys, time\n"
                               f"fd = os.open({str(home / 'in-use.lock')!r}, os.O_RDWR | os.O_CREAT)\n"
                               "fcntl.flock(fd, fcntl.LOCK_SH)\nprint('held', flush=True)\ntime.sleep(60)")],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(TrainRefused) as e:
            check_fresh_home(str(home), "A", None, None)
        message = str(e.value)
        assert "rm -r" not in message and "in use by" in message and "20260101T000000-aaaaaaaa" in message
        assert f"pid {holder.pid}" in message or "a running training" in message
    finally:
        holder.kill()
        holder.wait()
    with pytest.raises(TrainRefused, match="rm -r"):  # the training ended without a commit: removing is right
        check_fresh_home(str(home), "A", None, None)


def test_status_prints_a_hostile_run_record_escaped(tmp_path, capsys):
    run = tmp_path / "runs" / "r1"
    run.mkdir(parents=True)
    hostile = "\x1b]0;pwned\x07\x1b[2J\x9b31m\u202eevil\rover"
    (run / "run.json").write_text(json.dumps({"run_id": "r1" + hostile, "status": "failed", "reason": hostile,
                                              "duration_s": 1.0}))
    capsys.readouterr()
    assert main(["status", str(tmp_path / "runs")]) == 0
    out = capsys.readouterr().out
    assert not any(ch in out for ch in "\x1b\x07\x9b\u202e\r"), repr(out)
    assert "\\x1b]0;pwned\\x07" in out and "\\u202eevil\\x0dover" in out


def test_rendered_length_is_checked_again_before_the_tokenizer(prepare_base, tmp_path, monkeypatch):
    from kit.data import chat
    from kit.data.conversations import Conversation, Message

    monkeypatch.setattr(chat, "_bounded_template", lambda source: None)  # as without transformers' compiler
    tokenizer = chat.load_tokenizer(with_template(prepare_base["seed"], tmp_path,
                                                  "{% for i in range(100000) %}xy{% endfor %}" + CHATML))
    monkeypatch.setattr(type(tokenizer), "__call__", lambda *a, **k: pytest.fail("tokenized"))
    conv = Conversation("c", (Message("user", "hi"), Message("assistant", "ok")), "synthetic")
    with pytest.raises(chat.ChatTemplateError, match="its output has 200"):
        chat.encode_conversation(tokenizer, conv, 64)
