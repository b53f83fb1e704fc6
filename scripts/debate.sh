#!/usr/bin/env bash
# Quick start: fetch the local model if it is missing, build parley (release), and run a
# debate. With no API key set this runs offline on the local model (SmolLM2-135M, or the
# one PARLEY_LOCAL_MODEL names; see scripts/fetch-model.sh).
#
#   scripts/debate.sh "Design a rate limiter for a public REST API"
#   scripts/debate.sh --rounds 2 --agents architect,security "Design ..."
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ -z "${OPENAI_API_KEY:-}${OPENROUTER_API_KEY:-}" ]]; then
    scripts/fetch-model.sh ${PARLEY_LOCAL_MODEL:+"$PARLEY_LOCAL_MODEL"} >/dev/null
fi
# llama.cpp (the local model's engine) builds from source: cmake + libclang (apt-get).
source scripts/apt-deps.sh
apt_deps build >&2
cargo build --release --quiet -p parley-cli
if [[ $# -eq 0 ]]; then
    set -- "Design a URL shortener service: API, storage, and how to scale reads"
fi
exec "${CARGO_TARGET_DIR:-target}/release/parley" run "$@"
