"""SQLite: an in-memory order database filled from Python generators, then
queried with joins, aggregates, an index, and a Python function called from
SQL, as in a small reporting job.

Time is split between SQLite's C engine, the sqlite3 module's conversions,
and Python callbacks invoked from inside native code.
"""
import os
import random
import sqlite3
import zlib

# Rounds of load-and-report at BENCH_SCALE=1 (about 2.5 s bare on the
# reference machine).
ROUNDS = 6
ORDERS = 40_000
SCALE = float(os.environ.get("BENCH_SCALE", "1"))
# The functions a user would decorate with @profile for line_profiler and
# memory_profiler (bench/run.py makes a decorated copy from this list).
HOT = ['discount_band', 'load', 'report']

REGIONS = ["north", "south", "east", "west", "centre"]
PRODUCTS = [f"product-{i:03d}" for i in range(200)]


def discount_band(total):
    # Called by SQLite once per row: a Python callback from native code.
    if total > 800:
        return "gold"
    if total > 300:
        return "silver"
    return "bronze"


def load(db, rng, round_no):
    db.execute("DELETE FROM orders")
    db.execute("DELETE FROM customers")
    db.executemany("INSERT INTO customers VALUES (?, ?, ?)",
                   ((i, f"customer {i}", rng.choice(REGIONS))
                    for i in range(2000)))
    db.executemany(
        "INSERT INTO orders VALUES (?, ?, ?, ?, ?)",
        ((i, rng.randrange(2000), rng.choice(PRODUCTS), rng.randint(1, 12),
          round(rng.uniform(1, 120), 2)) for i in range(ORDERS)))
    db.commit()


def report(db):
    out = []
    out.append(db.execute(
        "SELECT c.region, count(*), round(sum(o.qty * o.price), 2) "
        "FROM orders o JOIN customers c ON c.id = o.customer "
        "GROUP BY c.region ORDER BY c.region").fetchall())
    out.append(db.execute(
        "SELECT band(qty * price) AS b, count(*) FROM orders "
        "GROUP BY b ORDER BY b").fetchall())
    out.append(db.execute(
        "SELECT product, sum(qty) AS n FROM orders "
        "GROUP BY product ORDER BY n DESC, product LIMIT 5").fetchall())
    top = db.execute(
        "SELECT customer, sum(qty * price) AS spend FROM orders "
        "GROUP BY customer HAVING spend > 2000 ORDER BY spend DESC").fetchall()
    # Python-side post-processing of the rows.
    ranked = sorted(((round(s / 100) * 100, c) for c, s in top), reverse=True)
    out.append(len(ranked))
    for cid, _ in top[:50]:
        out.append(db.execute(
            "SELECT count(*), max(price) FROM orders WHERE customer = ?",
            (cid,)).fetchone())
    return out


def main():
    rounds = max(1, int(ROUNDS * SCALE))
    rng = random.Random(7)
    db = sqlite3.connect(":memory:")
    db.create_function("band", 1, discount_band, deterministic=True)
    db.execute("CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT, "
               "region TEXT)")
    db.execute("CREATE TABLE orders (id INTEGER PRIMARY KEY, customer INTEGER, "
               "product TEXT, qty INTEGER, price REAL)")
    db.execute("CREATE INDEX orders_customer ON orders(customer)")
    checksum = 0
    for r in range(rounds):
        load(db, rng, r)
        result = report(db)
        checksum = zlib.crc32(repr(result).encode(), checksum)
    db.close()
    print(f"sqlite_work rounds={rounds} orders={ORDERS} checksum={checksum}")


if __name__ == "__main__":
    main()
