#!/usr/bin/env bash
# The shared-gradient study on the tiny contract, end to end on 2 CPU cores (docs/study.md):
#   prepare -> single (1 worker) -> dense (2 workers, gloo) -> powersgd (2 workers, gloo)
#   -> evaluation (candidates frozen first) -> screens (STUDY/screens.json)
#
# usage: examples/gradient_study_tiny.sh [OUT] [SEED]  (defaults: gradient-study-out, OUT/seed built when absent)
# env:   PYTHON         the kit's Python (default .venv/bin/python from `make`, else python3)
#        PUBLIC_SOURCE  the pinned public conversation source (default data/alpaca_5000.json, data/SOURCE.md)
#        KIT_LEDGER     the exposure ledger (default OUT/ledger/exposed.jsonl, started as a copy of the
#                       committed ledger/exposed.jsonl: the tiny study's retention probes must be records an
#                       earlier scoring opened, and its own scoring appends to the copy, never the committed file)
#        CONTRACT       the study contract (default contracts/shared-gradient.tiny.json)
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-gradient-study-out}
SEED=${2:-$OUT/seed}
PUBLIC_SOURCE=${PUBLIC_SOURCE:-data/alpaca_5000.json}
. examples/lib/kit_python.sh  # PY: the kit's Python, or a one-line refusal
STUDY=$OUT/study
CONTRACT=${CONTRACT:-contracts/shared-gradient.tiny.json}

if [ ! -f "$PUBLIC_SOURCE" ]; then
  echo "public conversation source $PUBLIC_SOURCE not found; set PUBLIC_SOURCE to a local copy (sha256 in $CONTRACT)" >&2
  exit 2
fi
mkdir -p "$OUT"
if [ -z "${KIT_LEDGER:-}" ]; then
  export KIT_LEDGER=$OUT/ledger/exposed.jsonl
  [ -f "$KIT_LEDGER" ] || { mkdir -p "$OUT/ledger"; cp ledger/exposed.jsonl "$KIT_LEDGER"; }
fi
start=$(date +%s)
if [ ! -f "$SEED/config.json" ]; then
  echo "== building the tiny seed into $SEED"
  $PY -m kit seed build --out "$SEED" --no-progress
fi
rm -rf "$STUDY"  # this script's own output: a study is prepared once, so start from an empty directory

echo "== prepare"
$PY -m kit study prepare --contract "$CONTRACT" --seed "$SEED" --public-source "$PUBLIC_SOURCE" --study "$STUDY"
for arm in single dense powersgd; do
  echo "== arm $arm"
  $PY -m kit study arm "$arm" --study "$STUDY" --seed "$SEED"
done
echo "== evaluate"
$PY -m kit study evaluate --study "$STUDY" --seed "$SEED" >/dev/null
echo "== screens"
$PY -m kit study screens --study "$STUDY"
echo "== done in $(( $(date +%s) - start )) s; every arm, screen input and verdict: $STUDY/screens.json"
