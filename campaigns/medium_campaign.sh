#!/usr/bin/env bash
# The medium campaign on a host with two GPUs, as a few device calls (docs/gpu-hosts.md, "The medium campaign").
#
#   bash campaigns/medium_campaign.sh pilot DATE       call 1: bring the host's git to the carried commit, install the
#                                                  notebook runtime, run the pilot (seed build + candidates), commit
#                                                  its record, freeze the contracts, commit them, bundle those two
#                                                  commits into $OUT, then start the campaign in the background
#   bash campaigns/medium_campaign.sh pilots DATE      one GPU (the re-run on the learnable seed, docs/gpu-hosts.md): in
#                                                  the background, the seed rebuilt to its pin, then the adaptive and
#                                                  the study pilot side by side on it, both records committed, each
#                                                  contract frozen from its own pilot, the commits bundled into
#                                                  build/medium/out; follow it with `follow`, which brings that back
#                                                  (refused before any work when a contract it would freeze is
#                                                  already frozen: keep that one beside its evidence and git rm it)
#                                                  (PILOT_PARALLEL / STUDY_PARALLEL: each pilot's candidates run
#                                                  that many at once, --parallel; default 1, one after another;
#                                                  THEN_TRIAL=1: the adaptive trial starts once its contract froze;
#                                                  THEN_TRIAL=both: with both contracts frozen, both trials side by
#                                                  side on the one GPU (each its own `kit demo --parts`);
#                                                  ELSE_PROBE="NAME CONFIG": when it did not freeze, `probe NAME
#                                                  CONFIG` follows on the same machine, so that one block of
#                                                  device time tests a seed recipe too)
#   bash campaigns/medium_campaign.sh probe NAME CONFIG [NAME CONFIG ...]  one GPU, in the background: a candidate
#                                                  seed recipe (CONFIG: SmallSeedConfig fields, as
#                                                  campaigns/seed-probes/*.json) built, then the adaptive pilot on it
#                                                  with a probe draft pinning the digest it built (kept in the
#                                                  record's folder; the freeze refuses it: its draft is not the
#                                                  committed one); nothing committed; `follow` brings it back. Several
#                                                  pairs: one sync, then the probes side by side on the one GPU
#   bash campaigns/medium_campaign.sh start            start (or resume: completed runs are reused) the campaign;
#                                                  PARTS=study (or adaptive) runs only that experiment
#   bash campaigns/medium_campaign.sh resume PARTS     a later sitting on a fresh machine, in the background: bring
#                                                  git to the carried commit, rebuild the seed to its pinned
#                                                  digest (the pilot's command and settings), then PARTS
#                                                  (adaptive, study, adaptive,study one after the other, or
#                                                  both: the two trials side by side on the one GPU)
#   bash campaigns/medium_campaign.sh replicates DATE  issue 51, one H200, in the background: the seed rebuilt to its pin,
#                                                  then campaigns/medium-replicates-plan.json's parts (python -m
#                                                  kit.replicates): prepare, study r1 r2 beside cohort A's endpoint,
#                                                  the growth pair r1 beside the study's development scores, the
#                                                  PowerSGD CUDA oracle when present, the committed-order study arms
#   bash campaigns/medium_campaign.sh growth-replay DATE  issues 51 and 47, one H200, in the background: the seed
#                                                  rebuilt, then `kit verify-evidence --replay` of
#                                                  medium-adaptive-A2-to-step64 and medium-study-single beside
#                                                  the replicates' prepare, cohort A's endpoint and growth pair r1,
#                                                  then growth pair r2 and a replay of medium-study-single-r1
#   bash campaigns/medium_campaign.sh confirm TAG      issue 63, one H200, in the background: the seed rebuilt, then the
#                                                  next block of campaigns/medium-replicate-design.json's campaign
#                                                  over the committed medium-confirm-* runs and fresh-final scores
#                                                  (python -m kit.replicate_campaign run --block 1; TAG: this
#                                                  session's, naming its re-derived inputs' runs)
#   bash campaigns/medium_campaign.sh follow SECONDS   calls 2..n: follow the campaign for up to SECONDS, then pack the
#                                                  run records, evaluation records and report into $OUT
#   bash campaigns/medium_campaign.sh sync             only the first step of pilot and resume: the host's git to the
#                                                  carried commit
#
# Carry build/gpu-wheels (make gpu-wheels) and build/bundle (make medium-bundle: the local last commit's object
# and tree listing, from which `sync` rebuilds that commit over the copied working tree, so that the host's
# records name real commits; the device copy's own .git is stale).
# Everything the campaign writes on the host goes under build/medium/ (ignored by git), which survives
# between calls while the machine stays warm; the background campaign (setsid) outlives the call that started
# it. A fresh machine starts over from what was committed: the pilot's record and the frozen contracts are in
# git, the seed rebuilds to its pinned digest, and `start` reuses nothing it cannot find (run records live with
# their checkpoint stores under build/medium/).
set -euo pipefail
cd "$(dirname "$0")/.."
W=build/medium
# Every step in the deterministic GPU mode (docs/engine.md, "Determinism"), not only the seed build: a run
# record then states a mode in which it repeats bit for bit, and its replay runs in it (#47). Before
# 2026-12-04 the trials ran without it; their records carry no mode and replay without the flag.
export KIT_GPU_DETERMINISTIC=${KIT_GPU_DETERMINISTIC:-1} CUBLAS_WORKSPACE_CONFIG=${CUBLAS_WORKSPACE_CONFIG:-:4096:8}
# The campaign runs in a checkout of its own (a copy of the synced repository), because every device call
# copies the local working tree anew over the device copy: a file the host committed (a frozen contract)
# would vanish there, and a notebook being rewritten is briefly missing. Later calls never touch this folder.
CAMPAIGN_DIR=${KIT_CAMPAIGN_DIR:-/tmp/kit-campaign}
if [ "${1:-}" = follow ] && [ -d "$CAMPAIGN_DIR/$W" ] && [ "$(pwd -P)" != "$(cd "$CAMPAIGN_DIR" && pwd -P)" ]; then
    cd "$CAMPAIGN_DIR"  # `follow` reads (and packs) the campaign where it runs
