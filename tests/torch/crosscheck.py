#!/usr/bin/python3
"""PyTorch cross-check of the dnn engine.

Reads what dnn_crosscheck_dump wrote (initial weights, five batches, step-1 gradients, five
losses; a batch may hold fewer samples than the others, as an epoch's last does) and trains the same model in PyTorch from the same weights on the same batches with the
same SGD, twice: in float64 (the reference) and in float32 (to measure what float32 rounding does
here). tensortier's losses must agree with the float64 reference within 1e-4 relative, and its
step-1 gradients within 1e-4 relative (max abs difference over the tensor's max abs) or, where
PyTorch's own float32 gradient is further off than a quarter of that, within 4x PyTorch float32's
error (deep nets at small batches: float32 itself is off by up to ~1e-4 there). A tensor's scale is
at least 1e-3 of the model's largest gradient: a gradient that is zero in exact arithmetic (a conv
bias before batch norm) is float32 noise, meaningless relative to itself.

A step can be checked only while float32 arithmetic cannot change the path: a ReLU input that the
float64 run puts closer to 0 than 4x PyTorch float32's RMS rounding error over that tensor is a gate
that any float32 implementation may take either way, and from there on (one flipped element
carries a few percent of a batch-norm channel's gradient at small batches and maps) training
diverges as chaotically in PyTorch's own float32 as in ours. So the losses are checked up to the
first step whose forward has such a gate, the gradients if step 1's has none; a run whose step 1
has one is inconclusive (exit 1: choose another shape), never silently passed.
Runs with Debian's python3-torch: /usr/bin/python3 crosscheck.py DIR [--trajectory]
[--expect-winograd] (--trajectory only prints each step's loss error of both float32 runs against
float64; --expect-winograd fails unless some convolution ran oneDNN's Winograd kernels, so that a
check meant for them cannot pass on direct ones, and is skipped on a CPU without AVX-512, which
oneDNN 2.6 has none for). Exit status 1 on a mismatch (naming the tensor) or an inconclusive run,
2 when torch is missing, 77 when skipped.
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
FLOAT32_FACTOR = 4.0  # a gradient may be off by this many times PyTorch float32's own error, if more
GRADIENT_FLOOR = 1e-3  # a gradient tensor's scale is at least this share of the model's largest
# A gradient below that floor (zero in exact arithmetic: a conv's bias before batch norm) is the
# noise of a sum's order, which differs between oneDNN's AVX2 and AVX-512 kernels (1.9e-4 of the
# floor on an AVX2 host against PyTorch's 3.9e-5): within this share of the floor it passes (a
# real error in such a tensor is of the order of the gradients, a thousand times more).
NOISE_TOLERANCE = 1e-3
SKIPPED = 77  # ctest's SKIP_RETURN_CODE for these tests: what the check needs is not on this host
AMBIGUITY = 4.0  # a gate is ambiguous within this many times float32's RMS error of its input

# Every ReLU input of a forward pass, in call order, while RECORD is a list (see main()).
RECORD = None


def relu(x):
    if RECORD is not None:
        RECORD.append(x.detach().double())
    return torch.relu(x)



# Mirrors of every model builder in dnn/src/models.cc, their parameters named as tensortier names
# them (a conv's weight "NAME.weight", its batch norm's "NAME.bn.weight"), so that the two are
# matched by name, not by order.
F = nn.functional


class ConvBn(nn.Module):
    """conv_bn_relu(): a bias-free conv whose weight is NAME.weight, batch norm NAME.bn, ReLU."""

    def __init__(self, cin, cout, kernel, stride, padding, relu=True):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(cout, cin, kernel, kernel))
        self.bn = nn.BatchNorm2d(cout)
        self.stride, self.padding, self.relu = stride, padding, relu

    def forward(self, x):
        x = self.bn(F.conv2d(x, self.weight, stride=self.stride, padding=self.padding))
        return relu(x) if self.relu else x


class Block(nn.Module):
    """block(): basic (two 3x3) or bottleneck (1x1, 3x3, 1x1 x4), projection when the shape changes."""

    def __init__(self, cin, channels, stride, bottleneck):
        super().__init__()
        cout = channels * 4 if bottleneck else channels
        if bottleneck:
            self.conv1 = ConvBn(cin, channels, 1, 1, 0)
            self.conv2 = ConvBn(channels, channels, 3, stride, 1)
            self.conv3 = ConvBn(channels, cout, 1, 1, 0, relu=False)
            self.convs = [self.conv1, self.conv2, self.conv3]
        else:
            self.conv1 = ConvBn(cin, channels, 3, stride, 1)
            self.conv2 = ConvBn(channels, channels, 3, 1, 1, relu=False)
            self.convs = [self.conv1, self.conv2]
        self.downsample = ConvBn(cin, cout, 1, stride, 0, relu=False) if stride != 1 or cin != cout else None

    def forward(self, x):
        y = x
        for conv in self.convs:
            y = conv(y)
        return relu(y + (self.downsample(x) if self.downsample is not None else x))


class ResNet(nn.Module):
    """resnet(): CIFAR-style stem (3x3 conv, no max pool), four stages, global average pool, fc."""

    def __init__(self, depth, c, width, classes):
        super().__init__()
        bottleneck = depth >= 50
        blocks = [2, 2, 2, 2] if depth == 18 else [3, 4, 6, 3]
        self.stem = ConvBn(c, width, 3, 1, 1)
        cin = width
        for stage in range(4):
            channels = width << stage
            layers = []
            for b in range(blocks[stage]):
                layers.append(Block(cin, channels, 2 if b == 0 and stage > 0 else 1, bottleneck))
                cin = channels * 4 if bottleneck else channels
            setattr(self, f"layer{stage + 1}", nn.Sequential(*layers))
        self.fc = nn.Linear(cin, classes)

    def forward(self, x):
        x = self.stem(x)
        for stage in range(4):
            x = getattr(self, f"layer{stage + 1}")(x)
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


class Vgg(nn.Module):
    """vgg(): configurations A (11) and D (16) at width/64 of the channels, one linear classifier."""

    def __init__(self, depth, c, size, width, classes, batch_norm=False):
        super().__init__()
        a = [1, 0, 2, 0, 4, 4, 0, 8, 8, 0, 8, 8, 0]
        d = [1, 1, 0, 2, 2, 0, 4, 4, 4, 0, 8, 8, 8, 0, 8, 8, 8, 0]
        self.plan = []
        cin, conv = c, 0
        for m in a if depth == 11 else d:
            if m == 0:
                self.plan.append(None)
                size //= 2
                continue
            conv += 1
            setattr(self, f"conv{conv}", (ConvBiasBn if batch_norm else nn.Conv2d)(cin, m * width, 3, padding=1))
            self.plan.append(f"conv{conv}")
            cin = m * width
        self.fc = nn.Linear(cin * size * size, classes)

    def forward(self, x):
        for step in self.plan:
            x = F.max_pool2d(x, 2, 2) if step is None else relu(getattr(self, step)(x))
        return self.fc(torch.flatten(x, 1))


class ConvBiasBn(nn.Conv2d):
    """vgg*_bn's conv: a conv with its bias (NAME.weight, NAME.bias) and then batch norm NAME.bn."""

    def __init__(self, cin, cout, kernel, padding):
        super().__init__(cin, cout, kernel, padding=padding)
        self.bn = nn.BatchNorm2d(cout)

    def forward(self, x):
        return self.bn(super().forward(x))


