#!/usr/bin/env bash
# `tessera run` as a Horovod user runs horovodrun (issue 31): a host file, --mpi-args with
# spaces, the user's own variable reaching every rank, HOROVOD_FUSION_THRESHOLD mapped to
# tessera's setting, and an unknown HOROVOD_* named once in a warning.
# The launcher module itself (what `tessera run` hands over to), so it needs no training build.
set -uo pipefail
DIR=$1
mkdir -p "$DIR"
PY=${TEST_PYTHON:-/usr/bin/python3}
run() { "$PY" -m tessera.run "$@"; }
printf '# two slots here\nlocalhost slots=2\n' > "$DIR/hosts"
fail() { echo "FAIL: $1"; cat "$DIR/run.log"; exit 1; }
# Each rank's line in one write: print() of several items under PYTHONUNBUFFERED writes them
# one by one, and two ranks' words interleaved ("rankrank 0 sees ...") once under load.
MY_PROJECT_VAR="a value with spaces" HOROVOD_FUSION_THRESHOLD=1048576 HOROVOD_NO_SUCH_KNOB=1 \
  timeout 120 "$PY" -m tessera.run -np 2 --hostfile "$DIR/hosts" \
    --mpi-args "--mca btl self,vader,tcp --oversubscribe" --timeline-filename "$DIR/tl.json" \
    "$PY" -c 'import os, sys; e = os.environ; sys.stdout.write(" ".join(["rank",
      e["OMPI_COMM_WORLD_RANK"], "sees", e["MY_PROJECT_VAR"], "|", e["TESSERA_FUSION_THRESHOLD"],
      "|", e["TESSERA_TIMELINE"]]) + "\n")' > "$DIR/run.log" 2>&1
rc=$?
[ "$rc" -eq 0 ] || fail "tessera run exited with $rc"
for r in 0 1; do
  grep -q "rank $r sees a value with spaces | 1048576 | $DIR/tl.json" "$DIR/run.log" ||
    fail "rank $r did not get the user's variable and the mapped settings"
done
[ "$(grep -c 'HOROVOD_NO_SUCH_KNOB' "$DIR/run.log")" -ge 1 ] || fail "no warning naming HOROVOD_NO_SUCH_KNOB"
grep -q "warning: tessera has no equivalent of HOROVOD_NO_SUCH_KNOB" "$DIR/run.log" ||
  fail "the warning does not name the ignored knob"
# An option's value with a space is never taken for the program.
run -np 1 --mpi-args "--mca btl self" > "$DIR/noprog.log" 2>&1
grep -q "no command to run" "$DIR/noprog.log" || { cat "$DIR/noprog.log"; exit 1; }
# HOROVOD_AUTOTUNE=1 tunes under Python as under tessera train: the DistributedOptimizer's
# steps drive the core's autotuner, which logs what it tried and says what it kept.
cat > "$DIR/tune.py" <<'PY'
import torch
import tessera.torch as hvd
hvd.init()
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4))
opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.01),
                               named_parameters=model.named_parameters())
for step in range(60):
    opt.zero_grad()
    model(torch.randn(8, 64)).sum().backward()
    opt.step()
hvd.shutdown()
PY
TESSERA_AUTOTUNE_WARMUP_STEPS=1 TESSERA_AUTOTUNE_STEPS_PER_SAMPLE=1 TESSERA_AUTOTUNE_SAMPLES=1 \
  TESSERA_AUTOTUNE_BAYES_TRIALS=1 TESSERA_AUTOTUNE_BOUNDS="algorithm=auto,ring" \
  TESSERA_AUTOTUNE_CONFIG="$DIR/tuned.json" HOROVOD_AUTOTUNE=1 HOROVOD_AUTOTUNE_LOG="$DIR/tune.jsonl" \
  timeout 300 "$PY" -m tessera.run -np 2 --mpi-args "--oversubscribe" "$PY" "$DIR/tune.py" \
  > "$DIR/tune.log" 2>&1 || { echo "FAIL: the autotuned run failed"; cat "$DIR/tune.log"; exit 1; }
grep -q '"done":true' "$DIR/tune.jsonl" 2>/dev/null ||
  { echo "FAIL: the autotuner did not finish under Python"; cat "$DIR/tune.log"; exit 1; }
echo "tessera run: host file, --mpi-args, forwarding, HOROVOD_* mapping and autotuning work"
