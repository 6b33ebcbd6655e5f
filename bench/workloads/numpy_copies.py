"""numpy code that copies a lot: arrays built from Python lists, explicit
.copy() calls, concatenation and stacking, dtype conversions with astype,
fancy (integer and boolean) indexing, and sorting into new arrays, as in a
data-preparation script that reshuffles a table of columns.

Most of the time is spent in numpy's native copy loops and in building
arrays out of Python objects; large temporary arrays are allocated and freed
all the time, so a memory profiler sees a high volume of big allocations and
of copying.
"""
import os

import numpy as np

# Iterations of the main loop at BENCH_SCALE=1 (about 2.5 s bare on the
# reference machine).
ITERATIONS = 12
SCALE = float(os.environ.get("BENCH_SCALE", "1"))
# The functions a user would decorate with @profile for line_profiler and
# memory_profiler (bench/run.py makes a decorated copy from this list).
HOT = ['from_python', 'reshuffle', 'rolling_copies']
ROWS = 200_000       # rows of the table
LIST_LEN = 60_000    # length of the Python lists turned into arrays


def from_python(rng_state):
    # Arrays built from Python lists and back: np.array(list) copies every
    # element out of a Python object.
    values = [((rng_state * 7919 + i * 104729) % 100_003) / 17.0
              for i in range(LIST_LEN)]
    ints = [i * 3 % 1009 for i in range(LIST_LEN)]
    a = np.array(values)
    b = np.array(ints, dtype=np.int64)
    pairs = np.array(list(zip(ints[:20_000], values[:20_000])))
    back = a[:5_000].tolist()
    return float(a.sum() + b.sum() + pairs[:, 1].sum() + sum(back))


def reshuffle(rng):
    # A table of columns, copied, converted and reassembled.
    price = rng.uniform(1.0, 500.0, ROWS)
    qty = rng.integers(1, 50, ROWS)
    cat = rng.integers(0, 64, ROWS)
    work = price.copy()
    work *= 1.2
    qty_f = qty.astype(np.float64)
    total = work * qty_f
    total32 = total.astype(np.float32)
    table = np.stack([price, qty_f, cat.astype(np.float64), total], axis=1)
    wide = np.concatenate([table, table[:, :2] * 0.5], axis=1)
    tall = np.concatenate([wide, wide[::-1]], axis=0)
    # Fancy indexing: every one of these makes a new array.
    order = np.argsort(tall[:, 3])
    ranked = tall[order]
    picked = ranked[rng.integers(0, len(ranked), ROWS // 2)]
    mask = picked[:, 2] < 16
    subset = picked[mask]
    by_cat = [subset[subset[:, 2] == c][:, 3].copy() for c in range(16)]
    merged = np.concatenate(by_cat)
    halves = np.array_split(merged, 8)
    rebuilt = np.hstack([h.copy() for h in halves[::-1]])
    ints = rebuilt.astype(np.int32).astype(np.int64)
    return (float(total32.sum(dtype=np.float64)) * 1e-6
            + float(ints.sum()) * 1e-6 + float(rebuilt.mean()))


def rolling_copies(rng):
    # A growing buffer extended by concatenation (a copy each time) and
    # windows taken as copies.
    buf = np.empty(0)
    acc = 0.0
    for k in range(40):
        chunk = rng.standard_normal(8_192)
        buf = np.concatenate([buf, chunk])
        window = buf[-16_384:].copy()
        window.sort()
        acc += float(window[len(window) // 2])
    return acc + float(buf.astype(np.float32).sum())


def main():
    iterations = max(1, int(ITERATIONS * SCALE))
    rng = np.random.default_rng(1234)
    acc = 0.0
    for i in range(iterations):
        acc += from_python(i)
        acc += reshuffle(rng)
        acc += rolling_copies(rng)
    print(f"numpy_copies iterations={iterations} acc={acc:.3f}")


if __name__ == "__main__":
    main()
