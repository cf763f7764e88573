#!/usr/bin/env bash
# Dead-rank trials (docs/reliability.md): run `tessera train` on 4 ranks, kill one rank at a
# random moment, and check that every other rank ends (non-zero exit, within 30 s) with a line
# that names the dead rank and what it had in flight, that no process is left, and that
# `--resume` from the last checkpoint starts from that checkpoint's step and ends on the same
# bits as an uninterrupted run.
#
# Usage: scripts/kill_trials.sh [--trials N] [--signal KILL|STOP] [--seed S] [--np N]
#                               [--tessera PATH] [--out DIR]
#   KILL (kill -9): the launcher (mpirun) sees the death and terminates the others; each names
#                   the ranks of its host that died.
#   STOP (kill -STOP): the rank hangs without dying, so the launcher sees nothing; the heartbeat
#                   (TESSERA_HEARTBEAT_TIMEOUT, 10 s) finds it and every rank ends naming it.
# Prints one line per trial and a summary; exits non-zero if any trial failed a check.
set -uo pipefail

trials=20
signal=KILL
seed=$RANDOM
np=4
here=$(cd "$(dirname "$0")" && pwd)
tessera=$here/../build/apps/tessera/tessera
out=/tmp/tessera_kill_trials
while [[ $# -gt 0 ]]; do
  case $1 in
    --trials) trials=$2; shift 2 ;;
    --signal) signal=$2; shift 2 ;;
    --seed) seed=$2; shift 2 ;;
    --np) np=$2; shift 2 ;;
    --tessera) tessera=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    *) echo "kill_trials.sh: unknown argument '$1' (see the usage at the top of the script)" >&2
       exit 2 ;;
  esac
done
case $signal in KILL|STOP) ;; *) echo "kill_trials.sh: --signal is KILL or STOP, not '$signal'" >&2; exit 2 ;; esac
RANDOM=$seed
mkdir -p "$out"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_btl=${OMPI_MCA_btl:-self,vader,tcp} OMPI_MCA_pml=${OMPI_MCA_pml:-ob1}
export OMPI_MCA_mtl=${OMPI_MCA_mtl:-^ofi} OMP_NUM_THREADS=1
# Each gradient reduced alone: with 4 ranks, fusion groups depend on arrival timing and with
# them the summation order, so only this setting promises the same bits (docs/training.md).
export TESSERA_FUSION_THRESHOLD=0

steps=40
checkpoint_every=5
train_args=(train --model resnet18 --image-size 32 --batch-size 4 --steps "$steps"
            --train-size 512 --val-size 16 --log-every 10 --checkpoint-every "$checkpoint_every"
            --seed 7)

now() { date +%s.%N; }
elapsed() { python3 -c "print(f'{$2 - $1:.2f}')"; }

# The uninterrupted run: its final checkpoint is what every resumed run must equal.
t0=$(now)
mpirun --oversubscribe --bind-to none -np "$np" "$tessera" "${train_args[@]}" \
  --checkpoint "$out/reference.pt" > "$out/reference.log" 2>&1 || {
  echo "the uninterrupted run failed:"; tail -20 "$out/reference.log"; exit 1; }
run_s=$(elapsed "$t0" "$(now)")
echo "uninterrupted run: ${run_s} s ($steps steps, $np ranks); killing one rank of $trials runs with SIG$signal (seed $seed)"
printf '%-5s %-4s %-7s %-9s %-7s %-5s %-9s %-7s %-12s %s\n' trial rank "kill at" "ended in" "exit" \
  named orphans "resumed" "bitwise" verdict

