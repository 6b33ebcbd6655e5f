"""scipy: a linear solve (LAPACK), an FFT, sparse products, an optimisation."""
import numpy as np
from scipy import fft, linalg, optimize, sparse

rng = np.random.default_rng(3)
m = rng.standard_normal((400, 400)) + 400 * np.eye(400)
x = linalg.solve(m, np.ones(400))
f = fft.rfft(np.sin(np.linspace(0, 100, 1 << 16)))
sp = sparse.random(3000, 3000, density=0.002, random_state=5, format="csr")
prod = (sp @ sp.T).nnz
best = optimize.minimize(lambda v: ((v - 3) ** 2).sum(), np.zeros(5)).x
print(round(float(x.sum()), 6), int(np.argmax(np.abs(f))), prod, [round(float(v), 3) for v in best])
