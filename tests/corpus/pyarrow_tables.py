"""pyarrow: its own memory pool (jemalloc or mimalloc, built in), a table
computed on and round-tripped through Parquet in memory.  Without pyarrow's
thread pools: pyarrow 26 aborts at the interpreter's exit now and then when
one ran ("terminate called without an active exception", bare: about 1 run
in 10 with the CPU pool, and once in CI with the I/O pool that
`pq.read_table` starts even with use_threads=False, apache/arrow#34314).
Reading through ParquetFile from a BufferReader starts neither."""
import io

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

n = 300_000
table = pa.table({"k": pa.array([i % 17 for i in range(n)]), "v": pa.array([float(i) for i in range(n)])})
grouped = table.group_by("k", use_threads=False).aggregate([("v", "sum")]).sort_by("k")
sink = io.BytesIO()
pq.write_table(table, sink)
back = pq.ParquetFile(pa.BufferReader(sink.getvalue())).read(use_threads=False)
print(back.num_rows, round(pc.sum(back["v"]).as_py(), 1), grouped.num_rows, grouped["v_sum"][0].as_py())
