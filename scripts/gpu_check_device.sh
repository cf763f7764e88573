# The GPU check's steps after the build, sourced by scripts/gpu_check.sh (which sets BUILD, DEV,
# NPS, MPIRUN, PY, TORCH, TRAINING, PYTHON and the helpers of scripts/gpu_check_lib.sh). Each
# step's timeout is capped by what is left of the budget.

# 3. The GPU tests: device conformance, the device collectives and the engine on CUDA tensors
# at 1, 2 and 4 ranks sharing the GPU (each backend that can run: IPC, staged and hierarchical
# when ranks share it, NCCL at 1 rank; the others skip saying why).
test_row "unit (GpuDevice)" "$LOG/unit.log" "$BUILD/tests/tessera_unit_tests" --gtest_filter='GpuDevice*'
for np in $NPS; do
  test_row "device collectives, $np ranks" "$LOG/dc_np$np.log" \
    $MPIRUN -np "$np" "$BUILD/tests/mpi_device_collectives"
  test_row "engine on CUDA tensors, $np ranks" "$LOG/ed_np$np.log" \
    $MPIRUN -np "$np" "$BUILD/tests/mpi_engine_device"
done

# 4. The device benchmarks: allreduce 4 KiB to 256 MiB at 1 rank (NCCL) and at 2 and 4 ranks
# sharing the GPU (IPC and staged), beside the host round trip and under the measured ceilings.
bench_rows() {  # ranks
  local np=$1 b=$LOG/bench_allreduce_np$1.txt backends=ipc,staged rc
  [ "$np" = 1 ] && backends=auto
  step 150 "$b" $MPIRUN -np "$np" "$BUILD/apps/tessera/tessera-bench" allreduce --device "$DEV" \
    --backend "$backends" -b 4K -e "${GPU_CHECK_BENCH_MAX:-256M}" -f 4 -n 10 -w 3
  rc=$?
  if [ "$rc" = 0 ]; then
    row "bench allreduce, $np ranks" "ok" "$(basename "$b")"
  else
    fail_row "bench allreduce, $np ranks" "$b" "$rc"
  fi
  grep "^# ceilings\|^# fusion" "$b" | sed 's/^# /    /' | tee -a "$SUMMARY"
  awk -v np="$np" '$1 + 0 == 4096 || $1 + 0 >= 67108864 {
      printf "    %d ranks %-12s %10s B  %9s us  algbw %8s  busbw %8s  vs_host %7s  %%bound %s\n",
             np, $5, $1, $6, $7, $8, $10, $12 }' "$b" | tee -a "$SUMMARY"
}
for np in $NPS; do bench_rows "$np"; done

# 5. The libtorch binding on CUDA tensors (tests/mpi/test_torch_device.cc in its cuda mode) at
# 1, 2 and 4 ranks sharing the GPU, then training on the GPU (issue 22).
torch_rows() {
  local targets=(mpi_torch_device) name="build libtorch binding test"
  if [ "$TRAINING" = on ]; then
    targets+=(tessera mpi_train mpi_spatial tessera_torch_unit_tests) name="$name and training"
  fi
  build "$name" "$LOG/build_torch.log" "${targets[@]}" || return
  for np in $NPS; do
    test_row "libtorch binding on CUDA tensors, $np ranks" "$LOG/td_np$np.log" \
      env TESSERA_TEST_TORCH_DEVICE="$DEV" $MPIRUN -np "$np" "$BUILD/tests/mpi_torch_device"
  done
  if [ "$TRAINING" = on ]; then source "$SRC/scripts/gpu_check_train.sh"; fi
}
[ "$TORCH" = on ] && torch_rows

# 6. The Python package's CUDA cases (the ops, a CUDA model under DistributedOptimizer against
# one CPU process, tessera.torch.spatial's tiles on CUDA against the whole image) at 1 and 2 ranks.
python_rows() {
  local np log rc
  build "build Python package" "$LOG/build_python.log" tessera_python || return
  for np in ${GPU_CHECK_PYTHON_NPS:-1 2}; do
    log=$LOG/py_np$np.log
    step 240 "$log" env PYTHONPATH="$BUILD/python" $MPIRUN -np "$np" "$PY" -m pytest -q \
      -p no:cacheprovider --color=no "$SRC/tests/python/test_ops.py" \
      "$SRC/tests/python/test_optimizer.py" "$SRC/tests/python/test_spatial.py" \
      -k "cuda or neither" -rs
    rc=$?
    if [ "$rc" = 0 ]; then
      row "Python package, CUDA case, $np ranks" "pass" "$(grep -E 'passed|skipped' "$log" | tail -1)"
    else
      fail_row "Python package, CUDA case, $np ranks" "$log" "$rc"
    fi
  done
}
[ "$TORCH" = on ] && [ "$PYTHON" = on ] && python_rows
true
