# utrain build. `make run` and `make test` are the two set-up commands.
# Everything is built under build/ (build-asan/ for the sanitizer suite,
# build-fuzz/ for the fuzz targets and their replay, built with clang).

CC       ?= gcc
BUILD    ?= build
ARCH     ?= -march=native
OPT      ?= -O3
BLAS_DIR ?= /usr/lib/x86_64-linux-gnu/openblas-openmp
BLAS_INC ?= /usr/include/x86_64-linux-gnu/openblas-openmp
PREFIX   ?= /usr/local
# MPI (OpenMPI) is required: the communicator's MPI backend is always built.
MPI_CFLAGS := $(shell mpicc --showme:compile 2>/dev/null)
MPI_LIBS   := $(shell mpicc --showme:link 2>/dev/null)

# -fno-math-errno: libm calls (sqrtf, expf) set no errno, so loops using them vectorize.
# -Wno-format-truncation: messages built with snprintf into fixed buffers may be
# cut short by design (paths in error text); every such call is bounded.
CFLAGS_BASE = -std=c11 -D_GNU_SOURCE -Wall -Wextra -Werror -Wno-format-truncation -fopenmp -fPIC -fno-math-errno \
              -Iinclude -I$(BLAS_INC) $(MPI_CFLAGS)
# clang (the fuzz build): it does not know -Wno-format-truncation, and its
# "loop not vectorized" notes on `omp simd` loops are remarks, not errors.
CC_IS_CLANG := $(findstring clang,$(shell $(CC) --version 2>/dev/null | head -n 1))
CFLAGS_CC = $(if $(CC_IS_CLANG),-Wno-unknown-warning-option -Wno-pass-failed)
SAN     ?=
override CFLAGS += $(CFLAGS_BASE) $(CFLAGS_CC) $(OPT) $(ARCH) $(SAN) -g $(CUDA_CFLAGS)
TEST_CFLAGS = -Itests/common -Itests/unit -Wno-missing-field-initializers
LDLIBS   = $(SAN) -L$(BLAS_DIR) -Wl,-rpath,$(BLAS_DIR) -lxsmm -lopenblas -ldnnl -lyaml -lcjson -lutf8proc -lz -lm -fopenmp -lpthread \
           $(MPI_LIBS) $(CUDA_LIBS)

