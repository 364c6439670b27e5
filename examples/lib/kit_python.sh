# Sourced by the examples: PY, the Python that runs the kit ($PYTHON, else the venv `make` creates
# (.venv), else python3 on PATH, e.g. an active venv), refused in one line when it cannot import the kit.
PY=${PYTHON:-}
if [ -z "$PY" ]; then
  if [ -x .venv/bin/python ]; then PY=.venv/bin/python; else PY=python3; fi
fi
if ! "$PY" -c 'import kit, torch, transformers' 2>/dev/null; then
  echo "$0: $PY cannot import the kit; run \`make test\` (creates .venv), activate a venv with the kit installed" \
       "(pip install -e .), or set PYTHON" >&2
  exit 2
fi
