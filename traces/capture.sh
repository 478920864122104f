#!/usr/bin/env bash
# Captures one workload's page-allocator trace on this machine, as the replay reads
# it, with the kernel's own free-memory state to compare it with:
#
#   traces/capture.sh NAME [--drop-caches] [--seconds N] -- WORKLOAD...
#
# Writes traces/NAME/ (NAME relative to traces/; the workload runs in the caller's
# directory):
#   NAME.perf.txt.xz   the kernel's kmem tracepoints, system-wide, `perf script` text
#   layout.txt.xz      the page layout when the trace starts: /proc/kpageflags and
#                      /proc/kpagecount, the bits the replay uses, run-length coded
#   zoneinfo.txt, buddyinfo.txt, pagetypeinfo.txt
#                      read right after the layout
#   snapshots.txt      /proc/buddyinfo and /proc/pagetypeinfo once a second, each
#                      stamped with the trace's own clock; the last one (`end`) also
#                      /proc/zoneinfo and /proc/vmstat
#   capture.txt        what the capture cost, the load average, the kernel
#
# Needs root (kpageflags, pagetypeinfo, system-wide perf), perf and python3.
# --drop-caches empties the page cache first (a file walk then reads from disk);
# --seconds N stops the workload after N seconds (timeout -s INT).
#
# The trace clock: the helper marks each read with a system call nobody else makes,
# `sched_get_priority_max(0x5a000000 | kind << 16 | seq)`, recorded as one more
# tracepoint, so every snapshot carries the time stamp of the trace's own clock
# (perf's, the one the replay's whole seconds are counted on). `perf script`'s
# marker lines are split off into the snapshots' time stamps.
set -euo pipefail
caller=$PWD
cd "$(dirname "$0")"
name=$1
shift
drop=false
seconds=
while [[ $# -gt 0 && $1 != -- ]]; do
    case $1 in
    --drop-caches) drop=true ;;
    --seconds)
        seconds=$2
        shift
        ;;
    *)
        echo "unknown option $1" >&2
        exit 2
        ;;
    esac
    shift
