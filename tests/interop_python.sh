#!/usr/bin/env bash
# Weights move between tessera and PyTorch both ways (Debian's python3-torch and torchvision):
#   1. Python saves a torchvision ResNet's state_dict (an OrderedDict, torch.save's zip format);
#   2. tessera export --init-from reads it and writes its own state_dict;
#   3. Python loads that into a fresh torchvision ResNet with strict=True (same names and
#      shapes) and checks every tensor equals the original, bit for bit;
#   4. tessera train --init-from takes the same file into a DeepLab-v3+ backbone.
set -euo pipefail
TESSERA=$1
DIR=$2
PY=${TEST_PYTHON:-/usr/bin/python3}  # the interpreter the build is for
rm -rf "$DIR" && mkdir -p "$DIR"
for model in resnet18 resnet50; do
  $PY - "$DIR/$model.py.pt" "$model" <<'PYEOF'
import sys, torch, torchvision
torch.manual_seed(0)
m = getattr(torchvision.models, sys.argv[2])()
with torch.no_grad():  # non-trivial buffers too
    for name, b in m.named_buffers():
        if b.dtype.is_floating_point:
            b.uniform_(0.5, 1.5)
torch.save(m.state_dict(), sys.argv[1])
PYEOF
  "$TESSERA" export --model "$model" --init-from "$DIR/$model.py.pt" -o "$DIR/$model.tessera.pt"
  $PY - "$DIR/$model.py.pt" "$DIR/$model.tessera.pt" "$model" <<'PYEOF'
import sys, torch, torchvision
import torch.jit._pickle
# torch >= 2.6 loads with weights_only=True: the C++ pickler tags typed dicts with
# restore_type_tag, which the weights-only unpickler accepts once allowed (docs/python.md).
if hasattr(torch.serialization, "add_safe_globals"):
    torch.serialization.add_safe_globals([torch.jit._pickle.restore_type_tag])
original = torch.load(sys.argv[1])
back = torch.load(sys.argv[2])
m = getattr(torchvision.models, sys.argv[3])()
m.load_state_dict(back, strict=True)  # raises on any missing, unexpected or misshapen entry
for k, v in original.items():
    if not torch.equal(v, back[k]):
        raise SystemExit(f"{k} differs after the round trip")
if list(back.keys()) != list(original.keys()):
    raise SystemExit("tessera lists the tensors in another order than torchvision")
print(f"{sys.argv[3]}: {len(back)} tensors round-tripped bit for bit, strict load into torchvision")
PYEOF
done
# The classifier's weights initialise a segmentation backbone (fc is reported unused).
"$TESSERA" train --model deeplabv3plus_resnet18 --init-from "$DIR/resnet18.py.pt" --steps 1 \
  --batch-size 2 --image-size 32 --train-size 4 --val-size 2 | tee "$DIR/train.log"
grep -q "120 tensors loaded" "$DIR/train.log"
# Bad input: a file of the wrong architecture is an error naming the file.
if "$TESSERA" export --model resnet18 --init-from "$DIR/resnet50.py.pt" -o "$DIR/x.pt" \
    2> "$DIR/err.log"; then
  echo "expected an error for resnet50 weights in resnet18" >&2
  exit 1
fi
grep -q "resnet50.py.pt" "$DIR/err.log"
echo "interop: ok"
