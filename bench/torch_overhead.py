"""tensortier.torch's overhead on a PyTorch step, split in its parts, side by side: plain PyTorch;
the runtime's allocator alone (every CPU tensor an object, no marks); with the model attached (step
and layer marks from the hooks, no policy); and fast-only (a plan, its executor). The modes
alternate in one process, ROUNDS rounds; each figure is the median over rounds of each run's median
step time after its warm-up.

    PYTHONPATH=build/release/python OMP_NUM_THREADS=2 python3 bench/torch_overhead.py [--width 64] [--batch 32]
    PYTHONPATH=build/release/python python3 bench/torch_overhead.py --ddp 2 --threads 1 --width 16 --batch 16

With --ddp N: the same under DistributedDataParallel over gloo in N processes (plain: PyTorch's DDP;
allocator: PyTorch's DDP over the runtime's tensors; marks and fast-only: rt.ddp), rank 0's figures.
"""

import argparse
import os
import runpy
import socket
import statistics
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel

import tensortier.torch as tt

EXAMPLE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples", "pytorch_resnet18.py")
MODES = ["plain", "allocator", "marks", "fast-only"]


class _Nothing:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False


def run(mode, args, resnet18):
    rt = None if mode == "plain" else tt.Runtime(args.tiers, "fast-only" if mode == "fast-only" else "", "")
    torch.manual_seed(0)
    model = resnet18(args.width)
    opt = torch.optim.SGD(model.parameters(), lr=0.02, momentum=0.9)
    marked = mode in ("marks", "fast-only")
    if marked:
        rt.attach(model, opt)
    net = model
    if args.ddp:
        net = rt.ddp(model) if marked else DistributedDataParallel(model)
    g = torch.Generator().manual_seed(1)
    x = torch.randn(args.batch, 3, 32, 32, generator=g)
    y = torch.randint(0, 10, (args.batch,), generator=g)
    times = []
    for i in range(args.warmup + args.steps):
        start = time.perf_counter()
        with rt.step() if marked else _Nothing():
            opt.zero_grad()
            loss = F.cross_entropy(net(x), y)
            loss.backward()
            opt.step()
        if i >= args.warmup:
            times.append(time.perf_counter() - start)
    if rt:
        rt.close()
    return statistics.median(times) * 1e3


def rank_main(rank, args, port):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(args.ddp))
    dist.init_process_group("gloo")
    try:
        measure(args)
    finally:
        dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--width", type=int, default=64)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--warmup", type=int, default=4)
    p.add_argument("--tiers", default="fast=dram:4GiB,slow=emulated:optane-server:8GiB")
    p.add_argument("--ddp", type=int, default=0, metavar="N", help="DDP over gloo in N processes (0: off)")
    args = p.parse_args()
    if args.ddp:
        with socket.socket() as s:  # a free port for the ranks' rendezvous
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        torch.multiprocessing.spawn(rank_main, (args, port), nprocs=args.ddp)
    else:
        measure(args)


def measure(args):
    torch.set_num_threads(args.threads)
    resnet18 = runpy.run_path(EXAMPLE)["ResNet18"]
    ms = {m: [] for m in MODES}
    for _ in range(args.rounds):
        for m in MODES:
            ms[m].append(run(m, args, resnet18))
    plain = statistics.median(ms["plain"])
    if args.ddp and dist.get_rank() != 0:
        return
    print(f"ResNet-18 width {args.width}, batch {args.batch}, {args.threads} threads, PyTorch {torch.__version__}; "
          f"{args.rounds} rounds of {args.steps} steps after {args.warmup}"
          + (f"; DDP over gloo, {args.ddp} ranks (rank 0's figures)" if args.ddp else ""))
    print("| mode | ms a step (median of rounds) | / plain | rounds |")
    print("| --- | --- | --- | --- |")
    for m in MODES:
        med = statistics.median(ms[m])
        print(f"| {m} | {med:.1f} | {med / plain:.3f}x | {', '.join(f'{v:.1f}' for v in ms[m])} |")


if __name__ == "__main__":
    main()
