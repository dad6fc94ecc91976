"""An unmodified PyTorch training loop (a CIFAR-style ResNet-18) on tiers with tensortier.torch.

    PYTHONPATH=build/release/python python3 examples/pytorch_resnet18.py --compare \\
        --tiers fast=dram:4GiB,slow=emulated:optane-server:8GiB --fast-budget 20%
    PYTHONPATH=build/release/python python3 examples/pytorch_resnet18.py --ddp 2 --compare

With --compare: plain PyTorch, then fast-only, slow-only and each --policy (default sentinel and
the oracle), each in a runtime of its own in turn, printing one table: the median step time, its
ratio to fast-only, the moves, and whether the losses are bit-identical to plain PyTorch's.
Without: one run under --policy. The data is synthetic (a few batches in turn) or, with --data
fashion-mnist, Fashion-MNIST's first training images (Debian's dataset-fashion-mnist); the model is
defined below; the loop in train() is plain PyTorch but for `with rt.step():`. The measured steps
start after --warmup steps once the plan has settled (its trial over). With --ddp N:
DistributedDataParallel over gloo in N processes (the example starts them, or torchrun's where it
runs under torchrun: Debian's torchrun of PyTorch 1.13 fails on Python 3.11 in its launcher), each
rank with its own runtime, fast budget and batches; each rank checks its losses against its plain
DDP run, and rank 0 prints the table.
"""

import argparse
import gzip
import os
import socket
import statistics
import struct
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel

import tensortier.torch as tt


class BasicBlock(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.relu = nn.ReLU(inplace=True)
        self.shortcut = nn.Sequential()
        if stride != 1 or cin != cout:
            self.shortcut = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + self.shortcut(x))


class ResNet18(nn.Module):
    def __init__(self, width=64, classes=10):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, width, 3, 1, 1, bias=False), nn.BatchNorm2d(width), nn.ReLU(inplace=True))
        layers, cin = [], width
        for i, stride in enumerate([1, 2, 2, 2]):
            cout = width * 2**i
            layers += [BasicBlock(cin, cout, stride), BasicBlock(cout, cout, 1)]
            cin = cout
        self.layers = nn.Sequential(*layers)
        self.fc = nn.Linear(cin, classes)

    def forward(self, x):
        x = self.layers(self.stem(x))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


FASHION_MNIST = "/usr/share/datasets/fashion-mnist"  # Debian's dataset-fashion-mnist


def idx(path):
    """An IDX file (gzip) as a uint8 tensor of its shape."""
    with gzip.open(path, "rb") as f:
        data = f.read()
    dims = data[3]
    shape = struct.unpack(">" + "I" * dims, data[4:4 + 4 * dims])
    return torch.frombuffer(bytearray(data[4 + 4 * dims:]), dtype=torch.uint8).reshape(shape)


