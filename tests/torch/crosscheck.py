#!/usr/bin/python3
"""PyTorch cross-check of the dnn engine.

Reads what dnn_crosscheck_dump wrote (initial weights, five batches, step-1 gradients, five
losses), trains the same model in PyTorch from the same weights on the same batches with the same
SGD, and checks that step-1 gradients and all five losses agree within 1e-4 relative.
Runs with Debian's python3-torch: /usr/bin/python3 crosscheck.py DIR. Exit status 1 on a
mismatch (naming the tensor), 2 when torch is missing.
"""
import json
import sys
from pathlib import Path

try:
    import numpy as np
    import torch
    from torch import nn
except ImportError as e:  # pragma: no cover
    print(f"crosscheck: cannot import torch ({e}); install python3-torch (tools/setup.sh test does)",
          file=sys.stderr)
    sys.exit(2)

TOLERANCE = 1e-4


class SmallCnn(nn.Module):
    """tensortier's small_cnn: conv-relu-maxpool, conv-relu-avgpool, linear."""

    def __init__(self, channels, size, classes):
        super().__init__()
        self.conv1 = nn.Conv2d(channels, 8, 3, padding=1)
        self.conv2 = nn.Conv2d(8, 16, 3, padding=1)
        self.fc = nn.Linear(16 * (size // 4) ** 2, classes)

    def forward(self, x):
        x = nn.functional.max_pool2d(torch.relu(self.conv1(x)), 2, 2)
        x = nn.functional.avg_pool2d(torch.relu(self.conv2(x)), 2, 2)
        return self.fc(torch.flatten(x, 1))


class ResBlock(nn.Module):
    """tensortier's resblock: stem conv-bn-relu, one basic block, global average pool, linear."""

    def __init__(self, channels, classes):
        super().__init__()
        self.stem = nn.Conv2d(channels, 8, 3, padding=1, bias=False)
        self.stem_bn = nn.BatchNorm2d(8)
        self.conv1 = nn.Conv2d(8, 8, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(8)
        self.conv2 = nn.Conv2d(8, 8, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(8)
        self.fc = nn.Linear(8, classes)

    def forward(self, x):
        x = torch.relu(self.stem_bn(self.stem(x)))
        y = torch.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        x = torch.relu(x + y)
        return self.fc(torch.flatten(nn.functional.adaptive_avg_pool2d(x, 1), 1))


def load(directory, name, shape, dtype=np.float32):
    return torch.from_numpy(np.fromfile(directory / name, dtype=dtype).reshape(shape))


def relative_error(ours, theirs):
    return float((ours - theirs).abs().max() / max(float(theirs.abs().max()), 1e-6))


def main():
    directory = Path(sys.argv[1])
    m = json.loads((directory / "manifest.json").read_text())
    n, c, h, w = m["input"]
    torch.manual_seed(0)
    torch.set_num_threads(2)
    model = SmallCnn(c, h, m["classes"]) if m["model"] == "small_cnn" else ResBlock(c, m["classes"])
    ours = m["params"]
    theirs = list(model.parameters())
    if len(ours) != len(theirs):
        print(f"crosscheck: {len(ours)} parameters in tensortier's {m['model']}, {len(theirs)} in PyTorch's")
        return 1
    with torch.no_grad():
        for p, t in zip(ours, theirs):
            value = load(directory, p["init"], p["shape"])
            if value.numel() != t.numel():
                print(f"crosscheck: {p['name']} has {value.numel()} elements, PyTorch's {tuple(t.shape)} has {t.numel()}")
                return 1
            t.copy_(value.reshape(t.shape))
    sgd = m["sgd"]
    optimizer = torch.optim.SGD(model.parameters(), lr=sgd["lr"], momentum=sgd["momentum"],
                                weight_decay=sgd["weight_decay"])
    failures = 0
    for step, batch in enumerate(m["batches"]):
        x = load(directory, batch["images"], (n, c, h, w))
        y = load(directory, batch["labels"], (n,), np.int32).long()
        optimizer.zero_grad()
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        err = abs(m["losses"][step] - loss.item()) / abs(loss.item())
        status = "ok" if err <= TOLERANCE else "MISMATCH"
        print(f"step {step + 1}: loss tensortier {m['losses'][step]:.7f} pytorch {loss.item():.7f} "
              f"relative {err:.1e} {status}")
        failures += err > TOLERANCE
        if step == 0:
            for p, t in zip(ours, theirs):
                grad = load(directory, p["grad"], p["shape"]).reshape(t.shape)
                err = relative_error(grad, t.grad)
                status = "ok" if err <= TOLERANCE else "MISMATCH"
                print(f"  step-1 gradient {p['name']:<22} relative {err:.1e} {status}")
                failures += err > TOLERANCE
        optimizer.step()
    print(f"crosscheck {m['model']}: {'PASSED' if failures == 0 else f'FAILED ({failures} mismatches)'}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
