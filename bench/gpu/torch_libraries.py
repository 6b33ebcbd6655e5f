"""PyTorch's own machinery under the kernel tier (issue 33, real libraries):
cuDNN convolutions (cuDNN loads its sub-libraries through its own search
paths), a CUDA graph captured then replayed (one cudaGraphLaunch runs many
kernels), Triton kernels made by torch.compile (launched through the driver
API), and the caching allocator growing its cache; run once more with
PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (its segments are mapped
with the driver's virtual memory calls, not cudaMalloc).  Each on lines a
marker names; what each launched is written to TRUTH.json.

    python3 torch_libraries.py TRUTH.json
"""
import json
import os
import sys
import time

import torch

MIB = 1 << 20


def convolutions(truth):
    torch.backends.cudnn.benchmark = True
    conv = torch.nn.Conv2d(64, 64, 3, padding=1).cuda()
    x = torch.randn(32, 64, 128, 128, device="cuda")
    with torch.no_grad():
        for _ in range(3):
            conv(x)                                                    # CONV_WARM
        torch.cuda.synchronize()
        for _ in range(50):
            y = conv(x)                                                # CONV
        torch.cuda.synchronize()
    truth["conv_calls"] = 50
    truth["cudnn"] = torch.backends.cudnn.version()
    return y


def graphs(truth):
    model = torch.nn.Sequential(*[torch.nn.Linear(1024, 1024) for _ in range(8)]).cuda()
    static_in = torch.randn(256, 1024, device="cuda")
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream), torch.no_grad():
        for _ in range(3):
            model(static_in)                                           # GRAPH_WARM
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.no_grad(), torch.cuda.graph(graph):
        static_out = model(static_in)                                  # GRAPH_CAPTURE
    for _ in range(200):
        graph.replay()                                                 # GRAPH_REPLAY
    torch.cuda.synchronize()
    truth["graph_replays"] = 200
    return static_out


def compiled(truth):
    @torch.compile
    def f(x):
        return torch.sin(x) * x + torch.cos(x) * 2.0
    x = torch.randn(4096, 4096, device="cuda")
    t = time.time()
    f(x)                                                               # COMPILE_FIRST
    torch.cuda.synchronize()
    truth["compile_sec"] = time.time() - t
    for _ in range(200):
        f(x)                                                           # TRITON
    torch.cuda.synchronize()
    truth["triton_calls"] = 200


def cache_growth(truth):
    blocks = []
    for _ in range(8):
        blocks.append(torch.empty(256 * MIB, dtype=torch.uint8, device="cuda"))  # GROW
    torch.cuda.synchronize()
    truth["grow_mb"] = 8 * 256.0
    truth["reserved_after_grow_mb"] = torch.cuda.memory_reserved() / MIB
    del blocks
    torch.cuda.empty_cache()


def main(truth_path):
    truth = {"torch": torch.__version__, "alloc_conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF", "")}
    torch.cuda.init()
    cache_growth(truth)
    convolutions(truth)
    graphs(truth)
    try:
        compiled(truth)
    except Exception as e:  # no compiler toolchain for Triton: said, not fatal
        truth["compile_error"] = f"{type(e).__name__}: {e}"[:500]
    with open(truth_path, "w") as f:
        json.dump(truth, f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1])
