#!/usr/bin/env bash
# One call on a GPU machine: configure + build with the CUDA backend, run the CUDA tests (op by
# op against the CPU backend, and model logits), the CPU unit tests, optionally benchmark
# 27B-shaped models, and print a short table.
#
#   tools/gpu-check.sh [--memcheck] [--no-cpu-tests] [--bench] [--models LIST] [--spec] [--spec27] [--ncu]
#                      [--long] [--llama] [--prefill-ab] [--layout-ab] [--ab PATCH] [--filter F]
#                      [--serve] [--kernels] [--budget S] [LOG_DIR]
#                                     run from the repo root on the GPU machine; full logs and
#                                     the gtest XML go to LOG_DIR (default build-gpu-check).
#                                     --memcheck also runs the op tests under compute-sanitizer
#                                     (memcheck: bad accesses; racecheck: shared-memory races)
#                                     --no-cpu-tests skips building the other targets and the
#                                     CPU unit tests (the CUDA tests still build the CLI)
#                                     --bench makes 27B-shaped random models (--models, default
#                                     mix-q4_k_m,q8_0; made while the CUDA tests run) and runs
#                                     `deltaflash bench --profile` on each: copy bandwidth, decode
#                                     tok/s and weight GB/s, prefill 512, the 1..32-row forward
#                                     curve, per-op tables (bench_<type>.txt/.json in LOG_DIR)
#                                     (--shape tiny|0.8b|27b, default 27b)
#                                     --spec: speculative decoding on the GPU: a 27B-shaped
#                                     mix-q4_k_m target with a 27B-shaped drafter (5 layers,
#                                     hidden 5120, block 16): `bench --draft` (draft and verify
#                                     step times, projected speedups), and bench/spec_demo.sh on
#                                     the demo pair (spec_27b.txt, spec_demo.txt in LOG_DIR),
#                                     plus the demo target's plain decode with --cuda-graphs off
#                                     and on (spec_graphs_off/on.txt) and the demo pair on
#                                     held-out code prompts, 256 tokens each
#                                     (bench/heldout_code_prompts.py; spec_heldout.txt, if time is left)
#                                     --spec27: only the 27B-shaped pair's `bench --draft`
#                                     (spec_27b.txt)
#                                     --ncu: with --bench, also profile six tensor-core matmul
#                                     kernels of a decode step with Nsight Compute (speed of
#                                     light, occupancy, warp stall reasons; ncu_<type>.txt in
#                                     other_logs.tgz, key lines in the summary) and time every
#                                     kernel of a decode forward (tools/ncu-step.sh; the table
#                                     in the summary)
#                                     --serve: the server on the demo pair under 8 concurrent
#                                     clients, --parallel 1 / 4 / 4 with --draft
#                                     (bench/serve_concurrency.sh; serve.txt in LOG_DIR)
#                                     --long: with --bench, also prompt tok/s at 4096 and 16384
#                                     tokens, and decode after 1024 and 32768 tokens of context
#                                     (appended to bench_<type>.txt)
#                                     --ab PATCH: also build the tree with PATCH applied (a
#                                     `git diff` carried as an untracked file; applied to a copy
#                                     under /tmp/deltaflash-ab), run its CUDA tests (--filter)
#                                     and, with --bench, each model's bench (decode, prefill 512,
#                                     the rows curve) beside ours: bench_<type>.txt "### B" and
#                                     the summary; with --kernels, its matmul_kernels and
#                                     gdn_kernels as kernels_b.txt
#                                     --layout-ab: with --bench, also each model's bench with
#                                     --weight-layout gguf (the file's rows instead of tiles)
#                                     --prefill-ab: with --bench, also prompts of 128, 256 and 512
#                                     tokens (one chunk each) with --prefill-matmul int8 and f16,
#                                     for the prompt products' row threshold (appended to
#                                     bench_<type>.txt)
#                                     --kernels: every CUDA matmul kernel alone on 27B-shaped
#                                     weights, 1-32 rows (bench/matmul_kernels.cpp), and the
#                                     delta-rule kernels (bench/gdn_kernels.cpp; kernels.txt)
#                                     --llama: with --bench, also build llama.cpp's llama-bench for
#                                     sm_90 from third_party/llama-src.tar.xz (carry it: made by
#                                     bench/pack-llama-source.sh; built in the background during
#                                     the whole run) and run it last on the same model files (kept
#                                     until then), flash attention on: pp512 / pp4096 (and pp16384
#                                     with --long) / tg32, and
#                                     tg32 after 32768 tokens when time is left (llama_<type>.txt)
#                                     --filter F: gtest filter for the CUDA tests (default all)
#                                     --budget S: seconds the whole script may take (default
#                                     470); the tests get what the bench leaves, so the bench
#                                     numbers come even when a test runs long
#   tools/gpu-check.sh --fetch-deps   run on the (Debian 12) dev machine: downloads the build
#                                     dependencies as .deb files into third_party/gpu-deps/
#
# LOG_DIR ends with at most 8 files (the GPU machine returns no more): summary.txt,
# test_cuda_ops.log, the bench files, and other_logs.tgz with the rest.
#
# The GPU machines reach no package registry. When third_party/gpu-deps/ holds .deb files
# (carry that path along), they are unpacked under /tmp/deltaflash-deps (never into /) and
# CMake finds the libraries there; otherwise the system's packages are used.
set -euo pipefail
cd "$(dirname "$0")/.."