def batches(args):
    """The batches the loop cycles through: synthetic (4), or Fashion-MNIST's first training images
    (16 batches; each rank its own), as 3 channels padded (or scaled down) to --image-size."""
    rank = dist.get_rank() if args.ddp else 0
    if args.data == "fashion-mnist":
        if not os.path.isdir(FASHION_MNIST):
            print(f"no Fashion-MNIST at {FASHION_MNIST} (Debian: apt install dataset-fashion-mnist): "
                  "synthetic data instead", file=sys.stderr)
        else:
            n = 16 * args.batch
            images = idx(f"{FASHION_MNIST}/train-images-idx3-ubyte.gz")[rank * n:(rank + 1) * n]
            labels = idx(f"{FASHION_MNIST}/train-labels-idx1-ubyte.gz")[rank * n:(rank + 1) * n].long()
            x = ((images.float() / 255 - 0.286) / 0.353).unsqueeze(1).expand(-1, 3, -1, -1)
            pad = args.image_size - 28
            if pad >= 0:
                x = F.pad(x, (pad // 2, pad - pad // 2, pad // 2, pad - pad // 2)).contiguous()
            else:  # smaller: scaled down
                x = F.interpolate(x, size=(args.image_size, args.image_size), mode="bilinear", align_corners=False)
            return [(x[i:i + args.batch], labels[i:i + args.batch]) for i in range(0, n, args.batch)]
    g = torch.Generator().manual_seed(1 + rank)  # each rank its own
    return [(torch.randn(args.batch, 3, args.image_size, args.image_size, generator=g),
             torch.randint(0, 10, (args.batch,), generator=g)) for _ in range(4)]


def settled(rt, args):
    """Whether the plan has settled (its trial over, made again where due): on every rank under DDP."""
    done = rt is None or rt.stats()["plan_settled"]
    if args.ddp:
        with rt.plain() if rt else _Nothing():  # gloo's system calls never touch an object
            flag = torch.tensor([int(done)])
            dist.all_reduce(flag, op=dist.ReduceOp.MIN)
        done = bool(flag.item())
    return done


def train(args, policy):
    """(losses, step times in ms after the warm-up, stats) of one run; policy None: plain PyTorch."""
    options = parse_options(args.runtime_options)
    if policy not in (None, "", "fast-only", "slow-only"):
        options.setdefault("timed_bound_s", 30)  # the bound beside the plan (its channel program's solve)
    rt = tt.Runtime(args.tiers, policy, args.fast_budget, **options) if policy is not None else None
    torch.manual_seed(0)
    model = ResNet18(args.width)
    opt = torch.optim.SGD(model.parameters(), lr=0.02, momentum=0.9)
    if rt:
        rt.attach(model, opt)
    if args.ddp:  # under a runtime, its DDP (communication in plain memory); plainly, PyTorch's
        net = rt.ddp(model) if rt else DistributedDataParallel(model)
    else:
        net = model
    # The measured steps start after the warm-up and once the plan has settled (the trial's phases
    # run different plans; at most --settle-steps more steps are waited for that).
    few = batches(args)
    losses, times_ms, measuring = [], [], False
    while len(times_ms) < args.steps:
        x, y = few[len(losses) % len(few)]
        start = time.perf_counter()
        with rt.step() if rt else _Nothing():
            opt.zero_grad()
            loss = F.cross_entropy(net(x), y)
            loss.backward()
            opt.step()
        losses.append(loss.item())
        if measuring:
            times_ms.append(1e3 * (time.perf_counter() - start))
        elif len(losses) >= args.warmup:
            measuring = len(losses) >= args.warmup + args.settle_steps or settled(rt, args)
            if measuring and rt and args.trace:  # the last two measured steps
                rt.trace(len(losses) + args.steps - 2, 2)
    stats = rt.stats() if rt else {}
    if rt:
        if args.trace:
            rank = f".rank{dist.get_rank()}" if args.ddp else ""
            rt.write_trace(f"{args.trace}.{policy}{rank}.json")
        if args.verbose:
            print(f"{policy}: {rt.describe()}\n{policy}: {stats}", file=sys.stderr)
        rt.close()
    return losses, times_ms, stats


def parse_options(text):
    """'room_wait_ms=0,trial_steps=0' -> {'room_wait_ms': 0.0, 'trial_steps': 0}; true/false are bools."""
    options = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        name, _, value = item.partition("=")
        if value in ("true", "false"):
            options[name] = value == "true"
        else:
            options[name] = float(value) if "." in value or name.endswith("_ms") else int(value)
    return options


class _Nothing:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tiers", default="fast=dram:4GiB,slow=emulated:optane-server:8GiB")
    p.add_argument("--policy", action="append", help="a policy (repeat for more; default sentinel, oracle)")
    p.add_argument("--fast-budget", default="20%")
    p.add_argument("--compare", action="store_true", help="plain PyTorch, fast-only, slow-only and the policies")
    p.add_argument("--width", type=int, default=64)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--image-size", type=int, default=32)
    p.add_argument("--data", choices=["synthetic", "fashion-mnist"], default="synthetic",
                   help="synthetic batches, or Fashion-MNIST's training images (Debian's dataset-fashion-mnist)")
    p.add_argument("--steps", type=int, default=6, help="measured steps")
    p.add_argument("--warmup", type=int, default=10, help="steps before (the profile, the plan and its trial)")
    p.add_argument("--settle-steps", type=int, default=40,
                   help="after the warm-up, at most this many steps more waiting for the plan to settle")
    p.add_argument("--threads", type=int, default=0, help="PyTorch's threads (0: PyTorch's default)")
    p.add_argument("--verbose", action="store_true")
    p.add_argument("--trace", default="", help="PREFIX: each policy's last two steps as PREFIX.POLICY[.rankN].json")
    p.add_argument("--runtime-options", default="", help="RuntimeOptions by name, e.g. 'room_wait_ms=0,trial_steps=0' (tensortier.torch.Runtime's options)")
    p.add_argument("--ddp", type=int, default=0, metavar="N",
                   help="DistributedDataParallel over gloo in N processes (0: off; under torchrun, its ranks)")
    args = p.parse_args()
    if args.ddp and "RANK" not in os.environ:
        with socket.socket() as s:  # a free port for the ranks' rendezvous
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        torch.multiprocessing.spawn(rank_main, (args, port), nprocs=args.ddp)  # raises where a rank failed
        return 0
    return rank_main(None, args, None)


def rank_main(rank, args, port):
    """One process: a DDP rank (rank given: one the example started) or the only one."""
    if rank is not None:
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank),
                          WORLD_SIZE=str(args.ddp), LOCAL_RANK=str(rank))
    if args.ddp:
        dist.init_process_group("gloo")
    try:
        code = run(args)
    finally:
        if args.ddp:
            dist.destroy_process_group()
    if rank is not None and code != 0:
        sys.exit(code)
    return code


