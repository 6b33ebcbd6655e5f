"""Text processing: build a corpus of generated log lines and JSON records,
then round-trip the records through json, scan the text with regular
expressions, rewrite it, and count words.

A mix of Python glue and C-accelerated library code (json's C encoder and
decoder, the re engine, str methods), as in log and data pipelines.
"""
import collections
import json
import os
import random
import re

# Batches at BENCH_SCALE=1 (about 2.5 s bare on the reference machine).
BATCHES = 44
RECORDS_PER_BATCH = 400
SCALE = float(os.environ.get("BENCH_SCALE", "1"))
# The functions a user would decorate with @profile for line_profiler and
# memory_profiler (bench/run.py makes a decorated copy from this list).
HOT = ['make_record', 'make_log', 'process']

SYLLABLES = ["ka", "lo", "mi", "ne", "ru", "sa", "to", "vi", "qu", "ber",
             "dan", "fel", "gor", "hin", "jas", "pol", "tran", "wex", "zy"]
LEVELS = ["DEBUG", "INFO", "INFO", "INFO", "WARNING", "ERROR"]

EMAIL = re.compile(r"\b[\w.]+@[\w]+\.(?:com|org|net)\b")
TIMESTAMP = re.compile(r"(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})")
LEVEL_LINE = re.compile(r"^\S+ (ERROR|WARNING) \[(\w+)\] (.*)$", re.MULTILINE)
NUMBER = re.compile(r"\b\d+(?:\.\d+)?\b")
WORD = re.compile(r"[a-z]{3,}")


def make_vocabulary(rng, size):
    words = set()
    while len(words) < size:
        words.add("".join(rng.choice(SYLLABLES)
                          for _ in range(rng.randint(1, 4))))
    return sorted(words)


def make_record(rng, vocab, n):
    name = rng.choice(vocab)
    return {
        "id": n,
        "user": {"name": name.title(), "email": f"{name}.{n % 97}@example.com",
                 "tags": rng.sample(vocab, 3)},
        "score": round(rng.uniform(0, 100), 3),
        "active": rng.random() < 0.7,
        "history": [rng.randint(0, 1000) for _ in range(rng.randint(2, 8))],
        "note": " ".join(rng.choice(vocab) for _ in range(rng.randint(5, 15))),
    }


def make_log(rng, vocab, records):
    lines = []
    for r in records:
        ts = (f"2024-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}"
              f"T{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}:"
              f"{rng.randint(0, 59):02d}")
        lines.append(f"{ts} {rng.choice(LEVELS)} [{rng.choice(vocab)}] "
                     f"user {r['user']['email']} scored {r['score']} "
                     f"after {len(r['history'])} tries: {r['note']}")
    return "\n".join(lines)


def process(batch_text, records, counter):
    # JSON round trip, twice with different settings.
    encoded = json.dumps(records)
    decoded = json.loads(encoded)
    pretty = json.dumps(decoded, indent=2, sort_keys=True)
    again = json.loads(pretty)
    assert again == records

    # Regular expressions over the log text.
    emails = EMAIL.findall(batch_text)
    months = collections.Counter(m.group(2)
                                 for m in TIMESTAMP.finditer(batch_text))
    problems = [(lvl, comp, len(msg))
                for lvl, comp, msg in LEVEL_LINE.findall(batch_text)]
    total = sum(float(x) for x in NUMBER.findall(batch_text))
    redacted = EMAIL.sub("<email>", batch_text)
    redacted = TIMESTAMP.sub(r"\3/\2/\1 \4h\5", redacted)

    # Plain Python string work.
    for line in redacted.splitlines():
        head, _, tail = line.partition(": ")
        counter.update(WORD.findall(tail.lower()))
        if head.endswith("]"):
            counter[head.rsplit("[", 1)[-1][:-1]] += 1
    return len(encoded) + len(pretty), len(emails), len(months), \
        len(problems), total


def main():
    batches = max(1, int(BATCHES * SCALE))
    rng = random.Random(1234)
    vocab = make_vocabulary(rng, 2000)
    counter = collections.Counter()
    size = emails = problems = 0
    total = 0.0
    for b in range(batches):
        records = [make_record(rng, vocab, b * RECORDS_PER_BATCH + i)
                   for i in range(RECORDS_PER_BATCH)]
        text = make_log(rng, vocab, records)
        s, e, _, p, t = process(text, records, counter)
        size += s
        emails += e
        problems += p
        total += t
    top = ",".join(w for w, _ in counter.most_common(3))
    print(f"text batches={batches} json_bytes={size} emails={emails} "
          f"problems={problems} numbers={total:.1f} top={top}")


if __name__ == "__main__":
    main()