DEPS_DEBS=(nlohmann-json3-dev libpcre2-dev libpcre2-8-0 libfmt-dev libfmt9 libcli11-dev libgtest-dev
  pkgconf pkgconf-bin libpkgconf3 libcpp-httplib-dev libcpp-httplib0.11 libssl-dev libssl3 zlib1g-dev zlib1g
  libbrotli-dev libbrotli1)
DEB_DIR=third_party/gpu-deps

if [ "${1:-}" = "--fetch-deps" ]; then  # on the dev machine
  mkdir -p "$DEB_DIR"
  (cd "$DEB_DIR" && apt-get download "${DEPS_DEBS[@]}")
  ls -la "$DEB_DIR"
  exit 0
fi

MEMCHECK=0
CPU_TESTS=1
BENCH=0
SPEC=0
NCU=0
SERVE=0
KERNELS=0
LLAMA=0
LONG=0
LAYOUT_AB=0
AB_PATCH=""
PREFILL_AB=0
MODELS=mix-q4_k_m,q8_0
FILTER='*'
SHAPE=27b
BUDGET=470
LOG=build-gpu-check
while [ $# -gt 0 ]; do
  case "$1" in
    --memcheck) MEMCHECK=1 ;;
    --no-cpu-tests) CPU_TESTS=0 ;;
    --bench) BENCH=1 ;;
    --spec) SPEC=1 ;;
    --spec27) SPEC=2 ;;
    --ncu) NCU=1 ;;
    --serve) SERVE=1 ;;
    --kernels) KERNELS=1 ;;
    --llama) LLAMA=1 ;;
    --long) LONG=1 ;;
    --layout-ab) LAYOUT_AB=1 ;;
    --ab) AB_PATCH=$2; shift ;;
    --prefill-ab) PREFILL_AB=1 ;;
    --models) MODELS=$2; shift ;;
    --shape) SHAPE=$2; shift ;;
    --budget) BUDGET=$2; shift ;;
    --filter) FILTER=$2; shift ;;
    -*) echo "gpu-check: unknown option $1" >&2; exit 2 ;;
    *) LOG=$1 ;;
  esac
  shift
done
BUILD=build-cuda
JOBS=16
mkdir -p "$LOG"
LOG=$(cd "$LOG" && pwd)
T0=$(date +%s)
elapsed() { echo "$(( $(date +%s) - T0 ))s"; }
left() { echo "$(( BUDGET - ($(date +%s) - T0) ))"; }  # seconds of the budget left
MODEL_DIR=/tmp/deltaflash-models