fi
mkdir -p "$W"

runtime() {  # the notebook runtime without an index (docs/gpu-hosts.md), once per machine ($NBRT: where)
    local rt=${NBRT:-/tmp/nbrt}
    [ -f "$rt/env.sh" ] || python3 tools/gpu_wheels.py install "$rt" --wheels build/gpu-wheels >"$W/runtime.log"
    # shellcheck disable=SC1091
    . "$rt/env.sh"
    export PYTHONPATH=".:${PYTHONPATH:-}" PYTHONUNBUFFERED=1 KIT_PROGRESS=0
}

timed() {  # timed FILE CMD...: GNU time's resource record of CMD in FILE, where the host has GNU time
    local file=$1; shift
    if [ -x /usr/bin/time ]; then /usr/bin/time -v -o "$file" "$@"; else "$@"; fi
}

sync_git() {  # the host's HEAD becomes the carried commit, rebuilt from the working tree (the copy carries its files)
    [ -d .git ] || git init -q  # first: every git command below needs a repository
    git config core.fileMode false
    git config user.name >/dev/null || git config user.name "kit medium campaign"
    git config user.email >/dev/null || git config user.email "kit@localhost"
    local b=build/bundle want tree actual carried commit
    want=$(cat "$b/commit.sha")
    tree=$(sed -n '1s/^tree //p' "$b/commit")
    rm -f .git/index
    # the files as found here (their blobs written), then the carried tree's entries (modes and blob ids) over them
    tr '\0' '\n' <"$b/tree" | cut -f2- | while IFS= read -r p; do
        if [ -e "$p" ] || [ -L "$p" ]; then printf '%s\n' "$p"; fi
    done | git update-index --add --stdin
    actual=$(git write-tree)
    tr '\0' '\n' <"$b/tree" | git update-index --index-info
    carried=$(git write-tree --missing-ok)
    # a file whose bytes differ (or that is missing) has another blob id; a lost executable bit alone does not count
    local differ
    differ=$(git diff-tree -r "$actual" "$carried" | awk '$3 != $4 {print $5, $6}')
    if [ "$carried" != "$tree" ] || [ -n "$differ" ]; then
        echo "the working tree differs from the carried commit $want:" >&2
        printf '%s\n' "$differ" | head -20 >&2
        exit 2
    fi
    # the commit object itself, byte for byte: the same id; its parent is not here, so the history is shallow at it
    commit=$(git hash-object -t commit -w --literally --stdin <"$b/commit")
    [ "$commit" = "$want" ] || { echo "build/bundle/commit hashes to $commit, not $want" >&2; exit 2; }
    grep -qsx "$commit" .git/shallow || echo "$commit" >>.git/shallow
    git reset -q "$commit"
    git rev-parse HEAD >"$W/base-commit"
    if [ -n "$(git status --porcelain)" ]; then
        echo "the working tree differs from the carried commit $(cat "$W/base-commit"):" >&2
        git status --porcelain | head -20 >&2
        exit 2
    fi
    echo "git: $(git log -1 --oneline)"
}

enter_checkout() {  # cd into the campaign's checkout, made from this (synced) copy when there is none yet
    [ "$(pwd -P)" = "$(mkdir -p "$CAMPAIGN_DIR" && cd "$CAMPAIGN_DIR" && pwd -P)" ] && return
    if [ ! -d "$CAMPAIGN_DIR/.git" ]; then
        cp -a . "$CAMPAIGN_DIR/"  # the synced .git, the tree, build/ (bundle, wheels, anything built here)
        echo "campaign checkout: $CAMPAIGN_DIR"
    fi
    cd "$CAMPAIGN_DIR"
}

