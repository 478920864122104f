"""A database workload: SQLite in a file, rows inserted in transactions, an index
built, queries run; a fresh database each pass, for the given seconds."""
import os
import random
import sqlite3
import sys
import tempfile
import time

seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 40.0
rng = random.Random(11)
end = time.monotonic() + seconds
d = tempfile.mkdtemp()
n = 0
while time.monotonic() < end:
    path = os.path.join(d, f"db{n}.sqlite")
    db = sqlite3.connect(path)
    db.execute("create table t (id integer primary key, k integer, v blob)")
    for _ in range(20):
        db.executemany(
            "insert into t (k, v) values (?, ?)",
            ((rng.randrange(1 << 30), os.urandom(rng.randint(64, 2048))) for _ in range(2000)),
        )
        db.commit()
    db.execute("create index tk on t (k)")
    for _ in range(200):
        lo = rng.randrange(1 << 30)
        db.execute("select count(*), sum(length(v)) from t where k between ? and ?", (lo, lo + (1 << 24))).fetchone()
    db.close()
    if n >= 2:
        os.remove(os.path.join(d, f"db{n - 2}.sqlite"))
    n += 1
for f in os.listdir(d):
    os.remove(os.path.join(d, f))
os.rmdir(d)