# --- dependencies carried as .deb files ---
CMAKE_DEPS=()
if compgen -G "$DEB_DIR/*.deb" >/dev/null; then
  PREFIX=/tmp/deltaflash-deps
  rm -rf "$PREFIX" && mkdir -p "$PREFIX"
  for f in "$DEB_DIR"/*.deb; do
    if command -v dpkg-deb >/dev/null; then
      dpkg-deb -x "$f" "$PREFIX"
    else  # a .deb is an ar archive holding data.tar.*
      tmp=$(mktemp -d) && (cd "$tmp" && ar x "$OLDPWD/$f" && tar -xf data.tar.* -C "$PREFIX") && rm -rf "$tmp"
    fi
  done
  # pkg-config files name their install prefix; point them at the unpacked copy.
  find "$PREFIX" -name '*.pc' -exec sed -i "s|^prefix=/usr\$|prefix=$PREFIX/usr|" {} +
  export PKG_CONFIG_PATH="$PREFIX/usr/lib/x86_64-linux-gnu/pkgconfig:$PREFIX/usr/share/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
  CMAKE_DEPS+=("-DCMAKE_PREFIX_PATH=$PREFIX/usr")
  if ! command -v pkg-config >/dev/null; then
    mkdir -p "$PREFIX/bin"
    cat >"$PREFIX/bin/pkg-config" <<EOF
#!/bin/sh
LD_LIBRARY_PATH="$PREFIX/usr/lib/x86_64-linux-gnu" exec "$PREFIX/usr/bin/pkgconf" "\$@"
EOF
    chmod +x "$PREFIX/bin/pkg-config"
    CMAKE_DEPS+=("-DPKG_CONFIG_EXECUTABLE=$PREFIX/bin/pkg-config")
  fi
  # cpp-httplib's shared library needs brotli (and OpenSSL, zlib) at link and run time; the
  # image's own OpenSSL and zlib are preferred, Debian's copies only fill in what is missing.
  RTLIB=$PREFIX/rtlib
  mkdir -p "$RTLIB"
  for lib in libcpp-httplib.so.0.11 libbrotlicommon.so.1 libbrotlidec.so.1 libbrotlienc.so.1 libssl.so.3 libcrypto.so.3 libz.so.1; do
    case "$lib" in libbrotli*|libcpp-httplib*) ;; *) ldconfig -p 2>/dev/null | grep -q "[[:space:]]$lib[[:space:]]" && continue ;; esac
    src=$(find "$PREFIX" -name "$lib*" \( -type f -o -type l \) | head -1)
    [ -n "$src" ] && ln -sf "$src" "$RTLIB/$lib"
  done
  export LD_LIBRARY_PATH="$RTLIB${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  echo "gpu-check: dependencies from $DEB_DIR unpacked under $PREFIX (runtime libs: $(ls "$RTLIB" | tr '\n' ' '))"
fi

# --- llama.cpp, the peer, built in the background (--llama) ---
llama_pid=""
LLAMA_BENCH=/tmp/llama-build/bin/llama-bench
if [ "$LLAMA" = 1 ]; then
  if [ -f third_party/llama-src.tar.xz ]; then
    (
      rm -rf /tmp/llama-src /tmp/llama-build && mkdir -p /tmp/llama-src && tar xJf third_party/llama-src.tar.xz -C /tmp/llama-src &&
        cmake -S /tmp/llama-src -B /tmp/llama-build -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON -DLLAMA_OPENSSL=OFF \
          -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF \
          -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_COMMON=ON -DGGML_CCACHE=OFF \
          -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 &&
        nice cmake --build /tmp/llama-build --target llama-bench -j"$JOBS"
    ) >"$LOG/llama_build.log" 2>&1 &
    llama_pid=$!
  else
    echo "gpu-check: --llama needs third_party/llama-src.tar.xz (bench/pack-llama-source.sh, then carry it)"
  fi
fi

# --- build ---
if ! command -v nvcc >/dev/null && [ -x /usr/local/cuda/bin/nvcc ]; then
  CMAKE_DEPS+=("-DCMAKE_CUDA_COMPILER=/usr/local/cuda/bin/nvcc")
fi
GEN=()
command -v ninja >/dev/null && GEN=(-G Ninja)
[ -f "$BUILD/CMakeCache.txt" ] && ! grep -q "CMAKE_GENERATOR:INTERNAL=${GEN[1]:-Unix Makefiles}" "$BUILD/CMakeCache.txt" && rm -rf "$BUILD"
# The CUDA test binary first (core, CUDA library, CLI), so its results come even when an
# unrelated target of a shared work tree does not build; then everything else. One CUDA
# architecture (sm_90a, the H200's) halves the device-code compile time.
build_rc=0
{
  cmake --version | head -1; (nvcc --version || /usr/local/cuda/bin/nvcc --version) | tail -2; c++ --version | head -1
  cmake -S . -B "$BUILD" "${GEN[@]}" -DCMAKE_BUILD_TYPE=Release -DDELTAFLASH_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90a \
    "${CMAKE_DEPS[@]}" &&
    cmake --build "$BUILD" -j"$JOBS" --target test_cuda_ops test_demo_drafter deltaflash \
      $([ "$KERNELS" = 1 ] && echo matmul_kernels gdn_kernels)
} >"$LOG/build.log" 2>&1 || build_rc=$?
echo "gpu-check: build of test_cuda_ops rc=$build_rc ($(elapsed))"
if [ "$build_rc" -ne 0 ]; then
  grep -E "error|Error|FAILED|undefined" "$LOG/build.log" | head -40 || true
  tail -30 "$LOG/build.log"
  exit 1
fi

# --- --ab PATCH: the tree with PATCH applied, built beside ours in the background ---
AB_SRC=/tmp/deltaflash-ab
B_BUILD=$AB_SRC/build-cuda
ab_pid=""
if [ -n "$AB_PATCH" ]; then
  AB_PATCH=$(cd "$(dirname "$AB_PATCH")" && pwd)/$(basename "$AB_PATCH")
  (
    rm -rf "$AB_SRC" && mkdir -p "$AB_SRC" &&
      tar --exclude=./build-cuda --exclude=./build --exclude=./build-gpu-check --exclude=./third_party/llama-src.tar.xz \
        --exclude=./third_party/llama.cpp-src --exclude=./node_modules \
        -cf - . | tar -xf - -C "$AB_SRC" &&
      cd "$AB_SRC" && { git apply -p1 "$AB_PATCH" 2>/dev/null || patch -p1 <"$AB_PATCH"; } &&
      cmake -S . -B "$B_BUILD" "${GEN[@]}" -DCMAKE_BUILD_TYPE=Release -DDELTAFLASH_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90a \
        "${CMAKE_DEPS[@]}" &&
      nice cmake --build "$B_BUILD" -j"$JOBS" --target test_cuda_ops deltaflash \
        $([ "$KERNELS" = 1 ] && echo matmul_kernels gdn_kernels)
  ) >"$LOG/build_b.log" 2>&1 &
  ab_pid=$!
fi
# Waits for the B build; true when it built.
ab_built() {
  [ -n "$ab_pid" ] || return 1
  if [ "$ab_pid" != done ]; then
    wait "$ab_pid" && ab_rc=0 || ab_rc=$?
    ab_pid=done
    echo "gpu-check: B build ($AB_PATCH) rc=$ab_rc ($(elapsed))"
  fi
  [ "$ab_rc" = 0 ]
}
ab_rc=skipped

GPU=$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | head -1 || true)

# Resource usage of the matmul kernels and the instruction mix of the decode Q4_K one (no GPU time).
if [ "$BENCH" = 1 ]; then
  OBJ=$(find "$BUILD" -name 'matvec.cu.o' | head -1)
  DUMP=$(command -v cuobjdump || ls /usr/local/cuda/bin/cuobjdump 2>/dev/null || true)
  if [ -n "$OBJ" ] && [ -n "$DUMP" ]; then
    {
      "$DUMP" -res-usage "$OBJ" 2>&1 | grep -A1 mv_kernel | grep -E "Function|REG" | paste - - | sed -E 's/.*mv_kernelILNS_8GgmlTypeE([0-9]+)ELi([0-9]+)E[^ ]*/type \1 NR \2/' || true
      echo "--- opcode counts, mv_kernel<Q4_K, NR=1> ---"
      "$DUMP" -sass "$OBJ" 2>/dev/null | awk '/Function : .*mv_kernelILNS_8GgmlTypeE12ELi1E/{on=1; next} /Function :/{on=0} on' |
        grep -oE '^ +/\*[0-9a-f]{4}\*/ +(@!?U?P[0-9T]+ +)?[A-Z][A-Z0-9_.]*' | awk '{print $NF}' | sort | uniq -c | sort -rn | head -40 || true
    } >"$LOG/sass_matvec.txt" 2>&1 || true
  fi
