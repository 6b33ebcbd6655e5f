"""grpcio: a server and a client, each with threads of grpc's own (its C core
polls and completes on them), over the loopback."""
import os
from concurrent import futures

# grpc's C core logs at INFO a GOAWAY its client transport may still receive
# when the server stops: closing the channel returns before its transport is
# gone, so the line comes or not by timing, bare too (1 run in 6 here).  The
# program's output is compared with and without pyrometer, so it must not race.
os.environ.setdefault("GRPC_VERBOSITY", "ERROR")
import grpc  # noqa: E402


def echo(request: bytes, context) -> bytes:
    return request[::-1] * 2


handler = grpc.method_handlers_generic_handler("corpus.Echo", {
    "Call": grpc.unary_unary_rpc_method_handler(echo, request_deserializer=None, response_serializer=None)})
server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
server.add_generic_rpc_handlers((handler,))
port = server.add_insecure_port("127.0.0.1:0")
server.start()
with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
    call = channel.unary_unary("/corpus.Echo/Call")
    replies = [call(f"req{i}".encode(), timeout=10) for i in range(200)]
server.stop(None).wait()
print(len(replies), replies[0], replies[-1])
