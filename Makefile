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

test: build
	cd $(BUILD) && ctest --output-on-failure --timeout 1800

# The main job on the built-in default: DeepLab-v3+ (ResNet-18 backbone) learns to segment the
# synthetic shapes data on 2 ranks, ending with its mIoU (4 classes: chance is about 0.25) and the
# path of its checkpoint. A few minutes on 2 cores.
DEMO_DIR ?= $(BUILD)/demo
demo: build
	@mkdir -p $(DEMO_DIR)
	@echo "== tessera demo: DeepLab-v3+ (ResNet-18) on $(NP) ranks, synthetic shapes, 4 classes"
	OMP_NUM_THREADS=1 $(MPIRUN) -np $(NP) $(BUILD)/apps/tessera/tessera train \
	  --model deeplabv3plus_resnet18 --image-size 64 --batch-size 8 --steps 700 \
	  --lr 0.5 --train-size 4096 --eval-every 350 --log-every 50 \
	  --metrics $(DEMO_DIR)/metrics.jsonl --checkpoint $(DEMO_DIR)/checkpoint.pt

clean:
	rm -rf $(BUILD)