start() {
    runtime
    # (the pid file may name this very process: `pilots` with THEN_TRIAL hands the pid file over to the trial)
    if [ -f "$W/campaign.pid" ] && [ "$(cat "$W/campaign.pid")" != "$$" ] && kill -0 "$(cat "$W/campaign.pid")" 2>/dev/null; then
        echo "campaign already running (pid $(cat "$W/campaign.pid"))"; return
    fi
    seed=()
    [ -f "$W/pilot-work/seed/config.json" ] && seed=(--seed "$W/pilot-work/seed")
    # Scorings inside `kit run` record to the ledger beside the runs directory (kit/evidence/ledger.py):
    # start it as the repository's, so preparations exclude what was exposed before, and bring it back
    # (pack). Not the tracked ledger/ itself: every call copies the working tree over it.
    mkdir -p "$W/ledger"
    [ -f "$W/ledger/exposed.jsonl" ] || cp ledger/exposed.jsonl "$W/ledger/exposed.jsonl"
    setsid nohup python3 -m kit demo --scale medium --parts "${PARTS:-adaptive,study}" "${seed[@]}" \
        --out "$W/work" --runs-dir "$W/runs" \
        --reports-dir "$W/reports" --no-progress >>"$W/campaign.log" 2>&1 </dev/null &
    echo $! >"$W/campaign.pid"
    echo "campaign started (pid $!), log $W/campaign.log"
}

