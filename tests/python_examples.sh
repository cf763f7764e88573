#!/usr/bin/env bash
# The examples and Horovod-style scripts, at small size, through `tessera run` (2 ranks):
#   1. examples/pytorch_synthetic_benchmark.py prints Horovod's synthetic-benchmark lines;
#   2. examples/imagenet_resnet50.py trains an epoch on `tessera make-dataset classes`, writes
#      a checkpoint on rank 0, and a second run resumes from it;
#   3. examples/segmentation_voc.py trains on `tessera make-dataset shapes` and reports mIoU;
#   4. tests/horovod_scripts/*.py, written for `import horovod.torch as hvd`, run with only that
#      line changed;
#   5. examples/spatial_slides.py (4 ranks): ResNet-50 on a 2x2 grid, then the U-Net on 2x1 tiles
#      x 2 data ranks, each rank reading its tile of the slides; the checkpoint loads into the
#      unpartitioned U-Net;
#   6. tessera run refuses a host it cannot reach, naming it.
set -euo pipefail
TESSERA=$1
DIR=$2
SRC=$(cd "$(dirname "$0")/.." && pwd)
PY=${TEST_PYTHON:-/usr/bin/python3}  # the interpreter the build is for
rm -rf "$DIR" && mkdir -p "$DIR"
run() { "$TESSERA" run -np 2 "$PY" "$@"; }
expect() {  # expect PATTERN FILE
  grep -q -- "$1" "$2" || { echo "FAIL: '$1' not in $2:"; cat "$2"; exit 1; }
}

run "$SRC/examples/pytorch_synthetic_benchmark.py" --model resnet18 --batch-size 4 \
  --image-size 32 --num-warmup-batches 1 --num-batches-per-iter 1 --num-iters 2 | tee "$DIR/synth.log"
expect "Total img/sec on 2 CPU(s)" "$DIR/synth.log"

"$TESSERA" make-dataset classes --out "$DIR/classes" --size 24 --image-size 32
args=(--train-dir "$DIR/classes/train" --val-dir "$DIR/classes/val" --image-size 32
      --batch-size 4 --val-batch-size 4 --warmup-epochs 1 --workers 0
      --checkpoint-format "$DIR/ckpt-{epoch}.pt")
run "$SRC/examples/imagenet_resnet50.py" "${args[@]}" --epochs 1 | tee "$DIR/imagenet1.log"
expect "epoch 1: val loss" "$DIR/imagenet1.log"
test -f "$DIR/ckpt-1.pt"
run "$SRC/examples/imagenet_resnet50.py" "${args[@]}" --epochs 2 | tee "$DIR/imagenet2.log"
expect "resuming from epoch 1" "$DIR/imagenet2.log"
expect "epoch 2: val loss" "$DIR/imagenet2.log"
test -f "$DIR/ckpt-2.pt"

"$TESSERA" make-dataset shapes --out "$DIR/shapes" --size 16 --image-size 48
run "$SRC/examples/segmentation_voc.py" --data "$DIR/shapes" --epochs 1 --image-size 48 \
  --batch-size 2 | tee "$DIR/seg.log"
expect "val mIoU" "$DIR/seg.log"

for script in "$SRC"/tests/horovod_scripts/*.py; do
  name=$(basename "$script")
  sed 's/^import horovod.torch as hvd$/import tessera.torch as hvd/' "$script" > "$DIR/$name"
  # Only the import line differs.
  test "$(diff "$script" "$DIR/$name" | grep -c '^[<>]')" -eq 2
  run "$DIR/$name" | tee "$DIR/$name.log"
done
expect "parameters equal on every rank" "$DIR/train_as_documented.py.log"
expect "every documented call behaved as documented" "$DIR/ops_as_documented.py.log"

"$TESSERA" run -np 4 "$PY" "$SRC/examples/spatial_slides.py" --model resnet50 --size 96 --grid 2x2 \
  --steps 2 --slides "$DIR/slides" | tee "$DIR/spatial-resnet.log"
expect "step 1: loss .* (tile (48, 48) of 96x96, grid 2x2 x 1 data)" "$DIR/spatial-resnet.log"
"$TESSERA" run -np 4 "$PY" "$SRC/examples/spatial_slides.py" --model unet --size 77 --grid 2x1 \
  --steps 2 --slides "$DIR/slides-unet" --checkpoint "$DIR/unet.pt" | tee "$DIR/spatial-unet.log"
expect "step 1: loss .* grid 2x1 x 2 data" "$DIR/spatial-unet.log"
expect "halo rows" "$DIR/spatial-unet.log"
expect "loaded into the unpartitioned unet" "$DIR/spatial-unet.log"

if "$TESSERA" run -np 2 -H nosuchhost.invalid:2 true 2> "$DIR/unreachable.log"; then
  echo "FAIL: tessera run started a job on an unreachable host"; exit 1
fi
expect "cannot reach host nosuchhost.invalid" "$DIR/unreachable.log"
echo "python examples: all ran"
