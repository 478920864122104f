#!/usr/bin/env bash
# Paired A/B of the LocalCache's fill and shuffled drain between two versions of
# the zonealloc crate, built side by side into one program (docs/ab-cache/main.rs):
# each version fills and drains its own 256 MiB zone, the two interleaved 1,024
# calls at a time, and each chunk's time is compared with the other version's
# chunk beside it. On a machine whose speed changes from one second to the next, a
# comparison of separate runs (or of rows measured far apart in one run) mostly
# measures the machine; pairs a few microseconds apart do not.
#
#   bash docs/ab-cache.sh BASE [NEW] [ROUNDS]
#
# BASE and NEW are commits; NEW defaults to the working tree, ROUNDS to 6 (each
# fills and drains both zones once, after one warm-up round). The two zones differ
# in where their tables lie, which alone can move the ratios a little: run
# `bash docs/ab-cache.sh HEAD HEAD` beside a comparison to see how much.
#
#   PROBE=docs/probes/NAME.patch bash docs/ab-cache.sh HEAD HEAD [ROUNDS]
#
# applies a probe (a patch that leaves part of the drain's work out, to size that
# part; see docs/probes/README.md) to NEW's copy, and runs every round on two new
# zones, since a probe may leave its lists unusable for another fill. FRESH=1 runs
# on new zones every round without a probe: the control beside a probe.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
base=${1:?usage: bash docs/ab-cache.sh BASE [NEW] [ROUNDS]}
new=${2:-}
rounds=${3:-6}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# The zonealloc crate at commit $2 (the working tree if empty) as a standalone
# package named $1 under $tmp/$1.
crate() {
    mkdir -p "$tmp/$1"
    if [[ -n $2 ]]; then
        git -C "$root" archive "$2" zonealloc | tar -x -C "$tmp/$1"
    else
        cp -r "$root/zonealloc" "$tmp/$1/"
    fi
    sed -i -e "s/^name = \"zonealloc\"$/name = \"$1\"/" \
        -e 's/^edition\.workspace = true$/edition = "2021"/' \
        -e '/^\(license\|rust-version\)\.workspace = true$/d' "$tmp/$1/zonealloc/Cargo.toml"
}
crate zonealloc-base "$base"
crate zonealloc-new "$new"
fresh=${FRESH:+fresh}
if [[ -n ${PROBE:-} ]]; then
    probe=$(realpath "$PROBE")
    (cd "$tmp/zonealloc-new" && git apply -p1 "$probe")
    fresh=fresh
fi

mkdir -p "$tmp/ab/src"
cp "$root/docs/ab-cache/main.rs" "$tmp/ab/src/main.rs"
cp "$root/Cargo.lock" "$tmp/ab/"
cat > "$tmp/ab/Cargo.toml" <<TOML
[package]
name = "ab-cache"
version = "0.1.0"
edition = "2021"
publish = false

[dependencies]
zonealloc-base = { path = "$tmp/zonealloc-base/zonealloc" }
zonealloc-new = { path = "$tmp/zonealloc-new/zonealloc" }

[profile.release]
debug = 1
TOML
export CARGO_TARGET_DIR="$root/target/ab-cache"
echo "base: $base; new: ${new:-the working tree}${PROBE:+ with $PROBE}${fresh:+; new zones every round}; $rounds rounds"
cargo build -q --release --manifest-path "$tmp/ab/Cargo.toml" ||
    cargo build -q --release --offline --manifest-path "$tmp/ab/Cargo.toml"
"$CARGO_TARGET_DIR/release/ab-cache" "$rounds" ${fresh:+"$fresh"}