# every backend folder but cuda's (built only with nvcc, below)
LIB_SRC  = $(sort $(filter-out src/backend/cuda/%,$(wildcard src/backend/*/*.c)) \
                  $(wildcard src/core/*.c src/ops/*.c src/backend/*.c src/nn/*.c \
                            src/models/*.c src/optim/*.c src/io/*.c src/data/*.c src/dist/*.c src/train/*.c))

# ---- the CUDA backend (src/backend/cuda): built whenever nvcc is found;
# `make CUDA=0` leaves it out. Its kernels (.cu) are compiled once into
# $(CU_BUILD) whatever BUILD is (nvcc output does not depend on CC or the
# sanitizers); its C glue is part of LIB_SRC. Without a GPU at run time the
# backend reports itself unavailable and the CUDA tests skip.
NVCC      ?= $(shell command -v nvcc 2>/dev/null || ls /usr/local/cuda/bin/nvcc 2>/dev/null)
CUDA      ?= $(if $(NVCC),1,0)
CUDA_HOME ?= $(patsubst %/bin/nvcc,%,$(NVCC))
CU_BUILD  ?= build/cu
# Hopper machine code, and PTX that the driver compiles for other GPUs (sm_80 and newer)
CU_ARCH   ?= -gencode arch=compute_90,code=sm_90 -gencode arch=compute_80,code=compute_80
NVCCFLAGS  = -std=c++17 -O3 $(CU_ARCH) -Xcompiler -Wall,-Wextra,-Werror,-fPIC -Iinclude -Werror all-warnings
ifeq ($(CUDA),1)
LIB_SRC   += $(sort $(wildcard src/backend/cuda/*.c))
CU_SRC     = $(sort $(wildcard src/backend/cuda/*.cu))
CU_OBJ     = $(CU_SRC:%.cu=$(CU_BUILD)/%.o)
CUDA_CFLAGS = -DUT_WITH_CUDA -I$(CUDA_HOME)/include
CUDA_LIBS   = -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 -lcublasLt -lcublas -lcudart -lstdc++ -ldl
# $(call nv_inc,header,pip module): the folder holding an NVIDIA library's
# header: the toolkit's, the system's, or a pip wheel's (nvidia-nccl,
# nvidia-cudnn: what PyTorch installs), first found
nv_inc = $(or $(firstword $(foreach d,$(CUDA_HOME)/include /usr/include /usr/include/x86_64-linux-gnu,\
                 $(if $(wildcard $(d)/$(1)),$(d)))),\
              $(shell python3 -c 'import nvidia.$(2) as m, os; d = list(m.__path__)[0]; \
                 print(d + "/include" if os.path.exists(d + "/include/$(1)") else "")' 2>/dev/null))
# $(call nv_libdir,include folder,library file): the lib folder beside it that holds the library
nv_libdir = $(firstword $(foreach d,$(1)/../lib $(1)/../lib64,$(if $(wildcard $(d)/$(2)),$(abspath $(d)))))
# NCCL (the ranks' collectives on GPU memory): only its header is needed to
# build, the library is opened when a run asks for it (src/backend/cuda/nccl.c).
# The toolkit's, the system's or pip's nvidia-nccl; `make NCCL=0` leaves it out.
NCCL      ?= 1
ifeq ($(NCCL),1)
ifeq ($(origin NCCL_INC),undefined)
NCCL_INC  := $(call nv_inc,nccl.h,nccl)
endif
NCCL_LIBDIR ?= $(call nv_libdir,$(NCCL_INC),libnccl.so.2)
ifneq ($(NCCL_INC),)
CUDA_CFLAGS += -DUT_WITH_NCCL -I$(NCCL_INC) $(if $(NCCL_LIBDIR),-DUT_NCCL_LIBDIR='"$(NCCL_LIBDIR)"')
endif
endif
# cuDNN (the convolutions on the GPU), the same way: the header to build, the
# library opened at the first convolution (src/backend/cuda/cudnn.c); a
# machine without it convolves with utrain's own kernels. `make CUDNN=0`
# leaves it out.
CUDNN     ?= 1
ifeq ($(CUDNN),1)
ifeq ($(origin CUDNN_INC),undefined)
CUDNN_INC := $(call nv_inc,cudnn.h,cudnn)
endif
CUDNN_LIBDIR ?= $(call nv_libdir,$(CUDNN_INC),libcudnn.so.9)
ifneq ($(CUDNN_INC),)
CUDA_CFLAGS += -DUT_WITH_CUDNN -I$(CUDNN_INC) $(if $(CUDNN_LIBDIR),-DUT_CUDNN_LIBDIR='"$(CUDNN_LIBDIR)"')
endif
endif
# cuDNN's fused attention (src/backend/cuda/cudnn_attn.cpp, host C++) is
# built with the headers of NVIDIA's cuDNN frontend, which
# scripts/fetch-cudnn-frontend.sh (run by `make`'s deps step) unpacks into
# .deps/; without them, or without cuDNN's header, that file builds as a stub
# that says so, and attention runs utrain's own kernels.
CUDNN_FE_INC ?= $(if $(wildcard .deps/cudnn-frontend/include/cudnn_frontend.h),.deps/cudnn-frontend/include)
CU_CXX_FLAGS = -std=c++17 -O1 -fPIC -Wall -Wextra -Werror -Iinclude -DCUDNN_FRONTEND_SKIP_JSON_LIB \
               $(if $(and $(CUDNN_INC),$(CUDNN_FE_INC)),-DUT_WITH_CUDNN_FE -isystem $(CUDNN_FE_INC) \
                   -isystem $(CUDNN_INC) -isystem $(CUDA_HOME)/include)
CU_OBJ    += $(CU_BUILD)/src/backend/cuda/cudnn_attn.o
endif
# `make CUDA_EMU=1 BUILD=build-emu ...` (`make test-emu`): the CUDA backend
# built for the CUDA emulator (tests/emu; docs/testing.md): its C glue against
# the emulator's runtime, its kernel files (gemm.cu included) by the host's
# C++ compiler, cuBLASLt, cuDNN and NCCL by tests/emu/cublas_emu.cpp,
# cudnn_emu.cpp and nccl_emu.cpp; no nvcc.
# The GPU tests then run on the CPU.
CUDA_EMU  ?= 0
ifeq ($(CUDA_EMU),1)
LIB_SRC   := $(filter-out src/backend/cuda/%,$(LIB_SRC)) $(sort $(wildcard src/backend/cuda/*.c))
CU_OBJ     = $(patsubst %,$(BUILD)/emu/%.o,$(basename $(notdir $(wildcard src/backend/cuda/*.cu)))) \
             $(BUILD)/emu/cublas_emu.o $(BUILD)/emu/cudnn_emu.o $(BUILD)/emu/nccl_emu.o $(BUILD)/emu/cuda_emu.o \
             $(BUILD)/emu/cudnn_attn.o
CUDA_CFLAGS = -DUT_WITH_CUDA -DUT_CUDA_EMU -DUT_WITH_CUDNN -DUT_WITH_NCCL -Itests/emu/shim
CUDA_LIBS   = -lstdc++
override CUDA := 1
endif
CLI_SRC  = $(sort $(wildcard src/cli/*.c))
TEST_SRC = $(sort $(wildcard tests/unit/test_*.c tests/parity/test_*.c tests/e2e/test_*.c \
                             tests/dist/test_*.c tests/emu/test_*.c) $(if $(filter 1,$(CUDA)),$(wildcard tests/gpu/test_*.c)))
# programs that tests start (under mpirun), not run alone by tests/run.sh
TEST_AUX = $(BUILD)/tests/dist/mpi_comm_ranks
TEST_LIB = $(sort $(wildcard tests/unit/gradcheck*.c tests/common/*.c))
HDRS     = $(filter-out tests/fuzz/%,$(wildcard include/utrain/*.h src/*/*.h src/*/*.def src/backend/*/*.h \
                                         src/backend/cuda/*.h src/backend/cuda/*.cuh tests/*/*.h))

LIB_OBJ  = $(LIB_SRC:%.c=$(BUILD)/%.o)
CLI_OBJ  = $(CLI_SRC:%.c=$(BUILD)/%.o)
TEST_OBJ = $(TEST_LIB:%.c=$(BUILD)/%.o)
TEST_BIN = $(TEST_SRC:%.c=$(BUILD)/%)

.PHONY: all lib deps nccl-info run run-fmnist test test-sim test-emu emu-tests test-asan tests fuzz fuzz-bins fuzz-replay bench bench-ddp bench-allreduce bench-parallel bench-fmnist bench-minilm bench-bert bench-optim bench-seq2seq install clean
# keep the gradcheck objects between builds (make would delete them as intermediates)
.SECONDARY:
all: lib $(BUILD)/utrain
lib: $(BUILD)/libutrain.a $(BUILD)/libutrain.so

deps:
	@scripts/install-deps.sh

# where the build finds NCCL's and cuDNN's headers and libraries (scripts/gpu-check.sh's env step)
nccl-info:
	@echo "NCCL header: $(if $(NCCL_INC),$(NCCL_INC)/nccl.h,not found (built without NCCL)); library beside it: $(if $(NCCL_LIBDIR),$(NCCL_LIBDIR),none (libnccl.so.2 from the loader's path))"
	@echo "cuDNN header: $(if $(CUDNN_INC),$(CUDNN_INC)/cudnn.h,not found (built without cuDNN)); library beside it: $(if $(CUDNN_LIBDIR),$(CUDNN_LIBDIR),none (libcudnn.so.9 from the loader's path))"
	@echo "cuDNN frontend headers (fused attention): $(if $(CUDNN_FE_INC),$(CUDNN_FE_INC) ($(shell cat .deps/cudnn-frontend/VERSION 2>/dev/null)),not found (scripts/fetch-cudnn-frontend.sh; built without cuDNN's fused attention))"

# core's private header (src/core/internal.h) is on the include path of core,
# ops and the backends only (and of the test that calls the CUDA backend's
# products directly); the layers above use include/utrain/*.h
LAYER_INC = $(if $(filter src/core/% src/ops/% src/backend/% tests/gpu/test_cuda_gemm.c,$<),-Isrc/core)

$(BUILD)/%.o: %.c $(HDRS)
	@mkdir -p $(dir $@)
	@echo "  CC    $<"
	@$(CC) $(CFLAGS) $(LAYER_INC) -c $< -o $@

$(CU_BUILD)/%.o: %.cu $(HDRS)
	@mkdir -p $(dir $@)
	@echo "  NVCC  $<"
	@$(NVCC) $(NVCCFLAGS) -c $< -o $@

# (rebuilt when the frontend's headers arrive: their VERSION file is newer)
$(CU_BUILD)/src/backend/cuda/cudnn_attn.o: src/backend/cuda/cudnn_attn.cpp src/backend/cuda/cudnn_attn.h \
                                           $(wildcard .deps/cudnn-frontend/VERSION)
	@mkdir -p $(dir $@)
	@echo "  CXX   $<"
	@$(CXX) $(CU_CXX_FLAGS) -c $< -o $@

$(BUILD)/libutrain.a: $(LIB_OBJ) $(CU_OBJ)
	@rm -f $@
	ar rcs $@ $^

$(BUILD)/libutrain.so: $(LIB_OBJ) $(CU_OBJ)
	$(CC) -shared -o $@ $^ $(LDFLAGS) $(LDLIBS)

$(BUILD)/utrain: $(CLI_OBJ) $(BUILD)/libutrain.a
	$(CC) -o $@ $^ $(LDFLAGS) $(LDLIBS)

$(BUILD)/tests/%: tests/%.c $(TEST_OBJ) $(BUILD)/libutrain.a $(HDRS)
	@mkdir -p $(dir $@)
	@echo "  TEST  $@"
	@$(CC) $(CFLAGS) $(TEST_CFLAGS) $(LAYER_INC) -o $@ $< $(TEST_OBJ) $(BUILD)/libutrain.a $(LDFLAGS) $(LDLIBS)

$(BUILD)/tests/%.o: tests/%.c $(HDRS)
	@mkdir -p $(dir $@)
	@echo "  CC    $<"
	@$(CC) $(CFLAGS) $(TEST_CFLAGS) -c $< -o $@

tests: all $(TEST_BIN) $(TEST_AUX)

# ---- the CUDA emulator (tests/emu, docs/testing.md): CUDA kernel files run
# by the host's C++ compiler, their launches rewritten by tests/emu/prep.pl,
# so that kernels are tested on machines without a GPU (or nvcc) ----
EMU_CU   = flash_attention_tc norm binary view unary softmax
EMU_OBJ  = $(EMU_CU:%=$(BUILD)/emu/%.o) $(BUILD)/emu/broken.o $(BUILD)/emu/cuda_emu.o
EMU_FLAGS = -std=c++17 -O3 $(ARCH) -g -fPIC -DUT_CUDA_EMU -Wall -Wextra -Werror -Wno-unknown-pragmas -Wno-attributes \
            -Itests/emu/shim -Isrc/backend/cuda -Iinclude

$(BUILD)/emu/%.cpp: src/backend/cuda/%.cu tests/emu/prep.pl
	@mkdir -p $(dir $@)
	@perl tests/emu/prep.pl $< > $@

# kernels that break a GPU's rules, for the emulator's own checks
$(BUILD)/emu/broken.cpp: tests/emu/broken.cu tests/emu/prep.pl
	@mkdir -p $(dir $@)
	@perl tests/emu/prep.pl $< > $@

$(BUILD)/emu/%.o: $(BUILD)/emu/%.cpp $(wildcard tests/emu/*.h) $(HDRS)
	@echo "  EMU   $(notdir $<)"
	@$(CXX) $(EMU_FLAGS) $(SAN) -c $< -o $@

# the emulator has no cuDNN graph API: cuDNN's fused attention builds as its stub there
$(BUILD)/emu/cudnn_attn.o: src/backend/cuda/cudnn_attn.cpp src/backend/cuda/cudnn_attn.h
	@mkdir -p $(dir $@)
	@echo "  CXX   $<"
	@$(CXX) $(EMU_FLAGS) $(SAN) -c $< -o $@

# the emulator itself and its stand-ins for the CUDA runtime, cuBLASLt, cuDNN and NCCL
EMU_LIBS = cuda_emu cublas_emu cudnn_emu nccl_emu
$(EMU_LIBS:%=$(BUILD)/emu/%.o): $(BUILD)/emu/%.o: tests/emu/%.cpp $(wildcard tests/emu/*.h)
	@mkdir -p $(dir $@)
	@echo "  CXX   $<"
	@$(CXX) $(EMU_FLAGS) $(SAN) -c $< -o $@

$(BUILD)/tests/emu/test_emu_kernels: tests/emu/test_emu_kernels.c $(EMU_OBJ) $(HDRS)
	@mkdir -p $(dir $@)
	@echo "  TEST  $@"
	@$(CC) $(CFLAGS) $(TEST_CFLAGS) -c $< -o $@.o
	@$(CXX) -o $@ $@.o $(EMU_OBJ) $(SAN) -lm

# The MPI rank program is test_comm itself under a name run.sh does not run:
# tests/dist/test_mpi_launch starts it under mpirun.
$(BUILD)/tests/dist/mpi_comm_ranks: $(BUILD)/tests/dist/test_comm
	@cp $< $@

# The main job, the seeds' example: fine-tune the pretrained all-MiniLM-L6-v2
# as a sentiment classifier on Rotten Tomatoes (2 epochs, best dev checkpoint),
# then test mode on that checkpoint: dev/test results and predictions, the
# test accuracy last. The run directory stays in runs/rt_minilm. A second
# `make run` resumes the finished run (nothing left to train) and tests it again.
run: deps
	@$(MAKE) --no-print-directory -j$(JOBS) all
	./$(BUILD)/utrain train configs/rt_minilm.yml --set continue_training=true
	./$(BUILD)/utrain test runs/rt_minilm

# The CNN on Fashion-MNIST for one epoch, then its test evaluation (runs/fmnist_cnn).
run-fmnist: deps
	@$(MAKE) --no-print-directory all
	./$(BUILD)/utrain train configs/fmnist_cnn.yml --set continue_training=true
	./$(BUILD)/utrain test runs/fmnist_cnn

# The test binaries run with the OpenBLAS kernels utrain itself would choose
# (ut_blas_select_kernels), so they exercise what users run.
BLAS_CORE = $(shell grep -qw avx512f /proc/cpuinfo && echo SkylakeX || (grep -qw avx2 /proc/cpuinfo && echo Haswell))
export OPENBLAS_CORETYPE ?= $(BLAS_CORE)

# The builds behind `make test` and `make run` use every core (JOBS); the
# tests themselves run one after another (tests/run.sh), but the CUDA
# emulator's two at a time (build-emu:2: each runs on one host thread).
JOBS ?= $(shell nproc 2>/dev/null || echo 2)

test: deps
	@$(MAKE) --no-print-directory -j$(JOBS) tests
	@$(MAKE) --no-print-directory -j$(JOBS) $(FUZZ_VARS) fuzz-replay
	@$(MAKE) --no-print-directory -j$(JOBS) emu-tests
	@UT_GPU_TEST_SKIP="$(EMU_SKIP)" tests/run.sh $(BUILD) $(FUZZ_BUILD) build-emu:2

# The same suite with the simulated device as every run's default device
# (UTRAIN_DEVICE=sim; docs/testing.md): ~12 min on 2 cores.
test-sim: deps
	@$(MAKE) --no-print-directory tests
	@UTRAIN_DEVICE=sim tests/run.sh $(BUILD)

# The GPU tests (tests/gpu: every op against the CPU, the trainer on cuda) on
# the CUDA emulator, built into build-emu (docs/testing.md, "The CUDA
# emulator"); the longest sequences are left out (slow there). `make test`
# runs them too.
EMU_TESTS = build-emu/tests/gpu/test_cuda_ops build-emu/tests/gpu/test_cuda_gemm build-emu/tests/gpu/test_cuda_nccl \
            build-emu/tests/gpu/test_cuda_trainer
EMU_SKIP  = x 1024 x
emu-tests:
	@$(MAKE) --no-print-directory CUDA_EMU=1 BUILD=build-emu build-emu/utrain $(EMU_TESTS)

test-emu: deps
	@$(MAKE) --no-print-directory emu-tests
	@UT_GPU_TEST_SKIP="$(EMU_SKIP)" tests/run.sh build-emu:2

# The same suite under AddressSanitizer + UndefinedBehaviorSanitizer.
test-asan: deps
	@$(MAKE) --no-print-directory BUILD=build-asan OPT=-O1 \
	  SAN="-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all" tests
	@ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=1 UBSAN_OPTIONS=print_stacktrace=1 UT_TEST_QUICK=1 tests/run.sh build-asan

# ---- fuzzing: clang's libFuzzer with ASan + UBSan (docs/testing.md) ----
# One target per parser of outside input, tests/fuzz/fuzz_<name>.c, with its
# committed inputs in tests/fuzz/<name>/{corpus,crashes}/. The library is
# built once into $(FUZZ_BUILD) with coverage instrumentation; the targets
# link libFuzzer (`make fuzz`), the replay programs link tests/fuzz/replay.c
# instead and run under `make test`.
FUZZ_BUILD   ?= build-fuzz
FUZZ_SECONDS ?= 60
FUZZ_TARGETS  = $(patsubst tests/fuzz/fuzz_%.c,%,$(wildcard tests/fuzz/fuzz_*.c))
FUZZ_SAN      = -fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer
FUZZ_VARS     = BUILD=$(FUZZ_BUILD) CC=clang OPT=-O1 SAN="$(FUZZ_SAN)"
FUZZ_HDRS     = $(wildcard tests/fuzz/*.h)

fuzz: deps
	@$(MAKE) --no-print-directory $(FUZZ_VARS) fuzz-bins
	@tests/fuzz/run_fuzz.sh $(FUZZ_BUILD) $(FUZZ_SECONDS) $(FUZZ_TARGETS)

# (fuzz-bins and fuzz-replay are called with FUZZ_VARS, as above)
fuzz-bins: $(FUZZ_TARGETS:%=$(BUILD)/tests/fuzz/fuzz_%)
fuzz-replay: $(FUZZ_TARGETS:%=$(BUILD)/tests/fuzz/test_fuzz_%)

$(BUILD)/tests/fuzz/fuzz_%: tests/fuzz/fuzz_%.c $(FUZZ_HDRS) $(BUILD)/libutrain.a
	@mkdir -p $(dir $@)
	@echo "  FUZZ  $@"
	@$(CC) $(CFLAGS) -fsanitize=fuzzer -o $@ $< $(BUILD)/libutrain.a $(LDFLAGS) $(LDLIBS)

$(BUILD)/tests/fuzz/test_fuzz_%: tests/fuzz/fuzz_%.c tests/fuzz/replay.c $(FUZZ_HDRS) $(BUILD)/libutrain.a
	@mkdir -p $(dir $@)
	@echo "  TEST  $@"
	@$(CC) $(CFLAGS) -DFUZZ_TARGET='"$*"' -o $@ $< tests/fuzz/replay.c $(BUILD)/libutrain.a \
	  $(LDFLAGS) $(LDLIBS)

bench: deps
	@$(MAKE) --no-print-directory all $(BUILD)/bench/gpt2_step
	bench/run_gpt2_step.sh $(BUILD)

# GPT-2 124M step with DDP on 2 ranks (mpirun): overlap or not, communication
# time, all-reduce bandwidth against bare MPI_Allreduce (docs/performance.md)
bench-ddp: deps
	@$(MAKE) --no-print-directory $(BUILD)/bench/ddp_step
	bench/run_ddp_step.sh $(BUILD)

# GPT-2 with tensor and pipeline parallelism against ddp on 2 ranks, and the
# pipeline bubble (docs/performance.md)
bench-allreduce: deps
	@$(MAKE) --no-print-directory $(BUILD)/bench/comm_allreduce
	bench/run_allreduce.sh $(BUILD)

bench-parallel: deps
	@$(MAKE) --no-print-directory all
	bench/run_parallel.sh $(BUILD)

# Fashion-MNIST CNN, one epoch: utrain against PyTorch (~12 min; docs/performance.md)
bench-fmnist: deps
	@$(MAKE) --no-print-directory all $(BUILD)/bench/sgemm_cnn
	bench/run_fmnist.sh $(BUILD)

# MiniLM fine-tuning on Rotten Tomatoes, 2 epochs each side (needs PYTHON with
# torch and transformers; ~10 min on 2 quiet cores; docs/performance.md)
bench-minilm: deps
	@$(MAKE) --no-print-directory all
	bench/run_minilm.sh $(BUILD)

# BERT-base-sized training step (batch 32 x 128), fp32 and bf16, against
# transformers + PyTorch (docs/performance.md)
bench-bert: deps
	@$(MAKE) --no-print-directory all $(BUILD)/bench/bert_step
	bench/run_bert_step.sh $(BUILD)

# one optimizer step (AdamW, Lion, Adafactor, SGD) over GPT-2 124M's
# parameters against PyTorch's (docs/performance.md)
bench-optim: deps
	@$(MAKE) --no-print-directory all $(BUILD)/bench/optim_step
	bench/run_optim_step.sh $(BUILD)

# T5-small- and BART-base-sized seq2seq step and generation speed against
# transformers + PyTorch (docs/performance.md)
bench-seq2seq: deps
	@$(MAKE) --no-print-directory all $(BUILD)/bench/seq2seq_step
	bench/run_seq2seq.sh $(BUILD)

$(BUILD)/bench/%: bench/%.c $(BUILD)/libutrain.a $(HDRS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $< $(BUILD)/libutrain.a $(LDFLAGS) $(LDLIBS)

install: all
	install -d $(DESTDIR)$(PREFIX)/include/utrain $(DESTDIR)$(PREFIX)/lib/pkgconfig $(DESTDIR)$(PREFIX)/bin
	install -m 644 include/utrain/*.h $(DESTDIR)$(PREFIX)/include/utrain/
	install -m 644 $(BUILD)/libutrain.a $(BUILD)/libutrain.so $(DESTDIR)$(PREFIX)/lib/
	install -m 755 $(BUILD)/utrain $(DESTDIR)$(PREFIX)/bin/
	sed -e 's|@PREFIX@|$(PREFIX)|g' -e 's|@BLAS_DIR@|$(BLAS_DIR)|g' \
	  -e 's|@MPI_CFLAGS@|$(MPI_CFLAGS)|g' -e 's|@MPI_LIBS@|$(MPI_LIBS)|g' utrain.pc.in \
	  > $(DESTDIR)$(PREFIX)/lib/pkgconfig/utrain.pc

clean:
	rm -rf build build-asan build-fuzz
