#!/usr/bin/env bash
# The adaptive sharded learning experiment end to end on the tiny contract (2 CPU cores, minutes):
# prepare -> cohort A (2 workers, migrated to 3 at the contract's step, plus the uninterrupted
# 2-worker control) -> cohort B with growth and the fixed-depth control -> dev evaluation ->
# selection -> final evaluation -> gates JSON; then every commit is verified.
#
# usage: examples/adaptive_tiny.sh [OUT] [SEED]   (defaults: adaptive-tiny-out, OUT/seed built when absent)
# env:   PYTHON         the kit's Python (default .venv/bin/python from `make`, else python3)
#        PUBLIC_SOURCE  the pinned public conversation source (default data/alpaca_5000.json, data/SOURCE.md)
#        KIT_LEDGER     the exposure ledger (default OUT/ledger/exposed.jsonl: this run's own, so the
#                       committed ledger/exposed.jsonl neither empties its finals nor receives its scorings)
#        CONTRACT       the adaptive contract (default contracts/adaptive-shards.tiny.json)
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-adaptive-tiny-out}
SEED=${2:-$OUT/seed}
. examples/lib/kit_python.sh  # PY: the kit's Python, or a one-line refusal
KIT="$PY -m kit"
PUBLIC_SOURCE=${PUBLIC_SOURCE:-data/alpaca_5000.json}
CONTRACT=${CONTRACT:-contracts/adaptive-shards.tiny.json}
P=$OUT/prepared
mkdir -p "$OUT"
export KIT_LEDGER=${KIT_LEDGER:-$OUT/ledger/exposed.jsonl}
last_root() { $PY -c 'import json,sys; print(json.loads(sys.stdin.read().strip().splitlines()[-1])[sys.argv[1]])' "$1"; }
contract() { $PY -c 'import json,sys; d=json.load(open(sys.argv[1])); print(eval(sys.argv[2], {}, {"c": d}))' $CONTRACT "$1"; }

MIG_STEP=$(contract 'c["migration"]["at_step"]')
FROM=$(contract 'c["migration"]["from_workers"]')
TO=$(contract 'c["migration"]["to_workers"]')

[ -f "$SEED/config.json" ] || $KIT seed build --out "$SEED" --no-progress
[ -f "$P/prepared.json" ] || $KIT adaptive prepare --contract $CONTRACT --seed "$SEED" \
    --replay "$SEED/trained_conversations.jsonl" --public-source "$PUBLIC_SOURCE" --out "$P"

echo "== cohort A: $FROM workers to step $MIG_STEP"
A_MID=$($KIT adaptive train --prepared "$P" --seed "$SEED" --home "$OUT/A$FROM" --cohort A --workers "$FROM" \
        --until "$MIG_STEP" | last_root full_root)
echo "== cohort A: migrate $FROM -> $TO workers at step $MIG_STEP, continue to the endpoint"
A_END=$($KIT adaptive train --prepared "$P" --seed "$SEED" --home "$OUT/A$TO" --cohort A --workers "$TO" \
        --resume "$A_MID" --source-home "$OUT/A$FROM" | last_root full_root)
echo "== cohort A: uninterrupted $FROM-worker control from the same step"
A_CTL=$($KIT adaptive train --prepared "$P" --seed "$SEED" --home "$OUT/A$FROM" --cohort A --workers "$FROM" \
        --resume "$A_MID" | last_root full_root)
$KIT adaptive compare --a "$OUT/A$TO:$A_END" --b "$OUT/A$FROM:$A_CTL" --cohort A --require-equal \
    --out "$OUT/migration-comparison.json"

echo "== cohort B: fixed-depth control ($TO workers), reference = the committed A endpoint"
B_END=$($KIT adaptive train --prepared "$P" --seed "$SEED" --home "$OUT/B" --cohort B --workers "$TO" \
        --resume "$A_END" --reference "$A_END" --source-home "$OUT/A$TO" | last_root full_root)
echo "== cohort B: growth (+blocks), identical examples and optimizer schedule"
G_END=$($KIT adaptive train --prepared "$P" --seed "$SEED" --home "$OUT/G" --cohort B --workers "$TO" \
        --resume "$A_END" --reference "$A_END" --reference-home "$OUT/A$TO" --source-home "$OUT/A$TO" --grow \
        | last_root full_root)
$KIT adaptive compare --a "$OUT/G:$G_END" --b "$OUT/B:$B_END" --cohort B --out "$OUT/growth-comparison.json"

echo "== development evaluation"
$KIT adaptive evaluate --prepared "$P" --split dev --candidate "$OUT/A$TO:$A_END" --baseline "seed:$SEED" --out "$OUT/dev-A.json"
$KIT adaptive evaluate --prepared "$P" --split dev --candidate "$OUT/B:$B_END" --baseline "$OUT/A$TO:$A_END" --out "$OUT/dev-B.json"
$KIT adaptive evaluate --prepared "$P" --split dev --candidate "$OUT/G:$G_END" --baseline "$OUT/B:$B_END" --out "$OUT/dev-G.json"

echo "== selection (fixed endpoints; development checks cannot choose another one)"
$KIT adaptive select --prepared "$P" --candidate "A=$OUT/A$TO:$A_END" --candidate "B=$OUT/B:$B_END" \
    --candidate "G=$OUT/G:$G_END" --dev-eval "$OUT/dev-A.json" --dev-eval "$OUT/dev-B.json" \
    --dev-eval "$OUT/dev-G.json" --out "$OUT/selection.json"

echo "== final evaluation"
$KIT adaptive evaluate --prepared "$P" --split final --selection "$OUT/selection.json" --candidate "$OUT/A$TO:$A_END" --baseline "seed:$SEED" --out "$OUT/final-A.json"
$KIT adaptive evaluate --prepared "$P" --split final --selection "$OUT/selection.json" --candidate "$OUT/B:$B_END" --baseline "$OUT/A$TO:$A_END" --out "$OUT/final-B.json"
$KIT adaptive evaluate --prepared "$P" --split final --selection "$OUT/selection.json" --candidate "$OUT/G:$G_END" --baseline "$OUT/B:$B_END" --out "$OUT/final-G.json"
$KIT adaptive gates --contract $CONTRACT --eval "A_vs_seed=$OUT/final-A.json" --eval "B_vs_A=$OUT/final-B.json" \
    --eval "growth_vs_control=$OUT/final-G.json" --out "$OUT/gates.json"

echo "== verify every commit"
# one process for all of them (kit.store.commits, which `kit checkpoint list` and `verify` call): each
# commit's objects re-hashed against its manifest, which must hash to its root
$PY - "$OUT/A$FROM" "$OUT/A$TO" "$OUT/B" "$OUT/G" <<'EOF'
import sys
from kit import numerics
numerics.apply()  # a script's own process: roots are computed under the kit's numeric profile
from kit.store.commits import list_commits, verify_commit
for home in sys.argv[1:]:
    for root in list_commits(home):
        verify_commit(home, root)  # raises, naming the object, on any mismatch
        print("verified", home, root)
EOF
echo "gates: $OUT/gates.json"
