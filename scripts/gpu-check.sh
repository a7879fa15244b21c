#!/usr/bin/env bash
# The GPU check: one command, on a lent GPU machine that has the CUDA toolkit
# but no package registry. Unpacks the .deb files that scripts/gpu-debs.sh
# fetched (into .gpu-debs/, carried with the call) into a private prefix
# (and builds cuDNN's fused attention with the cuDNN frontend's headers that
# scripts/fetch-cudnn-frontend.sh put in .deps/: carry .deps too),
# builds utrain with its CUDA backend, runs the GPU suite, the CPU checks that
# need that machine's CPU (bf16 instructions), and the GPU benchmarks, and
# writes a summary and every log under $OUT (default: gpu-check-out/).
#
#   scripts/gpu-check.sh [step ...]      steps: env build gpu signals suite trainer cpu-bf16 bench models llmc profile
#                                        minilm (default: env build gpu bench models llmc profile; `all`:
#                                        every step but signals, suite and minilm)
#
# The whole call must end inside the device tool's 600 s per command:
# GPU_CHECK_BUDGET (default 540) seconds bound it; a step that would start
# with under 20 s left is skipped (the summary says so), and each step's own
# limit is cut to what is left, so the summary and logs always come back.
#
# llmc builds llm.c (prepared here by scripts/gpu-llmc.sh into .llmc/, carried
# too) and runs its GPT-2 124M step beside utrain's. minilm (a call of its
# own: `scripts/gpu-check.sh env build minilm`, carrying .gpu-debs and
# .gpu-minilm from scripts/gpu-minilm.sh) fine-tunes MiniLM on Rotten
# Tomatoes end to end on the GPU, utrain against transformers + PyTorch. GPU_CHECK_BATCH sets the
# GPT-2 benchmarks' batch (default 8 sequences of 1024 tokens).
#
# Each step is bounded in time; a failing step is recorded and the rest run.
# The last thing printed is the summary table (also $OUT/summary.txt).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-gpu-check-out}
mkdir -p "$OUT"
steps=("$@")
[ ${#steps[@]} -eq 0 ] && steps=(env build gpu bench models llmc profile)
[ "${steps[*]}" = all ] && steps=(env build gpu trainer cpu-bf16 bench models llmc profile)
BUDGET=${GPU_CHECK_BUDGET:-540}
want() { local s; for s in "${steps[@]}"; do [ "$s" = "$1" ] && return 0; done; return 1; }
SUMMARY=$OUT/summary.txt
: >"$SUMMARY"
note() { echo "$*" | tee -a "$SUMMARY"; }
# run NAME LIMIT CMD...: CMD's output to $OUT/NAME.log; one summary line
run() {
    local name=$1 limit=$2; shift 2
    local t0=$SECONDS left=$((BUDGET - SECONDS))
    if [ $left -lt 20 ]; then
        note "$(printf '%-28s %-18s' "$name" "skipped (budget)")"
        return 125
    fi
    [ "$limit" -gt "$left" ] && limit=$left
    if [ "$(type -t "$1")" = function ]; then
        timeout "$limit" bash -c "$(declare -f "$1"); $(printf '%q ' "$@")" >"$OUT/$name.log" 2>&1
    else
        timeout "$limit" "$@" >"$OUT/$name.log" 2>&1
    fi
    local rc=$?
    local verdict=ok; [ $rc -ne 0 ] && verdict="FAIL (exit $rc)"; [ $rc -eq 124 ] && verdict="TIMEOUT (${limit}s)"
    note "$(printf '%-28s %-18s %4ds' "$name" "$verdict" $((SECONDS - t0)))"
    return $rc
}

NPROC=$(nproc)
# gpt2_yml DIR STEPS LOG_INTERVAL [TRAIN_KEY [LINE]]: DIR/gpt2.yml, GPT-2 124M
# on cuda over DIR/tokens.bin at batch 8 x 1024, runs under DIR/runs; an
# extra `train:` key and an extra top-level line (a `dist:` block)
gpt2_yml() {
    cat >"$1/gpt2.yml" <<YML
experiment_name: gpt2_124m
output_dir: $1/runs
device: cuda
seed: 1
threads: $NPROC
model: {name: gpt2, n_layer: 12, n_head: 12, n_embd: 768, vocab_size: 50257, block_size: 1024, dropout: 0}
data: {name: tokens, train_path: $1/tokens.bin, seq_len: 1024}
train: {max_steps: $2, batch_size: 8, log_interval: $3, eval_strategy: "no", save_strategy: "no", progress: lines${4:+, $4}}
${5:-}
YML
}
# random_tokens FILE N: a token file (llm.c's .bin layout, which utrain's
# tokens dataset reads) of N random GPT-2 ids: the machine has no corpus
random_tokens() {
    python3 - "$1" "$2" <<'PY'
import sys, numpy as np
n = int(sys.argv[2])
h = np.zeros(256, np.int32); h[0], h[1], h[2] = 20240520, 1, n
t = np.random.default_rng(1).integers(0, 50257, n, dtype=np.uint16)
with open(sys.argv[1], "wb") as f: f.write(h.tobytes()); f.write(t.tobytes())
PY
}
P=/opt/utrain-deps
LIBDIR=$P/usr/lib/x86_64-linux-gnu
export PATH=/usr/local/cuda/bin:$PATH
export LD_LIBRARY_PATH=$LIBDIR:$LIBDIR/openblas-openmp:$LIBDIR/openmpi/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export P LIBDIR
MAKEVARS=(BLAS_DIR="$LIBDIR/openblas-openmp" BLAS_INC="$P/usr/include/x86_64-linux-gnu/openblas-openmp"
          CFLAGS="-I$P/usr/include -I$P/usr/include/x86_64-linux-gnu"
          LDFLAGS="-L$LIBDIR -L$P/usr/lib -Wl,-rpath,$LIBDIR -Wl,-rpath,$LIBDIR/openmpi/lib")
# Kernels for this machine's GPU alone (half the nvcc time of the default
# Hopper code plus Ampere PTX), where nvidia-smi names its compute capability.
CC_GPU=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d ' .')
case "$CC_GPU" in
    [0-9][0-9]|[0-9][0-9][0-9]) MAKEVARS+=(CU_ARCH="-gencode arch=compute_$CC_GPU,code=sm_$CC_GPU") ;;
