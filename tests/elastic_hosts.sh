#!/usr/bin/env bash
# Elastic training on the network-namespace hosts of scripts/netns_hosts.sh (2 or 3 "hosts" of
# 2 slots), under `tessera run`'s supervisor (docs/reliability.md, "Elastic training"):
#   kill       rank 3 (host h1) of a 2x2 Python job dies (SIGKILL) after commit 4: the job
#              finishes on h0's 2 ranks, h1 is named and in cool-down, every sample of each epoch
#              was processed once, and the model equals, bit for bit, a reference that ran 4
#              ranks to commit 4 and 2 ranks from there; the time from the kill to the first
#              step after the restart is printed
#   same       3 hosts, --max-np 4: rank 3 (h1) dies, generation 1 runs 4 ranks on h0 and h2, and
#              the model equals an uninterrupted 4-rank run's bit for bit
#   grow       discovery first shows 1 slot: the supervisor says it waits for --min-np 2; then
#              h0 alone (2 slots): the job starts; h1 appears in the discovery output mid-run:
#              the next generation runs on 4 ranks from the commit that saw the notice
#   below      --min-np 4 and a rank of h1 dies: the job ends within 30 s with the line saying
#              why, and no process of it is left
#   error      rank 1 (host h0) raises an exception after commit 3: its own record names it, h0
#              is set aside, and the job finishes on h1 from commit 3
#   restarts   a rank dies in every generation: --max-restarts 1 ends it with the count and the
#              last failure
#   supervisor the supervisor is killed (SIGKILL) mid-run: no rank is left; then one is sent
#              SIGTERM: it ends the job, says so and exits 3, no rank left
#   train      the kill test through `tessera train --elastic` (checkpoints every 3 steps)
# Usage: tests/elastic_hosts.sh TESSERA_BINARY OUT_DIR [SCENARIO...]    (exit 77: no namespaces)
set -uo pipefail
tessera=$(realpath "$1") out=$2
shift 2
scenarios=${*:-kill same grow below error restarts supervisor train}
here=$(cd "$(dirname "$0")/.." && pwd)
# The ranks the references start without `tessera run` import the build tree's package.
export PYTHONPATH=$(cd "$(dirname "$tessera")/../../python" && pwd)${PYTHONPATH:+:$PYTHONPATH}
PY=${TEST_PYTHON:-/usr/bin/python3}
rm -rf "$out" && mkdir -p "$out"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
export TESSERA_FUSION_THRESHOLD=0 TESSERA_HEARTBEAT_TIMEOUT=5 TESSERA_TIMEOUT=120
hosts="$here/scripts/netns_hosts.sh"
train_py="$here/tests/elastic_train.py"
fail() { echo "FAIL ($scenario): $*"; [[ -n ${log:-} && -f $log ]] && tail -40 "$log"; exit 1; }
discovery() {  # a discovery script printing the file $1 (the test edits it)
  printf '#!/bin/sh\ncat %s\n' "$1" > "$1.sh" && chmod +x "$1.sh" && echo "$1.sh"
}
# tessera run's supervisor with the elastic options, on N namespace hosts.
elastic_run() {
  local n=$1
  shift
  timeout 300 "$hosts" --hosts "$n" --command -- "$tessera" run "$@"
}
same_model() {
  "$PY" - "$1" "$2" << 'EOF'
import sys, torch
a, b = (torch.load(p) for p in sys.argv[1:3])
diff = max((a[k] - b[k]).abs().max().item() for k in a)
same = all(torch.equal(a[k], b[k]) for k in a) and a.keys() == b.keys()
print(f"largest difference {diff:.3g}" + (" (bit for bit)" if same else ""))
sys.exit(0 if same else 1)
EOF
}
no_process_left() {  # $1: a word of the job's command lines
  for _ in $(seq 1 30); do
    pgrep -f -- "$1" > /dev/null || return 0
    sleep 0.5
  done
  pgrep -af -- "$1"
  return 1
}

