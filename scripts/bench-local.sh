#!/usr/bin/env bash
# Local model speed, Parley side by side with llama.cpp in one run (release build):
# Parley's local provider, then llama.cpp driven directly through its C API (the same
# library build) on the fetched Q4_1 file and on Parley's Q8_0 copy, then the ratios.
# With LLAMA_CPP_REF=<dir with a llama-bench binary> (e.g. a llama.cpp built beside the
# project) its `llama-bench -p 512 -n 128` runs too.
#
#   scripts/bench-local.sh
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/fetch-model.sh >/dev/null
exec cargo bench -p parley-local --bench generation
