#!/usr/bin/python3
"""Step time of the same models in PyTorch 1.13 (Debian's python3-torch), for
bench/compare_pytorch.sh. Same architecture as tensortier's dnn/models.cc (CIFAR-style ResNet
stem, VGG with one linear classifier), same batch, SGD with momentum, same thread count.
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


def resnet18(classes=10, width=64):
    layers, cin = [conv_bn(3, width, 3, 1, 1)], width
    for stage in range(4):
        for block in range(2):
            cout = width << stage
            layers.append(Basic(cin, cout, 2 if block == 0 and stage > 0 else 1))
            cin = cout
    return nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(cin, classes))


def vgg11(classes=10, width=64, size=32):
    cfg, layers, cin = [1, 0, 2, 0, 4, 4, 0, 8, 8, 0, 8, 8, 0], [], 3
    for c in cfg:
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
    model = resnet18() if model_name == "resnet18" else vgg11()
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
    print("JSON " + json.dumps({"model": model_name, "mode": "pytorch", "median_ms": statistics.median(times)}))


if __name__ == "__main__":
    main()