for scenario in $scenarios; do
  dir=$out/$scenario log=$out/$scenario/log
  mkdir -p "$dir"
  case $scenario in
  kill)
    printf 'h0:2\nh1:2\n' > "$dir/hosts"
    elastic_run 2 --min-np 2 --max-np 4 --max-restarts 3 --blacklist-cooldown-range 60 120 \
      --host-discovery-script "$(discovery "$dir/hosts")" --elastic-dir "$dir/elastic" \
      "$PY" "$train_py" "$dir/model.pt" --kill-rank 3 --kill-at-commit 4 > "$log" 2>&1
    rc=$?
    [[ $rc -eq 77 ]] && { cat "$log"; exit 77; }
    [[ $rc -eq 0 ]] || fail "exit $rc"
    grep -q "host h1 failed: in cool-down for" "$log" || fail "h1 not named as in cool-down"
    grep -q "lost rank 3 on h1" "$log" || fail "the lost rank is not named"
    grep -q "generation 1: 2 ranks on h0:2" "$log" || fail "no restart on h0's 2 ranks"
    [[ $(grep -c "samples processed exactly once" "$log") -eq 2 ]] || fail "a sample not once"
    restored=$(grep -o "restored commit [0-9]*" "$log" | grep -o "[0-9]*$")
    [[ -n $restored ]] || fail "no restore"
    # The reference: 4 ranks on the 2 hosts to that commit, 2 ranks on one host from there.
    ref=$dir/reference
    mkdir -p "$ref"
    TESSERA_ELASTIC_DIR=$ref "$hosts" --hosts 2 --slots 2 -- -np 4 -x OMP_NUM_THREADS \
      -x TESSERA_FUSION_THRESHOLD -x TESSERA_ELASTIC_DIR -x PYTHONPATH "$PY" "$train_py" \
      "$ref/unused.pt" --stop-at-commit "$restored" > "$ref/log" 2>&1 || fail "reference 1 failed"
    TESSERA_ELASTIC_DIR=$ref TESSERA_ELASTIC_GENERATION=1 mpirun --oversubscribe --bind-to none \
      -np 2 "$PY" "$train_py" "$ref/model.pt" >> "$ref/log" 2>&1 || fail "reference 2 failed"
    compared=$(same_model "$dir/model.pt" "$ref/model.pt") ||
      fail "the model differs from the reference: $compared"
    echo "kill: restored commit $restored at 2 ranks; against the reference: $compared"
    killed=$(grep -o "kills itself at [0-9.]*" "$log" | grep -o "[0-9.]*$")
    first=$(grep "ranks 2$" "$log" | head -1 | grep -o "step-time [0-9.]*" | grep -o "[0-9.]*$")
    took=$("$PY" -c "print(f'{$first - $killed:.1f}')")
    echo "kill: time to recover (kill to the first step after the restart): $took s"
    ;;
  same)
    printf 'h0:2\nh1:2\nh2:2\n' > "$dir/hosts"
    elastic_run 3 --min-np 2 --max-np 4 --host-discovery-script "$(discovery "$dir/hosts")" \
      --elastic-dir "$dir/elastic" "$PY" "$train_py" "$dir/model.pt" --kill-rank 3 \
      --kill-at-commit 4 > "$log" 2>&1 || fail "exit $?"
    grep -q "generation 1: 4 ranks on h0:2, h2:2" "$log" || fail "no restart on h0 and h2"
    ref=$dir/reference
    mkdir -p "$ref"
    "$hosts" --hosts 2 --slots 2 -- -np 4 -x OMP_NUM_THREADS -x TESSERA_FUSION_THRESHOLD \
      -x PYTHONPATH "$PY" "$train_py" "$ref/model.pt" > "$ref/log" 2>&1 || fail "reference failed"
    compared=$(same_model "$dir/model.pt" "$ref/model.pt") ||
      fail "the model differs from the uninterrupted run: $compared"
    echo "same: $(grep -o "restored commit [0-9]*" "$log") at 4 ranks on h0 and h2;" \
      "against the uninterrupted 4-rank run: $compared"
    ;;
  grow)
    printf 'h0:1\n' > "$dir/hosts"
    elastic_run 2 --min-np 2 --max-np 4 --host-discovery-script "$(discovery "$dir/hosts")" \
      --elastic-dir "$dir/elastic" "$PY" "$train_py" "$dir/model.pt" --step-delay 0.3 \
      > "$log" 2>&1 &
    job=$!
    for _ in $(seq 1 60); do grep -q "waiting for 2 slots" "$log" && break; sleep 0.5; done
    grep -q "waiting for 2 slots (--min-np): 1 usable on h0" "$log" || fail "no line saying so"
    grep -q "generation 0" "$log" && fail "started below --min-np"
    printf 'h0:2\n' > "$dir/hosts"
    for _ in $(seq 1 120); do grep -q "^commit 3 " "$log" && break; sleep 0.5; done
    printf 'h0:2\nh1:2\n' > "$dir/hosts"
    wait $job || fail "exit $?"
    grep -q "generation 1: 4 ranks on h0:2, h1:2" "$log" || fail "the new host was not used"
    last=$(grep -o "leaving at commit [0-9]*" "$log" | grep -o "[0-9]*$")
    restored=$(grep -o "restored commit [0-9]*" "$log" | grep -o "[0-9]*$")
    [[ -n $last && $last == "$restored" ]] ||
      fail "generation 1 restored commit '$restored', generation 0 left at '$last'"
    [[ $(grep -c "samples processed exactly once" "$log") -eq 2 ]] || fail "a sample not once"
    echo "grow: h1 added after commit 3; generation 0 left at commit $last," \
      "generation 1 ran 4 ranks from it"
    ;;
  below)
    printf 'h0:2\nh1:2\n' > "$dir/hosts"
    start=$(date +%s%N)
    elastic_run 2 --min-np 4 --max-np 4 --elastic-timeout 5 \
      --host-discovery-script "$(discovery "$dir/hosts")" --elastic-dir "$dir/elastic" \
      "$PY" "$train_py" "$dir/model.pt" --kill-rank 3 --kill-at-commit 2 > "$log" 2>&1
    rc=$?
    killed=$(grep -o "kills itself at [0-9.]*" "$log" | grep -o "[0-9.]*$")
    ended=$(date +%s.%N)
    [[ $rc -eq 3 ]] || fail "exit $rc, not the supervisor's 3"
    grep -q "stopped: fewer than --min-np 4 slots (2 usable) after waiting 5 s" "$log" ||
      fail "no line saying why"
    no_process_left "$train_py" || fail "processes left"
    took=$("$PY" -c "print(f'{$ended - $killed:.1f}')")
    "$PY" -c "import sys; sys.exit(0 if $took < 30 else 1)" || fail "took $took s"
    echo "below: ended $took s after the kill: $(grep -o 'stopped: fewer.*' "$log")"
    ;;
  error)
    printf 'h0:2\nh1:2\n' > "$dir/hosts"
    elastic_run 2 --min-np 2 --max-np 4 --host-discovery-script "$(discovery "$dir/hosts")" \
      --elastic-dir "$dir/elastic" "$PY" "$train_py" "$dir/model.pt" --raise-rank 1 \
      --raise-at-commit 3 > "$log" 2>&1 || fail "exit $?"
    cause="rank 1 on h0 failed after step 3: rank 1 failed: ValueError: rank 1: a planted bug"
    line=$(grep -o "generation 0 failed (mpirun exit [0-9]*): $cause at commit 3" "$log") ||
      fail "the failure is not the exception of rank 1"
    grep -q "generation 1: 2 ranks on h1:2" "$log" || fail "no restart on h1"
    grep -q "restored commit 3" "$log" || fail "not from commit 3"
    echo "error: $line; generation 1 on h1 from commit 3"
    ;;
  restarts)
    printf 'h0:2\nh1:2\n' > "$dir/hosts"
    elastic_run 2 --min-np 2 --max-np 4 --max-restarts 1 --blacklist-cooldown-range 1 2 \
      --host-discovery-script "$(discovery "$dir/hosts")" --elastic-dir "$dir/elastic" \
      "$PY" "$train_py" "$dir/model.pt" --kill-rank -1 --kill-at-commit 2 \
      --kill-every-generation > "$log" 2>&1
    rc=$?
    [[ $rc -eq 3 ]] || fail "exit $rc, not the supervisor's 3"
    line=$(grep -o "stopped: 1 restarts used of --max-restarts 1; last failure: .*" "$log") ||
      fail "no line with the count and the last failure"
    echo "restarts: $line"
    ;;
  supervisor)
    printf 'h0:2\nh1:2\n' > "$dir/hosts"
    elastic_run 2 --min-np 2 --max-np 4 --host-discovery-script "$(discovery "$dir/hosts")" \
      --elastic-dir "$dir/elastic" "$PY" "$train_py" "$dir/model.pt" --step-delay 0.3 \
      --epochs 50 > "$log" 2>&1 &
    for _ in $(seq 1 120); do grep -q "^commit 2 " "$log" && break; sleep 0.5; done
    sup=$(pgrep -f -- "tessera/run.py .*--elastic-dir $dir/elastic" | head -1)
    [[ -n $sup ]] || fail "no supervisor found"
    kill -9 "$sup"
    killed=$(date +%s%N)
    no_process_left "$dir/model.pt" || fail "ranks outlived the supervisor"
    gone=$((($(date +%s%N) - killed) / 1000000))
    wait
    # The hosts' namespaces emptied by themselves (netns_hosts.sh kills what is left after 20 s).
    grep -q "processes still in the hosts' namespaces" "$log" && fail "processes were left"
    echo "supervisor: killed (SIGKILL) at commit 2; mpirun and every rank gone ${gone} ms later"
    log=$dir/term.log
    elastic_run 2 --min-np 2 --max-np 4 --host-discovery-script "$(discovery "$dir/hosts")" \
      --elastic-dir "$dir/term" "$PY" "$train_py" "$dir/term.pt" --step-delay 0.3 \
      --epochs 50 > "$log" 2>&1 &
    job=$!
    for _ in $(seq 1 120); do grep -q "^commit 2 " "$log" && break; sleep 0.5; done
    sup=$(pgrep -f -- "tessera/run.py .*--elastic-dir $dir/term" | head -1)
    [[ -n $sup ]] || fail "no supervisor found"
    kill -TERM "$sup"
    no_process_left "$dir/term.pt" || fail "ranks outlived the supervisor's SIGTERM"
    wait $job
    rc=$?
    [[ $rc -eq 3 ]] || fail "exit $rc after SIGTERM, not the supervisor's 3"
    grep -q "stopped by a signal; generation 0 ended" "$log" || fail "no line saying so"
    grep -q "generation 1" "$log" && fail "relaunched after SIGTERM"
    echo "supervisor: SIGTERM at commit 2: the job ended, exit 3, no rank left"
    ;;
  train)
    printf 'h0:2\nh1:2\n' > "$dir/hosts"
    args=(train --model resnet18 --image-size 32 --batch-size 4 --steps 12 --train-size 256
          --val-size 16 --log-every 1 --seed 11 --precision f64)
    elastic_run 2 --min-np 2 --max-np 4 --host-discovery-script "$(discovery "$dir/hosts")" \
      --elastic-dir "$dir/elastic" "$tessera" "${args[@]}" --elastic \
      --checkpoint "$dir/ckpt.pt" --checkpoint-every 3 > "$log" 2>&1 &
    job=$!
    # Kill rank 3 (on h1) once the first checkpoint is written.
    for _ in $(seq 1 240); do [[ -f $dir/ckpt.pt ]] && break; sleep 0.5; done
    victim=""
    for pid in $(pgrep -f -- "--checkpoint $dir/ckpt.pt"); do
      tr '\0' '\n' < "/proc/$pid/environ" 2> /dev/null | grep -qx "OMPI_COMM_WORLD_RANK=3" &&
        victim=$pid
    done
    [[ -n $victim ]] || fail "rank 3 not found"
    kill -9 "$victim"
    wait $job || fail "exit $?"
    grep -q "host h1 failed" "$log" || fail "h1 not named"
    step=$(grep -o "resumed from .* at step [0-9]*" "$log" | grep -o "[0-9]*$")
    [[ -n $step ]] || fail "no resume"
    ref=$dir/reference
    mkdir -p "$ref"
    "$hosts" --hosts 2 --slots 2 -- -np 4 -x OMP_NUM_THREADS -x TESSERA_FUSION_THRESHOLD \
      "$tessera" "${args[@]}" --stop-at "$step" --checkpoint "$ref/a.pt" > "$ref/log" 2>&1 ||
      fail "reference 1 failed"
    mpirun --oversubscribe --bind-to none -np 2 "$tessera" "${args[@]}" --resume "$ref/a.pt" \
      --checkpoint "$ref/b.pt" >> "$ref/log" 2>&1 || fail "reference 2 failed"
    cmp -s "$dir/ckpt.pt" "$ref/b.pt" || fail "the checkpoint differs from the reference"
    echo "train: resumed at step $step on 2 ranks; the final checkpoint equals the" \
      "reference's bit for bit"
    ;;
  *) echo "unknown scenario $scenario"; exit 2 ;;
  esac
done
echo "elastic: every scenario passed"
