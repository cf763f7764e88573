# The training checks of the GPU check (issue 22), sourced by scripts/gpu_check.sh once the
# training stack is built (against PyTorch's libtorch, image codecs off: synthetic data):
#   1. equivalence on the GPU: N ranks sharing it with batch b = one rank with batch N*b (f64),
#      channels-last = NCHW, a GPU checkpoint resumed on the CPU, the spatial ResNets with GPU
#      tiles = the whole image (forward and backward), the DeviceFeed and layout unit tests;
#   2. bad input: --device cuda where no GPU is visible, NCCL forced with two ranks on one GPU;
#   3. tessera bench train against PyTorch in Python (bench/torch_reference.py) on the same GPU
#      with the same settings, f32 and bf16 channels-last, ResNet-50 and DeepLab-v3+; the
#      engine's overhead at one rank; torch.compile's figure; a simulator machine from what
#      this GPU measured.
# Each step runs only in the time left of the run's budget (scripts/gpu_check_lib.sh: step, cap).
DEV=${GPU_CHECK_TRAIN_DEVICE:-${DEV/fake/cpu}}  # the fake device is no training device
TESSERA=$BUILD/apps/tessera/tessera
figures() {  # each rank prints them: once each
  grep -h "^\[ equivalence \]\|^\[ resume \]\|^\[ channels-last \]\|^\[ spatial" "$@" |
    awk '!seen[$0]++' | sed 's/^/    /' | tee -a "$SUMMARY"
}
# A run that must fail with `fragment` in its output: name, fragment, log, command...
expect_error_row() {
  local name=$1 fragment=$2 log=$3; shift 3
  if step 120 "$log" "$@"; then
    row "$name" "FAIL" "it succeeded: $(basename "$log")"
    failed "$log"
  elif grep -qF -- "$fragment" "$log"; then
    row "$name" "pass" "$(grep -m1 -F -- "$fragment" "$log" | cut -c1-160)"
  else
    row "$name" "FAIL" "no '$fragment' in $(basename "$log")"
    failed "$log"
  fi
}

# 1. Equivalence and the unit tests of the GPU parts.
export TESSERA_TEST_TRAIN_DEVICE=$DEV
test_row "train units (DeviceFeed, layout, precision)" "$LOG/train_unit.log" \
  "$BUILD/tests/tessera_torch_unit_tests" \
  --gtest_filter='DeviceFeed*:MemoryLayout*:MixedPrecision*:LossScale*:DeviceChoice*'
for np in 2 4; do
  [ "$(left)" -gt 60 ] || break
  test_row "train on $DEV: $np ranks = 1 rank x $np batch" "$LOG/train_eq_np$np.log" \
    $MPIRUN -np "$np" "$BUILD/tests/mpi_train" --gtest_filter='TrainTest.RanksWithBatchB*:TrainTest.ChannelsLast*:TrainTest.ACheckpointResumesOnTheCpu*:TrainTest.F16*'
  figures "$LOG/train_eq_np$np.log"
  test_row "spatial ResNets on $DEV, $np ranks" "$LOG/spatial_np$np.log" \
    $MPIRUN -np "$np" "$BUILD/tests/mpi_spatial" --gtest_filter='SpatialTest.ResNet*'
  figures "$LOG/spatial_np$np.log"
done
unset TESSERA_TEST_TRAIN_DEVICE

# 2. Bad input.
SMALL=(--model resnet18 --image-size 32 --batch-size 2 --steps 1 --train-size 16 --val-size 4)
expect_error_row "--device cuda with no GPU visible" "--device cuda needs a" \
  "$LOG/bad_no_gpu.log" env CUDA_VISIBLE_DEVICES= "$TESSERA" train --device cuda "${SMALL[@]}"
expect_error_row "NCCL forced, 2 ranks on one GPU" "NCCL refuses two ranks on one GPU" \
  "$LOG/bad_nccl.log" env TESSERA_DEVICE_BACKEND=nccl $MPIRUN -np 2 "$TESSERA" train \
  --device "$DEV" "${SMALL[@]}"

