#!/usr/bin/env bash
# The official MCP Python SDK (package `mcp`) the MCP tests drive `parley mcp` with, in a
# virtual environment of its own, installed with pip when missing and kept (cached):
#
#   scripts/mcp-python.sh      # prints the environment's python
#
# Target: ${PARLEY_MCP_VENV:-$HOME/.cache/parley/mcp-venv}. Idempotent.
set -euo pipefail

VERSION="2.3.0"
VENV="${PARLEY_MCP_VENV:-$HOME/.cache/parley/mcp-venv}"
PY="$VENV/bin/python"

if [[ -x "$PY" ]] && "$PY" -c "import importlib.metadata as m, sys; sys.exit(m.version('mcp') != '$VERSION')" 2>/dev/null; then
    echo "$PY"
    exit 0
fi

echo "installing the MCP Python SDK (mcp==$VERSION) into $VENV ..." >&2
python3 -m venv "$VENV" >&2
"$PY" -m pip install --quiet --disable-pip-version-check "mcp==$VERSION" >&2
echo "$PY"
