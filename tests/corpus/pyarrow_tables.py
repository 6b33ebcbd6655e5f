"""pyarrow: its own memory pool (jemalloc or mimalloc, built in), a table
computed on and round-tripped through Parquet in memory.  Without pyarrow's
thread pools: pyarrow 26 aborts at the interpreter's exit in about 1 run in
10 when they ran ("terminate called without an active exception"), bare."""
import io

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

n = 300_000
table = pa.table({"k": pa.array([i % 17 for i in range(n)]), "v": pa.array([float(i) for i in range(n)])})
grouped = table.group_by("k", use_threads=False).aggregate([("v", "sum")]).sort_by("k")
sink = io.BytesIO()
pq.write_table(table, sink)
back = pq.read_table(io.BytesIO(sink.getvalue()), use_threads=False)
print(back.num_rows, round(pc.sum(back["v"]).as_py(), 1), grouped.num_rows, grouped["v_sum"][0].as_py())
