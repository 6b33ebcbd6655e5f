"""pprint (after pyperformance's bm_pprint): pretty-print and safe-repr a
large nested structure of lists, dicts and tuples.

Pure-Python library code (pprint's recursive formatter) with many small
string allocations.
"""
import os
import pprint

# Repetitions at BENCH_SCALE=1 (about 2.5 s bare on the reference machine).
REPEAT = 4
SCALE = float(os.environ.get("BENCH_SCALE", "1"))
# The functions a user would decorate with @profile for line_profiler and
# memory_profiler (bench/run.py makes a decorated copy from this list).
HOT = ["render"]


def build():
    return [{"id": i, "name": f"item {i}", "tags": ("a", "b", str(i % 10)),
             "values": list(range(i % 15)), "meta": {"x": i * 0.5, "ok": i % 2 == 0}}
            for i in range(5_000)]


def render(data):
    text = pprint.pformat(data, width=60)
    safe = pprint.saferepr(data)
    return len(text) + len(safe) + pprint.isreadable(data)


def main():
    data = build()
    total = 0
    for _ in range(max(1, round(REPEAT * SCALE))):
        total += render(data)
    print(f"pprint_format: {total}")


if __name__ == "__main__":
    main()
