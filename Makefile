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

demo: build
	@echo "== tessera demo: the trainer arrives with a later issue; until then the demo runs the"
	@echo "== allreduce benchmark on $(NP) ranks, every tessera algorithm beside MPI_Allreduce."
	$(MPIRUN) -np $(NP) $(BUILD)/apps/tessera/tessera bench allreduce --algo all -b 8 -e 64M -f 8

clean:
	rm -rf $(BUILD)
