# The GPU check's bookkeeping, sourced by scripts/gpu_check.sh and scripts/gpu_check_train_cpu.sh:
# rows of the summary, a time budget that caps every step, and the output contract. The device
# tool brings back at most 8 files from $OUT (16 MiB each), and a run it kills at its limit
# must still leave its table: so the logs stay in $LOG (under /tmp), the summary is written
# into $OUT_DIR row by row, and on EXIT (normal end, error, or SIGTERM/SIGINT/SIGHUP) `finish`
# adds the total row, a tail-trimmed archive of every log and copies of the logs that failing
# rows point to, never more than GPU_CHECK_MAX_FILES (8) files in all.
#
# The caller sets: LOG (logs), OUT_DIR (what comes back), BUDGET (seconds), then calls
# `gpu_check_start`.

# Per-log bytes kept in the archive (its tail: where a failure is), and the archive's ceiling.
ARCHIVE_TAIL_BYTES=${GPU_CHECK_TAIL_BYTES:-1048576}
ARCHIVE_MAX_BYTES=$(( 15 * 1024 * 1024 ))
MAX_FILES=${GPU_CHECK_MAX_FILES:-8}
FAILED_LOGS=()
CHILD=

gpu_check_start() {
  # The logs never share OUT's folder (that would bring back every log, and the archive itself).
  [ "$(realpath -m "$LOG")" = "$(realpath -m "$OUT_DIR")" ] && LOG=$LOG.logs
  rm -rf "$LOG" && mkdir -p "$LOG" "$OUT_DIR"
  SUMMARY=$OUT_DIR/summary.txt
  : > "$SUMMARY"
  T0=$(date +%s)
  trap 'finish' EXIT
  trap 'finish SIGTERM; exit 143' TERM
  trap 'finish SIGINT; exit 130' INT
  trap 'finish SIGHUP; exit 129' HUP
}

row() { printf '%-44s %-8s %s\n' "$1" "$2" "$3" | tee -a "$SUMMARY"; }
elapsed() { echo "$(( $(date +%s) - T0 )) s"; }
left() { echo $(( BUDGET - ($(date +%s) - T0) )); }
# A step's limit: its own, or what is left of the budget if that is less (never below 1).
cap() {
  local l
  l=$(left)
  [ "$l" -lt "$1" ] && set -- "$l"
  [ "$1" -lt 1 ] && set -- 1
  echo "$1"
}
# A failing row's log, to be copied into $OUT_DIR at the end (a glob names several).
failed() { local f; for f in "$@"; do [ -f "$f" ] && FAILED_LOGS+=("$f"); done; return 0; }

# Runs a command under `timeout` capped by the budget, in the background so that a signal to
# this script is handled at once (bash runs traps only between foreground commands) and the
# step is killed with it: timeout passes the signal on to its process group.
#   step SECONDS LOGFILE command...
step() {
  local t log=$2
  t=$(cap "$1"); shift 2
  if [ "$(left)" -lt 2 ]; then echo "no time left in the ${BUDGET} s budget" > "$log"; return 125; fi
  # The subshell would inherit the EXIT trap and write a total row of its own: not it.
  (trap - EXIT TERM INT HUP; exec timeout "$t" "$@" > "$log" 2>&1 < /dev/null) &
  CHILD=$!
  wait "$CHILD"
  local rc=$?
  CHILD=
  return "$rc"
}

# The row of a step that did not succeed: skip when the budget left it no time (125), else FAIL
# naming its log and how it ended; the log is then one to bring back.
fail_row() {  # name, log, exit status
  case $3 in
    125) row "$1" "skip" "no time left in the ${BUDGET} s budget" ;;
    124) row "$1" "FAIL" "$(basename "$2"): timed out (its limit or the budget's end, at $(elapsed))"; failed "$2" ;;
    *) row "$1" "FAIL" "$(basename "$2"): exit $3"; failed "$2" ;;
  esac
}

# A test row: pass with gtest's counts, or fail_row.
test_row() {  # name, log, command...
  local name=$1 log=$2 rc; shift 2
  step 240 "$log" "$@"
  rc=$?
  if [ "$rc" = 0 ]; then
    row "$name" "pass" "$(grep -c '\[       OK \].*cuda' "$log") cuda cases ok, $(grep -c '\[       OK \]' "$log") ok in all, $(grep -c SKIPPED "$log") skip lines"
  else
    fail_row "$name" "$log" "$rc"
  fi
}

# The logs, each cut to its last ARCHIVE_TAIL_BYTES, as one .tar.gz in $OUT_DIR; halves the tail
# until the archive fits under ARCHIVE_MAX_BYTES.
archive_logs() {
  local tail=$ARCHIVE_TAIL_BYTES stage=$LOG.archive f rel
  while :; do
    rm -rf "$stage" && mkdir -p "$stage"
    (cd "$LOG" && find . -type f -size -200M) | while read -r rel; do
      mkdir -p "$stage/$(dirname "$rel")"
      tail -c "$tail" "$LOG/$rel" > "$stage/$rel"
    done
    tar -czf "$OUT_DIR/logs.tar.gz" -C "$stage" . 2> /dev/null
    f=$(stat -c %s "$OUT_DIR/logs.tar.gz")
    [ "$f" -lt "$ARCHIVE_MAX_BYTES" ] || [ "$tail" -lt 4096 ] && break
    tail=$(( tail / 2 ))
  done
  rm -rf "$stage"
  echo "$tail"
}

# The end of every run: stops the running step, writes the total row, the archive and the
# failing rows' logs (tail-trimmed), at most MAX_FILES files in $OUT_DIR.
finish() {  # [why: the signal that ended the run]
  local why=${1:-} status=$? tail room n=0 f
  trap - EXIT TERM INT HUP
  if [ -n "$CHILD" ]; then kill -TERM "$CHILD" 2> /dev/null; wait "$CHILD" 2> /dev/null; fi
  tail=$(archive_logs)
  room=$(( MAX_FILES - 2 ))
  for f in $(printf '%s\n' "${FAILED_LOGS[@]}" | awk '!seen[$0]++'); do
    [ "$n" -lt "$room" ] || break
    tail -c "$ARCHIVE_TAIL_BYTES" "$f" > "$OUT_DIR/failed_$(basename "$f")"
    n=$(( n + 1 ))
  done
  row "total" "${why:+killed}" "$(elapsed)${why:+, ended by $why}; $OUT_DIR: summary.txt, logs.tar.gz (logs cut to their last $tail bytes), $n of ${#FAILED_LOGS[@]} failing logs"
  [ -z "$why" ] && echo "== summary ($SUMMARY)" && cat "$SUMMARY"
  return "$status"
}
