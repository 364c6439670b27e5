"""Every subcommand of `kit`, discovered from the parser, with bad paths: one line, no traceback, exit 2.

For each path-like option or positional (its argparse `type` is a kit.cli.args checker) the walk feeds
(a) a missing path, (b) a file where a folder belongs (or a folder where a file belongs), (c) garbage
JSON (a garbage file, and a folder whose marker file, e.g. prepared.json, is garbage), in process
through `kit.cli.main`. A second check makes sure no path-like option escaped the checkers.

The second half walks the rest of a consistent command line: one option name per concept (former
names still work, with a warning), unknown options blamed on the subcommand, `kit --version`, sizes
with units, `kit plan`'s table and JSON, the one-line refusals of a seed without a usable tokenizer, of
a contract of another kind and of a folder that is not a checkpoint store, and export's default HEAD.
"""

from __future__ import annotations

import argparse
import importlib
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from kit.cli import build_parser, command_handler, main
from kit.cli.args import Dir, Named, PathArg, leaf_parsers

REPO = Path(__file__).resolve().parents[1]

# Words in an option's name that say it takes a path (or HOME:ROOT / NAME=PATH holding one).
PATHISH = ("dir", "home", "out", "prepared", "seed", "contract", "source", "study", "plan", "notebook", "config",
           "eval", "selection", "tokenizer", "replay", "retention", "ledger", "runs", "work", "candidate",
           "baseline", "start")
NOT_PATHS = {"--memory-model", "--contract-digest"}  # JSON text and a sha256, not paths


def _path_actions(parser):
    return [a for a in parser._actions if isinstance(a.type, PathArg)]


def _argv(words, action, value):
    return [*words, *( [action.option_strings[0]] if action.option_strings else []), value]


def _cases(action, tmp):
    """(case name, value) pairs the checker of `action` must refuse."""
    t = action.type
    garbage = tmp / "garbage.json"
    out = []
    if t.kind == "input":
        out.append(("missing", t.sample(str(tmp / "does-not-exist"))))
    if t.wants_dir:
        out.append(("file-for-folder", t.sample(str(garbage))))
    else:
        out.append(("folder-for-file", t.sample(str(tmp / "a-folder"))))
    if t.kind == "input":
        out.append(("garbage-json", t.sample(str(garbage))))
        inner = t.inner if isinstance(t, Named) else t
        marker = getattr(inner, "marker", None) or getattr(getattr(inner, "store", None), "marker", None)
        if isinstance(inner, Dir) and marker:
            out.append(("garbage-marker", t.sample(str(tmp / "garbage-marker"))))
    return out


def _walk():
    for words, leaf in leaf_parsers(build_parser()):
        for action in _path_actions(leaf):
            yield words, action


WALK = list(_walk())


