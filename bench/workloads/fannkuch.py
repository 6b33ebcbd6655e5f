"""Fannkuch: for every permutation of 1..n, repeatedly reverse the prefix
whose length is the first element until a 1 comes first, and record the most
flips any permutation needs, plus a signed checksum.

Pure Python list slicing and indexing in a permutation generator: integer
code with heavy use of list operations implemented in C.
"""
import os

# Permutation length and repetitions at BENCH_SCALE=1 (about 2.5 s bare on
# the reference machine).  n is fixed so that the answer is comparable; the
# scale sets how many times the whole count is repeated.
N = 9
REPEAT = 3
SCALE = float(os.environ.get("BENCH_SCALE", "1"))
# The functions a user would decorate with @profile for line_profiler and
# memory_profiler (bench/run.py makes a decorated copy from this list).
HOT = ['fannkuch']


def fannkuch(n):
    perm = list(range(n))
    count = [0] * n
    max_flips = 0
    checksum = 0
    sign = 1
    r = n
    while True:
        # Count the flips for the current permutation.
        first = perm[0]
        if first:
            p = perm[:]
            flips = 0
            while first:
                p[:first + 1] = p[first::-1]
                flips += 1
                first = p[0]
            if flips > max_flips:
                max_flips = flips
            checksum += flips if sign > 0 else -flips
        # Next permutation, in the order of the rotating-prefix counter.
        sign = -sign
        while r != 1:
            count[r - 1] = r
            r -= 1
        while True:
            if r == n:
                return max_flips, checksum
            head = perm[0]
            perm[:r] = perm[1:r + 1]
            perm[r] = head
            count[r] -= 1
            if count[r] > 0:
                break
            r += 1


def main():
    repeat = max(1, round(REPEAT * SCALE)) if SCALE >= 1 / REPEAT else 1
    n = N if SCALE >= 1 / REPEAT else N - 1
    result = None
    for _ in range(repeat):
        result = fannkuch(n)
    print(f"fannkuch n={n} repeat={repeat} max_flips={result[0]} "
          f"checksum={result[1]}")


if __name__ == "__main__":
    main()
