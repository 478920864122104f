#!/usr/bin/env bash
# Captures one workload's page-allocator trace on this machine, as the replay reads
# it: the kernel's kmem tracepoints, system-wide, through perf, with the machine's
# /proc/zoneinfo, buddyinfo and pagetypeinfo read just before.
#
#   traces/capture.sh NAME [--drop-caches] -- WORKLOAD...
#
# Writes traces/NAME/{zoneinfo,buddyinfo,pagetypeinfo}.txt and
# traces/NAME/NAME.perf.txt.xz. Needs root (or perf_event_paranoid -1) and perf.
# --drop-caches empties the page cache first (a file walk then reads from disk).
set -euo pipefail
cd "$(dirname "$0")"
name=$1
shift
drop=false
if [[ ${1:-} == --drop-caches ]]; then
    drop=true
    shift
fi
[[ ${1:-} == -- ]] && shift
mkdir -p "$name"
if $drop; then
    sync
    echo 3 > /proc/sys/vm/drop_caches
fi
cat /proc/zoneinfo > "$name/zoneinfo.txt"
cat /proc/buddyinfo > "$name/buddyinfo.txt"
cat /proc/pagetypeinfo > "$name/pagetypeinfo.txt"
data=$(mktemp /tmp/kmem-XXXXXX.data)
start=$(date +%s.%N)
perf record -q -m 4096 -a -o "$data" \
    -e kmem:mm_page_alloc -e kmem:mm_page_free -e kmem:mm_page_free_batched \
    -e kmem:mm_page_alloc_zone_locked -e kmem:mm_page_pcpu_drain \
    -e kmem:mm_page_alloc_extfrag -- "$@"
end=$(date +%s.%N)
perf script -i "$data" | xz -9 -T0 > "$name/$name.perf.txt.xz"
events=$(xz -dc "$name/$name.perf.txt.xz" | wc -l)
rm -f "$data"
printf '%s: %s events in %.1f s\n' "$name" "$events" "$(echo "$end - $start" | bc)"
