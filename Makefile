# The two commands of the README: `make demo` and `make test`. Each installs what is missing
# (scripts/bootstrap.sh, as root) and builds first.
BUILD ?= build
JOBS ?= $(shell nproc)
NP ?= 2
MPIRUN = mpirun --oversubscribe --bind-to none

# Open MPI refuses to run as root unless told that is intended (CI and fresh machines are root).
export OMPI_ALLOW_RUN_AS_ROOT = 1
export OMPI_ALLOW_RUN_AS_ROOT_CONFIRM = 1
# No InfiniBand/OFI probing (and its warnings) on machines that have none.
export OMPI_MCA_btl ?= self,vader,tcp
export OMPI_MCA_pml ?= ob1
export OMPI_MCA_mtl ?= ^ofi

.PHONY: all bootstrap build test demo bench clean

all: build

bootstrap:
	@bash scripts/bootstrap.sh

build: bootstrap
	@mkdir -p $(BUILD)
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release > $(BUILD)/configure.log 2>&1 || \
	  (cat $(BUILD)/configure.log; exit 1)
	@cmake --build $(BUILD) -j$(JOBS) -- --no-print-directory

# Every test of the main build, then the reliability builds of docs/reliability.md (ASan+UBSan,
# TSan) and every fuzz target for FUZZ_SECONDS: scripts/test_all.sh, which prints each phase's
# minutes at the end.
FUZZ_SECONDS ?= 15
test: bootstrap
	@bash scripts/test_all.sh $(BUILD) $(FUZZ_SECONDS) $(JOBS)

# The main job on the built-in default: DeepLab-v3+ (ResNet-18 backbone) learns to segment a
# synthetic shapes data set on 2 ranks, ending with its mIoU (4 classes: chance is about 0.25) and
# the path of its checkpoint. The data set is written once as files in the Pascal VOC layout
# (JPEG images, palette PNG masks; its val split file is written last, so its presence means the
# set is complete), and training reads it through the real readers, the in-memory store and the
# prefetching workers. A few minutes on 2 cores. Its settings were measured (issue 32, in
# docs/training.md): at the same 700 steps, no random scaling (the shapes are whole at scale 1,
# and the evaluation crops at scale 1), half the old rate and the poly schedule took the mIoU
# from 0.45 to 0.72.
DEMO_DIR ?= $(BUILD)/demo
DEMO_DATA ?= $(DEMO_DIR)/shapes
demo: build
	@mkdir -p $(DEMO_DIR)
	@test -f $(DEMO_DATA)/ImageSets/Segmentation/val.txt || \
	  $(BUILD)/apps/tessera/tessera make-dataset shapes --out $(DEMO_DATA) --size 4096 --image-size 80
	@echo "== tessera demo: DeepLab-v3+ (ResNet-18) on $(NP) ranks, shapes data set (VOC layout), 4 classes"
	OMP_NUM_THREADS=1 $(MPIRUN) -np $(NP) $(BUILD)/apps/tessera/tessera train \
	  --data $(DEMO_DATA) --format voc --workers 2 \
	  --model deeplabv3plus_resnet18 --image-size 64 --batch-size 8 --steps 700 \
	  --lr 0.25 --lr-schedule poly --scale-range 1 1 --eval-every 350 --log-every 50 \
	  --metrics $(DEMO_DIR)/metrics.jsonl --checkpoint $(DEMO_DIR)/checkpoint.pt \
	  --curve $(DEMO_DIR)/curve.svg --predictions $(DEMO_DIR)/predictions.png
	@echo "== what it learned: $(DEMO_DIR)/predictions.png (validation images, true masks, predicted masks)"
	@echo "== how it learned:  $(DEMO_DIR)/curve.svg (training loss and validation mIoU by step)"

clean:
	rm -rf $(BUILD) $(BUILD)-san $(BUILD)-fuzz
