"""A small program with a Python hot loop, a native hot spot and a sleep:
run `pyrometer examples/hotspots.py` to see all three kinds of time."""

import json
import math
import time


def python_loop(n):
    total = 0
    for i in range(n):
        total += i * i % 7
    return total


def native_work(n):
    # sorted() and sum() run in C: native time charged to this line.
    data = [math.sin(i) for i in range(n)]
    return sum(sorted(data * 20))


def serialise(n):
    payload = {"items": [{"id": i, "name": f"item{i}"} for i in range(n)]}
    return len(json.dumps(payload))


def main():
    python_loop(3_000_000)
    native_work(100_000)
    serialise(200_000)
    time.sleep(0.3)


if __name__ == "__main__":
    main()
