"""Issue 9, case 15: papermill parameters with quotes, newlines and unicode.

tests/test_evidence.py::test_tricky_parameters_are_injected_exactly already runs a notebook with
quotes, apostrophes, backslashes, newlines, tabs, U+2028 and non-ASCII text in strings, list items and
dict keys, and checks that papermill's metadata, the injected cell and what the kernel saw (echoed
through a metric sidecar) equal the given values, and that the executed notebook passes
`nbformat.validate`. What it does not show is that no code runs from a value. Here every value is an
attempt to leave its string literal in the injected cell (closing quotes of each kind, triple quotes,
backslash-newline continuations, raw carriage returns, form feeds, NUL, U+2029, Python escapes such as
\\N{...} and \\x.. that would be decoded if the text were not escaped, non-BMP characters) and to
create a marker file; the run completes, the marker never appears, the kernel sees exactly the given
values, and the notebook validates. A parameter *name* carrying code is refused before anything runs.
"""

from __future__ import annotations

import json

import nbformat
import pytest
from support.notebooks import write_notebook

from kit.digest import canonical_json, load_canonical_json
from kit.evidence.parameters import ParameterError, parse_assignments
from kit.evidence.runner import run_notebook

PARAMS_CELL = "text = ''\nitems = []\nmapping = {}\n"
ECHO_CELL = ("from kit.evidence.notebook import record_metric\n"
             "record_metric('echo', {'text': text, 'items': items, 'mapping': mapping})\n")


def escapes(marker: str) -> list[str]:
    code = f"open({marker!r}, 'w').close()"
    return [
        f'"; {code}; x = "', f"'; {code}; x = '", f'"""; {code}; x = """', f"'''; {code}; x = '''",
        f'\\"; {code} #', f"\\'; {code} #", f"\\\n{code}", f"\n{code}\n", f"\r{code}\r", f"\r\n{code}",
        f"\x0c{code}", f"\x00{code}", f"\u2029{code}", f"\u0085{code}", "\\N{SNOWMAN} \\x41 \\u00e9 \\n",
        f"{{{code}}}", f"${{{code}}}", f"#{{{code}}}", "😀 \U0001f9ea \u202ertl\u202c é", "",
    ]


@pytest.fixture(scope="module")
def escaped_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("escapes")
    marker = root / "PWNED"
    nb = write_notebook(root / "params.ipynb", ECHO_CELL, parameters=PARAMS_CELL)
    values = escapes(str(marker))
    params = {"text": "\n".join(values), "items": values, "mapping": {v: [v] for v in values}}
    record = run_notebook(nb, params, "escapes", root / "runs", {})
    return {"record": record, "params": params, "marker": marker, "run_dir": root / "runs" / "escapes",
            "values": values}


def test_no_code_runs_from_parameter_values(escaped_run):
    assert escaped_run["record"].status == "completed", escaped_run["record"].error
    assert not escaped_run["marker"].exists()


def test_the_kernel_sees_exactly_the_given_values(escaped_run):
    params, run_dir = escaped_run["params"], escaped_run["run_dir"]
    echo = load_canonical_json(run_dir / "metrics" / "echo.json")
    assert canonical_json(echo) == canonical_json(params)
    executed = nbformat.read(run_dir / "params.ipynb", as_version=4)
    nbformat.validate(executed)
    assert executed.metadata.papermill.parameters == params
    (injected,) = [c for c in executed.cells if "injected-parameters" in c.metadata.get("tags", [])]
    assert parse_assignments(injected.source, "injected") == params  # literals only, equal to the given
    assert json.loads(json.dumps(load_canonical_json(run_dir / "run.json")["parameters"])) == params


@pytest.mark.parametrize("name", ["x = 1; open('PWNED', 'w').close(); y", "__import__('os')", "text\nimport os"])
def test_a_parameter_name_carrying_code_is_refused_before_anything_runs(tmp_path, name):
    nb = write_notebook(tmp_path / "p.ipynb", ECHO_CELL, parameters=PARAMS_CELL)
    with pytest.raises(ParameterError, match="unknown parameter"):
        run_notebook(nb, {name: 1}, "r1", tmp_path / "runs", {})
    assert not (tmp_path / "runs").exists() and not (tmp_path / "PWNED").exists()
