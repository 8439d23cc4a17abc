#!/usr/bin/env bash
# Runs ringvisor's test binaries, benchmarks and demo on a machine with an NVIDIA GPU, on the CUDA backend
# (RINGVISOR_BACKEND=cuda). The binaries are built elsewhere by `scripts/gpu-pack.sh` (the GPU machine needs
# no Rust toolchain) and unpacked here from gpu-pack.tar.xz.
#
#   scripts/gpu-suite.sh PACK OUTDIR [FILTER...]
#
# Each binary runs on its own, tests one at a time by default (RV_TEST_THREADS), with RV_TEST_ARGS passed to it
# (e.g. `gpu::`: in device/tests only the real-driver variants), under a timeout (RV_TEST_LIMIT seconds,
# default 90), so that a hang is reported as a hang and the rest still runs. FILTERs keep the binaries whose names contain one of them (`demo`, `bench` included). Logs
# go to OUTDIR; the last lines printed are a table: binary, exit status (124 = timed out), seconds, tests
# passed/failed. Through the device tool, write OUTDIR under $OUT and tar it: only 8 files come back.
set -uo pipefail
pack=${1:?pack file}
out=${2:?output folder}
shift 2
filters=("$@")
mkdir -p "$out" /tmp/rv-gpu
tar -xJf "$pack" -C /tmp/rv-gpu
bin=/tmp/rv-gpu/bin
# Put this repository where the binaries were built (the tests read their data through that path).
root=$(cat "$bin/BUILD_ROOT" 2>/dev/null || true)
if [ -n "$root" ] && [ ! -e "$root" ]; then
  mkdir -p "$(dirname "$root")" && ln -s "$PWD" "$root"
fi

# cudarc loads libnvrtc.so by that name: point it at the toolkit's NVRTC.
nvrtc=$(ls /usr/local/cuda/lib64/libnvrtc.so* /usr/local/cuda*/targets/*/lib/libnvrtc.so* 2>/dev/null | head -1)
if [ -z "$nvrtc" ]; then
  nvrtc=$(find / -xdev -name 'libnvrtc.so*' ! -name '*builtins*' 2>/dev/null | head -1)
fi
mkdir -p /tmp/rv-gpu/lib
[ -n "$nvrtc" ] && ln -sf "$nvrtc" /tmp/rv-gpu/lib/libnvrtc.so
export LD_LIBRARY_PATH="/tmp/rv-gpu/lib:$(dirname "${nvrtc:-/nonexistent}"):${LD_LIBRARY_PATH:-}"
export RINGVISOR_BACKEND=${RINGVISOR_BACKEND:-cuda}
{
  nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv
  echo "nvrtc: ${nvrtc:-not found}"
  echo "backend: $RINGVISOR_BACKEND"
} | tee "$out/machine.txt"

summary="$out/summary.txt"
: >"$summary"
run() { # name timeout command...
  local name=$1 limit=$2
  shift 2
  if [ ${#filters[@]} -gt 0 ]; then
    local keep=0
    for f in "${filters[@]}"; do [[ $name == *$f* ]] && keep=1; done
    [ $keep = 1 ] || return 0
  fi
  local t0=$SECONDS
  timeout -k 5 "$limit" "$@" >"$out/$name.log" 2>&1
  local rc=$?
  local counts
  counts=$(grep -Eo 'test result: [a-zA-Z]+\. [0-9]+ passed; [0-9]+ failed' "$out/$name.log" | tail -1)
  printf '%-28s rc=%-3s %4ss  %s\n' "$name" "$rc" "$((SECONDS - t0))" "${counts:-}" | tee -a "$summary"
}

for t in "$bin"/test-*; do
  [ -x "$t" ] || continue
  name=${t##*/test-}
  # shellcheck disable=SC2086 # RV_TEST_ARGS is a list of words (a test-name filter such as `gpu::`)
  run "$name" "${RV_TEST_LIMIT:-90}" "$t" --test-threads="${RV_TEST_THREADS:-1}" ${RV_TEST_ARGS:-}
done
[ -x "$bin/ringvisor" ] && run demo 120 "$bin/ringvisor" demo --duration 10 --sensors 64 --no-chaos
[ -x "$bin/ringvisor" ] && run demo-chaos 120 "$bin/ringvisor" demo --duration 10 --sensors 64
[ -x "$bin/ringvisor-bench" ] && run bench "${RV_BENCH_LIMIT:-240}" "$bin/ringvisor-bench" --quick --out "$out/bench"
echo "== summary"
cat "$summary"
