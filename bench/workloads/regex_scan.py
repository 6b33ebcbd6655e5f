"""Regular expressions (after pyperformance's regex_v8 and regex_effbot):
many patterns (alternations, classes, groups, backreferences, lookahead)
searched, matched, substituted and split over generated text.

Time goes to the C re engine, called from short Python loops.
"""
import os
import random
import re

# Passes at BENCH_SCALE=1 (about 2.5 s bare on the reference machine).
PASSES = 7
SCALE = float(os.environ.get("BENCH_SCALE", "1"))
# The functions a user would decorate with @profile for line_profiler and
# memory_profiler (bench/run.py makes a decorated copy from this list).
HOT = ["scan", "make_text"]

PATTERNS = [re.compile(p) for p in (
    r"\b(\w+)\s+\1\b",                       # repeated words (backreference)
    r"[\w.+-]+@[\w-]+\.(?:com|org|net|io)",   # e-mail addresses
    r"\d{1,3}(?:\.\d{1,3}){3}",               # IPv4 addresses
    r"(?i)error|warn(?:ing)?|fatal",          # levels, case-insensitive
    r"https?://[^\s\"']+",                    # URLs
    r"(?=\w*\d)\w{6,}",                       # words with a digit (lookahead)
    r"\"(?:[^\"\\]|\\.)*\"",                  # quoted strings
    r"(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2})",  # timestamps
)]
WORDS = ["alpha", "beta", "gamma", "delta", "error", "warn", "the", "the",
         "node42", "x9y8z7", "value", "status", "ok", "fatal", "retry"]


def make_text(rng, lines):
    out = []
    for i in range(lines):
        w = rng.choices(WORDS, k=12)
        out.append(f"2024-{1 + i % 12:02d}-{1 + i % 28:02d}T{i % 24:02d}:{i % 60:02d} "
                   f"{' '.join(w)} from 10.{i % 256}.{(i * 7) % 256}.{(i * 13) % 256} "
                   f"mail user{i}@host{i % 9}.com see https://example.org/p/{i} "
                   f"\"msg {i} \\\"q\\\"\"")
    return "\n".join(out)


def scan(text):
    found = 0
    for pat in PATTERNS:
        found += sum(1 for _ in pat.finditer(text))
    found += len(PATTERNS[3].sub("LEVEL", text))
    found += len(re.split(r"[\s,;]+", text))
    for line in text.splitlines()[:2000]:
        m = PATTERNS[7].match(line)
        if m:
            found += int(m.group(2))
    return found


def main():
    rng = random.Random(7)
    text = make_text(rng, 4000)
    total = 0
    for _ in range(int(PASSES * SCALE)):
        total += scan(text)
    print(f"regex_scan: {total}")


if __name__ == "__main__":
    main()
