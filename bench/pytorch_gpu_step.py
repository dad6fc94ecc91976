#!/usr/bin/env python3
"""PyTorch's side of the GPU figures (issues 37, 51): the same models as tensortier's dnn/models.cc
(bench/pytorch_step_time.py defines them), one training step on the GPU with SGD and momentum.
Like for like with tensortier's --backend cuda: the same math (--math fp32, the default: TF32 off
in cuDNN and cuBLAS, as tensortier's fp32; --math tf32: on, as tensortier's tf32) and the same way
of choosing convolution algorithms (cuDNN's heuristics: benchmark mode off, as tensortier; --benchmark
turns it on for both to be compared that way). Median step time over the timed steps, and the peak
device bytes as PyTorch counts them, both: max_memory_allocated (live tensors, what tensortier's
peak counts) and max_memory_reserved (its caching allocator's pool); then the same under
torch.autograd.graph.save_on_cpu(pin_memory=True), the swap to pinned host memory PyTorch offers.
Usage: pytorch_gpu_step.py MODEL BATCH STEPS WARMUP [--math fp32|tf32] [--benchmark]; prints one
JSON line per mode. Without a GPU it prints one line saying so and exits 0."""
import argparse
import json
import os
import statistics
import sys
import time

try:
    import torch
except ImportError:
    print("pytorch_gpu_step: not measured: no PyTorch for this python3")
    sys.exit(0)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pytorch_step_time import resnet, vgg  # noqa: E402  the models of dnn/models.cc


def model_of(name):
    if name.startswith("resnet"):
        return resnet(int(name[len("resnet"):]))
    if name.startswith("vgg"):
        return vgg(int(name[len("vgg"):]))
    raise SystemExit(f"unknown model {name}")


def measure(name, batch, steps, warmup, offload):
    torch.manual_seed(1)
    net = model_of(name).cuda()
    opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9, weight_decay=5e-4)
    x = torch.randn(batch, 3, 32, 32, device="cuda")
    y = torch.randint(0, 10, (batch,), device="cuda")
    loss_fn = torch.nn.CrossEntropyLoss()
    times = []
    torch.cuda.reset_peak_memory_stats()
    for step in range(warmup + steps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        if offload:
            with torch.autograd.graph.save_on_cpu(pin_memory=True):
                loss = loss_fn(net(x), y)
        else:
            loss = loss_fn(net(x), y)
        loss.backward()
        opt.step()
        torch.cuda.synchronize()
        if step >= warmup:
            times.append((time.perf_counter() - t0) * 1e3)
    return {"bench": "pytorch_gpu_step", "model": name, "batch": batch,
            "mode": "save_on_cpu(pin_memory)" if offload else "plain",
            "median_ms": round(statistics.median(times), 3),
            "max_allocated_mib": round(torch.cuda.max_memory_allocated() / 2**20, 1),
            "max_reserved_mib": round(torch.cuda.max_memory_reserved() / 2**20, 1),
            "device": torch.cuda.get_device_name(), "torch": torch.__version__,
            "cudnn": torch.backends.cudnn.version()}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model")
    parser.add_argument("batch", type=int)
    parser.add_argument("steps", type=int)
    parser.add_argument("warmup", type=int)
    parser.add_argument("--math", choices=["fp32", "tf32"], default="fp32")
    parser.add_argument("--benchmark", action="store_true", help="cuDNN benchmark mode (algorithms timed)")
    a = parser.parse_args()
    if not torch.cuda.is_available():
        print(f"pytorch_gpu_step: not measured: no CUDA device for PyTorch {torch.__version__}")
        return
    torch.backends.cudnn.benchmark = a.benchmark
    torch.backends.cuda.matmul.allow_tf32 = a.math == "tf32"
    torch.backends.cudnn.allow_tf32 = a.math == "tf32"
    for offload in (False, True):
        row = measure(a.model, a.batch, a.steps, a.warmup, offload)
        row.update({"math": a.math, "cudnn_benchmark": a.benchmark})
        print("JSON " + json.dumps(row), flush=True)
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