# 3. Throughput, one rank, synthetic data: tessera against PyTorch eager with the same settings.
# GPU_CHECK_BENCHES and GPU_CHECK_BENCH_ITERS shrink them for the script's own check on a CPU.
read -r -a ITERS <<< "${GPU_CHECK_BENCH_ITERS:---warmup 5 --iters 5 --batches-per-iter 5}"
BENCH=("${ITERS[@]}" --cudnn-benchmark --memory-format channels-last)
IFS=';' read -r -a BENCHES <<< "${GPU_CHECK_BENCHES:-resnet50 128 224;deeplabv3plus_resnet50 16 513}"
R50=(${BENCHES[0]})
ratio() {  # json_a json_b: a's mean img/s over b's
  "$PY" -c 'import json,sys; a,b=(json.load(open(f))["per_rank_mean"] for f in sys.argv[1:3]); print(f"{a:.1f} vs {b:.1f} img/s: {a/b:.3f}x")' "$1" "$2"
}
bench_pair() {  # model batch image precision
  local tag=$1_$4 out
  [ "$(left)" -gt 45 ] || { row "bench $1 $4" "skip" "no time left"; return; }
  out=$LOG/bench_${tag}
  if step 300 "$out.tessera.log" "$TESSERA" bench train --device "$DEV" --model "$1" \
       --batch-size "$2" --image-size "$3" --precision "$4" "${BENCH[@]}" --json "$out.tessera.json" &&
     step 300 "$out.eager.log" "$PY" "$SRC/bench/torch_reference.py" --device "$DEV" --model "$1" \
       --batch-size "$2" --image-size "$3" --precision "$4" "${BENCH[@]}" --json "$out.eager.json"; then
    row "bench $1 b$2 $3² $4 CL: tessera/eager" "ok" "$(ratio "$out.tessera.json" "$out.eager.json")"
    grep -h "^Parameters" "$out.tessera.log" "$out.eager.log" | tr '\n' ' ' | sed 's/^/    /' | tee -a "$SUMMARY"
    echo | tee -a "$SUMMARY"
  else
    row "bench $1 b$2 $3² $4" "FAIL" "$(basename "$out").*.log"
    failed "$out".*.log
  fi
}
for b in "${BENCHES[@]}"; do
  for p in f32 bf16; do bench_pair $b $p; done
done
if [ "$(left)" -gt 40 ] && step 300 "$LOG/bench_noengine.log" "$TESSERA" bench train --device "$DEV" \
     --no-engine --model resnet50 --batch-size "${R50[1]}" --image-size "${R50[2]}" --precision bf16 \
     "${BENCH[@]}" --json "$LOG/bench_resnet50_bf16_noengine.json"; then
  row "engine overhead, 1 rank (on / off)" "ok" \
    "$(ratio "$LOG/bench_resnet50_bf16.tessera.json" "$LOG/bench_resnet50_bf16_noengine.json")"
fi

# The input pipeline against ResNet-50's GPU step (bf16, channels-last, batch 128 at 224²), from
# JPEG files and from the decoded store: only where this build has the image codecs (the GPU
# test machine's has not: TESSERA_IMAGE_CODECS=OFF).
CORES=$(getconf _NPROCESSORS_ONLN)  # not nproc: it follows OMP_NUM_THREADS
if grep -q "TESSERA_IMAGE_CODECS:BOOL=ON" "$BUILD/CMakeCache.txt" && [ "$(left)" -gt 90 ]; then
  DS=$LOG.data/classes224  # beside the logs, not in their archive
  step 120 "$LOG/make_dataset.log" "$TESSERA" make-dataset classes --out "$DS" --size 1200 --image-size 256
  for keep in "" --keep-decoded; do
    step 300 "$LOG/bench_data$keep.log" "$TESSERA" bench data --data "$DS" --format folder \
      --device "$DEV" --reference-model resnet50 --batch-size "${R50[1]}" --image-size "${R50[2]}" \
      --precision bf16 --memory-format channels-last --workers "$CORES" --repeats 2 $keep &&
      row "bench data $CORES workers ${keep:-(files)}: x step" "ok" \
        "$(awk '$1 == '"$CORES"' {print $2 " samples/s, " $3 "x the step"}' "$LOG/bench_data$keep.log")"
  done
else
  row "bench data against the GPU step" "skip" "no image codecs in this build, or no time"
fi

