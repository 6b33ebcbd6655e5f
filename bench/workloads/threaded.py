"""Threads: four worker threads, each alternating pure-Python work (a small
word-frequency and prime-sieve job) with GIL-releasing native work (hashing
and compressing buffers with hashlib and zlib), like a server's request
handlers.

The profiler must see every thread, not just the main one, and must not
serialise the native sections that run outside the GIL.
"""
import hashlib
import os
import threading
import zlib

# Work items per thread at BENCH_SCALE=1 (about 2.5 s bare on the reference
# machine, with two cores).
ITEMS = 64
THREADS = 4
SCALE = float(os.environ.get("BENCH_SCALE", "1"))
# The functions a user would decorate with @profile for line_profiler and
# memory_profiler (bench/run.py makes a decorated copy from this list).
HOT = ['python_part', 'native_part', 'worker']
BUFFER = 1 << 20


def python_part(seed):
    # Sieve of Eratosthenes and a little dictionary work, all bytecode.
    limit = 20_000 + seed % 1000
    sieve = [True] * limit
    sieve[0] = sieve[1] = False
    for i in range(2, int(limit ** 0.5) + 1):
        if sieve[i]:
            for j in range(i * i, limit, i):
                sieve[j] = False
    primes = [i for i, p in enumerate(sieve) if p]
    counts = {}
    for p in primes:
        key = p % 10
        counts[key] = counts.get(key, 0) + 1
    return len(primes) + sum(k * v for k, v in counts.items())


def native_part(buffer, seed):
    # hashlib and zlib release the GIL on buffers this large.
    digest = hashlib.sha256(buffer).digest()
    digest = hashlib.blake2b(buffer + digest).digest()
    packed = zlib.compress(buffer, 6)
    return len(packed) ^ digest[seed % len(digest)]


def worker(index, items, results):
    # Semi-compressible data: repeated phrases with a varying counter.
    buffer = b"".join(b"record %d of thread %d; " % (i, index)
                      for i in range(BUFFER // 24))[:BUFFER]
    acc = 0
    for item in range(items):
        acc += python_part(index * 1000 + item)
        acc += native_part(buffer, item)
    results[index] = acc


def main():
    items = max(1, int(ITEMS * SCALE))
    results = [0] * THREADS
    threads = [threading.Thread(target=worker, args=(i, items, results))
               for i in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    print(f"threaded threads={THREADS} items={items} result={sum(results)}")


if __name__ == "__main__":
    main()