done
[[ ${1:-} == -- ]] && shift
[[ $# -gt 0 ]] || {
    echo "usage: $0 NAME [--drop-caches] [--seconds N] -- WORKLOAD..." >&2
    exit 2
}
mkdir -p "$name"
out=$(cd "$name" && pwd)
base=$(basename "$out")
work=$(mktemp -d /tmp/kmem-capture-XXXXXX)
trap 'rm -rf "$work"' EXIT

# The helper: reads the layout, then snapshots once a second until SIGUSR1 (the
# end snapshot), then, on SIGUSR2 (perf has stopped), stamps the snapshots with
# the markers' trace times and writes the layout file. Everything it holds until
# then stays in its own memory, so that nothing it keeps reaches the page cache
# while the trace runs.
cat > "$work/helper.py" <<'PY'
import lzma, os, resource, signal, sys, time

out, work = sys.argv[1], sys.argv[2]
LAYOUT_BEGIN, LAYOUT_END, SNAPSHOT, END = 1, 2, 3, 4
SECTION = 32768          # frames per memory section (x86-64, 128 MiB)
CHUNK = 1 << 15          # frames per read of each file, alternating

def mark(kind, seq):
    try:
        os.sched_get_priority_max(0x5A000000 | kind << 16 | seq)
    except OSError:
        pass             # EINVAL, as meant: only the tracepoint matters

def read(path):
    with open(path) as f:
        return f.read()

def zones(text):
    """(name, start_pfn, spanned, managed) of each populated zone."""
    zs, cur = [], None
    for line in text.splitlines():
        w = line.split()
        if line.startswith("Node "):
            cur = {"name": w[3]}
            zs.append(cur)
        elif cur is not None and len(w) >= 2 and w[0] in ("spanned", "managed", "start_pfn:"):
            cur[w[0].rstrip(":")] = int(w[1])
    return [z for z in zs if z.get("spanned", 0) > 0 and z.get("managed", 0) > 0]

# 1. The layout: both files in alternating chunks, so that the flags and the count
#    of a frame are read within a few milliseconds of each other. A zone whose
#    memory map is initialised lazily (deferred struct pages) reads as zeros past
#    its initialised part: each zone is read up to its start + managed, then on
#    until a whole section has been zeros.
zi = zones(read("/proc/zoneinfo"))
flags = os.open("/proc/kpageflags", os.O_RDONLY)
count = os.open("/proc/kpagecount", os.O_RDONLY)
raw_f, raw_c = bytearray(), bytearray()
spans = []
# The read at a higher priority, so that the machine's other work moves the
# frames as little as possible while it runs; back to normal after.
nice0 = os.getpriority(os.PRIO_PROCESS, 0)
try:
    os.setpriority(os.PRIO_PROCESS, 0, -10)
except OSError:
    pass
t0 = time.monotonic()
cpu0 = time.process_time()
mark(LAYOUT_BEGIN, 0)
for z in zi:
    start, end = z["start_pfn"], z["start_pfn"] + z["spanned"]
    must = min(end, start + z["managed"])
    p, zero_run = start, 0
    first = len(raw_f) // 8
    while p < end and (p < must or zero_run < SECTION):
        n = min(CHUNK, end - p)
        bf = os.pread(flags, 8 * n, 8 * p)
        bc = os.pread(count, 8 * n, 8 * p)
        n = min(len(bf), len(bc)) // 8
        if n == 0:
            break
        raw_f += bf[: 8 * n]
        raw_c += bc[: 8 * n]
        zero_run = zero_run + n if bf[: 8 * n].count(0) == 8 * n and bc[: 8 * n].count(0) == 8 * n else 0
        p += n
    spans.append((z["name"], start, p - start, first))
mark(LAYOUT_END, 0)
layout_s = time.monotonic() - t0
layout_cpu = time.process_time() - cpu0
try:
    os.setpriority(os.PRIO_PROCESS, 0, nice0)
except OSError:
    pass
for f in ("zoneinfo", "buddyinfo", "pagetypeinfo"):
    with open(os.path.join(out, f + ".txt"), "w") as w:
        w.write(read("/proc/" + f))

# 2. Snapshots, one a second, until SIGUSR1.
state = {"end": False, "perf_done": False}
signal.signal(signal.SIGUSR1, lambda *_: state.__setitem__("end", True))
signal.signal(signal.SIGUSR2, lambda *_: state.__setitem__("perf_done", True))
snaps = open(os.path.join(work, "snapshots.raw"), "w")
seq, next_t = 0, time.monotonic()
open(os.path.join(work, "ready"), "w").close()
while not state["end"]:
    next_t += 1.0
    while not state["end"] and time.monotonic() < next_t:
        time.sleep(min(0.05, max(0.0, next_t - time.monotonic())))
    if state["end"]:
        break
    seq += 1
    mark(SNAPSHOT, seq)
    b, p = read("/proc/buddyinfo"), read("/proc/pagetypeinfo")
    snaps.write("=== snapshot %d\n%s%s" % (seq, b, p))
    snaps.flush()
mark(END, 0)
b, p = read("/proc/buddyinfo"), read("/proc/pagetypeinfo")
z, v = read("/proc/zoneinfo"), read("/proc/vmstat")
snaps.write("=== end 0\n%s%s=== zoneinfo\n%s=== vmstat\n%s" % (b, p, z, v))
snaps.close()
ru = resource.getrusage(resource.RUSAGE_SELF)
open(os.path.join(work, "end-done"), "w").close()
while not state["perf_done"]:
    time.sleep(0.05)

# 3. perf has stopped: the markers' trace times into the snapshots' headers,
#    the layout encoded, the costs written down.
times = {}
for line in open(os.path.join(work, "marks.txt")):
    t, v = line.split()
    v = int(v, 16)
    times[((v >> 16) & 0xFF, v & 0xFFFF)] = t
def stamp(kind, seq):
    return times.get((kind, seq), "?")
with open(os.path.join(out, "snapshots.txt"), "w") as w:
    w.write("# /proc/buddyinfo and /proc/pagetypeinfo once a second during the trace; "
            "time= is the trace clock (perf script's seconds)\n")
    for line in open(os.path.join(work, "snapshots.raw")):
        if line.startswith("=== snapshot "):
            n = int(line.split()[2])
            line = "=== snapshot %d time=%s\n" % (n, stamp(SNAPSHOT, n))
        elif line.startswith("=== end "):
            line = "=== end time=%s\n" % stamp(END, 0)
        w.write(line)

# The layout: for each frame the kpageflags bits the replay reads, and whether
# kpagecount is non-zero, as one hex mask; runs of equal masks as `LENGTH MASK`.
BITS = [(10, 0x1), (20, 0x2), (23, 0x4), (32, 0x8), (7, 0x10), (26, 0x20), (5, 0x40),
        (12, 0x80), (14, 0x100), (15, 0x200), (16, 0x400), (18, 0x800)]
MAPPED = 0x1000
cache = {}
def mask(fl, c):
    key = (fl, c != 0)
    m = cache.get(key)
    if m is None:
        m = sum(v for b, v in BITS if fl >> b & 1) | (MAPPED if c else 0)
        cache[key] = m
    return m
lines = ["# zonealloc page layout v1: /proc/kpageflags and /proc/kpagecount when the trace started",
         "# mask bits: 1 BUDDY, 2 NOPAGE, 4 OFFLINE, 8 RESERVED, 10 SLAB, 20 PGTABLE, 40 LRU, 80 ANON,",
         "#   100 SWAPBACKED, 200 COMPOUND_HEAD, 400 COMPOUND_TAIL, 800 UNEVICTABLE, 1000 kpagecount > 0",
         "begin_time %s" % stamp(LAYOUT_BEGIN, 0),
         "end_time %s" % stamp(LAYOUT_END, 0)]
import struct
for name, start, n, first in spans:
    lines.append("zone %s %d %d" % (name, start, n))
    fl = struct.unpack_from("<%dQ" % n, raw_f, 8 * first)
    ct = struct.unpack_from("<%dQ" % n, raw_c, 8 * first)
    prev, run = None, 0
    for i in range(n):
        m = mask(fl[i], ct[i])
        if m == prev:
            run += 1
        else:
            if run:
                lines.append("%d %x" % (run, prev))
            prev, run = m, 1
    if run:
        lines.append("%d %x" % (run, prev))
with lzma.open(os.path.join(out, "layout.txt.xz"), "wt", preset=6) as w:
    w.write("\n".join(lines) + "\n")
with open(os.path.join(work, "helper-cost.txt"), "w") as w:
    w.write("layout_frames %d\nlayout_read_s %.3f\nlayout_read_cpu_s %.3f\n"
            "helper_cpu_s_during_trace %.3f\nhelper_maxrss_kib %d\n"
            % (sum(s[2] for s in spans), layout_s, layout_cpu,
               ru.ru_utime + ru.ru_stime, ru.ru_maxrss))
PY

now() { date +%s.%N; }
load() { cut -d' ' -f1-3 /proc/loadavg; }
if $drop; then
    sync
    echo 3 > /proc/sys/vm/drop_caches
fi
load_start=$(load)
t_start=$(now)
data=$work/kmem.data
# perf record at a higher priority and with 32 MiB of buffer per CPU: on a machine
# busy with other work a starved reader loses events (perf script then warns of
# lost chunks, kept in capture.txt); the replay's check of the capture (the
# kernel's free memory rebuilt from the trace) shows what a loss did.
nice -n -10 perf record -m 8192 -a -o "$data" \
    -e kmem:mm_page_alloc -e kmem:mm_page_free -e kmem:mm_page_free_batched \
    -e kmem:mm_page_alloc_zone_locked -e kmem:mm_page_pcpu_drain \
    -e kmem:mm_page_alloc_extfrag \
    -e syscalls:sys_enter_sched_get_priority_max --filter 'policy >= 0x5a000000' \
    2> "$work/perf-record.log" &
perf_pid=$!
sleep 1
python3 "$work/helper.py" "$out" "$work" &
helper_pid=$!
while [[ ! -e $work/ready ]]; do
    kill -0 "$helper_pid" 2>/dev/null || { echo "helper failed" >&2; exit 1; }
    sleep 0.05
done
t_work=$(now)
if [[ -n $seconds ]]; then
    (cd "$caller" && timeout -s INT "$seconds" "$@") || true
else
    (cd "$caller" && "$@")
fi
t_work_end=$(now)
kill -USR1 "$helper_pid"
while [[ ! -e $work/end-done ]]; do sleep 0.05; done
load_end=$(load)
# perf record's own CPU time (user + system ticks) while it recorded.
perf_ticks=$(awk '{print $14 + $15}' "/proc/$perf_pid/stat")
kill -INT "$perf_pid"
wait "$perf_pid" || true
times > "$work/times.txt"
perf script -i "$data" 2> "$work/perf-script.log" | awk -v marks="$work/marks.txt" '
    /sys_enter_sched_get_priority_max/ {
        for (i = 1; i <= NF; i++) if ($i ~ /^[0-9]+\.[0-9]+:$/) t = substr($i, 1, length($i) - 1)
        print t, $NF > marks
        next
    }
    { print }' | xz -9 -T0 > "$out/$base.perf.txt.xz"
kill -USR2 "$helper_pid"
wait "$helper_pid"
events=$(xz -dc "$out/$base.perf.txt.xz" | wc -l)
{
    echo "# how traces/$base was captured"
    echo "kernel $(uname -r)"
    echo "date $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "workload $*"
    echo "drop_caches $drop"
    echo "load_average_start $load_start"
    echo "load_average_end $load_end"
    printf 'workload_s %.1f\n' "$(echo "$t_work_end - $t_work" | bc)"
    printf 'capture_s %.1f\n' "$(echo "$(now) - $t_start" | bc)"
    echo "events $events"
    echo "perf_data_bytes $(stat -c %s "$data")"
    echo "trace_xz_bytes $(stat -c %s "$out/$base.perf.txt.xz")"
    echo "layout_xz_bytes $(stat -c %s "$out/layout.txt.xz")"
    cat "$work/helper-cost.txt"
    printf 'perf_record_cpu_s %.2f\n' "$(echo "$perf_ticks / $(getconf CLK_TCK)" | bc -l)"
    # bash's `times`: the shell's own, then its children's user and system time
    # (perf record, the helper, the workload, perf script, xz), all together.
    echo "children_cpu $(tail -1 "$work/times.txt")"
    grep -hiE 'lost|wakeup|captured' "$work/perf-record.log" | sed 's/^/perf_record /'
    # perf script's summary of what the buffers dropped ("lost N chunks"); none
    # when nothing was lost.
    echo "perf_script_lost $(grep -hioE 'lost [0-9]+ chunks|[0-9]+ lost' "$work/perf-script.log" | tr '\n' ' ')"
} > "$out/capture.txt"
cat "$out/capture.txt"
