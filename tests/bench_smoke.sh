#!/usr/bin/env bash
# `tessera bench` end to end at 2 ranks: every collective gives #wrong 0 beside MPI, the
# calibration writes a cost table that auto then reads, and bad input is refused with a message
# that says what is accepted. Usage: bench_smoke.sh PATH/TO/tessera WORKDIR
set -uo pipefail
tessera=$1
work=$2
mkdir -p "$work"
run() { mpirun --oversubscribe --bind-to none -np 2 "$tessera" "$@"; }
fail=0
check() {  # check NAME EXPECTED_RC PATTERN OUTPUT RC
  if [[ $5 -ne $2 ]] || ! grep -q -- "$3" <<<"$4"; then
    echo "FAIL $1: exit $5 (want $2), output lacks '$3':"
    echo "$4" | tail -20
    fail=1
  else
    echo "ok   $1"
  fi
}

for c in allreduce allgather broadcast reduce-scatter alltoall; do
  out=$(run bench "$c" -b 64 -e 256K -f 8 -n 3 -w 1 --algo all --json "$work/$c.json" 2>&1); rc=$?
  check "bench $c" 0 "#wrong total: 0" "$out" $rc
  grep -q '"rows"' "$work/$c.json" || { echo "FAIL bench $c: no JSON rows"; fail=1; }
done
out=$(run bench allreduce -d bf16 -o avg -b 64 -e 64K -f 16 -n 2 --algo ring,rhd 2>&1); rc=$?
check "bench allreduce bf16 avg" 0 "#wrong total: 0" "$out" $rc

# ResNet-50 as torchvision defines it: 161 parameter tensors, 25,557,032 parameters.
out=$(run bench engine -n 2 -w 1 --json "$work/engine.json" 2>&1); rc=$?
check "bench engine" 0 "161 tensors, 25557032 parameters" "$out" $rc
grep -q '"control_ms_per_step"' "$work/engine.json" || { echo "FAIL bench engine: no JSON"; fail=1; }
# Both ranks share this host, so the critical-path measure is there; the median script reads it.
check "bench engine critical path" 0 "until the first rank has the agreement" "$out" $rc
out=$(python3 "$(dirname "$0")/../scripts/bench_engine_median.py" "$work/engine.json" 2>&1); rc=$?
check "bench_engine_median.py" 0 "critical, first agreed" "$out" $rc
out=$(run bench allreduce -d i32 -o band -b 64 -e 64K -f 16 -n 2 --algo all 2>&1); rc=$?
check "bench allreduce i32 band" 0 "#wrong total: 0" "$out" $rc
out=$(run bench allreduce -d f32 -o bor -n 1 2>&1); rc=$?
check "bor on f32 refused" 2 "bitwise and not defined on floating dtype f32" "$out" $rc

# Device buffers on the test device (the same table a GPU fills): every collective exact,
# the ceilings and the fusion figure printed; a GPU asked for where there is none, refused.
for c in allreduce allgather broadcast reduce-scatter alltoall; do
  out=$(run bench "$c" --device fake -b 4K -e 256K -f 8 -n 2 -w 1 2>&1); rc=$?
  check "bench $c --device fake" 0 "#wrong total: 0" "$out" $rc
done
check "bench --device fake: ceilings" 0 "ceilings while every rank copies: device copy" "$out" $rc
out=$(run bench allreduce --device fake -d bf16 -o avg -e 64K -f 16 -n 2 2>&1); rc=$?
check "bench --device fake: fusion" 0 "fusion of ResNet-50's 161 gradients" "$out" $rc
check "bench --device fake bf16 avg" 0 "#wrong total: 0" "$out" $rc
if ! nvidia-smi > /dev/null 2>&1; then
  out=$(run bench allreduce --device cuda -n 1 2>&1); rc=$?
  check "bench --device cuda without a GPU" 2 "--device cuda: no usable GPU here" "$out" $rc
fi
out=$(run bench allreduce --device fake --backend nccl -n 1 2>&1); rc=$?
check "bench --backend nccl on the fake device" 2 "device backend nccl cannot run here" "$out" $rc

out=$(run bench allreduce --calibrate -e 1M -n 3 -w 1 --table "$work/table.json" 2>&1); rc=$?
check "calibrate" 0 "wrote $work/table.json" "$out" $rc
grep -q '"measured"' "$work/table.json" || { echo "FAIL calibrate: no measured curves"; fail=1; }
out=$(TESSERA_COST_TABLE="$work/table.json" run bench allreduce -b 8 -e 1M -f 32 -n 3 2>&1); rc=$?
check "auto with the calibrated table" 0 "#wrong total: 0" "$out" $rc

