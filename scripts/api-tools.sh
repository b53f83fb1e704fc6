#!/usr/bin/env bash
# Tools for the HTTP API's schema tests (crates/cli/tests/api_fuzz.rs), fetched once with
# pip into a cached virtualenv and reused:
#
#   schemathesis 4.32.5            the schema-driven fuzzer run against `parley serve`
#   openapi-spec-validator 0.9.0   validates docs/src/reference/openapi.json as OpenAPI 3.1
#
# Cache: ${PARLEY_CACHE_DIR:-$HOME/.cache/parley}/api-tools/venv-<versions>.
# Prints the virtualenv's bin directory on success. Idempotent.
set -euo pipefail

SCHEMATHESIS="schemathesis==4.32.5"
VALIDATOR="openapi-spec-validator==0.9.0"
CACHE="${PARLEY_CACHE_DIR:-$HOME/.cache/parley}/api-tools"
VENV="$CACHE/venv-schemathesis-4.32.5-osv-0.9.0"

# `.complete` is written last: a run stopped half-way installs again.
if [ ! -f "$VENV/.complete" ]; then
    mkdir -p "$CACHE"
    rm -rf "$VENV"
    echo "==> installing $SCHEMATHESIS and $VALIDATOR (once, cached in $CACHE)" >&2
    python3 -m venv "$VENV" >&2
    "$VENV/bin/pip" install --quiet --disable-pip-version-check "$SCHEMATHESIS" "$VALIDATOR" >&2
    touch "$VENV/.complete"
fi
echo "$VENV/bin"
