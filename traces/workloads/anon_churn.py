"""Anonymous-memory churn: buffers of 1 to 32 MiB, every page written, a window of
eight kept, the oldest freed; paced to run for the given seconds."""
import random
import sys
import time

seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 40.0
rng = random.Random(7)
window = []
end = time.monotonic() + seconds
page = b"x"
while time.monotonic() < end:
    n = rng.randint(1, 32) << 20
    b = bytearray(n)
    # Write one byte a page, so every page is faulted in (the kernel allocates it).
    b[::4096] = page * len(range(0, n, 4096))
    window.append(b)
    if len(window) > 8:
        window.pop(0)
    time.sleep(0.02)
