#!/bin/sh
# Regenerates the expected traces from Erlang/OTP's own supervisor (needs `apt-get install -y erlang-base`).
# The conformance tests read the checked-in traces; they need no Erlang at run time.
set -eu
cd "$(dirname "$0")"
for scn in *.scn; do
    ./oracle.escript "$scn" > "${scn%.scn}.trace"
done
