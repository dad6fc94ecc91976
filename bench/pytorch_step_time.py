#!/usr/bin/python3
"""Step time of the same models in PyTorch 1.13 (Debian's python3-torch), for
bench/compare_pytorch.sh. Same architecture as tensortier's dnn/models.cc (CIFAR-style ResNet
stem, VGG with one linear classifier), same batch, SGD with momentum, same thread count.
Also its footprint: after the timed steps, one step under torch.profiler (profile_memory), each
op's own allocations minus frees summed in time order; its peak plus what lives across steps
(parameters, gradients, momentum) and the batch is "peak_mib". An op's transient allocations
freed within it are netted, so this is a lower bound of PyTorch's peak.
Usage: pytorch_step_time.py MODEL BATCH STEPS WARMUP THREADS; prints one JSON line."""
import json
import statistics
import sys
import time

import torch
from torch import nn


def conv_bn(cin, cout, k, stride, pad, relu=True):
    layers = [nn.Conv2d(cin, cout, k, stride, pad, bias=False), nn.BatchNorm2d(cout)]
    return nn.Sequential(*layers, nn.ReLU()) if relu else nn.Sequential(*layers)


class Basic(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.a = conv_bn(cin, cout, 3, stride, 1)
        self.b = conv_bn(cout, cout, 3, 1, 1, relu=False)
        self.down = conv_bn(cin, cout, 1, stride, 0, relu=False) if stride != 1 or cin != cout else None

    def forward(self, x):
        return torch.relu(self.b(self.a(x)) + (self.down(x) if self.down is not None else x))


class Bottleneck(nn.Module):
    def __init__(self, cin, channels, stride):
        super().__init__()
        cout = channels * 4
        self.body = nn.Sequential(conv_bn(cin, channels, 1, 1, 0), conv_bn(channels, channels, 3, stride, 1),
                                  conv_bn(channels, cout, 1, 1, 0, relu=False))
        self.down = conv_bn(cin, cout, 1, stride, 0, relu=False) if stride != 1 or cin != cout else None

    def forward(self, x):
        return torch.relu(self.body(x) + (self.down(x) if self.down is not None else x))


def resnet(depth, classes=10, width=64):
    bottleneck = depth >= 50
    blocks = [2, 2, 2, 2] if depth == 18 else [3, 4, 6, 3]
    layers, cin = [conv_bn(3, width, 3, 1, 1)], width
    for stage in range(4):
        for block in range(blocks[stage]):
            channels, stride = width << stage, 2 if block == 0 and stage > 0 else 1
            layers.append(Bottleneck(cin, channels, stride) if bottleneck else Basic(cin, channels, stride))
            cin = channels * 4 if bottleneck else channels
    return nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(cin, classes))


def vgg(depth, classes=10, width=64, size=32):
    a = [1, 0, 2, 0, 4, 4, 0, 8, 8, 0, 8, 8, 0]
    d = [1, 1, 0, 2, 2, 0, 4, 4, 4, 0, 8, 8, 8, 0, 8, 8, 8, 0]
    layers, cin = [], 3
    for c in a if depth == 11 else d:
        if c == 0:
            layers.append(nn.MaxPool2d(2, 2))
            size //= 2
        else:
            layers += [nn.Conv2d(cin, c * width, 3, 1, 1), nn.ReLU()]
            cin = c * width
    return nn.Sequential(*layers, nn.Flatten(), nn.Linear(cin * size * size, classes))


def main():
    model_name, batch, steps, warmup, threads = sys.argv[1], *map(int, sys.argv[2:6])
    torch.set_num_threads(threads)
    torch.manual_seed(1)
    models = {"resnet18": lambda: resnet(18), "resnet50": lambda: resnet(50), "vgg11": lambda: vgg(11),
              "vgg16": lambda: vgg(16)}
    if model_name not in models:
        raise SystemExit(f"pytorch_step_time: no mirror of '{model_name}' (known: {', '.join(models)})")
    model = models[model_name]()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=5e-4)
    x = torch.randn(batch, 3, 32, 32)
    y = torch.randint(0, 10, (batch,))
    times = []
    for step in range(warmup + steps):
        start = time.perf_counter()
        optimizer.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        optimizer.step()
        if step >= warmup:
            times.append((time.perf_counter() - start) * 1000)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], profile_memory=True) as prof:
        optimizer.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        optimizer.step()
    live = peak = 0
    for _, delta in sorted((e.time_range.start, e.self_cpu_memory_usage) for e in prof.events()
                           if e.self_cpu_memory_usage != 0):
        live += delta
        peak = max(peak, live)
    params = list(model.parameters())
    across_steps = sum(p.numel() * p.element_size() for p in params)
    across_steps += sum(p.grad.numel() * p.grad.element_size() for p in params if p.grad is not None)
    across_steps += sum(s["momentum_buffer"].numel() * 4 for s in optimizer.state.values() if "momentum_buffer" in s)
    batch_bytes = x.numel() * x.element_size() + y.numel() * y.element_size()
    print("JSON " + json.dumps({"model": model_name, "mode": "pytorch", "median_ms": statistics.median(times),
                                "peak_live_mib": (peak + across_steps + batch_bytes) / 2**20}))


if __name__ == "__main__":
    main()
