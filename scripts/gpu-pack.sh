#!/usr/bin/env bash
# Builds what scripts/gpu-suite.sh runs on a GPU machine (which has no Rust toolchain): every test binary of
# the workspace, the `ringvisor` command and `ringvisor-bench`, in the release profile, stripped, packed into
# .gpu/gpu-pack.tar.xz (git ignores .gpu/).
#
#   scripts/gpu-pack.sh [TEST-NAME-FILTER...]
#
# Without filters it packs the test binaries gpu-suite.sh runs (about 23 MB): every test binary of the workspace
# packed is over 60 MB, near the device tool's 64 MiB limit on what travels. `all` packs every one.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ $# -eq 0 ]; then
  set -- lifecycle large_messages routing api bad_input device_faults fuzz_boundary sensor multi_device \
    device_recovery otp_conformance chaos
elif [ "$*" = all ]; then
  set --
fi
dest=.gpu
rm -rf "$dest/bin" && mkdir -p "$dest/bin"
cargo build --release -p ringvisor -p ringvisor-bench --bins
cp "${CARGO_TARGET_DIR:-target}/release/ringvisor" "${CARGO_TARGET_DIR:-target}/release/ringvisor-bench" "$dest/bin/"
cargo test --release --workspace --no-run --message-format=json 2>/dev/null |
  python3 -c '
import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["profile"]["test"]:
        kind = m["target"]["kind"][0]
        print(m["executable"], m["target"]["name"] + ("" if kind == "test" else "-" + kind))
' | while read -r exe name; do
  keep=1
  if [ $# -gt 0 ]; then keep=0; for f in "$@"; do [[ $name == *$f* ]] && keep=1; done; fi
  if [ $keep = 1 ]; then cp "$exe" "$dest/bin/test-$name"; fi
done
strip "$dest"/bin/*
# Tests read their data through the absolute path they were built at (CARGO_MANIFEST_DIR): record it, so the
# suite can put the repository there on the GPU machine.
pwd > "$dest/bin/BUILD_ROOT"
tar -cJf "$dest/gpu-pack.tar.xz" -C "$dest" bin
ls -la "$dest/gpu-pack.tar.xz"
