#!/usr/bin/env bash
# Facts about the code's layout, checked:
#   1. the engine crate (parley-engine) has no NATS, Redis or actor dependency, direct or
#      transitive (`cargo tree -p parley-engine -e normal`);
#   2. no Rust source file under crates/*/src is over 1,000 lines — tests (`tests/` folders,
#      `*_tests.rs`, `tests.rs`) and generated files (a first line saying "generated") aside,
#      and the paths listed in scripts/house-exceptions.txt;
#   3. no two modules of one crate import each other.
#
# Limits of check 3: it reads, by grep, `crate::<module>` paths, one-line groups
# `crate::{a, b}` (a nested group only up to its first `}`), and `super::<module>` in files
# directly under src/, skipping comment lines and everything from a file's first
# `#[cfg(test)]` on (test modules sit at the end of a file). It does not follow re-exports
# (`pub use`), glob imports (`use crate::*`), macros, or paths split over lines; it treats a module with its submodules as one (a child using its
# parent, as `machine/rounds.rs` uses `machine`, is no circle); and it finds pairs only
# (A ↔ B), not longer loops (A → B → C → A). `farm-studio look` draws the whole picture.
#
#   scripts/check-house.sh     # from anywhere in the repository; exit 1 on any failure
set -euo pipefail
cd "$(dirname "$0")/.."

fail=0
problem() {
    echo "check-house: $*" >&2
    fail=1
}

echo "==> the engine crate's dependencies"
if ! tree=$(cargo tree -p parley-engine -e normal --prefix none --quiet 2>&1); then
    echo "$tree" >&2
    problem "cargo tree -p parley-engine failed"
else
    for dep in async-nats redis ractor; do
        if grep -qE "^${dep} v" <<<"$tree"; then
            problem "parley-engine depends on ${dep}: $(cargo tree -p parley-engine -e normal -i "$dep" --quiet 2>/dev/null | head -5 | tr '\n' ' ')"
        fi
    done
fi

echo "==> source files of at most 1,000 lines"
exceptions=scripts/house-exceptions.txt
declare -A allowed=()
if [[ -f $exceptions ]]; then
    while IFS= read -r line; do
        line="${line%%#*}"
        line="${line//[[:space:]]/}"
        [[ -n $line ]] && allowed[$line]=1
    done <"$exceptions"
fi
while IFS= read -r file; do
    case "$file" in
    */tests/* | *_tests.rs | */tests.rs) continue ;;
    esac
    if head -n 1 "$file" | grep -qi "generated"; then
        continue
    fi
    lines=$(wc -l <"$file")
    if ((lines > 1000)); then
        if [[ -n ${allowed[$file]:-} ]]; then
            echo "    allowed for now: $file ($lines lines)"
        else
            problem "$file has $lines lines (at most 1,000; split it along its seams)"
        fi
    fi
done < <(find crates/*/src -name '*.rs' -type f | sort)
for file in "${!allowed[@]}"; do
    [[ -f $file ]] || problem "$exceptions lists $file, which does not exist (remove the line)"
done

echo "==> no two modules of one crate import each other"
# The module a source file is: crates/x/src/a/b.rs and crates/x/src/a/b/mod.rs are a::b;
# lib.rs and main.rs are the crate root.
module_of() {
    local rel=${1#crates/*/src/}
    rel=${rel%.rs}
    rel=${rel%/mod}
    case "$rel" in lib | main) rel="" ;; esac
    echo "${rel//\//::}"
}
# The top module (first path segment) every file imports, as "crate importer imported" lines.
edges=$(
    for file in $(find crates/*/src -name '*.rs' -type f | sort); do
        case "$file" in */tests/* | *_tests.rs | */tests.rs) continue ;; esac
        crate=${file#crates/}
        crate=${crate%%/*}
        mod=$(module_of "$file")
        top=${mod%%::*}
        [[ -z $top ]] && continue
        # Code only: no comment lines, nothing from the first `#[cfg(test)]` on.
        src=$(sed '/^#\[cfg(test)\]/,$d' "$file" | grep -v '^[[:space:]]*//' || true)
        {
            grep -oE '\bcrate::[a-z_][a-z0-9_]*' <<<"$src" | sed 's/^crate:://' || true
            # `use crate::{a, b::C}`: the first segment of each name in the group.
            grep -oE '\bcrate::\{[^}]*\}?' <<<"$src" | sed -E 's/^crate::\{//; s/\}$//' |
                tr ',' '\n' | sed -E 's/^[[:space:]]*//; s/::.*//; s/[[:space:]].*//' |
                grep -E '^[a-z_][a-z0-9_]*$' || true
            # `use super::x` from a file directly in src/ names the crate root's x.
            if [[ $mod != *::* ]]; then
                grep -oE '\bsuper::[a-z_][a-z0-9_]*' <<<"$src" | sed 's/^super:://' || true
            fi
        } | sort -u | while read -r used; do
            [[ -n $used && $used != "$top" ]] && echo "$crate $top $used"
        done
    done | sort -u
)
while read -r crate a b; do
    [[ -z ${crate:-} ]] && continue
    if grep -qx "$crate $b $a" <<<"$edges" && [[ $a < $b ]]; then
        problem "crates/$crate: modules $a and $b import each other (move what both need into a module of its own)"
    fi
done <<<"$edges"

if ((fail)); then
    echo "check-house: FAILED" >&2
    exit 1
fi
echo "check-house: ok"