class LeNet5(nn.Module):
    def __init__(self, c, size, classes):
        super().__init__()
        self.conv1 = nn.Conv2d(c, 6, 5, padding=2)
        self.conv2 = nn.Conv2d(6, 16, 5)
        out = ((size // 2) - 4) // 2
        self.fc1 = nn.Linear(16 * out * out, 120)
        self.fc2 = nn.Linear(120, 84)
        self.fc3 = nn.Linear(84, classes)

    def forward(self, x):
        x = F.max_pool2d(relu(self.conv1(x)), 2, 2)
        x = F.max_pool2d(relu(self.conv2(x)), 2, 2)
        x = relu(self.fc1(torch.flatten(x, 1)))
        return self.fc3(relu(self.fc2(x)))


class Mlp(nn.Module):
    def __init__(self, inputs, width, classes):
        super().__init__()
        self.fc1 = nn.Linear(inputs, width * 4)
        self.fc2 = nn.Linear(width * 4, width * 2)
        self.fc3 = nn.Linear(width * 2, classes)

    def forward(self, x):
        x = relu(self.fc1(torch.flatten(x, 1)))
        return self.fc3(relu(self.fc2(x)))


class SmallCnn(nn.Module):
    """tensortier's small_cnn: conv-relu-maxpool, conv-relu-avgpool, linear."""

    def __init__(self, channels, size, classes):
        super().__init__()
        self.conv1 = nn.Conv2d(channels, 8, 3, padding=1)
        self.conv2 = nn.Conv2d(8, 16, 3, padding=1)
        self.fc = nn.Linear(16 * (size // 4) ** 2, classes)

    def forward(self, x):
        x = F.max_pool2d(relu(self.conv1(x)), 2, 2)
        x = F.avg_pool2d(relu(self.conv2(x)), 2, 2)
        return self.fc(torch.flatten(x, 1))


class ResBlock(nn.Module):
    """tensortier's resblock: stem conv-bn-relu, one basic block, global average pool, linear."""

    def __init__(self, channels, classes):
        super().__init__()
        self.stem = ConvBn(channels, 8, 3, 1, 1)
        setattr(self, "block", Block(8, 8, 1, False))
        self.fc = nn.Linear(8, classes)

    def forward(self, x):
        x = getattr(self, "block")(self.stem(x))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


def make_model(name, c, h, width, classes):
    if name == "small_cnn":
        return SmallCnn(c, h, classes)
    if name == "resblock":
        return ResBlock(c, classes)
    if name == "mlp":
        return Mlp(c * h * h, width, classes)
    if name == "lenet5":
        return LeNet5(c, h, classes)
    if name in ("vgg11", "vgg16", "vgg11_bn", "vgg16_bn"):
        return Vgg(int(name[3:5]), c, h, width, classes, batch_norm=name.endswith("_bn"))
    if name in ("resnet18", "resnet34", "resnet50"):
        return ResNet(int(name[6:]), c, width, classes)
    raise SystemExit(f"crosscheck: no PyTorch mirror of '{name}'")


def load(directory, name, shape, dtype=np.float32):
    return torch.from_numpy(np.fromfile(directory / name, dtype=dtype).reshape(shape))


def relative_error(ours, theirs, floor=1e-12):
    """Max abs difference over the reference's max abs, or over `floor` where that is larger."""
    return float((ours.double() - theirs).abs().max() / max(float(theirs.abs().max()), floor))


def train(m, directory, dtype):
    """Five SGD steps in PyTorch at `dtype`: losses, step-1 gradients and every step's ReLU inputs."""
    global RECORD
    n, c, h, w = m["input"]
    model = make_model(m["model"], c, h, m.get("width", 8), m["classes"]).to(dtype)
    named = dict(model.named_parameters())
    with torch.no_grad():
        for p in m["params"]:
            t = named[p["name"]]
            value = load(directory, p["init"], p["shape"])
            if value.numel() != t.numel():
                raise SystemExit(f"crosscheck: {p['name']} has {value.numel()} elements, PyTorch's "
                                 f"{tuple(t.shape)} has {t.numel()}")
            t.copy_(value.reshape(t.shape).to(dtype))
    sgd = m["sgd"]
    optimizer = torch.optim.SGD(model.parameters(), lr=sgd["lr"], momentum=sgd["momentum"],
                                weight_decay=sgd["weight_decay"])
    losses, gates, grads = [], [], None
    for batch in m["batches"]:
        k = batch.get("count", n)  # an epoch's last batch may hold fewer samples
        x = load(directory, batch["images"], (k, c, h, w)).to(dtype)
        y = load(directory, batch["labels"], (k,), np.int32).long()
        optimizer.zero_grad()
        RECORD = []
        loss = nn.functional.cross_entropy(model(x), y)
        gates.append(RECORD)
        RECORD = None
        loss.backward()
        losses.append(loss.item())
        if grads is None:
            grads = {k: v.grad.detach().double().clone() for k, v in named.items()}
        optimizer.step()
    return losses, grads, gates


def ambiguous_gates(gates64, gates32):
    """ReLU inputs the float64 run puts within AMBIGUITY x float32's error of 0: (count, where)."""
    count, where = 0, None
    for call, (x64, x32) in enumerate(zip(gates64, gates32)):
        error = float((x32 - x64).pow(2).mean().sqrt())  # float32's typical rounding error here
        near = (x64.abs() <= AMBIGUITY * error) & (x64 != 0)
        k = int(near.sum())
        if k and where is None:
            at = tuple(int(i) for i in near.nonzero()[0])
            where = f"ReLU call {call} at {at}: float64 {float(x64[at]):.2e}, float32 RMS error {error:.1e}"
        count += k
    return count, where


def main():
    directory = Path(sys.argv[1])
    m = json.loads((directory / "manifest.json").read_text())
    if m["input"][2] != m["input"][3]:
        raise SystemExit("crosscheck: the mirrors take square images")
    torch.manual_seed(0)
    torch.set_num_threads(2)
    n, c, h, _ = m["input"]
    names = set(dict(make_model(m["model"], c, h, m.get("width", 8), m["classes"]).named_parameters()))
    ours = {p["name"] for p in m["params"]}
    if names != ours:
        print(f"crosscheck: parameters only in PyTorch's {m['model']}: {sorted(names - ours)[:5]}; "
              f"only in tensortier's: {sorted(ours - names)[:5]}")
        return 1
    winograd = sorted(name for name, impl in m.get("implementations", {}).items() if "wino" in impl)
    print(f"{len(winograd)} convolutions on Winograd kernels{': ' + ', '.join(winograd) if winograd else ''}")
    if "--expect-winograd" in sys.argv and not winograd:
        if "avx512f" not in Path("/proc/cpuinfo").read_text():
            print(f"crosscheck {m['model']}: SKIPPED: this CPU has no AVX-512, and oneDNN 2.6 has Winograd "
                  "kernels only for AVX-512")
            return SKIPPED
        print(f"crosscheck {m['model']}: FAILED: no convolution ran Winograd kernels, and this check is for them")
        return 1
    losses64, grads64, gates64 = train(m, directory, torch.float64)
    losses32, grads32, gates32 = train(m, directory, torch.float32)
    if "--trajectory" in sys.argv:  # how far each float32 run is from float64, step by step
        for step, ref in enumerate(losses64):
            print(f"step {step + 1}: loss float64 {ref:.7f}; relative error of tensortier "
                  f"{abs(m['losses'][step] - ref) / abs(ref):.1e}, of pytorch float32 "
                  f"{abs(losses32[step] - ref) / abs(ref):.1e}")
        return 0
    failures, checked = 0, 0
    for step in range(len(m["batches"])):
        count, where = ambiguous_gates(gates64[step], gates32[step])
        if count:
            print(f"step {step + 1}: {count} ReLU inputs within float32 rounding of 0 (first: {where}); "
                  "float32 training may take either path from here: steps from this one are not checked")
            break
        ref = losses64[step]
        err = abs(m["losses"][step] - ref) / abs(ref)
        err32 = abs(losses32[step] - ref) / abs(ref)
        status = "ok" if err <= TOLERANCE else "MISMATCH"
        print(f"step {step + 1}: loss tensortier {m['losses'][step]:.7f} pytorch float64 {ref:.7f} "
              f"relative {err:.1e} (pytorch float32 {err32:.1e}) {status}")
        failures += err > TOLERANCE
        checked += 1
        if step == 0:
            # A gradient that is zero in exact arithmetic (a conv's bias before batch norm, which
            # takes the mean out) is float32 noise in both implementations; relative to itself
            # it is meaningless, so a tensor's scale is at least GRADIENT_FLOOR of the largest
            # gradient of the model.
            floor = GRADIENT_FLOOR * max(float(g.abs().max()) for g in grads64.values())
            for p in m["params"]:
                ref_grad = grads64[p["name"]]
                grad = load(directory, p["grad"], p["shape"]).reshape(ref_grad.shape)
                err = relative_error(grad, ref_grad, floor)
                err32 = relative_error(grads32[p["name"]], ref_grad, floor)
                bound = max(TOLERANCE, FLOAT32_FACTOR * err32)
                if float(ref_grad.abs().max()) < floor:
                    bound = max(bound, NOISE_TOLERANCE)
                status = "ok" if err <= bound else "MISMATCH"
                print(f"  step-1 gradient {p['name']:<28} relative {err:.1e} (pytorch float32 {err32:.1e}) {status}")
                failures += err > bound
    if checked == 0:
        print(f"crosscheck {m['model']}: INCONCLUSIVE: step 1 already has a gate float32 may take either "
              "way; choose another shape or seed")
        return 1
    print(f"crosscheck {m['model']}: {'PASSED' if failures == 0 else f'FAILED ({failures} mismatches)'} "
          f"({checked} of {len(m['batches'])} steps checked against PyTorch float64)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