def run(args):
    if args.threads:
        torch.set_num_threads(args.threads)
    policies = args.policy or ["sentinel", "oracle"]
    runs = ([None, "fast-only", "slow-only"] if args.compare else []) + policies
    rank0 = not args.ddp or dist.get_rank() == 0
    say = print if rank0 else (lambda *a, **k: None)
    say(f"ResNet-18 width {args.width}, batch {args.batch}, {args.image_size}x{args.image_size}, "
          f"{torch.get_num_threads()} threads, PyTorch {torch.__version__}; tiers {args.tiers}, "
          f"fast budget {args.fast_budget}; median of {args.steps} steps after {args.warmup} and once the plan settled"
          + (f"; DDP over gloo, {dist.get_world_size()} ranks (rank 0's figures)" if args.ddp else ""))
    results = {}
    for policy in runs:
        results[policy] = train(args, policy)
    reference = results.get(None, (None,))[0]
    fast = statistics.median(results["fast-only"][1]) if "fast-only" in results else None
    say("| run | ms a step | / fast-only | ms added: measured / predicted / bound | moves | MiB in / out | "
        "last loss | losses as plain PyTorch |")
    say("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for policy, (losses, times_ms, s) in results.items():
        ms = statistics.median(times_ms)
        ratio = f"{ms / fast:.2f}x" if fast else "-"
        added = "-"
        if s.get("bound_added_ms"):  # a policy the bound was computed for
            measured = f"{ms - fast:.1f}" if fast else "-"
            added = f"{measured} / {s['predicted_added_ms']:.1f} / {s['bound_added_ms']:.1f}"
        moved = f"{s['bytes_in'] / 2**20:.0f} / {s['bytes_out'] / 2**20:.0f}" if s else "-"
        # Runs differ in length (each waits for its plan to settle): compared over plain PyTorch's steps.
        n = len(reference) if reference is not None else len(losses)
        same = "-" if reference is None or policy is None else (
            "bit-identical" if losses[:n] == reference else "DIFFER")
        say(f"| {policy or 'plain PyTorch'} | {ms:.1f} | {ratio} | {added} | {s.get('moves', '-')} | {moved} | "
            f"{losses[n - 1]:.6f} | {same} |")
    say("(added: over fast-only's step, measured; predicted by the plan; the timed bound no plan beats, "
        "from the profiled step. The charge, the prediction and the bound count what layers declare and "
        "what they write into tensors born inside them; the charge also what the profiled step saw them "
        "touch undeclared.)")
    differ = any(reference is not None and p is not None and r[0][:len(reference)] != reference
                 for p, r in results.items())
    if args.ddp:  # every rank's verdict
        flag = torch.tensor([int(differ)])
        dist.all_reduce(flag)
        differ = bool(flag.item())
        say(f"every rank's losses as its plain DDP run's: {'no' if differ else 'yes'}")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
