"""Network churn over loopback TCP: four connections, each a sender streaming
chunks of 1 KiB to 256 KiB to a receiver that reads them into a fixed buffer, paced
to a total rate; one connection in turn is closed and reopened every half second.
Runs for the given seconds."""
import random
import socket
import sys
import threading
import time

seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 40.0
rate = float(sys.argv[2]) if len(sys.argv) > 2 else 64e6  # bytes a second, all senders
CONNS = 4
end = time.monotonic() + seconds
payload = bytes(256 << 10)

listener = socket.socket()
listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
listener.bind(("127.0.0.1", 0))
listener.listen(16)
port = listener.getsockname()[1]


def receive(conn):
    buf = bytearray(64 << 10)
    with conn:
        while conn.recv_into(buf):
            pass


def accept():
    while True:
        try:
            conn, _ = listener.accept()
        except OSError:
            return
        threading.Thread(target=receive, args=(conn,), daemon=True).start()


def send(slot, stop):
    rng = random.Random(slot)
    per = rate / CONNS
    with socket.create_connection(("127.0.0.1", port)) as s:
        t = time.monotonic()
        while not stop.is_set() and time.monotonic() < end:
            n = rng.randint(1 << 10, 256 << 10)
            s.sendall(payload[:n])
            t += n / per
            d = t - time.monotonic()
            if d > 0:
                time.sleep(d)


threading.Thread(target=accept, daemon=True).start()
slots = []
for i in range(CONNS):
    stop = threading.Event()
    th = threading.Thread(target=send, args=(i, stop))
    th.start()
    slots.append((th, stop))
turn = 0
while time.monotonic() < end:
    time.sleep(0.5)
    th, stop = slots[turn]
    stop.set()
    th.join()
    stop = threading.Event()
    th = threading.Thread(target=send, args=(turn + CONNS * 1000, stop))
    th.start()
    slots[turn] = (th, stop)
    turn = (turn + 1) % CONNS
for th, stop in slots:
    stop.set()
    th.join()
listener.close()
