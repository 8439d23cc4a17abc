#!/usr/bin/env bash
# The one prepared run of ringvisor on a machine with an NVIDIA GPU, on the CUDA backend (RINGVISOR_BACKEND=cuda).
# The binaries are built elsewhere by `scripts/gpu-pack.sh` (the GPU machine needs no Rust toolchain) and
# unpacked here from gpu-pack.tar.xz.
#
#   scripts/gpu-suite.sh PACK OUTDIR [FILTER...]
#
# Such a machine is lent for about 15 minutes, its start included: the whole run has a deadline (RV_DEADLINE
# seconds from the start, default 480), and the steps run most important first: the floor probe and the CUDA
# rows, block 0 under a burst, the device suites (their `gpu::` variants), the supervised suites, OTP
# conformance, chaos on two devices, the demo with chaos, WebGPU on the GPU's Vulkan driver, then the quick
# benchmark. Each step runs under its own limit, cut to what the deadline leaves (a hang is reported as a hang,
# rc 124, and the rest still runs); a step with no time left is skipped. FILTERs keep the steps whose names
# contain one of them. Logs go to OUTDIR, with a summary table (step, exit status, seconds, tests passed/failed)
# and OUTDIR.tar.gz beside it (the device tool brings back 8 files at most: take the archive).
set -uo pipefail
pack=${1:?pack file}
out=${2:?output folder}
shift 2
filters=("$@")
deadline=$((SECONDS + ${RV_DEADLINE:-480}))
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
# NVIDIA's Vulkan driver for the wgpu steps (the loader finds the ICD through this file).
icd=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
[ -e "$icd" ] && export VK_DRIVER_FILES="${VK_DRIVER_FILES:-$icd}"
{
  date -u
  nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap,pcie.link.gen.current,pcie.link.width.current \
    --format=csv
  echo "nvrtc: ${nvrtc:-not found}"
  echo "backend: $RINGVISOR_BACKEND"
  echo "vulkan loader: $(ldconfig -p | grep -m1 'libvulkan.so.1' || echo none)"
} | tee "$out/machine.txt"

summary="$out/summary.txt"
: >"$summary"
# step NAME LIMIT COMMAND...: runs COMMAND under min(LIMIT, time left), logs to OUTDIR/NAME.log.
step() {
  local name=$1 limit=$2
  shift 2
  if [ ${#filters[@]} -gt 0 ]; then
    local keep=0
    for f in "${filters[@]}"; do [[ $name == *$f* ]] && keep=1; done
    [ $keep = 1 ] || return 0
  fi
  local left=$((deadline - SECONDS))
  if [ "$left" -lt 10 ]; then
    printf '%-28s skipped (deadline)\n' "$name" | tee -a "$summary"
    return 0
  fi
  [ "$limit" -gt "$left" ] && limit=$left
  local t0=$SECONDS
  timeout -k 5 "$limit" "$@" >"$out/$name.log" 2>&1 &
  local pid=$!
  # A step still running 8 s before its limit is taken for a hang: every thread's stack goes to NAME.bt
  # (cuda-gdb debugs host code too) before the timeout ends it.
  while kill -0 "$pid" 2>/dev/null; do
    if [ $((SECONDS - t0)) -ge $((limit - 8)) ] && [ ! -e "$out/$name.bt" ] && command -v cuda-gdb >/dev/null; then
      local child
      child=$(pgrep -P "$pid" | head -1)
      [ -n "$child" ] && timeout 20 cuda-gdb -batch -p "$child" -ex 'thread apply all bt 15' >"$out/$name.bt" 2>&1
    fi
    sleep 1
  done
  wait "$pid"
  local rc=$?
  local counts
  counts=$(grep -Eo 'test result: [a-zA-Z]+\. [0-9]+ passed; [0-9]+ failed' "$out/$name.log" | tail -1)
  printf '%-28s rc=%-3s %4ss limit=%-4s %s\n' "$name" "$rc" "$((SECONDS - t0))" "$limit" "${counts:-}" |
    tee -a "$summary"
}
# A test binary's real-driver variants (device suites; `gpu::` also matches `wgpu::`, run in steps of their own)
# or all its tests (supervised suites, on RINGVISOR_BACKEND).
device_suite() { step "$1" "$2" "$bin/test-$1" --test-threads=1 gpu:: --skip wgpu::; }
suite() { local name=$1 limit=$2; shift 2; step "$name" "$limit" "$bin/test-$name" --test-threads=1 "$@"; }

step floor-and-calls 60 "$bin/ringvisor-bench" --quick --only-cuda
step liveness 90 "$bin/ringvisor-bench" --only-liveness
device_suite lifecycle 90
device_suite large_messages 60
device_suite routing 60
for t in api bad_input device_faults fuzz_boundary sensor; do device_suite "$t" 45; done
suite multi_device 90
suite device_recovery 60
suite otp_conformance 120 gpu:: --skip wgpu::
RINGVISOR_CHAOS_SECS=5 suite chaos 120
step demo-chaos 40 "$bin/ringvisor" demo --duration 10 --sensors 64
# WebGPU on the GPU's Vulkan driver; a crash leaves a backtrace (cuda-gdb debugs host code too). A missing
# adapter fails these steps (RINGVISOR_REQUIRE_WGPU): NVIDIA's ICD needs the GL vendor-neutral dispatch
# libraries beside the loader (carry libvulkan1, libglvnd0, libegl1, libgl1, libglx0, libopengl0, libgles2, see
# the device tool's README), or the tests skip and the benchmark finds no adapter.
export RINGVISOR_REQUIRE_WGPU=1
RINGVISOR_BACKEND=wgpu step wgpu-bench 50 "$bin/ringvisor-bench" --quick --only-wgpu
RINGVISOR_BACKEND=wgpu step wgpu-lifecycle 60 "$bin/test-lifecycle" --test-threads=1 wgpu::
if command -v cuda-gdb >/dev/null && grep -q 'rc=13[49]' <(grep wgpu-lifecycle "$summary"); then
  RINGVISOR_BACKEND=wgpu step wgpu-backtrace 60 cuda-gdb -batch -ex run -ex 'thread apply all bt 12' \
    --args "$bin/test-lifecycle" --test-threads=1 wgpu::a_behaviours
fi
step bench 240 "$bin/ringvisor-bench" --quick --out "$out/bench"
echo "== summary"
cat "$summary"
tar -czf "$out.tar.gz" -C "$(dirname "$out")" "$(basename "$out")"