# A machine for the simulator from this GPU: Summit's network and node shape, this GPU's copy
# and host-link bandwidth (bench allreduce's ceilings) and its compute rate; the 132-GPU
# DeepLab-v3+ point and the 2,304-GPU ResNet-50 point predicted with it.
ceil=$(grep -h "^# ceilings" "$LOG"/bench_allreduce_np1.txt 2> /dev/null | head -1)
copy=$(echo "$ceil" | sed -n 's/.*device copy \([0-9.]*\) GB\/s.*/\1/p')
h2d=$(echo "$ceil" | sed -n 's/.*host->device \([0-9.]*\) GB\/s.*/\1/p')
if [ -n "$copy" ] && [ -n "$h2d" ] && [ -f "$LOG/bench_deeplabv3plus_resnet50_bf16.tessera.json" ]; then
  # A reduction reads two inputs and writes one: input bytes at 2/3 of the copy rate.
  printf '{"preset": "summit", "name": "summit-nodes-of-this-gpu", "node_copy_gbps": %s,
 "reduce_gbps": %s, "shm": {"latency_us": 10, "gbps": %s}}\n' \
    "$("$PY" -c "print(6 * $copy)")" "$("$PY" -c "print($copy * 2 / 3)")" "$h2d" \
    > "$LOG/machine.json"
  D=(${BENCHES[1]})
  for m in "deeplabv3plus ${D[1]} 1,132 deeplabv3plus_resnet50_bf16" \
           "resnet50 ${R50[1]} 1,256,2304 resnet50_bf16"; do
    set -- $m
    ips=$("$PY" -c 'import json,sys; print(json.load(open(sys.argv[1]))["per_rank_mean"])' \
            "$LOG/bench_$4.tessera.json")
    step 60 "$LOG/simulate_$1.txt" "$TESSERA" simulate --machine "$LOG/machine.json" --model "$1" \
      --batch-size "$2" --img-per-s "$ips" --gpus "$3" &&
      row "simulated $1 at $3 GPUs" "ok" "simulate_$1.txt" &&
      awk '/^ +gpus/ {on = 1} on && /^#/ {exit} on' "$LOG/simulate_$1.txt" | sed 's/^/    /' |
        tee -a "$SUMMARY"
  done
fi

# Spatial 2x2 on the GPU: peak device memory per rank against one rank on the whole image
# (ResNet-50, GPU_CHECK_SPATIAL_SIZE², batch 1; the four ranks share the GPU).
S=${GPU_CHECK_SPATIAL_SIZE:-4096}
SP=(--model resnet50 --image-size "$S" --batch-size 1 --warmup 1 --iters 2 --device "$DEV")
if [ "$(left)" -gt 120 ] &&
   step 300 "$LOG/spatial_1x1.log" "$TESSERA" bench spatial --spatial 1x1 "${SP[@]}" \
     --json "$LOG/spatial_1x1.json" &&
   step 300 "$LOG/spatial_2x2.log" $MPIRUN -np 4 "$TESSERA" bench spatial --spatial 2x2 "${SP[@]}" \
     --json "$LOG/spatial_2x2.json"; then
  row "spatial 2x2 / 1x1 peak device memory, $S²" "ok" "$("$PY" -c 'import json,sys; a,b=(json.load(open(f)) for f in sys.argv[1:3]); k="peak_device_gib"; print("%.2f / %.2f GiB = %.3f (target <= 0.3); step %.3f / %.3f s" % (b[k], a[k], b[k] / max(a[k], 1e-9), b["step_s"], a["step_s"]))' "$LOG/spatial_1x1.json" "$LOG/spatial_2x2.json")"
else
  row "spatial 2x2 / 1x1 peak device memory" "skip/FAIL" "spatial_*.log ($(left) s left)"
  failed "$LOG"/spatial_*.log
fi

# torch.compile's figures last: compiling takes a minute or more per model.
has_compile=$("$PY" -c 'import torch; print(hasattr(torch, "compile"))' 2> /dev/null)
for m in "${BENCHES[@]}"; do
  set -- $m
  [ "$has_compile" = True ] || { row "torch.compile $1 bf16" "skip" "this torch has none"; continue; }
  [ "$(left)" -gt 150 ] || { row "torch.compile $1 bf16" "skip" "no time left"; continue; }
  out=$LOG/bench_$1_bf16
  if step 300 "$out.compile.log" "$PY" "$SRC/bench/torch_reference.py" --device "$DEV" \
       --model "$1" --batch-size "$2" --image-size "$3" --precision bf16 --compile "${BENCH[@]}" \
       --json "$out.compile.json"; then
    row "torch.compile $1 bf16: tessera/compiled" "ok" "$(ratio "$out.tessera.json" "$out.compile.json")"
  else
    row "torch.compile $1 bf16" "FAIL" "$(basename "$out").compile.log"
    failed "$out.compile.log"
  fi
done