pack() {  # at most 8 files come back: one archive of the evidence, the log beside it
    local out="${OUT:-$W/out}"
    mkdir -p "$out"
    local items=()
    # Besides the run records: what a verification of the finals needs (the prepared job's record, the
    # selection log, the final-access log and the final-evaluation log, docs/formats/selection-records.md) and every store's
    # attempt records (adaptive homes' attempts/, the study arms' arm.json and attempts), never the
    # checkpoint objects themselves.
    for p in runs reports ledger campaign.log oracle.log work/medium*-plan.json work/medium*-timing.json work/adaptive/*.json \
             work/adaptive/prepared/prepared.json work/adaptive/prepared/selections.jsonl \
             work/adaptive/prepared/final-access.jsonl work/adaptive/prepared/final-evaluations.jsonl \
             work/adaptive/*/attempts work/study/arms/*/arm.json work/study/arms/*/attempts \
             work/study/arms/*/attempts-rank* work/study/prepared/prepared.json \
             work/study/*.json work/study/evaluation work/at-once work/replicates-*.json work/study/replicates \
             work/confirm-block-*.json finals \
             seed-build oracle replay/runs replay.log replay-r1.log; do
        for q in $W/$p; do [ -e "$q" ] && items+=("${q#"$W"/}"); done
    done
    [ ${#items[@]} -gt 0 ] && tar czf "$out/medium-evidence.tgz" -C "$W" "${items[@]}"
    cp "$W/campaign.log" "$out/" 2>/dev/null || true
    # what `pilots` left for the caller (the seed build, both pilot records, the bundle of its commits)
    [ -d "$W/out" ] && [ "$(cd "$W/out" && pwd)" != "$(mkdir -p "$out" && cd "$out" && pwd)" ] && cp "$W/out"/* "$out/" 2>/dev/null
    true
    ls -la "$out"
}

follow() {
    local until=$((SECONDS + $1)) shown=0
    while [ $SECONDS -lt $until ]; do
        if [ -f "$W/campaign.log" ]; then
            local n; n=$(wc -l <"$W/campaign.log")
            [ "$n" -gt "$shown" ] && sed -n "$((shown + 1)),${n}p" "$W/campaign.log" && shown=$n
        fi
        if [ ! -f "$W/campaign.pid" ] || ! kill -0 "$(cat "$W/campaign.pid")" 2>/dev/null; then
            echo "no campaign process running"; break
        fi
        sleep 5
    done
    pack
}

pilot() {
    local date=$1 id="medium-pilot-$1"
    sync_git
    runtime
    nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
    local seed=(--build-seed)  # a seed already built on this machine (an earlier pilot's) is not built again
    [ -f "$W/pilot-work/seed/config.json" ] && seed=(--seed "$W/pilot-work/seed")
    # shellcheck disable=SC2086
    # PILOT_EXTRA: more candidate choices, e.g. "--warmup 0 16 --schedule-after cosine"
    python3 -m campaigns.medium_pilot "${seed[@]}" --device cuda --lr ${PILOT_LRS:-1e-5 3e-5 6e-5} ${PILOT_EXTRA:-} \
        --until "${PILOT_UNTIL:-32}" --deadline-s "${PILOT_DEADLINE_S:-500}" \
        --work "$W/pilot-work" --out "$W/pilot" --run-id "$id" || true
    local out="${OUT:-$W/out}"
    mkdir -p "$out"
    tar czf "$out/$id.tgz" -C "$W" pilot
    mkdir -p runs && rm -rf "runs/$id" && cp -r "$W/pilot" "runs/$id" && rm -rf "$W/pilot"
    git add "runs/$id"
    git commit -q -m "Medium pilot $date: its record, on development roles only (campaigns/medium_pilot.py)"
    if python3 -m campaigns.medium_freeze --pilot "runs/$id"; then
        git add contracts/adaptive-shards.medium.json contracts/shared-gradient.medium.json
        git commit -q -m "Medium contracts frozen from the drafts and the committed pilot $id (campaigns/medium_freeze.py)"
    fi
    git bundle create "$out/device.bundle" "$(cat "$W/base-commit")..HEAD"
    git log --oneline -3
    [ -f contracts/adaptive-shards.medium.json ] && start
}

build_seed() {  # the pinned seed at build/medium/pilot-work/seed, once per machine: a fresh host's digest check
    local seed="$W/pilot-work/seed" out="$W/out"
    mkdir -p "$out" "$W/seed-build"
    nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | tee "$W/seed-build/gpu.txt"
    [ -f "$seed/config.json" ] && return 0
    echo "seed build started $(date -u +%FT%TZ)"
    CUBLAS_WORKSPACE_CONFIG=:4096:8 KIT_GPU_DETERMINISTIC=1 timed "$W/seed-build/time.txt" \
        python3 -m kit seed build --scale medium --device cuda --out "$seed" --no-progress \
        >"$W/seed-build/seed_build.json" 2>"$W/seed-build/stderr.txt" || true
    # the full build record too (greedy task samples, learning curve, disjointness), not only the summary
    cp "$seed/seed_build.json" "$W/seed-build/record.json" 2>/dev/null || true
    tar czf "$out/seed-build.tgz" -C "$W" seed-build
    grep -o '"parameter_digest": "[0-9a-f]*"' "$W/seed-build/seed_build.json" || { echo "seed build failed"; exit 1; }
}

refuse_frozen_contracts() {  # before any device time: the pilots could not freeze over a contract already frozen
    local c frozen=()
    for c in contracts/adaptive-shards.medium.json contracts/shared-gradient.medium.json; do
        if [ "$c" = contracts/shared-gradient.medium.json ] && [ "${PILOTS:-adaptive,study}" = adaptive ]; then continue; fi
        [ -f "$c" ] && frozen+=("$c")
    done
    [ ${#frozen[@]} = 0 ] && return 0
    # 2026-12-03: the freeze refused these, and THEN_TRIAL started both trials on the old contracts, whose
    # seed pin the new seed failed; the block's time went to two refused preparations
    echo "pilots: refused: ${frozen[*]} already frozen; a frozen contract is never rewritten, so these pilots could" \
         "not freeze theirs. Keep it beside its evidence (runs/medium-superseded-seed-<8 hex>/contracts/), git rm" \
         "it, commit, and carry that commit (make medium-bundle)" >&2
    exit 2
}

pilots_run() {  # `pilots` in the foreground; its output is build/medium/campaign.log
    local date=$1 a="medium-pilot-$1" s="study-pilot-$1" out="$W/out" seed="$W/pilot-work/seed"
    [ "${SYNCED:-0}" = 1 ] || sync_git  # SYNCED=1: `pilots` synced before making the checkout
    refuse_frozen_contracts
    # the pilots run kit commands only (no notebooks): the kit's environment without the notebook runtime
    export PYTHONPATH=".:${PYTHONPATH:-}" PYTHONUNBUFFERED=1 KIT_PROGRESS=0
    build_seed
    echo "pilots started $(date -u +%FT%TZ)"
    # side by side: two processes on one GPU, each deterministic on its own (the roots do not depend on the other)
    # shellcheck disable=SC2086
    python3 -m campaigns.medium_pilot --seed "$seed" --device cuda --lr ${PILOT_LRS:-3e-4 1e-3} \
        ${PILOT_EXTRA:---warmup 0 16 --schedule-after cosine} --until "${PILOT_UNTIL:-128}" --parallel "${PILOT_PARALLEL:-1}" \
        --deadline-s "${PILOT_DEADLINE_S:-1000}" --work "$W/pilot-work" --out "$W/pilot" --run-id "$a" \
        >"$W/adaptive-pilot.log" 2>&1 &
    local ap=$! sp=""
    if [ "${PILOTS:-adaptive,study}" != adaptive ]; then  # PILOTS=adaptive: the adaptive pilot alone
    # shellcheck disable=SC2086
    python3 -m campaigns.study_pilot --seed "$seed" --device cuda --lr ${STUDY_LRS:-3e-4 1e-3} \
        --warmup ${STUDY_WARMUPS:-0 16} --until "${STUDY_UNTIL:-128}" --parallel "${STUDY_PARALLEL:-1}" --deadline-s "${PILOT_DEADLINE_S:-1000}" \
        --work "$W/study-pilot-work" --out "$W/study-pilot" --run-id "$s" >"$W/study-pilot.log" 2>&1 &
    sp=$!
    fi
    wait $ap || true
    [ -z "$sp" ] || wait "$sp" || true
    tail -n 3 "$W"/*-pilot.log || true
    mkdir -p runs
    tar czf "$out/$a.tgz" -C "$W" pilot adaptive-pilot.log
    rm -rf "runs/$a" && cp -r "$W/pilot" "runs/$a" && git add "runs/$a"
    if [ -n "$sp" ]; then
        tar czf "$out/$s.tgz" -C "$W" study-pilot study-pilot.log
        rm -rf "runs/$s" && cp -r "$W/study-pilot" "runs/$s" && git add "runs/$s"
    fi
    git commit -q -m "Medium pilots $date on one GPU: their records, development roles only"
    local froze_a=0 froze_s=0  # what THIS run froze: only its own contracts may start a trial
    if python3 -m campaigns.medium_freeze --pilot "runs/$a"; then
        git add contracts/adaptive-shards.medium.json
        git commit -q -m "Adaptive medium contract frozen from its draft and the committed pilot $a"
        froze_a=1
    fi
    if [ -n "$sp" ] && python3 -m campaigns.medium_freeze --study-pilot "runs/$s"; then
        git add contracts/shared-gradient.medium.json
        git commit -q -m "Study medium contract frozen from its draft and its own committed pilot $s"
        froze_s=1
    fi
    git bundle create "$out/device.bundle" "$(cat "$W/base-commit")..HEAD"
    git log --oneline -4
    # The candidates' checkpoint stores (each commit: FP32 parameters and both Adam moments) are not
    # evidence once the records are committed; the trials need the disk (a 64 GiB host filled up with them).
    find "$W/pilot-work" -mindepth 1 -maxdepth 1 ! -name seed -exec rm -rf {} +
    rm -rf "$W/study-pilot-work"
    echo "pilots done $(date -u +%FT%TZ); disk: $(df -h . | awk 'NR == 2 {print $4 " free"}')"
    # THEN_TRIAL=1 (carry build/gpu-wheels too): with the adaptive contract frozen, the adaptive trial starts at
    # once on the seed just built, so that one block holds the pilot and the trial (`follow` keeps following)
    if [ "${THEN_TRIAL:-0}" = both ] && [ $froze_a = 1 ] && [ $froze_s = 1 ]; then
        trials_side_by_side
    elif [ "${THEN_TRIAL:-0}" != 0 ] && [ $froze_a = 1 ]; then
        PARTS=adaptive start
    elif [ -n "${ELSE_PROBE:-}" ] && [ $froze_a = 0 ]; then
        # ELSE_PROBE="NAME CONFIG": the positive control did not hold on the pinned seed, so the rest of the
        # block checks a candidate seed recipe. The host's git already holds the pilots' commits (bundled
        # above): no second sync, which would reset them away.
        # shellcheck disable=SC2086
        SYNCED=1 probe_run $ELSE_PROBE
    fi
}

trials_side_by_side() {  # THEN_TRIAL=both: both trials at once on the one GPU, in this (background) process
    runtime
    mkdir -p "$W/ledger"
    [ -f "$W/ledger/exposed.jsonl" ] || cp ledger/exposed.jsonl "$W/ledger/exposed.jsonl"
    local seed=(--seed "$W/pilot-work/seed") common=(--scale medium --out "$W/work" --runs-dir "$W/runs" --no-progress)
    echo "trials started $(date -u +%FT%TZ)"
    python3 -m kit demo "${common[@]}" --parts adaptive "${seed[@]}" --reports-dir "$W/reports" \
        >>"$W/campaign.log" 2>&1 </dev/null &
    local ap=$!
    # The study starts once the seed's inspection run completed, which it then reuses (one run id, one
    # record); each trial is deterministic on its own, so sharing the GPU changes their times, not their roots.
    # Both prepare against the ledger as committed: the adaptive finals record theirs minutes later.
    while kill -0 "$ap" 2>/dev/null && ! grep -q '"status":"completed"' "$W/runs/medium-seed/run.json" 2>/dev/null; do
        sleep 2
    done
    python3 -m kit demo "${common[@]}" --parts study "${seed[@]}" --no-report \
        >>"$W/campaign.log" 2>&1 </dev/null &
    local sp=$!
    wait "$ap" || true
    wait "$sp" || true
    echo "trials done $(date -u +%FT%TZ)"
}

pilots() {  # in the background, so that it outlives the device call that starts it (followed by `follow`)
    sync_git
    enter_checkout
    refuse_frozen_contracts  # here too: in the call's own output, before the background run
    if [ -f "$W/campaign.pid" ] && kill -0 "$(cat "$W/campaign.pid")" 2>/dev/null; then
        echo "already running (pid $(cat "$W/campaign.pid"))"; return
    fi
    mkdir -p "$W"
    SYNCED=1 setsid nohup bash campaigns/medium_campaign.sh pilots-run "$1" >>"$W/campaign.log" 2>&1 </dev/null &
    echo $! >"$W/campaign.pid"
    echo "pilots started (pid $!), log $W/campaign.log"
}

probe_run() {  # `probe` in the foreground: does a seed recipe pass the positive control? (docs/gpu-hosts.md)
    local name=$1 config=$2 d="$W/probe-$1" out="$W/out"
    [ "${SYNCED:-0}" = 1 ] || sync_git  # SYNCED=1: after `pilots` on this machine (ELSE_PROBE)
    export PYTHONPATH=".:${PYTHONPATH:-}" PYTHONUNBUFFERED=1 KIT_PROGRESS=0
    [ -f "$config" ] || { echo "probe: $config: no such seed config"; exit 2; }
    mkdir -p "$out" "$d/seed-build"
    nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | tee "$d/seed-build/gpu.txt"
    cp "$config" "$d/seed-build/config.json"
    echo "probe $name: seed build started $(date -u +%FT%TZ)"
    CUBLAS_WORKSPACE_CONFIG=:4096:8 KIT_GPU_DETERMINISTIC=1 timed "$d/seed-build/time.txt" \
        python3 -m kit seed build --scale medium --device cuda --config "$config" --out "$d/seed" --no-progress \
        >"$d/seed-build/seed_build.json" 2>"$d/seed-build/stderr.txt" || true
    local digest
    digest=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['parameter_digest'])" \
        "$d/seed-build/seed_build.json") || { echo "probe $name: seed build failed"; tar czf "$out/probe-$name.tgz" -C "$W" "probe-$name/seed-build"; exit 1; }
    echo "probe $name: seed $digest"
    cp "$d/seed/seed_build.json" "$d/seed-build/record.json" 2>/dev/null || true  # the full build record
    mkdir -p "$d/pilot"
    # the probe draft: the committed adaptive draft pinning the probe's seed, beside the pilot's record
    python3 - "$digest" "$d/pilot/probe-draft.json" <<'PY'
import json, sys
c = json.load(open("contracts/adaptive-shards.medium.draft.json"))
c["seed"]["parameter_digest"] = sys.argv[1]
c["description"] = "PROBE (never frozen): " + c["description"]
open(sys.argv[2], "w").write(json.dumps(c, indent=2) + "\n")
PY
    # shellcheck disable=SC2086
    python3 -m campaigns.medium_pilot --seed "$d/seed" --draft "$d/pilot/probe-draft.json" --device cuda \
        --lr ${PILOT_LRS:-3e-4 1e-3} ${PILOT_EXTRA:---warmup 16 --schedule-after cosine} \
        --until "${PILOT_UNTIL:-128}" --parallel "${PILOT_PARALLEL:-1}" --deadline-s "${PILOT_DEADLINE_S:-1000}" \
        --work "$d/pilot-work" --out "$d/pilot" --run-id "probe-$name" >"$d/pilot.log" 2>&1 || true
    tail -n 3 "$d/pilot.log" || true
    tar czf "$out/probe-$name.tgz" -C "$W" "probe-$name/seed-build" "probe-$name/pilot" "probe-$name/pilot.log"
    echo "probe $name: done $(date -u +%FT%TZ)"
}

probes_run() {  # probe-run NAME CONFIG [NAME CONFIG ...]: one sync, then each probe side by side on the one GPU
    [ $(($# % 2)) = 0 ] || { echo "probe: expected NAME CONFIG pairs, got: $*"; exit 2; }
    [ $# = 2 ] && { probe_run "$1" "$2"; return; }
    [ "${SYNCED:-0}" = 1 ] || sync_git
    local pids=()
    while [ $# -gt 0 ]; do
        # each deterministic on its own: sharing the GPU changes their times, not their digests
        SYNCED=1 probe_run "$1" "$2" &
        pids+=($!)
        shift 2
    done
    for p in "${pids[@]}"; do wait "$p" || true; done
}

probe() {  # in the background, as pilots
    sync_git
    enter_checkout
    if [ -f "$W/campaign.pid" ] && kill -0 "$(cat "$W/campaign.pid")" 2>/dev/null; then
        echo "already running (pid $(cat "$W/campaign.pid"))"; return
    fi
    mkdir -p "$W"
    SYNCED=1 setsid nohup bash campaigns/medium_campaign.sh probe-run "$@" >>"$W/campaign.log" 2>&1 </dev/null &
    echo $! >"$W/campaign.pid"
    echo "probe started (pid $!), log $W/campaign.log"
}

resume() {  # in the background, as pilots: the seed rebuilt to its pin, then PARTS (`both`: side by side)
    sync_git
    enter_checkout
    if [ -f "$W/campaign.pid" ] && kill -0 "$(cat "$W/campaign.pid")" 2>/dev/null; then
        echo "already running (pid $(cat "$W/campaign.pid"))"; return
    fi
    mkdir -p "$W"
    setsid nohup bash campaigns/medium_campaign.sh resume-run "$1" >>"$W/campaign.log" 2>&1 </dev/null &
    echo $! >"$W/campaign.pid"
    echo "resume started (pid $!), log $W/campaign.log"
}

resume_run() {  # `resume` in the foreground: the seed notebook then inspects the seed at the same path
    runtime
    build_seed
    if [ "$1" = both ]; then trials_side_by_side; else PARTS=$1 start; fi
}

ledger_prefix() {  # the ledger as the committed preparations read it, sha256 checked: the carried copy
    # (inputs.ledger.carried, when the tracked ledger has changed form since) or the tracked file's first lines
    mkdir -p "$W/ledger"
    python3 - "$1" "$W/ledger/exposed.jsonl" <<'PY'
import hashlib, json, os, sys
spec = json.load(open(sys.argv[1]))["inputs"]["ledger"]
path = spec["carried"] if os.path.isfile(spec["carried"]) else spec["file"]
with open(path, "rb") as f:
    data = b"".join(f.read().splitlines(keepends=True)[: spec["entries"]])
if hashlib.sha256(data).hexdigest() != spec["sha256"]:
    sys.exit(f"{path}: its first {spec['entries']} lines hash to {hashlib.sha256(data).hexdigest()}, not the "
             f"plan's field 'inputs.ledger.sha256' {spec['sha256']}; carry {spec['carried']} ({spec['make']})")
open(sys.argv[2], "wb").write(data)
PY
}

in_background() {  # in_background STAGE DATE: `STAGE-run DATE` in the background (setsid, as resume), its pid and
    # log under $W; refused before any device time when the ledger prefix the replicate plan names is wrong
    sync_git
    enter_checkout
    if [ -f "$W/campaign.pid" ] && kill -0 "$(cat "$W/campaign.pid")" 2>/dev/null; then
        echo "already running (pid $(cat "$W/campaign.pid"))"; return
    fi
    mkdir -p "$W"
    ledger_prefix campaigns/medium-replicates-plan.json || exit 2  # before any device time goes to the seed
    setsid nohup bash campaigns/medium_campaign.sh "$1-run" "$2" >>"$W/campaign.log" 2>&1 </dev/null &
    echo $! >"$W/campaign.pid"
    echo "$1 started (pid $!), log $W/campaign.log"
}

replicate_setup() {  # what every replicate stage starts with: the runtime, the seed at its pin, the ledger prefix,
    # and (global) the kit.replicates command line `r` and the two GPU modes as env prefixes
    plan=campaigns/medium-replicates-plan.json
    runtime
    build_seed
    ledger_prefix "$plan"
    r=(python3 -m kit.replicates --scale medium --out "$W/work" --seed "$W/pilot-work/seed" --runs-dir "$W/runs"
       --plan "$plan")
    # the committed runs' mode: flag and workspace unset; the replicates' mode: deterministic
    committed=(env -u KIT_GPU_DETERMINISTIC -u CUBLAS_WORKSPACE_CONFIG)
    deterministic=(env KIT_GPU_DETERMINISTIC=1 CUBLAS_WORKSPACE_CONFIG=:4096:8)
}

replicates_run() {  # `replicates` in the foreground: the most valuable first, so a cut-off leaves complete records
    local t0=$SECONDS
    replicate_setup
    echo "replicates: prepare $(date -u +%FT%TZ) (+$((SECONDS - t0)) s)"
    "${committed[@]}" "${r[@]}" --part prepare || { echo "replicates: prepare failed"; return 1; }
    echo "replicates: study r1 r2 beside cohort A's endpoint $(date -u +%FT%TZ) (+$((SECONDS - t0)) s)"
    "${committed[@]}" "${r[@]}" --part a-endpoint &
    local a=$!
    "${deterministic[@]}" "${r[@]}" --part study --replicates 1 2 || true
    wait $a || true
    echo "replicates: the study's development scores $(date -u +%FT%TZ) (+$((SECONDS - t0)) s)"
    "${deterministic[@]}" "${r[@]}" --part study-dev --replicates 1 2 || true
    # a scored replicate arm's checkpoint home is read by nothing later: the block of 2026-12-04 filled the
    # host's 64 GiB with six of them and their compile caches, and the growth pair failed at its commit
    rm -rf "$W"/work/study/arms/*-r[1-9]*/home /tmp/kit-arm-compile-*
    df -h "$W" | tail -n 1
    echo "replicates: growth pair r1 $(date -u +%FT%TZ) (+$((SECONDS - t0)) s)"
    "${deterministic[@]}" "${r[@]}" --part growth --replicates 1 || true
    if [ -f bench/powersgd_oracle.py ] && grep -q -- --cuda bench/powersgd_oracle.py; then
        echo "replicates: PowerSGD CUDA oracle $(date -u +%FT%TZ) (+$((SECONDS - t0)) s)"
        mkdir -p "$W/oracle"
        "${deterministic[@]}" python3 bench/powersgd_oracle.py --cuda --out "$W/oracle" >"$W/oracle.log" 2>&1 || true
        tail -n 5 "$W/oracle.log"
    fi
    echo "replicates: the committed-order study arms again $(date -u +%FT%TZ) (+$((SECONDS - t0)) s)"
    "${committed[@]}" "${r[@]}" --part study-r0 || true
    echo "replicates done $(date -u +%FT%TZ) (+$((SECONDS - t0)) s)"
}

