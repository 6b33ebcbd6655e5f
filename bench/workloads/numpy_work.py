"""Numerical work with numpy: dense linear algebra, FFT-based filtering and
elementwise array expressions, driven by a Python loop that does the
bookkeeping, as in a typical analysis script.

Most of the time is spent in native code (BLAS/LAPACK, pocketfft, numpy's
ufunc loops); the profiler must attribute it as native time and not slow it
down.
"""
import os

import numpy as np

# Iterations of the main loop at BENCH_SCALE=1 (about 2.5 s bare on the
# reference machine).
ITERATIONS = 34
SCALE = float(os.environ.get("BENCH_SCALE", "1"))
# The functions a user would decorate with @profile for line_profiler and
# memory_profiler (bench/run.py makes a decorated copy from this list).
HOT = ['linear_algebra', 'spectral_filter', 'elementwise', 'python_glue']
N = 256            # matrix side
SIGNAL = 1 << 16   # samples per signal


def linear_algebra(rng):
    a = rng.standard_normal((N, N))
    spd = a @ a.T + N * np.eye(N)
    b = rng.standard_normal(N)
    x = np.linalg.solve(spd, b)
    eig = np.linalg.eigvalsh(spd)
    q, r = np.linalg.qr(a)
    resid = float(np.linalg.norm(spd @ x - b))
    return resid, float(eig[-1] / eig[0]), float(np.abs(np.diag(r)).sum())


def spectral_filter(rng):
    t = np.linspace(0.0, 1.0, SIGNAL, endpoint=False)
    clean = np.sin(2 * np.pi * 50 * t) + 0.5 * np.sin(2 * np.pi * 120 * t)
    noisy = clean + rng.standard_normal(SIGNAL) * 0.8
    spectrum = np.fft.rfft(noisy)
    freqs = np.fft.rfftfreq(SIGNAL, d=1.0 / SIGNAL)
    spectrum[freqs > 200] = 0
    recovered = np.fft.irfft(spectrum, n=SIGNAL)
    return float(np.sqrt(np.mean((recovered - clean) ** 2)))


def elementwise(rng):
    x = rng.uniform(-3, 3, 250_000)
    y = np.exp(-x * x) * np.cos(4 * x) + np.tanh(x) ** 2
    y = np.where(y > 0.5, np.sqrt(np.abs(y)), y * 0.5)
    hist, _ = np.histogram(y, bins=64)
    order = np.argsort(y)
    return float(y[order[len(order) // 2]]), int(hist.argmax())


def python_glue(rng, steps):
    # A small Kalman filter written step by step: many tiny numpy calls,
    # where call overhead and Python bookkeeping dominate.
    f = np.array([[1.0, 1.0], [0.0, 1.0]])
    h = np.array([[1.0, 0.0]])
    q = np.eye(2) * 1e-3
    r = np.array([[0.25]])
    state = np.zeros(2)
    p = np.eye(2)
    truth = 0.0
    errors = []
    for k in range(steps):
        truth += 0.1
        z = truth + rng.standard_normal() * 0.5
        state = f @ state
        p = f @ p @ f.T + q
        s = h @ p @ h.T + r
        gain = p @ h.T @ np.linalg.inv(s)
        state = state + (gain @ (np.array([z]) - h @ state)).ravel()
        p = (np.eye(2) - gain @ h) @ p
        errors.append(abs(state[0] - truth))
    return sum(errors) / len(errors)


def main():
    iterations = max(1, int(ITERATIONS * SCALE))
    rng = np.random.default_rng(42)
    acc = 0.0
    for _ in range(iterations):
        resid, cond, rdiag = linear_algebra(rng)
        rms = spectral_filter(rng)
        median, mode = elementwise(rng)
        err = python_glue(rng, 400)
        acc += resid + cond + rdiag * 1e-6 + rms + median + mode + err
    print(f"numpy_work iterations={iterations} acc={acc:.3f}")


if __name__ == "__main__":
    main()
