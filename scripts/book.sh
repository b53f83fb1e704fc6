#!/usr/bin/env bash
# Builds the book (docs/, mdBook) into docs/book/ and checks every relative link and #anchor
# of the book's pages, README.md, ARCHITECTURE.md and CONTRIBUTING.md, then of the built HTML
# (scripts/check-links.py).
# mdbook is installed once with `cargo install` into ~/.cache/parley/tools
# ($PARLEY_CACHE_DIR/tools) when it is missing.
#
#   scripts/book.sh          # build + link check (part of scripts/test.sh)
#   scripts/book.sh serve    # mdbook serve docs: the book on http://localhost:3000, rebuilt on save
set -euo pipefail
cd "$(dirname "$0")/.."

MDBOOK_VERSION="0.5.4"
ROOT="${PARLEY_CACHE_DIR:-$HOME/.cache/parley}/tools/mdbook-$MDBOOK_VERSION"
MDBOOK="$ROOT/bin/mdbook"

if [[ ! -x "$MDBOOK" ]]; then
    echo "==> installing mdbook $MDBOOK_VERSION (cargo install, once)" >&2
    cargo install mdbook --version "$MDBOOK_VERSION" --locked --quiet --root "$ROOT"
fi

if [[ "${1:-}" == serve ]]; then
    exec "$MDBOOK" serve docs
fi
python3 scripts/check-links.py
"$MDBOOK" build docs
python3 scripts/check-links.py --built docs/book
