#!/usr/bin/env bash
# The shared-gradient study on the tiny contract, end to end on 2 CPU cores (docs/study.md):
#   prepare -> single (1 worker) -> dense (2 workers, gloo) -> powersgd (2 workers, gloo)
#   -> evaluation (candidates frozen first) -> screens (STUDY/screens.json)
#
# usage: examples/gradient_study_tiny.sh [OUT]       (default OUT: gradient-study-out)
# env:   PYTHON (default python3), SEED (a seed directory; built into OUT/seed when absent),
#        SOURCE (the pinned public conversation source, default data/alpaca_5000.json in the repository)
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
OUT=${1:-gradient-study-out}
SEED=${SEED:-$OUT/seed}
SOURCE=${SOURCE:-data/alpaca_5000.json}
STUDY=$OUT/study
CONTRACT=contracts/shared-gradient.tiny.json

if [ ! -f "$SOURCE" ]; then
  echo "public conversation source $SOURCE not found; set SOURCE to a local copy (sha256 in $CONTRACT)" >&2
  exit 2
fi
mkdir -p "$OUT"
start=$(date +%s)
if [ ! -f "$SEED/config.json" ]; then
  echo "== building the tiny seed into $SEED"
  $PY -m kit seed build --out "$SEED" --no-progress
fi
rm -rf "$STUDY"  # this script's own output: a study is prepared once, so start from an empty directory

echo "== prepare"
$PY -m kit study prepare --contract "$CONTRACT" --seed "$SEED" --public-source "$SOURCE" --study "$STUDY"
for arm in single dense powersgd; do
  echo "== arm $arm"
  $PY -m kit study arm "$arm" --study "$STUDY" --seed "$SEED"
done
echo "== evaluate"
$PY -m kit study evaluate --study "$STUDY" --seed "$SEED" >/dev/null
echo "== screens"
$PY -m kit study screens --study "$STUDY"
echo "== done in $(( $(date +%s) - start )) s; every arm, screen input and verdict: $STUDY/screens.json"
