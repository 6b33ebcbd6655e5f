"""JSON (after pyperformance's json_dumps and json_loads): encode and decode
nested documents of dicts, lists, strings and numbers, with and without
indentation and key sorting.

Mostly C-accelerated (json's C encoder and scanner), with the Python glue
that builds the documents and checks the round trip.
"""
import json
import os

# Rounds at BENCH_SCALE=1 (about 2.5 s bare on the reference machine).
ROUNDS = 62
SCALE = float(os.environ.get("BENCH_SCALE", "1"))
# The functions a user would decorate with @profile for line_profiler and
# memory_profiler (bench/run.py makes a decorated copy from this list).
HOT = ["make_document", "round_trip"]


def make_document(seed, n):
    return {
        "id": seed,
        "name": f"user-{seed}",
        "tags": [f"t{(seed * 7 + i) % 50}" for i in range(8)],
        "items": [{"sku": f"sku-{seed}-{i}", "qty": i % 7, "price": (seed % 97) * 1.25 + i,
                   "flags": [True, False, None], "note": "é\u2603 \"quoted\" text"}
                  for i in range(n)],
        "nested": {"a": {"b": {"c": [seed, seed * 2, {"d": "deep"}]}}},
    }


def round_trip(docs):
    total = 0
    for doc in docs:
        compact = json.dumps(doc)
        pretty = json.dumps(doc, indent=2, sort_keys=True)
        back = json.loads(compact)
        again = json.loads(pretty)
        assert back == again
        total += len(compact) + len(pretty) + len(back["items"])
    return total


def main():
    total = 0
    for r in range(int(ROUNDS * SCALE)):
        docs = [make_document(r * 100 + i, 20) for i in range(100)]
        total += round_trip(docs)
    print(f"json_roundtrip: {total}")


if __name__ == "__main__":
    main()