esac
# The machine's own OpenMPI when it has one with its compiler wrapper (its
# mpirun then matches the library); else the carried Debian one, relocated.
if command -v mpicc >/dev/null 2>&1 && [ "$(command -v mpicc)" != "$P/usr/bin/mpicc" ]; then
    MAKEVARS+=(MPI_CFLAGS="$(mpicc --showme:compile)" MPI_LIBS="$(mpicc --showme:link)")
    MPI_OWN=1
else
    export OPAL_PREFIX=$P/usr PATH=$P/usr/bin:$PATH
    MAKEVARS+=(MPI_CFLAGS="-I$LIBDIR/openmpi/include -I$LIBDIR/openmpi/include/openmpi"
               MPI_LIBS="-L$LIBDIR/openmpi/lib -lmpi")
    MPI_OWN=0
fi

unpack() {
    ls .gpu-debs/*.deb >/dev/null 2>&1 || { echo "no .gpu-debs/*.deb: run scripts/gpu-debs.sh where apt works and carry .gpu-debs"; return 1; }
    mkdir -p $P
    for f in .gpu-debs/*.deb; do
        # with the machine's own OpenMPI, leave the carried one packed
        case "$(basename "$f")" in *openmpi*|libpmix*|libhwloc*|libevent*|libfabric*|libucx*|libpsm*|libmunge*|ibverbs*|librdmacm*|libnl-*)
            [ "${MPI_OWN:-0}" = 1 ] && continue;; esac
        dpkg -x "$f" $P || return 1
    done
    # Debian's alternatives links point at /etc/alternatives: aim them at the real files
    if [ "${MPI_OWN:-0}" != 1 ]; then
        ln -sf mpirun.openmpi $P/usr/bin/mpirun
        ln -sf orterun $P/usr/bin/mpirun.openmpi
        ln -sf opal_wrapper $P/usr/bin/mpicc
    fi
    find $P -name '*.so*' | head -50
}

if want env; then
    {
        date -u; uname -a; cat /etc/os-release 2>/dev/null | head -3
        nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv 2>&1
        nvcc --version 2>&1 | tail -2; gcc --version | head -1
        grep -o -w -E 'avx512f|avx512_bf16|amx_bf16|amx_tile|avx512_fp16' /proc/cpuinfo | sort | uniq -c
        grep -m1 'model name' /proc/cpuinfo; echo "cores: $NPROC"
        ls /usr/local/cuda/lib64 2>/dev/null | grep -E 'cudart|cublasLt|cudnn|nccl' | head
        ldconfig -p | grep -E 'cudnn|nccl|libmpi' | head
        which mpirun python3 2>&1
        mpirun --version 2>&1 | head -2
        # can this machine's nvcc build and run a cuBLASLt program?
        printf '%s\n' '#include <cstdio>' '#include <cublasLt.h>' \
            'int main(){int n=0;cudaGetDeviceCount(&n);cublasLtHandle_t h;int r=cublasLtCreate(&h);' \
            'printf("devices %d, cublasLtCreate %d, cublasLt version %zu\\n",n,r,cublasLtGetVersion());return r;}' >/tmp/ut_probe.cu
        nvcc -arch=sm_90 -o /tmp/ut_probe /tmp/ut_probe.cu -lcublasLt && /tmp/ut_probe
    } >"$OUT/env.txt" 2>&1
    note "machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $NPROC cores; GPU: $(nvidia-smi --query-gpu=name,memory.total --format=csv,noheader 2>&1 | head -1)"
    note "cpu bf16: $(grep -o -w -E 'avx512_bf16|amx_bf16' /proc/cpuinfo | sort -u | xargs)"
    make -s nccl-info 2>&1 | tail -3 | while IFS= read -r l; do note "$l"; done
fi

if want build; then
    export MPI_OWN
    run unpack-debs 300 unpack
    if [ -n "$CC_GPU" ]; then note "kernels built for: sm_$CC_GPU (this GPU)"
    else note "kernels built for: sm_90 + compute_80 PTX (the default)"; fi
    BUILD_GOALS=(all tests build/bench/gpt2_step build/bench/sgemm_rate build/bench/gpu_gpt2_step build/bench/gpu_gemm
                 build/bench/bert_step build/bench/optim_step)
    note "cuDNN frontend headers: $(cat .deps/cudnn-frontend/VERSION 2>/dev/null || echo 'none (carry .deps from scripts/fetch-cudnn-frontend.sh)')"
    if ! run build 900 make -j"$NPROC" "${MAKEVARS[@]}" "${BUILD_GOALS[@]}" &&
        grep -qE "(cudnn_attn\.cpp|cudnn-frontend)[^ ]*: (fatal )?error" "$OUT/build.log"; then
        # the frontend against this machine's cuDNN headers: the errors are in
        # build.log; build the rest without cuDNN's fused attention
        grep -m5 -E "error" "$OUT/build.log" | tee -a "$SUMMARY"
        note "  cuDNN's fused attention did not build here: building without it (CUDNN_FE_INC=)"
        run build-without-cudnn-fe 900 make -j"$NPROC" "${MAKEVARS[@]}" CUDNN_FE_INC= "${BUILD_GOALS[@]}"
    fi
    grep -E "error|warning" "$OUT/build.log" | head -20
fi

# the test programs' OpenBLAS kernels, as `make test` chooses them
grep -qw avx512f /proc/cpuinfo && export OPENBLAS_CORETYPE=SkylakeX

if want gpu; then
    for t in build/tests/gpu/test_* build/tests/unit/test_backend; do
        [ -x "$t" ] || continue
        name=gpu-$(basename "$t")
        run "$name" 300 "$t"
        trc=$?
        if [ $trc -ge 128 ] && [ $trc -ne 137 ] && command -v cuda-gdb >/dev/null; then
            # a crash: where, from cuda-gdb (it debugs host code too)
            gl=$((BUDGET - SECONDS - 30)); [ $gl -gt 120 ] && gl=120
            [ $gl -gt 10 ] && timeout $gl cuda-gdb -batch -ex run -ex bt "$t" >"$OUT/$name-gdb.log" 2>&1
            grep -A25 -E "^Thread .* received signal|^#0" "$OUT/$name-gdb.log" | head -30 | tee -a "$SUMMARY"
        fi
        grep -E "^(FAIL|skip)|^  note:" "$OUT/$name.log" | head -40 | tee -a "$SUMMARY"
        tail -3 "$OUT/$name.log" | tee -a "$SUMMARY"
        if [ $trc -ne 0 ] && [ $trc -lt 128 ] && [ $trc -ne 124 ]; then
            # failures: again with the kernels written since the last GPU run
            # switched back to the paths before them (docs/gpu.md's switches);
            # failures that go away point at those changes
            UT_FRESH_GRADS=0 UT_LINEAR_GELU=0 UT_LINEAR_CE=0 UT_CUDA_LN_BWD=two run "$name-older-paths" 300 "$t"
            note "  $name with UT_FRESH_GRADS=0 UT_LINEAR_GELU=0 UT_LINEAR_CE=0 UT_CUDA_LN_BWD=two:"
            grep -E "^FAIL" "$OUT/$name-older-paths.log" | head -20 | tee -a "$SUMMARY"
            tail -1 "$OUT/$name-older-paths.log" | tee -a "$SUMMARY"
        fi
    done
    # inputs prepared on the loader thread and uploaded from page-locked
    # memory against the host path, on cuda (the same checkpoint, to the bit)
    UTRAIN_DEVICE=cuda run gpu-prepare-paths 300 build/tests/e2e/test_prepare_paths
    grep -E "FAIL" "$OUT/gpu-prepare-paths.log" | head -10 | tee -a "$SUMMARY"
    # the attention kernels under compute-sanitizer (races, barriers, bad accesses)
    # (GPU_CHECK_SANITIZE=0 skips them: racecheck takes about two minutes)
    if command -v compute-sanitizer >/dev/null && [ "${GPU_CHECK_SANITIZE:-0}" = 1 ]; then
        for tool in memcheck racecheck synccheck; do
            UT_GPU_TEST_ROWS=attention run "gpu-sanitizer-$tool" 300 compute-sanitizer --tool $tool --error-exitcode 9 build/tests/gpu/test_cuda_ops
            grep -E "ERROR SUMMARY|^FAIL" "$OUT/gpu-sanitizer-$tool.log" | head -3 | tee -a "$SUMMARY"
        done
    fi
    # the same GPT-2 (2 layers, small) on both devices: the losses of 3 steps agree
    run gpu-gpt2-cpu 300 build/bench/gpu_gpt2_step --device cpu --batch 2 --seq 64 --layers 2 --steps 3 --json
    run gpu-gpt2-cuda 300 build/bench/gpu_gpt2_step --device cuda --batch 2 --seq 64 --layers 2 --steps 3 --json
    note "  cpu:  $(tail -1 "$OUT/gpu-gpt2-cpu.log")"
    note "  cuda: $(tail -1 "$OUT/gpu-gpt2-cuda.log")"
    # and in bf16 (attention on the mma.sync kernels, reading the 16-bit qkv as stored)
    run gpu-gpt2-cpu-bf16 300 build/bench/gpu_gpt2_step --device cpu --batch 2 --seq 64 --layers 2 --steps 3 --bf16 --json
    run gpu-gpt2-cuda-bf16 300 build/bench/gpu_gpt2_step --device cuda --batch 2 --seq 64 --layers 2 --steps 3 --bf16 --json
    note "  cpu bf16:  $(tail -1 "$OUT/gpu-gpt2-cpu-bf16.log")"
    note "  cuda bf16: $(tail -1 "$OUT/gpu-gpt2-cuda-bf16.log")"
    # and with attention on utrain's own mma.sync kernels (the default: cuDNN's where it runs)
    UT_CUDA_ATTN=mma run gpu-gpt2-cuda-bf16-mma 300 build/bench/gpu_gpt2_step --device cuda --batch 2 --seq 64 \
        --layers 2 --steps 3 --bf16 --json
    note "  cuda bf16, UT_CUDA_ATTN=mma: $(tail -1 "$OUT/gpu-gpt2-cuda-bf16-mma.log")"
fi

if want bench; then
    nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv >"$OUT/gpu-state.txt" 2>&1
    note "load before the benchmarks: $(uptime)"
    for prec in ${GPU_CHECK_PRECISIONS:-bf16 tf32}; do
        flag=; [ $prec = tf32 ] && flag=--tf32; [ $prec = bf16 ] && flag=--bf16
        run "bench-utrain-gpt2-$prec" 300 build/bench/gpu_gpt2_step --batch "${GPU_CHECK_BATCH:-8}" --seq 1024 --steps 10 $flag --json
        note "  $(tail -1 "$OUT/bench-utrain-gpt2-$prec.log")"
        if [ $prec = bf16 ]; then # linear's 16-bit output through our rounding pass instead of cuBLASLt's
            UT_CUDA_LT_FUSED=0 run "bench-utrain-gpt2-bf16-unfused" 300 build/bench/gpu_gpt2_step \
                --batch "${GPU_CHECK_BATCH:-8}" --seq 1024 --steps 10 --bf16 --json
            note "  (UT_CUDA_LT_FUSED=0) $(tail -1 "$OUT/bench-utrain-gpt2-bf16-unfused.log")"
            # every activation gradient zeroed and added into, instead of
            # written by its first consumer (docs/engine.md)
            UT_FRESH_GRADS=0 run "bench-utrain-gpt2-bf16-zeroed" 300 build/bench/gpu_gpt2_step \
                --batch "${GPU_CHECK_BATCH:-8}" --seq 1024 --steps 10 --bf16 --json
            note "  (UT_FRESH_GRADS=0) $(tail -1 "$OUT/bench-utrain-gpt2-bf16-zeroed.log")"
            # the MLP's linear and GELU as two ops instead of one (cuBLASLt's GELU epilogue)
            UT_LINEAR_GELU=0 run "bench-utrain-gpt2-bf16-gelu2" 300 build/bench/gpu_gpt2_step \
                --batch "${GPU_CHECK_BATCH:-8}" --seq 1024 --steps 10 --bf16 --json
            note "  (UT_LINEAR_GELU=0) $(tail -1 "$OUT/bench-utrain-gpt2-bf16-gelu2.log")"
            # the head and the loss as two ops: the logits copied out of the
            # padded rows and their gradient back into them
            UT_LINEAR_CE=0 run "bench-utrain-gpt2-bf16-ce2" 300 build/bench/gpu_gpt2_step \
                --batch "${GPU_CHECK_BATCH:-8}" --seq 1024 --steps 10 --bf16 --json
            note "  (UT_LINEAR_CE=0) $(tail -1 "$OUT/bench-utrain-gpt2-bf16-ce2.log")"
            # layer norm's backward as two kernels (dx, then the weight's and
            # bias's partial sums) instead of one pass over g and x
            UT_CUDA_LN_BWD=two run "bench-utrain-gpt2-bf16-ln2" 300 build/bench/gpu_gpt2_step \
                --batch "${GPU_CHECK_BATCH:-8}" --seq 1024 --steps 10 --bf16 --json
            note "  (UT_CUDA_LN_BWD=two) $(tail -1 "$OUT/bench-utrain-gpt2-bf16-ln2.log")"
            # attention on utrain's mma.sync kernels instead of cuDNN's
            UT_CUDA_ATTN=mma run "bench-utrain-gpt2-bf16-mma" 300 build/bench/gpu_gpt2_step \
                --batch "${GPU_CHECK_BATCH:-8}" --seq 1024 --steps 10 --bf16 --json
            note "  (UT_CUDA_ATTN=mma) $(tail -1 "$OUT/bench-utrain-gpt2-bf16-mma.log")"
            # the head's products at 50257 (rows ld16 apart) instead of padded to 50304
            UT_CUDA_LT_PAD=0 run "bench-utrain-gpt2-bf16-nopad" 300 build/bench/gpu_gpt2_step \
                --batch "${GPU_CHECK_BATCH:-8}" --seq 1024 --steps 10 --bf16 --json
            note "  (UT_CUDA_LT_PAD=0) $(tail -1 "$OUT/bench-utrain-gpt2-bf16-nopad.log")"
        fi
        [ $prec = bf16 ] && flag=--amp
        run "bench-torch-gpt2-$prec" 300 python3 bench/torch_gpu_gpt2_step.py --batch "${GPU_CHECK_BATCH:-8}" --seq 1024 --steps 10 $flag --json
        note "  $(tail -1 "$OUT/bench-torch-gpt2-$prec.log")"
    done
    # the issue's own size, batch 64 x 1024 in bf16 (GPU_CHECK_BATCH_BIG=0: not run)
    BIG=${GPU_CHECK_BATCH_BIG:-64}
    if [ "$BIG" != 0 ]; then
        run "bench-utrain-gpt2-bf16-b$BIG" 300 build/bench/gpu_gpt2_step --batch "$BIG" --seq 1024 --steps 10 --bf16 --json
        note "  batch $BIG: $(tail -1 "$OUT/bench-utrain-gpt2-bf16-b$BIG.log")"
        UT_CUDA_ATTN=mma run "bench-utrain-gpt2-bf16-b$BIG-mma" 300 build/bench/gpu_gpt2_step --batch "$BIG" \
            --seq 1024 --steps 10 --bf16 --json
        note "  batch $BIG, UT_CUDA_ATTN=mma: $(tail -1 "$OUT/bench-utrain-gpt2-bf16-b$BIG-mma.log")"
        run "bench-torch-gpt2-bf16-b$BIG" 300 python3 bench/torch_gpu_gpt2_step.py --batch "$BIG" --seq 1024 --steps 10 --amp --json
        note "  batch $BIG: $(tail -1 "$OUT/bench-torch-gpt2-bf16-b$BIG.log")"
    fi
    if [ "${GPU_CHECK_COMPILE:-0}" = 1 ]; then
        run bench-torch-compile-gpt2-bf16 600 python3 bench/torch_gpu_gpt2_step.py --batch "${GPU_CHECK_BATCH:-8}" --seq 1024 --steps 10 --amp --compile --json
        note "  $(tail -1 "$OUT/bench-torch-compile-gpt2-bf16.log")"
        if [ "$BIG" != 0 ]; then # and at the issue's batch
            run "bench-torch-compile-gpt2-bf16-b$BIG" 600 python3 bench/torch_gpu_gpt2_step.py --batch "$BIG" \
                --seq 1024 --steps 10 --amp --compile --json
            note "  batch $BIG: $(tail -1 "$OUT/bench-torch-compile-gpt2-bf16-b$BIG.log")"
        fi
    fi
fi

if want profile; then
    # where the GPT-2 step's time goes, op by op (before `models`, which can
    # take the rest of the budget; UT_PROFILE_OPS: docs/gpu.md;
    # gpu: the GPU's own time per op from timing events, nothing waited for;
    # GPU_CHECK_PROFILE_MODE=1: the host's clock around a wait per op)
    for prec in ${GPU_CHECK_PROFILE:-bf16}; do
        flag=; [ $prec = bf16 ] && flag=--bf16
        UT_PROFILE_OPS=${GPU_CHECK_PROFILE_MODE:-gpu} run profile-gpt2-$prec 300 build/bench/gpu_gpt2_step \
            --batch "${GPU_CHECK_BATCH:-8}" --seq 1024 --steps 3 $flag
        grep -A40 "op profile" "$OUT/profile-gpt2-$prec.log" | tee -a "$SUMMARY"
        # the same step's products alone, shape by shape (what linear's share is made of)
        run gemm-gpt2-$prec 120 build/bench/gpu_gemm --batch "${GPU_CHECK_BATCH:-8}" --precision $prec
        cat "$OUT/gemm-gpt2-$prec.log" | tee -a "$SUMMARY"
    done
    # one optimizer step over GPT-2 124M's parameters on the GPU, each
    # optimizer (Adafactor: six launches a step), beside PyTorch's
    run optim-gpu 120 build/bench/optim_step --device cuda --steps 10
    run optim-gpu-torch 120 python3 bench/torch_optim_step.py --device cuda --steps 10
    note "optimizer step, GPT-2 124M on the GPU (utrain, then PyTorch; median ms):"
    grep -h '^{' "$OUT/optim-gpu.log" "$OUT/optim-gpu-torch.log" 2>/dev/null | tee -a "$SUMMARY"
fi

if want models; then
    # the benchmark table's other rows, utrain against PyTorch on this GPU:
    # the Fashion-MNIST CNN's epoch (configs/fmnist_cnn.yml through `utrain
    # train`; bench/torch_fmnist.py) and the BERT-base training step at
    # 32 x 128 (bench/bert_step.c; bench/torch_bert_step.py), in float32 (as
    # the issue's PyTorch figures are), TF32 and bf16; then ZeRO-Offload's
    # device memory against zero2's
    . bench/common.sh # jget, calc, fmnist_loop_s
    M=/tmp/utrain-models; rm -rf $M; mkdir -p $M
    FM=/usr/share/datasets/fashion-mnist
    if [ ! -f $FM/train-images-idx3-ubyte.gz ]; then
        FM=$M/fmnist
        python3 bench/make_fmnist_like.py $FM
        note "models: no Fashion-MNIST here: a synthetic set of its shapes (bench/make_fmnist_like.py); the times hold, the accuracies are that set's"
    fi
    sets=()
    for f in train_images:train-images-idx3 train_labels:train-labels-idx1 test_images:t10k-images-idx3 \
        test_labels:t10k-labels-idx1; do
        sets+=(--set "data.${f%%:*}=$FM/${f#*:}-ubyte.gz")
    done
    run models-cnn-utrain 240 build/utrain train configs/fmnist_cnn.yml --set device=cuda --set output_dir=$M/runs \
        --set train.eval_strategy=no --set train.progress=lines "${sets[@]}" &&
        run models-cnn-utrain-test 120 build/utrain test $M/runs/fmnist_cnn
    uloop=$(fmnist_loop_s $M/runs/fmnist_cnn/metrics.jsonl 2>/dev/null)
    uacc=$(tr -d '\n' <$M/runs/fmnist_cnn/test_results.json 2>/dev/null | jget accuracy)
    run models-cnn-torch 240 python3 bench/torch_fmnist.py --device cuda --data $FM --json
    j=$(tail -1 "$OUT/models-cnn-torch.log")
    tloop=$(jget epoch_s <<<"$j")
    line="  fmnist cnn epoch (55,000 images, batch 64, fp32): utrain ${uloop:-?} s (test acc ${uacc:-?}),"
    line+=" PyTorch ${tloop:-?} s (test acc $(jget test_accuracy <<<"$j"))"
    [ -n "$uloop" ] && [ -n "$tloop" ] && line+=", ratio $(calc %.3f "$uloop/$tloop")"
    note "$line"
    for prec in fp32 tf32 bf16; do
        flag=; [ $prec = tf32 ] && flag=--tf32; [ $prec = bf16 ] && flag=--bf16
        run models-bert-utrain-$prec 200 build/bench/bert_step --device cuda --steps 10 $flag --json
        run models-bert-torch-$prec 200 python3 bench/torch_bert_step.py --device cuda --steps 10 $flag --json
        u=$(tail -1 "$OUT/models-bert-utrain-$prec.log"); t=$(tail -1 "$OUT/models-bert-torch-$prec.log")
        um=$(jget median_s <<<"$u"); tm=$(jget median_s <<<"$t")
        ua=$(jget activation_peak_bytes <<<"$u"); tmax=$(jget max_memory_allocated <<<"$t")
        line="  bert-base step 32 x 128 $prec: utrain ${um:-?} s (activations ${ua:-?} B), PyTorch ${tm:-?} s"
        line+=" (max allocated ${tmax:-?} B)"
        [ -n "$um" ] && [ -n "$tm" ] && line+=", ratio $(calc %.3f "$um/$tm")"
        note "$line"
        # the fused masked / packed-sequence attention against the materialised
        # path: always in bf16, and wherever the fused run failed
        if [ $prec = bf16 ] || [ -z "$um" ]; then
            run models-bert-utrain-$prec-unfused 200 env UT_CUDA_ATTN=unfused build/bench/bert_step --device cuda \
                --steps 10 $flag --json
            uu=$(jget median_s <<<"$(tail -1 "$OUT/models-bert-utrain-$prec-unfused.log")")
            line="  bert-base step 32 x 128 $prec, attention unfused (UT_CUDA_ATTN=unfused): utrain ${uu:-?} s"
            [ -n "$um" ] && [ -n "$uu" ] && line+=", fused / unfused $(calc %.3f "$um/$uu")"
            note "$line"
        fi
    done
    # ZeRO-Offload's device memory against zero2's: GPT-2 124M, one rank,
    # bf16, 5 steps each; the trainer's own accounting of the model state
    # on the device and in host memory (its log), and its tokens/s
    random_tokens "$M/tokens.bin" $((8 * 1025 * 8))
    gpt2_yml "$M" 5 5 "precision: bf16" "dist: {strategy: zero2}"
    for off in none cpu; do
        run models-gpt2-zero2-offload-$off 200 build/utrain train "$M/gpt2.yml" --set experiment_name=zero2_$off \
            --set dist.offload_optimizer=$off
        note "  gpt2 124M zero2, offload_optimizer $off: $(grep -h -o -E '(memory|optimizer offload) rank 0.*' \
            $M/runs/zero2_$off/logger_logs/*.log 2>/dev/null | xargs) $(grep -o '"tokens_per_s": [0-9.e+]*' \
            $M/runs/zero2_$off/metrics.jsonl 2>/dev/null | tail -1)"
    done
    rm -rf $M
fi

if want minilm; then
    # MiniLM fine-tuning on Rotten Tomatoes end to end (configs/rt_minilm.yml:
    # 2 epochs, dev evaluation and a checkpoint after each, the test), both
    # sides on the GPU. The tokenizer and the data come in .gpu-minilm
    # (scripts/gpu-minilm.sh); the weights are random in MiniLM's shapes
    # (bench/make_minilm_like.py: the pretrained file does not fit in a
    # call), so the times are those of the pretrained run and the
    # accuracies are not.
    if [ -f .gpu-minilm/model/config.json ]; then
        W=/tmp/utrain-minilm-like; rm -rf $W
        run minilm-weights 120 python3 bench/make_minilm_like.py .gpu-minilm/model $W
        DEVICE=cuda MINILM_MODEL=$W RT_DATA=.gpu-minilm/rt THREADS=$NPROC PYTHON=python3 \
            run minilm 420 bench/run_minilm.sh build
        grep -A4 "^== MiniLM" "$OUT/minilm.log" | tee -a "$SUMMARY"
        rm -rf $W
    else
        note "minilm: no .gpu-minilm/ (run scripts/gpu-minilm.sh here, and carry .gpu-minilm)"
    fi
fi

if want signals; then
    # stops under mpirun (SIGTERM to the launcher, Ctrl-C, a killed rank):
    # on the CPU, then with device cuda, the output unbuffered so that a hang
    # shows which test it is in
    for dev in cpu cuda; do
        UTRAIN_DEVICE=$dev run signals-$dev 150 stdbuf -oL -eL build/tests/dist/test_failures
        grep -E "^(ok|FAIL)|passed" "$OUT/signals-$dev.log" | tail -14 | sed "s/^/  $dev: /" | tee -a "$SUMMARY"
    done
    ps -eo pid,ppid,stat,etime,args | grep -E "utrain|mpirun" | grep -v grep | cut -c1-160 | tee -a "$SUMMARY"
fi

if want suite; then
    # the whole suite with device: cuda as every config's default (as make
    # test-sim does with sim): tests that compare against figures made on the
    # CPU to the bit fail here by nature; the failures are listed to read
    UTRAIN_DEVICE=cuda run suite-cuda "${GPU_CHECK_SUITE_LIMIT:-400}" tests/run.sh build
    awk '/^== /{t=$2} /FAIL|broken/{print t": "$0}' "$OUT/suite-cuda.log" | head -60 | tee -a "$SUMMARY"
    tail -1 "$OUT/suite-cuda.log" | tee -a "$SUMMARY"
fi

if want trainer; then
    # GPT-2 124M through `utrain train` on the GPU (random tokens: the machine
    # has no corpus), against the bare step of bench/gpu_gpt2_step in the
    # same call: what the trainer adds around the step
    T=$OUT/trainer; mkdir -p "$T"
    random_tokens "$T/tokens.bin" $((8 * 1025 * 64))
    gpt2_yml "$T" 30 10
    for prec in bf16 fp32; do
        name=trainer-gpt2-$prec; flag=--bf16
        [ $prec = fp32 ] && name=trainer-gpt2-tf32 flag=--tf32
        run $name 300 build/utrain train "$T/gpt2.yml" --set train.precision=$prec \
            --set train.tf32=$([ $prec = fp32 ] && echo true || echo false) --set experiment_name=$name
        note "  $name: $(grep -o '"tokens_per_s": [0-9.e+]*' "$T/runs/$name/metrics.jsonl" 2>&1 | tail -2 | xargs)"
        note "  $name: $(grep -o '"mfu": [0-9.e+-]*' "$T/runs/$name/metrics.jsonl" 2>&1 | tail -2 | xargs)"
        run bench-step-gpt2-$prec 300 build/bench/gpu_gpt2_step --batch 8 --seq 1024 --steps 10 $flag --json
        note "  $(tail -1 "$OUT/bench-step-gpt2-$prec.log")"
    done
    # one step of the trainer profiled op by op (train.profile_step, the GPU's timing events)
    run trainer-gpt2-profile 300 build/utrain train "$T/gpt2.yml" --set train.precision=bf16 \
        --set train.max_steps=4 --set train.profile_step=2 --set experiment_name=profile
    sed -n '/utrain step profile/,/over their time/p' "$OUT/trainer-gpt2-profile.log" | tee -a "$SUMMARY"
    rm -rf "$T"
fi

if want cpu-bf16; then
    run cpu-test_dnnl 300 build/tests/unit/test_dnnl
    run cpu-test_precision 300 build/tests/unit/test_precision
    grep -E "FAIL|peak" "$OUT/cpu-test_precision.log" | head -5 | tee -a "$SUMMARY"
    run cpu-test_plan 300 build/tests/e2e/test_plan
    grep -E "FAIL" "$OUT/cpu-test_plan.log" | head -5 | tee -a "$SUMMARY"
    run cpu-test_amp 600 build/tests/dist/test_amp
    for prec in fp32 bf16; do
        run "cpu-gpt2-step-$prec" 600 build/bench/gpt2_step --steps 4 --threads "$NPROC" --seq 256 --precision $prec --json
        note "  $(tail -1 "$OUT/cpu-gpt2-step-$prec.log")"
    done
fi

if want llmc; then
    # llm.c's GPT-2 124M (random init, bf16, its own attention: built without
    # cuDNN) on random tokens, at the benchmarks' batch: tokens/s of its steps
    B=${GPU_CHECK_BATCH:-8}
    if [ -f .llmc/train_gpt2.cu ]; then
        L=/tmp/utrain-llmc; rm -rf $L; cp -r .llmc $L; mkdir -p $L/lib
        # CUDA 13's cudaMemAdvise takes a location: its managed-memory
        # fallback (never wanted on these machines) is taken out; NVML is the
        # driver's libnvidia-ml.so.1, linked through a name the linker finds
        sed -i -e '/cudaMemAdvise(\*out, bytes, cudaMemAdviseSetPreferredLocation/d' \
            -e 's|if(err == cudaErrorMemoryAllocation) {|if (0) {|' $L/llmc/cuda_utils.cuh
        nvml=$(ldconfig -p | awk '/libnvidia-ml.so.1 /{print $NF; exit}')
        [ -n "$nvml" ] && ln -sf "$nvml" $L/lib/libnvidia-ml.so
        run llmc-build 600 bash -c "cd $L && nvcc --threads=0 -t=0 --use_fast_math -std=c++17 -O3 \
            -gencode arch=compute_90,code=sm_90 -DENABLE_BF16 train_gpt2.cu -lcublas -lcublasLt -L$L/lib \
            -lnvidia-ml -o train_gpt2cu"
        BIG=${GPU_CHECK_BATCH_BIG:-64}
        for b in $B $([ "$BIG" != 0 ] && [ "$BIG" != "$B" ] && echo "$BIG"); do
            random_tokens "$L/tok.bin" $((b * 1024 * 40 + 1))
            run llmc-gpt2-bf16-b$b 300 $L/train_gpt2cu -i $L/tok.bin -j $L/tok.bin -e d12 -b "$b" -t 1024 -x 20 \
                -v 100000 -s 100000 -h 0 -n 0
            note "  llm.c $(cut -c1-12 .llmc/COMMIT) GPT-2 124M bf16 B=$b T=1024: median of steps 11-20: $(grep -o \
                '[0-9.]* ms | -\?[0-9.]*% bf16 MFU | [0-9]* tok/s' "$OUT/llmc-gpt2-bf16-b$b.log" | tail -10 | sort -n | sed -n 5p)"
        done
    else
        note "llmc: no .llmc/ (run scripts/gpu-llmc.sh where llm.c was fetched, and carry .llmc)"
    fi
fi

# Every log in one archive: the device tool brings back at most 8 files.
(cd "$OUT" && tar czf logs.tgz --remove-files -- *.log env.txt gpu-state.txt 2>/dev/null)

echo
echo "==== summary ($SUMMARY) ===="
cat "$SUMMARY"
