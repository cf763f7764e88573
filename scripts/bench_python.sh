#!/usr/bin/env bash
# tessera.torch from Python beside the C++ path and PyTorch DDP, in one sitting, runs alternating.
#
#   scripts/bench_python.sh train MODEL BATCH IMAGE WARMUP ITERS PER_ITER RUNS
#   scripts/bench_python.sh roundtrip CYCLE_MS CALLS RUNS
#
# train: per run, "Total img/sec" on 2 ranks x 1 thread of
#   cpp     mpirun -np 2 tessera bench train                 (the C++ path)
#   python  mpirun -np 2 python3 examples/pytorch_synthetic_benchmark.py  (tessera.torch)
#   ddp     bench/ddp_synthetic.py --nprocs 2                (DDP over gloo, default buckets)
# roundtrip: per run, the median per-call time of a synchronous 4-byte allreduce on 2 ranks
#   from C++ (build/bench/allreduce_roundtrip) and from Python (bench/python_roundtrip.py),
#   with TESSERA_CYCLE_TIME=CYCLE_MS.
# Each line printed is one run; the last line the medians and their ratios.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
PY=/usr/bin/python3
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
export OMPI_MCA_btl=${OMPI_MCA_btl:-self,vader,tcp} OMPI_MCA_pml=${OMPI_MCA_pml:-ob1}
export OMPI_MCA_mtl=${OMPI_MCA_mtl:-^ofi} PYTHONPATH=$BUILD/python
MPI=(mpirun --bind-to none -np 2)
median() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
total() { grep -h "^Total img/sec" | sed 's/.*: \([0-9.]*\).*/\1/'; }
out=$(mktemp -d)

if [[ $1 == train ]]; then
  MODEL=$2 BATCH=$3 IMAGE=$4 WARMUP=$5 ITERS=$6 PER_ITER=$7 RUNS=$8
  CPP_ARGS=(--model "$MODEL" --batch-size "$BATCH" --image-size "$IMAGE" --warmup "$WARMUP"
            --iters "$ITERS" --batches-per-iter "$PER_ITER" --threads 1)
  for run in $(seq "$RUNS"); do
    c=$("${MPI[@]}" "$BUILD/apps/tessera/tessera" bench train "${CPP_ARGS[@]}" 2>&1 | total)
    p=$("${MPI[@]}" -x PYTHONPATH $PY examples/pytorch_synthetic_benchmark.py --no-cuda \
        --model "$MODEL" --batch-size "$BATCH" --image-size "$IMAGE" --threads 1 \
        --num-warmup-batches "$WARMUP" --num-iters "$ITERS" \
        --num-batches-per-iter "$PER_ITER" 2>&1 | total)
    d=$($PY bench/ddp_synthetic.py "${CPP_ARGS[@]}" --nprocs 2 2>&1 | total)
    echo "$c $p $d" >> "$out/rows"
    echo "run $run: cpp $c  python $p  ddp $d img/s  python/cpp $(awk -v a="$p" -v b="$c" \
      'BEGIN{printf "%.3f", a/b}')  python/ddp $(awk -v a="$p" -v b="$d" 'BEGIN{printf "%.3f", a/b}')"
  done
  awk '{ print $2 / $1 }' "$out/rows" > "$out/pc"; awk '{ print $2 / $3 }' "$out/rows" > "$out/pd"
  echo "$MODEL batch $BATCH ${IMAGE}x$IMAGE, medians of $RUNS: cpp $(cut -d' ' -f1 "$out/rows" | median)" \
    "python $(cut -d' ' -f2 "$out/rows" | median) ddp $(cut -d' ' -f3 "$out/rows" | median) img/s;" \
    "python/cpp $(median < "$out/pc")  python/ddp $(median < "$out/pd")"
else
  CYCLE=$2 CALLS=$3 RUNS=$4
  us() { sed 's/.*"median_us": \([0-9.]*\).*/\1/'; }
  for run in $(seq "$RUNS"); do
    c=$(TESSERA_CYCLE_TIME=$CYCLE "${MPI[@]}" -x TESSERA_CYCLE_TIME \
        "$BUILD/bench/allreduce_roundtrip" "$CALLS" 200 | us)
    p=$(TESSERA_CYCLE_TIME=$CYCLE "${MPI[@]}" -x TESSERA_CYCLE_TIME -x PYTHONPATH \
        $PY bench/python_roundtrip.py "$CALLS" 200 | us)
    echo "$c $p" >> "$out/rows"
    echo "run $run: c++ $c us  python $p us  python - c++ $(awk -v a="$p" -v b="$c" 'BEGIN{printf "%.2f", a-b}') us"
  done
  awk '{ print $2 - $1 }' "$out/rows" > "$out/diff"
  echo "4-byte allreduce, 2 ranks, cycle ${CYCLE} ms, medians of $RUNS: c++ $(cut -d' ' -f1 "$out/rows" | median) us" \
    "python $(cut -d' ' -f2 "$out/rows" | median) us; python - c++ $(median < "$out/diff") us"
fi
rm -rf "$out"