growth_replay_run() {  # `growth-replay` in the foreground: two chains on the one GPU once the seed is rebuilt
    local t0=$SECONDS
    replicate_setup
    # The replay (issue 47, item 7): `kit verify-evidence --replay` of a committed adaptive run and a study arm,
    # re-deriving their preparations first. Their records state no GPU mode (made before it was recorded), so
    # they replay as they ran, without the flag. The seed they name (build/medium/pilot-work/seed, which no
    # committed run produces: the campaign built it) is present: the one just rebuilt to its pin.
    # (hard links: the replay reads it as a plain folder of its own data root)
    mkdir -p "$W/replay/data/build/medium/pilot-work"
    [ -d "$W/replay/data/build/medium/pilot-work/seed" ] || cp -al "$W/pilot-work/seed" "$W/replay/data/build/medium/pilot-work/seed"
    echo "growth-replay: replay of medium-adaptive-A2-to-step64 and medium-study-single $(date -u +%FT%TZ) (+$((SECONDS - t0)) s)"
    ( "${committed[@]}" python3 -m kit verify-evidence --replay runs/medium-adaptive-A2-to-step64 runs/medium-study-single \
          --work "$W/replay" >"$W/replay.log" 2>&1; echo "growth-replay: replay rc $? $(date -u +%FT%TZ) (+$((SECONDS - t0)) s)"
      tail -n 8 "$W/replay.log" ) &
    local replay=$!
    echo "growth-replay: prepare $(date -u +%FT%TZ) (+$((SECONDS - t0)) s)"
    "${committed[@]}" "${r[@]}" --part prepare || { echo "growth-replay: prepare failed"; wait $replay; return 1; }
    echo "growth-replay: cohort A's endpoint $(date -u +%FT%TZ) (+$((SECONDS - t0)) s)"
    "${committed[@]}" "${r[@]}" --part a-endpoint || true
    echo "growth-replay: growth pair r1 $(date -u +%FT%TZ) (+$((SECONDS - t0)) s)"
    df -h "$W" | tail -n 1
    "${deterministic[@]}" "${r[@]}" --part growth --replicates 1 || true
    wait $replay || true
    # 2026-12-04 (block b): these two ran as separate calls on the warm machine with the device time left
    echo "growth-replay: growth pair r2 $(date -u +%FT%TZ) (+$((SECONDS - t0)) s)"
    "${deterministic[@]}" "${r[@]}" --part growth --replicates 2 || true
    echo "growth-replay: replay of medium-study-single-r1 in its recorded mode $(date -u +%FT%TZ) (+$((SECONDS - t0)) s)"
    env -u KIT_GPU_DETERMINISTIC -u CUBLAS_WORKSPACE_CONFIG python3 -m kit verify-evidence --replay \
        runs/medium-study-single-r1 --work "$W/replay" >"$W/replay-r1.log" 2>&1 || true
    tail -n 2 "$W/replay-r1.log"
    echo "growth-replay done $(date -u +%FT%TZ) (+$((SECONDS - t0)) s)"
}

