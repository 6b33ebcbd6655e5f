"""The standard library's native parts: sqlite3, zlib, bz2, lzma, hashlib
(OpenSSL), and the C library's own plugins (NSS modules, dlopened by glibc for
the user and host lookups)."""
import bz2
import grp
import hashlib
import lzma
import pwd
import socket
import sqlite3
import zlib

db = sqlite3.connect(":memory:")
db.execute("create table t (k integer, v text)")
db.executemany("insert into t values (?, ?)", ((i, f"v{i % 100}") for i in range(100_000)))
rows = db.execute("select v, count(*) from t group by v order by v limit 3").fetchall()
blob = b"".join(str(i).encode() for i in range(200_000))
sizes = [len(zlib.compress(blob)), len(bz2.compress(blob)), len(lzma.compress(blob))]
assert zlib.decompress(zlib.compress(blob)) == blob and lzma.decompress(lzma.compress(blob)) == blob
digest = hashlib.sha512(blob).hexdigest()[:16]
user = pwd.getpwuid(0).pw_name
group = grp.getgrgid(0).gr_name
local = sorted({a[4][0] for a in socket.getaddrinfo("localhost", 80, proto=socket.IPPROTO_TCP)})
print(rows, sizes, digest, user, group, local)
