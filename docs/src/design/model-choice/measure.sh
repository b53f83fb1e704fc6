#!/usr/bin/env bash
# Interleaved measurement of the two local models with `parley compare` (see measurement.md here).
# Usage: docs/src/design/model-choice/measure.sh PARLEY_BINARY   (run from anywhere; writes out-*/ and load.log here)
set -euo pipefail
cd "$(dirname "$0")"
BIN="$1"
for p in problems/*.md; do
    name="$(basename "$p" .md)"
    mkdir -p "one/$name" && cp "$p" "one/$name/"
    for m in smollm2 gemma3; do
        case $m in smollm2) model=smollm2-135m ;; gemma3) model=gemma3-270m ;; esac
        echo "$(date -u +%T) start $name $m loadavg $(cut -d' ' -f1-3 /proc/loadavg)" >> load.log
        PARLEY_LOCAL_MODEL=$model "$BIN" compare -c "compare-$m.json" -p "one/$name" -o "out-$m" 2>> "stderr-$m.log" || true
        echo "$(date -u +%T) end   $name $m loadavg $(cut -d' ' -f1-3 /proc/loadavg)" >> load.log
    done
done