out=$(run bench allreduce --algo nccl 2>&1); rc=$?
check "unknown algorithm" 2 "accepted: auto ring rhd dbtree multicolor hierarchical mpi" "$out" $rc
out=$(run bench allreduce -d f8 2>&1); rc=$?
check "unknown dtype" 2 "accepted: f32 f64 f16 bf16 i32 i64 u8" "$out" $rc
out=$(run bench allreduce -d i32 -o avg 2>&1); rc=$?
check "average on integers" 2 "average is not defined on integer dtype i32" "$out" $rc
out=$(TESSERA_ALLREDUCE="ring:0-10;warp:11-max" run bench allreduce -e 1K 2>&1); rc=$?
check "malformed TESSERA_ALLREDUCE" 2 "bad part 'warp:11-max'" "$out" $rc
out=$(TESSERA_SEGMENT_BYTES=lots run bench allreduce -e 1K 2>&1); rc=$?
check "malformed TESSERA_SEGMENT_BYTES" 2 "TESSERA_SEGMENT_BYTES='lots'" "$out" $rc
out=$(TESSERA_COST_TABLE=/nonexistent.json run bench allreduce -e 1K 2>&1); rc=$?
check "missing cost table" 2 "cannot read TESSERA_COST_TABLE='/nonexistent.json'" "$out" $rc
# The input pipeline from the command line: make-dataset, bench data, training on the files with a
# corrupt JPEG (skipped, named, listed at the epoch's end) and no file read after the first epoch.
out=$("$tessera" make-dataset shapes --out "$work/shapes" --size 40 --image-size 48 2>&1); rc=$?
check "make-dataset shapes" 0 "36 train + 4 val samples of 48x48" "$out" $rc
out=$(run bench data --data "$work/shapes" --format voc --workers 1,2 --batch-size 4 \
  --image-size 32 --repeats 1 --json "$work/data.json" 2>&1); rc=$?
check "bench data" 0 "deeplabv3plus_resnet18 training step (batch 4, 32x32, 1 thread, cpu, f32, contiguous) consumes" "$out" $rc
grep -q '"ratio_to_step"' "$work/data.json" || { echo "FAIL bench data: no JSON"; fail=1; }
out=$(run bench data --data "$work/nowhere" --format voc 2>&1); rc=$?
check "bench data without a data set" 2 "nowhere' is not a folder" "$out" $rc
head -c 300 "$work/shapes/JPEGImages/000007.jpg" > "$work/cut.jpg"
mv "$work/cut.jpg" "$work/shapes/JPEGImages/000007.jpg"
out=$(run train --data "$work/shapes" --format voc --image-size 32 --batch-size 2 --steps 12 \
  --log-every 6 --max-corrupt 0.05 2>&1); rc=$?
check "train on files: data wait" 0 "data wait" "$out" $rc
check "train on files: corrupt file named" 0 "000007.jpg' is a truncated JPEG" "$out" $rc
check "train on files: listed at the epoch's end" 0 "1 corrupt training samples skipped so far" "$out" $rc
check "train on files: no reads after the first epoch" 0 "0 bytes read from files after the first epoch" "$out" $rc
out=$(run train --data "$work/shapes" --format voc --image-size 32 --batch-size 2 --steps 12 2>&1); rc=$?
check "train on files: over --max-corrupt" 2 "more than --max-corrupt 1% allows" "$out" $rc
# Spatial decomposition from the command line: slides, a 1x2 grid, AUC, each rank reading its tile.
# 512x512 slides (2x2 TIFF tiles of 256): each rank of a 1x2 grid reads one column of them.
out=$("$tessera" make-dataset slides --out "$work/slides" --size 8 --image-size 512 2>&1); rc=$?
check "make-dataset slides" 0 "6 train + 2 val samples of 512x512" "$out" $rc
out=$(run train --model resnet18 --spatial 1x2 --data "$work/slides" --image-size 512 --batch-size 1 --steps 3 \
  --log-every 3 2>&1); rc=$?
check "train --spatial: grid" 0 "512x512 images over a 1x2 grid: tiles of 512x256" "$out" $rc
check "train --spatial: auc" 0 "eval  step 3: auc" "$out" $rc
# About half the file: the two columns' compressed tiles differ a little with the slides'
# content, which follows torch's random generator (51.1% under PyPI's torch 2.11).
check "train --spatial: reads its tile" 0 "(\(4[5-9]\|5[0-4]\)\.[0-9]%)" "$out" $rc
out=$(run train --model resnet18 --spatial 2x2 --data "$work/slides" --image-size 512 --steps 1 2>&1); rc=$?
check "train --spatial: grid larger than the job" 2 "needs a multiple of 4 ranks, but the job has 2" "$out" $rc
out=$(run train --model resnet18 --spatial 1x2 --data "$work/slides" --image-size 1024 --steps 1 2>&1); rc=$?
check "train --spatial: image larger than the slides" 2 "smaller than --image-size 1024" "$out" $rc
out=$(run train --model resnet18 --spatial 1x2 --data "$work/slides" --image-size 96 --batch-size 1 \
  --steps 1 2>&1); rc=$?