@pytest.fixture(scope="module")
def bad(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("bad")
    (tmp / "garbage.json").write_text("{not json at all\n")
    (tmp / "a-folder").mkdir()
    for marker in ("prepared.json", "config.json", "prepared/prepared.json"):
        (tmp / "garbage-marker" / marker).parent.mkdir(parents=True, exist_ok=True)
        (tmp / "garbage-marker" / marker).write_text("garbage")
    return tmp


def test_the_walk_covers_every_subcommand():
    leaves = {" ".join(w) for w, _ in leaf_parsers(build_parser())}
    walked = {" ".join(w) for w, _ in WALK}
    # every subcommand except those without a path argument
    assert leaves - walked == set(), leaves - walked
    assert len(WALK) >= 50


def test_every_subcommand_names_a_handler_that_its_handler_module_defines():
    """kit.cli.main imports a command's handler module only when it runs (kit.cli.command_handler): each
    leaf's `handler` ("module:function") must name a function that module defines, or the command fails only
    when used."""
    missing = []
    for words, leaf in leaf_parsers(build_parser()):
        module, _, function = (leaf.get_default("handler") or "").partition(":")
        if not module.startswith("kit.cli.handlers.") or \
                not callable(getattr(importlib.import_module(module), function, None)):
            missing.append(f"kit {' '.join(words)}: {leaf.get_default('handler')!r}")
    assert not missing, missing
    assert command_handler(argparse.Namespace(handler="kit.cli.handlers.adaptive:cmd_train")).__module__ == \
        "kit.cli.handlers.adaptive"


def test_help_and_the_parser_import_no_torch():
    """`kit --help` and building the whole parser stay light: the handlers' drivers (torch, transformers,
    the notebook runtime) are imported by the command that runs, not by the parser."""
    code = ("import sys\nfrom kit.cli import build_parser, main\nbuild_parser()\n"
            "heavy = sorted(m for m in ('torch', 'transformers', 'papermill', 'nbconvert', 'matplotlib', 'pandas') "
            "if m in sys.modules)\nprint(heavy, sorted(m for m in sys.modules if m.startswith('kit.cli.handlers')))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.stdout.strip() == "[] []", done.stdout + done.stderr[-2000:]
    helped = subprocess.run([sys.executable, "-X", "importtime", "-m", "kit", "--help"], capture_output=True, check=False,
                            text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert helped.returncode == 0 and "usage: kit" in helped.stdout
    imported = {line.split("|")[-1].strip() for line in helped.stderr.splitlines() if line.startswith("import time:")}
    assert "torch" not in imported and "kit.cli.handlers" not in imported, sorted(imported)


def test_every_path_like_argument_is_checked():
    unchecked = []
    for words, leaf in leaf_parsers(build_parser()):
        for action in leaf._actions:
            if isinstance(action, (argparse._HelpAction, argparse._StoreTrueAction)) or action.choices:
                continue
            name = (action.option_strings or [action.dest])[-1]
            if name in NOT_PATHS or isinstance(action.type, PathArg):
                continue
            words_of_name = re.split(r"[-_]", name.strip("-").lower())
            if any(w in PATHISH or w.rstrip("s") in PATHISH for w in words_of_name):
                unchecked.append(f"kit {' '.join(words)} {name}")
    assert not unchecked, unchecked


@pytest.mark.parametrize("words,action", WALK, ids=[f"{'-'.join(w)}:{(a.option_strings or [a.dest])[0]}"
                                                    for w, a in WALK])
def test_bad_path_is_one_line_exit_2(words, action, bad, capsys):
    for case, value in _cases(action, bad):
        status = main(_argv(words, action, value))
        err = capsys.readouterr().err
        where = f"kit {' '.join(words)} ({case}: {value})"
        assert status == 2, (where, err)
        assert "Traceback" not in err, where
        assert err.endswith("\n") and err.count("\n") == 1, (where, err)
        assert err.startswith(f"kit {' '.join(words)}: error: "), (where, err)
        assert "expected" in err, (where, err)
        path = value.partition("=")[2] if isinstance(action.type, Named) else value
        path = path.rpartition(":")[0] if path.endswith(":" + "0" * 64) else path
        assert path in err, (where, err)


def test_named_refusals(bad, tmp_path, capsys):
    """The cases of issue 16 by name."""
    assert main(["adaptive", "train", "--prepared", str(bad / "garbage.json"), "--seed", "s", "--home", "h"]) == 2
    assert "is a file, not a folder" in capsys.readouterr().err
    assert main(["adaptive", "train", "--prepared", str(bad / "garbage-marker"), "--seed", "s", "--home", "h"]) == 2
    err = capsys.readouterr().err
    assert "prepared.json is not valid JSON" in err and "`kit adaptive prepare`" in err
    assert main(["checkpoint", "verify", "--home", "/nonexistent"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("kit checkpoint verify: error:") and "/nonexistent: the folder does not exist" in err
    # the kit's own refusals name the subcommand too: a store without a commit has no HEAD
    (tmp_path / "store" / "objects").mkdir(parents=True)
    assert main(["checkpoint", "show", "--home", str(tmp_path / "store")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("kit checkpoint show: error: ") and "no HEAD" in err and err.count("\n") == 1
    # usage errors are one line and name the subcommand
    assert main(["adaptive", "train"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("kit adaptive train: error: the following arguments are required") and err.count("\n") == 1


def test_source_is_a_deprecated_alias(capsys):
    from pathlib import Path

    source = Path(__file__).resolve().parents[1] / "data" / "alpaca_5000.json"
    assert main(["study", "prepare", "--source", str(source)]) == 2  # other options missing: refused after
    err = capsys.readouterr().err
    assert "kit study prepare: warning: --source is deprecated; use --public-source" in err


def test_inspection_notebook_refuses_before_writing(tmp_path, capsys):
    """`kit run` of the inspection notebook: an unknown RUN_ID is refused with no run record written, in the
    folder it reads (-p RUNS_DIR, default --runs-dir), which may differ from the one it records into."""
    from pathlib import Path

    nb = str(Path(__file__).resolve().parents[1] / "notebooks" / "90_inspect_failed_arm.ipynb")
    runs = tmp_path / "runs"
    (runs / "some-run").mkdir(parents=True)
    (runs / "some-run" / "run.json").write_text("{}")
    assert main(["run", nb, "-p", "RUN_ID", "no-such-run", "--runs-dir", str(runs)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("kit run: error: ") and "no-such-run: no such run" in err and "some-run" in err
    assert err.count("\n") == 1
    assert sorted(p.name for p in runs.iterdir()) == ["some-run"]  # no failed record
    out = tmp_path / "out"
    # the run is looked up in the folder it reads, not in the one it would record into
    assert main(["run", nb, "-p", "RUN_ID", "some-run", "-p", "RUNS_DIR", str(tmp_path / "elsewhere"),
                 "--runs-dir", str(out)]) == 2
    err = capsys.readouterr().err
    assert "elsewhere/some-run: no such run" in err and "-p RUNS_DIR names the folder to read" in err
    assert not out.exists()


# --- one command line (issue 29): names, unknown options, --version, sizes, library errors, stores -----------
REPO = Path(__file__).resolve().parents[1]
TINY_LLAMA = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 64, "hidden_size": 16,
              "intermediate_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2, "num_key_value_heads": 2,
              "max_position_embeddings": 64, "tie_word_embeddings": True}


def _one_line_error(err: str, prog: str) -> None:
    assert "Traceback" not in err, err
    assert err.startswith(f"{prog}: error: ") and err.endswith("\n") and err.count("\n") == 1, err


def test_unknown_options_name_the_subcommand(tmp_path, capsys):
    assert main(["adaptive", "prepare", "--foo"]) == 2  # before the missing required options: the typo is the cause
    err = capsys.readouterr().err
    _one_line_error(err, "kit adaptive prepare")
    assert "unrecognized arguments: --foo" in err
    (tmp_path / "store" / "objects").mkdir(parents=True)
    assert main(["checkpoint", "list", "--home", str(tmp_path / "store"), "--bogus", "1"]) == 2
    err = capsys.readouterr().err
    _one_line_error(err, "kit checkpoint list")
    assert "unrecognized arguments: --bogus 1" in err
    # an abbreviation of a real option is unknown too (issue 52: `--worker 2` once ran as `--workers 2`)
    assert main(["checkpoint", "list", "--ho", str(tmp_path / "store")]) == 2
    err = capsys.readouterr().err
    _one_line_error(err, "kit checkpoint list")
    assert "unrecognized arguments: --ho" in err


def test_version_prints_the_kits_version(capsys):
    import kit

    assert main(["--version"]) == 0
    assert capsys.readouterr().out == f"kit {kit.__version__}\n"


def _fake_seed(path, tokenizer: str | None = '{"version": "1.0"}'):
    import json

    path.mkdir(parents=True)
    (path / "config.json").write_text(json.dumps(TINY_LLAMA))
    if tokenizer is not None:
        (path / "tokenizer.json").write_text(tokenizer)
    return path


@pytest.mark.parametrize("words,new,old,value_of", [
    (["report", "--out", "OUT"], "--runs-dir", "--runs", "dir"),
    (["study", "prepare", "--out", "OUT", "--contract", "STUDY_CONTRACT", "--seed", "SEED"],
     "--public-source", "--source", "source"),
    (["study", "prepare", "--public-source", "SOURCE", "--contract", "STUDY_CONTRACT", "--seed", "SEED"],
     "--out", "--study", "out"),
    (["demo"], "--seed", "--seed-dir", "seed"),
])
def test_former_option_names_still_work_with_a_warning(words, new, old, value_of, tmp_path, capsys):
    """One name per concept; the former names are deprecated aliases for one release: same destination, a
    warning line naming the new name, and marked in the help."""
    seed = _fake_seed(tmp_path / "seed")
    source = str(REPO / "data" / "alpaca_5000.json")
    subs = {"OUT": str(tmp_path / "out"), "SEED": str(seed), "SOURCE": source,
            "STUDY_CONTRACT": str(REPO / "contracts" / "shared-gradient.tiny.json")}
    value = {"dir": str(tmp_path), "source": source, "out": str(tmp_path / "new"), "seed": str(seed)}[value_of]
    argv = [subs.get(w, w) for w in words]
    with_new = build_parser().parse_args([*argv, new, value])
    assert capsys.readouterr().err == ""
    with_old = build_parser().parse_args([*argv, old, value])
    assert vars(with_old) == vars(with_new)
    prog = "kit " + " ".join(words[:2] if words[0] == "study" else words[:1])
    assert capsys.readouterr().err == f"{prog}: warning: {old} is deprecated; use {new} (the name every kit command " \
                                      "uses; the old name goes in the next release)\n"
    leaf = {" ".join(w): p for w, p in leaf_parsers(build_parser())}[prog[len("kit "):]]
    action = next(a for a in leaf._actions if new in a.option_strings)
    assert old in action.option_strings and f"({old}: deprecated alias)" in action.help


def test_one_name_per_concept():
    """Across every subcommand the runs folder is --runs-dir, the public source --public-source and a seed folder
    --seed; an old name appears only as the second name of an option (its deprecated alias)."""
    for words, leaf in leaf_parsers(build_parser()):
        for action in leaf._actions:
            first, others = (action.option_strings or [""])[0], action.option_strings[1:]
            for old, new in (("--runs", "--runs-dir"), ("--source", "--public-source"), ("--seed-dir", "--seed")):
                assert first != old, f"kit {' '.join(words)} {old}: should be {new}"
                if old in others:
                    assert first == new and "deprecated alias" in action.help, (words, action.option_strings)


def test_store_commands_refuse_a_folder_that_is_not_a_store(tmp_path, capsys):
    folder = tmp_path / "not-a-store"
    folder.mkdir()
    (folder / "notes.txt").write_text("mine")
    for action in ("list", "gc", "verify", "show"):
        assert main(["checkpoint", action, "--home", str(folder)] + (["--objects"] if action == "gc" else [])) == 2
        err = capsys.readouterr().err
        _one_line_error(err, f"kit checkpoint {action}")
        assert f"{folder}: not a checkpoint store" in err
    assert sorted(p.name for p in folder.iterdir()) == ["notes.txt"]


def _store_with_two_commits(home):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from kit.digest import canonical_json
    from kit.store.commits import write_commit
    from kit.store.objects import ObjectStore
    from kit.store.params import save_param_states

    config = LlamaConfig(**{k: v for k, v in TINY_LLAMA.items() if k not in ("architectures", "model_type")})
    torch.manual_seed(0)
    state = {k: v.detach().clone() for k, v in LlamaForCausalLM(config).state_dict().items() if k != "lm_head.weight"}
    store = ObjectStore(home)
    layout = {"blocks": [[0, 2]], "embedding_owner": 0, "model_config": store.put_bytes(canonical_json(TINY_LLAMA))}
    roots = []
    for scale in (1.0, 2.0):
        entries = save_param_states(store, {k: {"group": "all", "age": 0, "param": v * scale,
                                                "exp_avg": torch.zeros_like(v), "exp_avg_sq": torch.zeros_like(v)}
                                            for k, v in state.items()})
        roots.append(write_commit(home, {"cursor": {"step": len(roots)}, "params": entries}, layout,
                                  roots[-1] if roots else None, [store.put_bytes(b"rng %d" % len(roots))]))
    return roots


def test_export_defaults_to_head_like_verify_and_show(tmp_path, capsys):
    from kit.store.export import export_hf

    home = tmp_path / "store"
    first, head = _store_with_two_commits(home)
    assert main(["checkpoint", "export", "--home", str(home), "--out", str(tmp_path / "default")]) == 0
    digest = capsys.readouterr().out.strip()
    assert digest == export_hf(home, head, tmp_path / "head")
    assert digest != export_hf(home, first, tmp_path / "first")  # HEAD, not just any commit
    assert main(["checkpoint", "show", "--home", str(home)]) == 0
    assert f'"full_root": "{head}"' in capsys.readouterr().out


def _tiny_config(tmp_path):
    import json

    path = tmp_path / "config.json"
    path.write_text(json.dumps({**TINY_LLAMA, "num_hidden_layers": 4}))  # a block or more for each of 3 workers
    return str(path)


def test_plan_prints_a_table_and_json_on_request(tmp_path, capsys):
    import json

    config = _tiny_config(tmp_path)
    workers = ["--worker", "1GiB", "--worker", "2GB:2", "--worker", "3000MB"]
    assert main(["plan", "--config", config, *workers, "--json"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("{\n ")  # indented, not one long line
    record = json.loads(out)
    assert [w["memory_bytes"] for w in record["workers"]] == [2**30, 2 * 10**9, 3 * 10**9]
    assert [w["speed"] for w in record["workers"]] == [1.0, 2.0, 1.0]
    assert main(["plan", "--config", config, *workers]) == 0
    header, *rows, footer = capsys.readouterr().out.splitlines()
    assert header.split() == ["worker", "memory", "speed", "blocks", "embedding", "estimate", "utilisation"]
    assert len(rows) == 3 and "GiB = 2^30 bytes" in footer and "--json" in footer
    for row, w in zip(rows, record["workers"]):
        assert row.split()[0] == w["name"]
        assert f"{w['memory_bytes'] / 2**30:.3f} GiB" in row and f"[{w['blocks'][0]}, {w['blocks'][1]})" in row
        assert f"{w['estimate']['total'] / 2**30:.3f} GiB" in row and f"{w['utilization']:.2%}" in row
    # a bare number is GiB, as before units were accepted
    assert main(["plan", "--config", config, "--worker", "1", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["workers"][0]["memory_bytes"] == 2**30


@pytest.mark.parametrize("value,says", [("80G", "ambiguous; expected 80GB (GB = 10^9 bytes) or 80GiB (GiB = 2^30 bytes)"),
                                        ("80gigs", "unknown unit 'gigs'"), ("eighty", "expected a size such as 80GiB"),
                                        ("80GiB:fast", "speed 'fast' is not a positive number"),
                                        ("0GB", "above 0")])
def test_plan_refuses_a_bad_size_in_one_line(value, says, tmp_path, capsys):
    assert main(["plan", "--config", _tiny_config(tmp_path), "--worker", value]) == 2
    err = capsys.readouterr().err
    _one_line_error(err, "kit plan")
    assert "argument --worker" in err and says in err and "could not convert" not in err, err


def test_plan_refuses_an_unknown_memory_model_field(tmp_path, capsys):
    assert main(["plan", "--config", _tiny_config(tmp_path), "--worker", "1GiB", "--memory-model", '{"foo": 1}']) == 2
    err = capsys.readouterr().err
    _one_line_error(err, "kit plan")
    assert "argument --memory-model: unknown MemoryModel field(s) foo; expected only" in err and "reserve_bytes" in err


def test_a_model_folder_without_a_usable_tokenizer_is_one_line(tmp_path, capsys):
    """transformers' own messages (multi-line, or a bare Exception with a traceback) become the kit's line."""
    missing = _fake_seed(tmp_path / "no-tokenizer", tokenizer=None)
    assert main(["seed", "show", str(missing)]) == 2
    err = capsys.readouterr().err
    _one_line_error(err, "kit seed show")
    assert f"{missing}: has no tokenizer.json; expected a seed folder" in err and "backend tokenizer" not in err
    broken = _fake_seed(tmp_path / "broken-tokenizer", tokenizer='{"a": 1}')  # JSON, but not a tokenizer
    assert main(["seed", "show", str(broken)]) == 2
    err = capsys.readouterr().err
    _one_line_error(err, "kit seed show")
    assert f"{broken}: its tokenizer does not load (" in err and "expected the tokenizer.json" in err
    (missing / "tokenizer.json").write_text("{}")
    (missing / "tokenizer_config.json").write_text("{garbage")
    assert main(["seed", "show", str(missing)]) == 2
    assert "its tokenizer_config.json is not valid JSON" in capsys.readouterr().err


@pytest.mark.parametrize("words,contract,right", [
    (["adaptive", "prepare"], "shared-gradient.tiny.json", "kit study prepare"),
    (["study", "prepare"], "adaptive-shards.tiny.json", "kit adaptive prepare"),
    (["continued", "prepare"], "adaptive-shards.tiny.json", "kit adaptive prepare"),
    (["adaptive", "gates"], "shared-gradient.tiny.json", "kit study prepare"),
])
def test_a_contract_of_the_other_kind_names_the_right_command(words, contract, right, capsys):
    path = REPO / "contracts" / contract
    assert main([*words, "--contract", str(path)]) == 2
    err = capsys.readouterr().err
    _one_line_error(err, f"kit {' '.join(words)}")
    assert f"{path}: is a contract of kind" in err and f"give it to `{right}`" in err and "unknown field" not in err


def test_contract_kinds_are_the_schemas():
    from kit.adaptive import continued_schema, schema
    from kit.cli.args import CONTRACT_COMMANDS
    from kit.study import schema as study_schema

    assert set(CONTRACT_COMMANDS) == {schema.KIND, continued_schema.KIND, study_schema.KIND}
