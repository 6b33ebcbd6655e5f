"""pandas: a frame built, grouped, joined, written to CSV in memory."""
import io

import numpy as np
import pandas as pd

n = 200_000
df = pd.DataFrame({"key": np.arange(n) % 97, "x": np.arange(n, dtype="float64"), "s": [f"r{i % 13}" for i in range(n)]})
g = df.groupby("key")["x"].agg(["sum", "mean", "count"])
joined = df.merge(g, left_on="key", right_index=True)
buf = io.StringIO()
joined.head(1000).to_csv(buf)
cats = df["s"].astype("category").value_counts().sort_index()
print(len(joined), round(float(g["mean"].sum()), 3), len(buf.getvalue()), [int(c) for c in cats.values[:3]])
