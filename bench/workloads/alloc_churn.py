"""Allocation churn: an event-processing loop that builds and throws away
many short-lived dicts, lists, tuples and strings (parsing, reshaping and
formatting records), while a few long-lived containers keep growing (an
index of keys, a list of kept summaries, a bytearray log).

Nearly every line allocates; most objects die young and are reused by the
small-object allocator, and the growing containers are resized now and then
into large blocks. A memory profiler sees a very high rate of allocations
and frees with a slowly rising footprint.
"""
import os

# Batches at BENCH_SCALE=1 (about 2.5 s bare on the reference machine).
BATCHES = 48
EVENTS_PER_BATCH = 2_000
SCALE = float(os.environ.get("BENCH_SCALE", "1"))
# The functions a user would decorate with @profile for line_profiler and
# memory_profiler (bench/run.py makes a decorated copy from this list).
HOT = ['make_event', 'reshape', 'summarise', 'main']

KINDS = ("click", "view", "purchase", "scroll", "hover", "share")
REGIONS = ("eu-west", "us-east", "ap-south", "sa-east")


def lcg(seed):
    # A small deterministic generator, so that the checksum is stable and no
    # time goes into the random module.
    state = seed
    while True:
        state = (state * 1103515245 + 12345) & 0x7FFFFFFF
        yield state


def make_event(i, r):
    # A fresh dict with nested list and string values per event.
    return {
        "id": i,
        "kind": KINDS[r % len(KINDS)],
        "region": REGIONS[(r >> 3) % len(REGIONS)],
        "user": "user-%05d" % (r % 20_000),
        "tags": [f"t{(r >> k) & 15}" for k in range(0, 12, 3)],
        "values": [((r >> k) & 255) / 7.0 for k in range(8)],
    }


def reshape(event):
    # Short-lived intermediates: a copy with derived fields, tuples, joins.
    row = dict(event)
    row["key"] = "/".join((event["region"], event["kind"], event["user"]))
    row["tags"] = sorted(set(event["tags"]))
    values = event["values"]
    row["stats"] = (min(values), max(values), sum(values) / len(values))
    row["line"] = ",".join(str(v)[:6] for v in values)
    return row


def summarise(rows):
    groups = {}
    for row in rows:
        groups.setdefault(row["kind"], []).append(row["stats"][2])
    return {k: (len(v), sum(v) / len(v)) for k, v in sorted(groups.items())}


def main():
    batches = max(1, int(BATCHES * SCALE))
    rand = lcg(7)
    index = {}          # grows: key -> count
    kept = []           # grows: one summary per batch, plus sampled rows
    log = bytearray()   # grows: an append-only text log
    checksum = 0
    event_id = 0
    for b in range(batches):
        rows = []
        for _ in range(EVENTS_PER_BATCH):
            event = make_event(event_id, next(rand))
            event_id += 1
            row = reshape(event)
            rows.append(row)
            index[row["key"]] = index.get(row["key"], 0) + 1
            log += row["key"].encode() + b"\n"
            if event_id % 16 == 0:
                kept.append((row["key"], row["line"], row["stats"]))
        summary = summarise(rows)
        kept.append(summary)
        text = "\n".join(f"{b} {k} {n} {m:.3f}"
                         for k, (n, m) in summary.items())
        log += text.encode() + b"\n"
        checksum = (checksum * 31 + sum(len(r["line"]) for r in rows)) \
            % 1_000_000_007
        del rows
    print(f"alloc_churn batches={batches} keys={len(index)} "
          f"kept={len(kept)} log={len(log)} checksum={checksum}")


if __name__ == "__main__":
    main()
