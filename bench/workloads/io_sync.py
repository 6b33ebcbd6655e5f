"""I/O: write, fsync, re-read and delete temporary files, and ping-pong
messages between two threads over a socketpair.

Most of the wall time is spent blocked in system calls (fsync, recv), so a
profiler's cost shows up on its handling of waiting threads and system time.
"""
import hashlib
import os
import socket
import tempfile
import threading

# Rounds at BENCH_SCALE=1 (about 2.5 s bare on the reference machine).
ROUNDS = 150
SCALE = float(os.environ.get("BENCH_SCALE", "1"))
# The functions a user would decorate with @profile for line_profiler and
# memory_profiler (bench/run.py makes a decorated copy from this list).
HOT = ["file_round", "ping_pong", "echo"]
FILES = 4
BLOCK = 256 * 1024
MESSAGES = 400


def file_round(directory, r):
    digest = hashlib.sha1()
    for i in range(FILES):
        path = os.path.join(directory, f"f{r}-{i}.bin")
        data = bytes([(r + i) % 256]) * BLOCK
        with open(path, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        with open(path, "rb") as f:
            digest.update(f.read())
        os.unlink(path)
    return digest.hexdigest()


def echo(sock):
    while True:
        msg = sock.recv(4096)
        if not msg or msg == b"stop":
            break
        sock.sendall(msg.upper())


def ping_pong(sock):
    total = 0
    for i in range(MESSAGES):
        sock.sendall(b"ping %d" % i)
        total += len(sock.recv(4096))
    return total


def main():
    a, b = socket.socketpair()
    server = threading.Thread(target=echo, args=(b,))
    server.start()
    total = 0
    last = ""
    with tempfile.TemporaryDirectory(prefix="io-sync-") as d:
        for r in range(int(ROUNDS * SCALE)):
            last = file_round(d, r)
            total += ping_pong(a)
    a.sendall(b"stop")
    server.join()
    a.close()
    b.close()
    print(f"io_sync: {total} {last[:12]}")


if __name__ == "__main__":
    main()