fi

# --- models for the bench, made in the background while the tests run ---
make_pid=""
if [ "$BENCH" = 1 ]; then
  mkdir -p "$MODEL_DIR"
  (
    for t in ${MODELS//,/ }; do
      # 27B shape: ~17 GB as mix-q4_k_m, ~29 GB as q8_0; the disk is 64 GB.
      free_gb=$(df -BG --output=avail "$MODEL_DIR" | tail -1 | tr -dc 0-9)
      need_gb=20
      case "$t" in q8_0|q6_k|q5_k|mix-iq4_xs|iq4_xs|q4_k|q4_0) need_gb=32 ;; f16|bf16|f32) need_gb=999 ;; esac
      if [ "${free_gb:-0}" -lt "$need_gb" ]; then
        echo "not made: ${free_gb} GB free, ~${need_gb} GB needed" >"$LOG/make_$t.log"
        continue
      fi
      m0=$(date +%s)
      "$BUILD/deltaflash" make-model --arch qwen35 --shape "$SHAPE" --type "$t" --seed 1 -o "$MODEL_DIR/m27-$t.gguf" -q \
        >"$LOG/make_$t.log" 2>&1 || echo "make-model $t failed" >>"$LOG/make_$t.log"
      echo "make-model $t: $(( $(date +%s) - m0 )) s, $(stat -c %s "$MODEL_DIR/m27-$t.gguf" 2>/dev/null) bytes" >>"$LOG/make_$t.log"
    done
  ) &
  make_pid=$!
fi