confirm_run() {  # `confirm TAG` in the foreground: the next block of the confirmatory design (docs/gpu-hosts.md)
    local t0=$SECONDS design=campaigns/medium-replicate-design.json
    replicate_setup
    # the plan is made over what is committed: the design's runs and the fresh-final scores of earlier sessions
    mkdir -p "$W/runs" "$W/finals"
    for d in runs/medium-confirm-*; do [ -d "$d" ] && [ ! -e "$W/$d" ] && cp -r "$d" "$W/runs/"; done
    [ -d campaigns/medium-confirm-finals ] && cp -rn campaigns/medium-confirm-finals/. "$W/finals/"
    echo "confirm: block of $(date -u +%FT%TZ) (+$((SECONDS - t0)) s)"
    python3 -m kit.replicate_campaign run --design "$design" --block 1 --tag "$1" --out "$W/work" \
        --seed "$W/pilot-work/seed" --runs-dir "$W/runs" --scores "$W/finals" || true
    echo "confirm done $(date -u +%FT%TZ) (+$((SECONDS - t0)) s)"
}

case "${1:-}" in
    pilot) pilot "${2:?DATE}" ;;
    pilots) pilots "${2:?DATE}" ;;
    pilots-run) pilots_run "${2:?DATE}" ;;
    probe) : "${3:?NAME CONFIG}"; shift; probe "$@" ;;
    probe-run) : "${3:?NAME CONFIG}"; shift; probes_run "$@" ;;
    start) enter_checkout; start ;;
    resume) resume "${2:?PARTS}" ;;
    resume-run) resume_run "${2:?PARTS}" ;;
    replicates) in_background replicates "${2:?DATE}" ;;
    replicates-run) replicates_run "${2:?DATE}" ;;
    growth-replay) in_background growth-replay "${2:?DATE}" ;;
    confirm) in_background confirm "${2:?TAG}" ;;
    confirm-run) confirm_run "${2:?TAG}" ;;
    growth-replay-run) growth_replay_run "${2:?DATE}" ;;
    follow) follow "${2:?SECONDS}" ;;  # reads files only: no runtime needed
    sync) sync_git ;;
    *) sed -n '2,56p' "$0"; exit 2 ;;
esac