clean=0; matched=0; resumed_n=0; started_n=0; failed=0; before=0
times=()
attempt=0
for ((t = 1; t <= trials; ++t)); do
  attempt=$((attempt + 1))
  dir=$out/trial$t
  rm -rf "$dir"; mkdir -p "$dir"
  victim=$((RANDOM % np))
  # A moment anywhere from start-up to the final evaluation and checkpoint.
  delay=$(python3 -c "import random; random.seed($seed * 1000 + $attempt); print(f'{random.uniform(1.0, 0.95 * $run_s):.2f}')")
  mpirun --oversubscribe --bind-to none -np "$np" "$tessera" "${train_args[@]}" \
    --checkpoint "$dir/ck.pt" > "$dir/killed.log" 2>&1 &
  launcher=$!
  sleep "$delay"
  # The ranks are the launcher's children; each knows its rank from the environment.
  pids=()
  victim_pid=
  for p in $(pgrep -P "$launcher"); do
    r=$( (tr '\0' '\n' < "/proc/$p/environ") 2>/dev/null | sed -n 's/^OMPI_COMM_WORLD_RANK=//p')
    [[ -n $r ]] || continue
    pids+=("$p")
    [[ $r == "$victim" ]] && victim_pid=$p
  done
  if [[ -z $victim_pid ]]; then
    wait "$launcher"
    echo "$t: the run ended before the kill at ${delay} s; trying again with another moment"
    before=$((before + 1))
    t=$((t - 1))
    continue
  fi
  kill -s "$signal" "$victim_pid"
  t_kill=$(now)
  # Ended: the launcher has exited and no rank's process is left (a zombie counts as gone).
  alive() {
    local st
    st=$(sed -n 's/^[0-9]* (.*) \([A-Z]\).*/\1/p' "/proc/$1/stat" 2>/dev/null)
    [[ -n $st && $st != Z && $st != X ]]
  }
  ended=
  for ((i = 0; i < 1200; ++i)); do  # 60 s
    left=0
    kill -0 "$launcher" 2>/dev/null && left=1
    for p in "${pids[@]}"; do alive "$p" && left=1; done
    if [[ $left -eq 0 ]]; then ended=$(now); break; fi
    sleep 0.05
  done
  orphans=0
  if [[ -z $ended ]]; then
    ended_s=never
    for p in "${pids[@]}"; do alive "$p" && orphans=$((orphans + 1)); done
    kill -9 "$launcher" "${pids[@]}" 2>/dev/null
  else
    ended_s=$(elapsed "$t_kill" "$ended")
  fi
  wait "$launcher"; rc=$?
  # Rank 0 printed its summary: training had ended before the kill, and the others may have
  # left already with nothing in flight to name. Not a trial of a death during training.
  if grep -q '^done: ' "$dir/killed.log"; then
    echo "$t: the kill at ${delay} s landed after training had ended; trying again with another moment"
    before=$((before + 1))
    t=$((t - 1))
    continue
  fi
  # Every other rank's line names the dead rank: "rank V on this host has died" (KILL) or
  # "rank V (host ...) stopped answering" (STOP), and says what was in flight.
  named=0
  for ((r = 0; r < np; ++r)); do
    [[ $r == "$victim" ]] && continue
    line=$(grep "^tessera: rank $r " "$dir/killed.log" | head -1)
    if [[ $line == *"In flight here: "* ]] &&
       { grep -Eq "ranks? ([0-9]+, )*([0-9]+ and )?$victim( and [0-9]+)?(, [0-9]+)* on this host ha(s|ve) died" <<<"$line" ||
         [[ $line == *"rank $victim (host "*") stopped answering"* ]]; }; then
      named=$((named + 1))
    fi
  done
  # Resume from the checkpoint the killed run left (or from the start if it wrote none).
  from=start
  resume_args=()
  [[ -f $dir/ck.pt ]] && resume_args=(--resume "$dir/ck.pt")
  mpirun --oversubscribe --bind-to none -np "$np" "$tessera" "${train_args[@]}" \
    "${resume_args[@]}" --checkpoint "$dir/ck.pt" > "$dir/resumed.log" 2>&1
  resume_rc=$?
  # A checkpoint existed: the run must say it resumed from it, at a step the checkpoints are
  # written at (a resume that ignored the file and trained from step 0 would end on the same
  # bits, since training is deterministic, so the bitwise check alone cannot tell).
  resumed_ok=1
  if [[ ${#resume_args[@]} -gt 0 ]]; then
    from=$(sed -n 's/^resumed from .* at step \([0-9]*\)$/\1/p' "$dir/resumed.log" | head -1)
    if [[ -z $from ]] || ((from < checkpoint_every || from % checkpoint_every != 0 || from > steps)); then
      resumed_ok=0
      from=${from:-none}
    fi
    resumed_n=$((resumed_n + 1))
    started_n=$((started_n + resumed_ok))
  fi
  bitwise=no
  if [[ $resume_rc -eq 0 ]] && cmp -s "$dir/ck.pt" "$out/reference.pt"; then
    bitwise=yes; matched=$((matched + 1))
  fi
  verdict=ok
  if [[ $rc -ne 0 && $ended_s != never && $orphans -eq 0 && $named -eq $((np - 1)) ]] &&
     python3 -c "import sys; sys.exit(0 if $ended_s <= 30 else 1)"; then
    clean=$((clean + 1)); times+=("$ended_s")
  else
    verdict=NOT-CLEAN; failed=1
  fi
  [[ $bitwise == yes ]] || { verdict="$verdict,NO-MATCH"; failed=1; }
  [[ $resumed_ok == 1 ]] || { verdict="$verdict,NOT-RESUMED"; failed=1; }
  printf '%-5s %-4s %-7s %-9s %-7s %-5s %-9s %-7s %-12s %s\n' "$t" "$victim" "${delay}s" \
    "${ended_s}s" "$rc" "$named/$((np - 1))" "$orphans" "$from" "$bitwise" "$verdict"
done
counted=$trials
summary=$(python3 -c "
import statistics
t = [float(x) for x in '${times[*]}'.split()]
print(f'median {statistics.median(t):.2f} s, max {max(t):.2f} s' if t else 'no clean endings')")
echo "summary: SIG$signal, $counted trials ($before more ended before their kill and were run again): $clean ended cleanly (every other rank named rank and" \
     "in-flight work, non-zero exit, no process left, within 30 s; $summary);" \
     "$matched of $counted resumed runs ($resumed_n from a checkpoint, $started_n of them starting" \
     "at its step) ended bit for bit on the uninterrupted run's checkpoint"
exit $failed