check "train --spatial: tiles that do not divide" 2 "image sizes that work: 64 or 128" "$out" $rc
# Tuning and the simulator from the command line (issue 7).
out=$(TESSERA_AUTOTUNE_WARMUP_STEPS=1 TESSERA_AUTOTUNE_STEPS_PER_SAMPLE=1 TESSERA_AUTOTUNE_SAMPLES=1 \
  TESSERA_AUTOTUNE_BAYES_TRIALS=2 TESSERA_FUSION_THRESHOLD=1M \
  run tune --log "$work/tune.jsonl" --output "$work/tuned.json" --bounds "algorithm=auto,ring" \
  -- bench train --model resnet18 --image-size 32 --batch-size 2 --warmup 0 --iters 4 \
  --batches-per-iter 10 2>&1); rc=$?
check "tune -- bench train" 0 "autotune: algorithm=" "$out" $rc
grep -q '"done":true' "$work/tune.jsonl" || { echo "FAIL tune: no final log line"; fail=1; }
grep -q '"TESSERA_CYCLE_TIME"' "$work/tuned.json" || { echo "FAIL tune: no config"; fail=1; }
# The fusion threshold was set explicitly: the tuner left it out of the config.
if grep -q TESSERA_FUSION_THRESHOLD "$work/tuned.json"; then echo "FAIL tune: touched an explicit knob"; fail=1; fi
out=$(run bench train --config "$work/tuned.json" --model resnet18 --image-size 32 --batch-size 2 \
  --warmup 0 --iters 1 --batches-per-iter 1 2>&1); rc=$?
check "bench train --config" 0 "Total img/sec" "$out" $rc
echo '{"knobs": {"TESSERA_FUSION": "1M"}}' > "$work/bad_config.json"
out=$(run train --config "$work/bad_config.json" --steps 1 2>&1); rc=$?
check "train --config: unknown setting" 2 "unknown config file key TESSERA_FUSION (did you mean TESSERA_FUSION_THRESHOLD?)" "$out" $rc
out=$(run tune --bounds "cycle_time_ms=5-1" -- bench train --model resnet18 --image-size 32 \
  --batch-size 2 --iters 1 2>&1); rc=$?
check "tune: bounds that exclude every value" 2 "field 'cycle_time_ms'" "$out" $rc
out=$("$tessera" tune --log x 2>&1); rc=$?
check "tune without a training run" 2 "give the training run after --" "$out" $rc
out=$("$tessera" simulate --preset summit --model deeplabv3plus --gpus 6,132 --json "$work/sim.json" \
  --svg "$work/sim.svg" 2>&1); rc=$?
check "simulate summit deeplabv3plus" 0 "deeplabv3plus_resnet50: 2 img per GPU at 6.7 img/s" "$out" $rc
python3 -c "import json,sys; p=json.load(open(sys.argv[1]))['points']; assert [x['gpus'] for x in p]==[6,132] and all(0<x['efficiency']<=1 for x in p)" \
  "$work/sim.json" || { echo "FAIL simulate: JSON points"; fail=1; }
grep -q "<polyline" "$work/sim.svg" || { echo "FAIL simulate: no SVG lines"; fail=1; }
out=$("$tessera" simulate --preset mars 2>&1); rc=$?
check "simulate: unknown preset" 2 "unknown machine preset 'mars'; accepted: summit, local" "$out" $rc
echo '{"nodes": 2, "ranks_per_node": 4, "intra": {"latency_us": 1, "gbps": -5},
       "inter": {"latency_us": 2, "gbps": 10}, "reduce_gbps": 20}' > "$work/machine.json"
out=$("$tessera" simulate --machine "$work/machine.json" 2>&1); rc=$?
check "simulate: negative value" 2 "field 'intra.gbps'" "$out" $rc
out=$("$tessera" simulate --preset summit --gpus 30000 2>&1); rc=$?
check "simulate: more GPUs than the machine" 2 "exceeds machine 'summit'" "$out" $rc
# A workload from a real run's timeline: ResNet-18's 62 gradients as the trainer enqueued them.
out=$(run train --model resnet18 --image-size 32 --batch-size 2 --steps 3 --timeline "$work/train_tl.json" 2>&1); rc=$?
check "train --timeline" 0 "done: 3 steps" "$out" $rc
out=$("$tessera" simulate --preset summit --timeline "$work/train_tl.json" --batch-size 2 --gpus 6,60 2>&1); rc=$?
check "simulate --timeline" 0 "62 gradients, [0-9.]* MB; the timeline.s last complete step" "$out" $rc
exit $fail
