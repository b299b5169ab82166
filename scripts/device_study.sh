#!/usr/bin/env bash
# A study on a lent GPU machine, as one time-boxed command whose results come back as files
# (docs/development.md, "A study on a lent GPU"):
#
#   bash scripts/device_study.sh NAME SECONDS [scripts/study.py options ...]
#   e.g. bash scripts/device_study.sh early_cpu 480 --groups mlm lm --jobs 16
#
# Trains and evaluates the jobs of study NAME that docs/results/NAME does not hold yet (--continue-from),
# for at most SECONDS (then SIGTERM: finished jobs stay indexed), writes the report into docs/results
# (--publish), and packs under $OUT: published.tgz (the report, its claims table and per-seed CSVs: unpack
# at the repository's root, then regenerate with --report-only --from-csv), runs.tgz (the run folders
# without checkpoints and per-prompt files: provenance, metrics, summaries, cells) and the logs. Jobs run
# one a process (--ensembles off unless the options say otherwise: an ensemble stopped by the time limit
# leaves nothing evaluated), listed seed by seed, each evaluated as it finishes, so a stopped study keeps
# its finished jobs, mostly whole seeds; the next command continues from what was published. Exits
# non-zero if the report or the packing failed (a study stopped by its time limit is not a failure).
# Where the machine lacks this project's packages or data, carry them: .whl/ (wheels, installed into
# $TMPDIR/site) and .data/ (used as SSA_DATA_ROOT).
set -u
if [ $# -lt 2 ]; then
    echo "usage: bash scripts/device_study.sh NAME SECONDS [study.py options ...]" >&2
    exit 2
fi
name=$1 seconds=$2
shift 2
out=${OUT:?"OUT: the folder whose files come back (set by the device tool)"}
py=${PYTHON:-python3}
tmp=${TMPDIR:-/tmp}
if [ -d .whl ]; then
    $py -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$tmp/site" .whl/*.whl || exit 1
    export PYTHONPATH=$tmp/site:$PWD
fi
if [ -d .data ]; then
    export SSA_DATA_ROOT=$PWD/.data
fi
export WANDB_MODE=disabled PYTHONUNBUFFERED=1
root=${STUDY_ROOT:-$tmp/device_study/$name}
cont=()
if [ -d "docs/results/$name" ]; then
    cont=(--continue-from "docs/results/$name")
fi
t0=$(date +%s)
# SIGTERM at the limit (the study stops its workers and indexes what finished), SIGKILL 30 s later
timeout -k 30 "$seconds" $py scripts/study.py "$name" --root "$root" "${cont[@]}" --ensembles off "$@" \
    >"$out/study.log" 2>&1
rc=$?
echo "device_study: study exit $rc after $(($(date +%s) - t0)) s (124 or 130: stopped at its time limit)"
$py scripts/study.py "$name" --report-only --root "$root" "${cont[@]}" --publish >"$out/report.log" 2>&1
report=$?
echo "device_study: report exit $report"
tar czf "$out/runs.tgz" -C "$root" --exclude='*.pt' --exclude=parts --exclude=predictions.csv \
    --exclude=by_position.csv .
packed=$?
tar czf "$out/published.tgz" "docs/results/$name.md" "docs/results/${name}_claims.csv" "docs/results/$name"
packed=$((packed + $?))
grep -E "done \(|failed|seed ensemble|Error" "$out/study.log" | tail -5
echo "device_study: all in $(($(date +%s) - t0)) s"
if [ "$report" -ne 0 ] || [ "$packed" -ne 0 ]; then
    echo "device_study: the report (exit $report) or the packing failed; see $out/report.log" >&2
    exit 1
fi
exit $((rc == 124 || rc == 130 ? 0 : rc))