# --- CUDA tests (with --bench: what the benches asked for leave of the budget) ---
cuda_rc=0
test_limit=420
n_models=$(echo "${MODELS//,/ }" | wc -w)
# A model's bench ~60 s (~90 s with its --layout-ab rerun), --long ~120 s a model, --ncu ~90 s a
# model, --llama ~45 s a model (~90 s with --long; its build overlaps the run), --spec ~60 s,
# --kernels ~80 s (H200, session 9; H100, session 14); --prefill-ab ~90 s a model (an estimate:
# six model loads).
bench_reserve=$(( 20 + (LAYOUT_AB == 1 ? 90 : 60) * n_models + (LONG == 1 ? 120 * n_models : 0) +
  (NCU == 1 ? 90 * n_models : 0) + (LLAMA == 1 ? (LONG == 1 ? 90 : 45) * n_models : 0) +
  (SPEC == 1 ? 60 : 0) + (KERNELS == 1 ? 80 : 0) + (PREFILL_AB == 1 ? 90 * n_models : 0) +
  (${#AB_PATCH} > 0 ? 45 * n_models + (KERNELS == 1 ? 80 : 0) : 0) ))
[ "$BENCH" = 1 ] && test_limit=$(( $(left) - bench_reserve ))
[ -n "$AB_PATCH" ] && test_limit=$(( test_limit / 2 ))  # (the other half for B's tests)
[ "$test_limit" -lt 60 ] && test_limit=60
timeout "$test_limit" "$BUILD/tests/test_cuda_ops" --gtest_filter="$FILTER" --gtest_output="xml:$LOG/test_cuda_ops.xml" \
  >"$LOG/test_cuda_ops.log" 2>&1 || cuda_rc=$?
# The demo drafter against its float64 reference and the live loop against the offline
# procedure, on CUDA as on the CPU (appended to the same log).
timeout 120 "$BUILD/tests/test_demo_drafter" --gtest_filter="*/cuda" >>"$LOG/test_cuda_ops.log" 2>&1 || cuda_rc=$?
echo "gpu-check: CUDA tests rc=$cuda_rc ($(elapsed), limit ${test_limit}s)"
ab_test_rc=skipped
if ab_built; then
  ab_test_rc=0
  timeout "$test_limit" "$B_BUILD/tests/test_cuda_ops" --gtest_filter="$FILTER" >"$LOG/test_cuda_ops_b.log" 2>&1 ||
    ab_test_rc=$?
  echo "gpu-check: B's CUDA tests rc=$ab_test_rc ($(elapsed))"
elif [ -n "$AB_PATCH" ]; then
  grep -E "error|rejected|FAILED|does not apply" "$LOG/build_b.log" | head -20 || tail -20 "$LOG/build_b.log"
fi

mem_rc=skipped

mem_rc=skipped
if [ "$MEMCHECK" = 1 ]; then
  SAN=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null || true)
  if [ -n "$SAN" ]; then
    mem_rc=0
    timeout 240 "$SAN" --tool memcheck --error-exitcode 99 "$BUILD/tests/test_cuda_ops" \
      --gtest_filter='CudaOps.*:Types/CudaMatmul.*' >"$LOG/memcheck.log" 2>&1 || mem_rc=$?
    # Shared-memory races in the kernels that use shared memory.
    timeout 240 "$SAN" --tool racecheck --error-exitcode 99 "$BUILD/tests/test_cuda_ops" \
      --gtest_filter='CudaOps.KvStoreAndAttention:CudaOps.GdnDeltaRule:CudaOps.RmsNorm:CudaOps.GdnConvNormGatesEqualsSeparateOps:CudaOps.ArgmaxRowsStrided' >>"$LOG/memcheck.log" 2>&1 || mem_rc=$?
    grep -E "ERROR SUMMARY|RACECHECK SUMMARY" "$LOG/memcheck.log" || true
  else
    mem_rc="no compute-sanitizer"
  fi
  echo "gpu-check: memcheck rc=$mem_rc ($(elapsed))"
fi

# --- bench: 27B-shaped models, one process each ---
bench_rc=skipped
if [ "$BENCH" = 1 ]; then
  wait "$make_pid" || true
  echo "gpu-check: models made ($(elapsed)): $(find "$MODEL_DIR" -name '*.gguf' | wc -l) file(s)"
  bench_rc=0
  # With --llama, our benches leave llama-bench its share of the budget (it runs last): ~45 s a
  # model, ~90 s with --long (its 16384-token prompt and the decode after 32768 tokens).
  llama_reserve=$(( LLAMA == 1 ? (LONG == 1 ? 90 : 45) * n_models : 0 ))
  ours_left() { echo $(( $(left) - llama_reserve )); }
  for t in ${MODELS//,/ }; do
    f="$MODEL_DIR/m27-$t.gguf"
    if [ ! -s "$f" ]; then echo "gpu-check: no model $f" | tee -a "$LOG/bench_$t.txt"; bench_rc=1; continue; fi
    lim=$(( $(ours_left) - 10 ))
    if [ "$lim" -lt 30 ]; then echo "gpu-check: no time left for the $t bench" | tee -a "$LOG/bench_$t.txt"; bench_rc=1; continue; fi
    rc=0
    timeout "$lim" "$BUILD/deltaflash" bench -m "$f" -p 512 -n 32 -r 2 --device cuda --profile \
      --json-out "$LOG/bench_$t.json" >"$LOG/bench_$t.txt" 2>&1 || rc=$?
    echo "gpu-check: bench $t rc=$rc ($(elapsed))"
    [ "$rc" -ne 0 ] && bench_rc=$rc
    if [ "$LAYOUT_AB" = 1 ] && [ "$(ours_left)" -gt 120 ]; then  # the same bench on the file's row layout
      echo "### --weight-layout gguf" >>"$LOG/bench_$t.txt"
      timeout $(( $(ours_left) - 60 )) "$BUILD/deltaflash" bench -m "$f" -p 512 -n 32 -r 2 --device cuda --weight-layout gguf \
        >>"$LOG/bench_$t.txt" 2>&1 || echo "gpu-check: bench $t --weight-layout gguf rc=$?"
      echo "gpu-check: bench $t, GGUF row layout ($(elapsed))"
    fi
    if [ "$ab_rc" = 0 ] && [ "$(ours_left)" -gt 60 ]; then  # the same bench on B's build (--ab)
      echo "### B: $(basename "$AB_PATCH")" >>"$LOG/bench_$t.txt"
      timeout $(( $(ours_left) - 30 )) "$B_BUILD/deltaflash" bench -m "$f" -p 512 -n 32 -r 2 --device cuda \
        >>"$LOG/bench_$t.txt" 2>&1 || echo "gpu-check: B bench $t rc=$?"
      echo "gpu-check: B bench $t ($(elapsed))"
    fi
    if [ "$NCU" = 1 ] && command -v ncu >/dev/null && [ "$(ours_left)" -gt 90 ]; then
      # Launch 200 on lands inside the first 1-row forward (decode-shaped launches).
      timeout $(( $(ours_left) - 60 )) ncu --clock-control none --kernel-name regex:mma --launch-skip 200 \
        --launch-count 6 --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats \
        --section MemoryWorkloadAnalysis "$BUILD/deltaflash" bench -m "$f" -p 1 -n 2 -r 1 --device cuda \
        >"$LOG/ncu_$t.txt" 2>&1 || echo "gpu-check: ncu rc=$?"
      # Every kernel of a decode forward timed alone (tools/ncu-step.sh): where a step's time goes.
      [ "$(ours_left)" -gt 60 ] && timeout $(( $(ours_left) - 40 )) tools/ncu-step.sh "$f" "$LOG/ncu_step_$t" >/dev/null 2>&1 ||
        echo "gpu-check: ncu-step rc=$?"
      echo "gpu-check: ncu $t ($(elapsed))"
    fi
    if [ "$LONG" = 1 ]; then
      for p in 4096 16384; do
        [ "$(ours_left)" -gt 60 ] || { echo "gpu-check: no time left for pp$p" | tee -a "$LOG/bench_$t.txt"; break; }
        echo "### long prompt: $p tokens" >>"$LOG/bench_$t.txt"
        timeout $(( $(ours_left) - 30 )) "$BUILD/deltaflash" bench -m "$f" -p "$p" -n 1 -r 1 --device cuda \
          >>"$LOG/bench_$t.txt" 2>&1 || echo "gpu-check: pp$p rc=$?"
        echo "gpu-check: pp$p $t ($(elapsed))"
      done
      for d in 1024 32768; do  # decode after a long context (its prefill untimed)
        [ "$(ours_left)" -gt 90 ] || { echo "gpu-check: no time left for tg at depth $d" | tee -a "$LOG/bench_$t.txt"; break; }
        echo "### decode at depth $d" >>"$LOG/bench_$t.txt"
        timeout $(( $(ours_left) - 30 )) "$BUILD/deltaflash" bench -m "$f" -p 16 -n 32 -d "$d" -b 4096 -r 1 --device cuda \
          >>"$LOG/bench_$t.txt" 2>&1 || echo "gpu-check: tg at depth $d rc=$?"
        echo "gpu-check: tg32 at depth $d, $t ($(elapsed))"
      done
    fi
    if [ "$PREFILL_AB" = 1 ]; then
      echo "### prompt products: --prefill-matmul int8 vs f16, one chunk" >>"$LOG/bench_$t.txt"
      for p in 128 256 512; do
        for m in int8 f16; do
          [ "$(left)" -gt 45 ] || break 2
          echo "prefill-matmul $m, $p tokens:" >>"$LOG/bench_$t.txt"
          timeout $(( $(left) - 30 )) "$BUILD/deltaflash" bench -m "$f" -p "$p" -b "$p" -n 1 -r 3 --device cuda \
            --prefill-matmul "$m" 2>&1 | grep -E "\| pp$p " >>"$LOG/bench_$t.txt" || echo "gpu-check: pp$p $m failed"
        done
      done
      echo "gpu-check: prefill A/B $t ($(elapsed))"
    fi
    [ "$LLAMA" = 1 ] || rm -f "$f"  # with --llama, kept for the peer's run at the end
  done
fi

# --- speculative decoding: 27B-shaped pair and the demo pair ---
spec_rc=skipped
if [ "$SPEC" != 0 ]; then
  spec_rc=0
fi
if [ "$SPEC" = 1 ]; then
  # Cheapest first: the demo target's plain decode (launch-bound) with CUDA graphs off and on,
  # then the demo pair, then (time permitting) the demo pair without graphs and the 27B pair.
  for g in off on; do  # with graphs on, also the demo pair's draft and verify step costs (bench --draft)
    draft=(); [ "$g" = on ] && draft=(--draft models/demo/qwen35-demo-drafter-q8_0.gguf)
    timeout 90 "$BUILD/deltaflash" bench -m models/demo/qwen35-demo-target-q8_0.gguf -p 16 -n 128 -r 3 --device cuda \
      --cuda-graphs "$g" "${draft[@]}" >"$LOG/spec_graphs_$g.txt" 2>&1 || spec_rc=$?
  done
  # Where the demo target's 1-row and 16-row (verify) forwards go, op by op.
  timeout 60 "$BUILD/deltaflash" bench -m models/demo/qwen35-demo-target-q8_0.gguf -p 16 -n 16 -r 1 --device cuda \
    --profile >"$LOG/spec_demo_profile.txt" 2>&1 || spec_rc=$?
  echo "gpu-check: demo-target decode, CUDA graphs off/on rc=$spec_rc ($(elapsed))"
  timeout $(( $(left) > 45 ? $(left) - 15 : 30 )) bench/spec_demo.sh models/demo/qwen35-demo-target-q8_0.gguf \
    models/demo/qwen35-demo-drafter-q8_0.gguf --max-prompts 5 --bin "$BUILD/deltaflash" --device cuda >"$LOG/spec_demo.txt" 2>&1 || spec_rc=$?
  echo "gpu-check: demo-pair speculation rc=$spec_rc ($(elapsed))"
  if [ "$(left)" -gt 90 ]; then  # the drafter's own held-out distribution, longer continuations
    python3 bench/heldout_code_prompts.py --max 8 >"$LOG/heldout_prompts.txt" 2>>"$LOG/spec_heldout.txt" &&
      timeout $(( $(left) - 15 )) bench/spec_demo.sh models/demo/qwen35-demo-target-q8_0.gguf \
        models/demo/qwen35-demo-drafter-q8_0.gguf --sets code --code-prompts "$LOG/heldout_prompts.txt" -n 256 \
        --bin "$BUILD/deltaflash" --device cuda >>"$LOG/spec_heldout.txt" 2>&1 || spec_rc=$?
    echo "gpu-check: demo-pair speculation on held-out code rc=$spec_rc ($(elapsed))"
  fi
fi
if [ "$SPEC" != 0 ]; then
  if [ "$(left)" -gt 150 ]; then
    mkdir -p "$MODEL_DIR"
    {
      "$BUILD/deltaflash" make-model --arch qwen35 --shape 27b --type mix-q4_k_m --seed 1 -q -o "$MODEL_DIR/t27.gguf" &&
        "$BUILD/deltaflash" make-model --arch qwen35-dflash-draft --target "$MODEL_DIR/t27.gguf" --type q8_0 --seed 2 -q \
          -o "$MODEL_DIR/d27.gguf" &&
        timeout $(( $(left) - 15 )) "$BUILD/deltaflash" bench -m "$MODEL_DIR/t27.gguf" --draft "$MODEL_DIR/d27.gguf" \
          -p 64 -n 32 -r 3 --device cuda --json-out "$LOG/spec_27b.json"
    } >"$LOG/spec_27b.txt" 2>&1 || spec_rc=$?
    rm -f "$MODEL_DIR/t27.gguf" "$MODEL_DIR/d27.gguf"
    echo "gpu-check: 27B speculation bench rc=$spec_rc ($(elapsed))"
  else
    echo "not run: $(left) s of the budget left" >"$LOG/spec_27b.txt"
  fi
fi

# --- each matmul kernel alone on 27B-shaped weights (bench/matmul_kernels.cpp) ---
if [ "$KERNELS" = 1 ]; then
  if [ "$(left)" -gt 40 ]; then
    timeout $(( $(left) - 20 )) "$BUILD/matmul_kernels" >"$LOG/kernels.txt" 2>&1 || echo "gpu-check: matmul_kernels rc=$?"
    timeout 60 "$BUILD/gdn_kernels" >>"$LOG/kernels.txt" 2>&1 || echo "gpu-check: gdn_kernels rc=$?"
    if [ "$ab_rc" = 0 ] && [ "$(left)" -gt 40 ]; then
      timeout $(( $(left) - 20 )) "$B_BUILD/matmul_kernels" >"$LOG/kernels_b.txt" 2>&1 || echo "gpu-check: B matmul_kernels rc=$?"
      timeout 60 "$B_BUILD/gdn_kernels" >>"$LOG/kernels_b.txt" 2>&1 || echo "gpu-check: B gdn_kernels rc=$?"
    fi
  else
    echo "not run: $(left) s of the budget left" >"$LOG/kernels.txt"
  fi
  echo "gpu-check: matmul kernels ($(elapsed))"
fi

# --- llama.cpp on the same files, last: its build (~5 min) has had the whole run ---
if [ "$LLAMA" = 1 ] && [ "$BENCH" = 1 ]; then
  if [ -n "$llama_pid" ]; then
    wait "$llama_pid" && echo "gpu-check: llama.cpp built ($(elapsed))" || echo "gpu-check: llama.cpp build failed"
  fi
  for t in ${MODELS//,/ }; do
    f="$MODEL_DIR/m27-$t.gguf"
    [ -f "$f" ] || continue
    if [ -x "$LLAMA_BENCH" ] && [ "$(left)" -gt 60 ]; then
      # (with --long, also a 16384-token prompt, as our bench's)
      timeout $(( $(left) - 20 )) "$LLAMA_BENCH" -m "$f" -p "512,4096$([ "$LONG" = 1 ] && echo ,16384)" -n 32 -fa on \
        -ngl 99 -r 2 -o md >"$LOG/llama_$t.txt" 2>&1 || echo "gpu-check: llama-bench rc=$?"
      if [ "$(left)" -gt 120 ]; then  # generation after 32768 tokens of context, as bench -d
        timeout $(( $(left) - 20 )) "$LLAMA_BENCH" -m "$f" -p 0 -n 32 -d 32768 -fa on -ngl 99 -r 1 -o md \
          >>"$LOG/llama_$t.txt" 2>&1 || echo "gpu-check: llama-bench at depth rc=$?"
      fi
      echo "gpu-check: llama-bench $t ($(elapsed))"
    fi
    rm -f "$f"
  done
fi

# --- the server under concurrent clients (demo pair): --parallel 1, 4, and 4 with --draft ---
serve_rc=skipped
if [ "$SERVE" = 1 ]; then
  serve_rc=0
  if [ "$(left)" -gt 60 ]; then
    timeout $(( $(left) - 15 )) bench/serve_concurrency.sh models/demo/qwen35-demo-target-q8_0.gguf \
      models/demo/qwen35-demo-drafter-q8_0.gguf --bin "$BUILD/deltaflash" --device cuda >"$LOG/serve.txt" 2>&1 || serve_rc=$?
  else
    echo "not run: $(left) s of the budget left" >"$LOG/serve.txt"
  fi
  echo "gpu-check: server concurrency rc=$serve_rc ($(elapsed))"
fi

all_rc=0
cpu_rc=0
if [ "$CPU_TESTS" = 1 ]; then
  cmake --build "$BUILD" -j"$JOBS" >"$LOG/build_all.log" 2>&1 || all_rc=$?
  echo "gpu-check: build of all targets rc=$all_rc ($(elapsed))"
  if [ "$all_rc" -ne 0 ]; then grep -E "error|FAILED" "$LOG/build_all.log" | head -20 || true; fi

  # --- CPU unit tests (the CUDA ones already ran) ---
  timeout 300 ctest --test-dir "$BUILD" -L unit -E 'Cuda' -j"$JOBS" --timeout 240 --output-on-failure \
    >"$LOG/ctest_cpu.log" 2>&1 || cpu_rc=$?
  echo "gpu-check: CPU unit tests rc=$cpu_rc ($(elapsed))"
fi

# --- summary ---
count() {  # gtest prints no FAILED/SKIPPED line when there are none
  local n
  n=$(grep -Eo "\[  $1 +\] [0-9]+" "$2" | grep -Eo '[0-9]+$' | head -1 || true)
  echo "${n:-0}"
}
{
  echo
  echo "=== failures ==="
  grep -E "^\[  FAILED  \] [A-Za-z]" "$LOG/test_cuda_ops.log" | sort -u | head -30 || true
  grep -E "FAILED$" "$LOG/test_cuda_ops.log" | head -20 || true
  grep -A3 -E ": Failure$" "$LOG/test_cuda_ops.log" | head -40 || true
  if [ -f "$LOG/ctest_cpu.log" ]; then
    grep -E "\*\*\*Failed|\*\*\*Timeout|Not Run" "$LOG/ctest_cpu.log" | grep -v "(Disabled)" | head -20 || true
  fi
  echo
  echo "=== largest error/tolerance ratios (of $(grep -c '^\[cuda-err\]' "$LOG/test_cuda_ops.log" || true) checks) ==="
  grep '^\[cuda-err\].*err/tol=' "$LOG/test_cuda_ops.log" | sed 's/.*err\/tol=\([^ ]*\).*/\1 &/' | sort -g -r | head -12 | cut -d' ' -f2- || true
  echo
  echo "=== models (CUDA vs CPU) ==="
  grep '^\[cuda-model\]' "$LOG/test_cuda_ops.log" || true
  grep '^\[demo-drafter\]' "$LOG/test_cuda_ops.log" || true
  for f in "$LOG"/ncu_step_*/ncu_step.md; do
    [ -s "$f" ] || continue
    echo; echo "=== every kernel of a decode forward, timed alone ($(basename "$(dirname "$f")")) ==="; head -24 "$f"
  done
  for f in "$LOG"/ncu_*.txt; do
    [ -s "$f" ] || continue
    echo; echo "=== $(basename "$f") ==="
    grep -E "mma_kernel|imma_q4k|imma_q6k|Duration|DRAM Throughput|Memory Throughput|Compute \(SM\) Throughput|Registers Per Thread|Grid Size|Achieved Occupancy|Theoretical Occupancy|Warp Cycles Per Issued|Issued Warp|Stall|stalled|Eligible" "$f" | head -80 || true
  done
  if [ "$BENCH" = 1 ]; then
    echo
    echo "=== bench (27B shape, one GPU) ==="
    for t in ${MODELS//,/ }; do
      if [ -s "$LOG/bench_$t.json" ]; then
        python3 tools/bench-summary.py "$t" "$LOG/bench_$t.json" || true
      else
        echo "$t: no JSON"; tail -5 "$LOG/bench_$t.txt" 2>/dev/null || true
      fi
      grep -E "^### long prompt|\| pp(4096|16384) \|" "$LOG/bench_$t.txt" 2>/dev/null || true
    done
  fi
  echo
  echo "=== gpu-check summary ==="
  printf '%-22s %s\n' "GPU" "${GPU:-none found}"
  printf '%-22s passed %s, failed %s, skipped %s (rc %s)\n' "CUDA tests" "$(count PASSED "$LOG/test_cuda_ops.log")" \
    "$(count FAILED "$LOG/test_cuda_ops.log")" "$(count SKIPPED "$LOG/test_cuda_ops.log")" "$cuda_rc"
  printf '%-22s %s\n' "memcheck (op tests)" "$mem_rc"
  if [ -n "$AB_PATCH" ]; then
    printf '%-22s build rc %s; passed %s, failed %s (rc %s)\n' "B: $(basename "$AB_PATCH")" "$ab_rc" \
      "$(count PASSED "$LOG/test_cuda_ops_b.log" 2>/dev/null)" "$(count FAILED "$LOG/test_cuda_ops_b.log" 2>/dev/null)" "$ab_test_rc"
    grep -E "^\[  FAILED  \] [A-Za-z]" "$LOG/test_cuda_ops_b.log" 2>/dev/null | sort -u | head -10 || true
    for t in ${MODELS//,/ }; do
      [ -f "$LOG/bench_$t.txt" ] || continue
      echo "B bench $t:"; sed -n '/^### B/,$p' "$LOG/bench_$t.txt" | grep -E "\| (pp512|tg32) \||^\| (1|2|4|8|16|32) \|" || true
    done
  fi
  if [ "$CPU_TESTS" = 1 ]; then
    printf '%-22s rc %s\n' "build (all targets)" "$all_rc"
    printf '%-22s %s (rc %s)\n' "CPU unit tests" "$(grep -E 'tests passed' "$LOG/ctest_cpu.log" | tail -1)" "$cpu_rc"
  else
    printf '%-22s %s\n' "CPU unit tests" "skipped (--no-cpu-tests)"
  fi
  printf '%-22s %s\n' "bench" "$bench_rc"
  for lf in "$LOG"/llama_*.txt; do
    [ -f "$lf" ] || continue
    echo; echo "=== llama.cpp CUDA on the same file ($(basename "$lf")) ==="; grep -E '^\|' "$lf" || tail -5 "$lf"
  done
  printf '%-22s %s\n' "speculation" "$spec_rc"
  if [ "$SPEC" != 0 ]; then
    echo; echo "=== speculation: 27B-shaped pair ==="; grep -A4 "^| block" "$LOG/spec_27b.txt" || tail -5 "$LOG/spec_27b.txt"
  fi
  if [ "$SPEC" = 1 ]; then
    echo; echo "=== speculation: demo pair ==="; tail -6 "$LOG/spec_demo.txt"
    if [ -f "$LOG/spec_heldout.txt" ]; then
      echo; echo "=== speculation: demo pair, held-out code prompts, 256 tokens ==="; tail -4 "$LOG/spec_heldout.txt"
    fi
    for g in off on; do
      echo; echo "=== demo target plain decode, --cuda-graphs $g ==="; grep -E '^\|' "$LOG/spec_graphs_$g.txt" | head -20 || tail -5 "$LOG/spec_graphs_$g.txt"
    done
  fi
  if [ -f "$LOG/kernels.txt" ]; then
    echo; echo "=== matmul kernels alone (27B shapes; full table in kernels.txt) ==="
    grep -E "copy bandwidth|\| (1|16) \|" "$LOG/kernels.txt" | head -60 || true
  fi
  if [ -f "$LOG/serve.txt" ]; then
    echo; echo "=== server, 8 concurrent clients (demo pair) ==="; grep -E "median|clients x|not run|did not" "$LOG/serve.txt" || true
  fi
  printf '%-22s %s\n' "wall time" "$(elapsed)"
} | tee "$LOG/summary.txt"
# The GPU machine returns at most 8 files: keep the main ones (summary, test log, bench and
# speculation tables), pack the rest (JSON, graphs on/off runs, build logs) into other_logs.tgz.
(
  cd "$LOG"
  ls | grep -v -E '^(summary\.txt|test_cuda_ops\.log|bench_.*\.txt|spec_(27b|demo|heldout)\.txt|llama_[^b].*\.txt|serve\.txt|kernels(_b)?\.txt)$' >/tmp/gpu-check-pack.txt || true
  if [ -s /tmp/gpu-check-pack.txt ]; then tar czf other_logs.tgz -T /tmp/gpu-check-pack.txt && xargs rm -rf </tmp/gpu-check-pack.txt; fi
)
[ "$cuda_rc" -eq 0 ] && [ "$cpu_rc" -eq 0 ] && [ "$all_rc" -eq 0 ] && { [ "$mem_rc" = 0 ] || [ "$mem_rc" = skipped ]; } &&
  { [ "$bench_rc" = 0 ] || [ "$bench_rc" = skipped ]; }
