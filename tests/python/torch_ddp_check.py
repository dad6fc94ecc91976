"""tensortier.torch under DDP (gloo, two processes, each with its own runtime) against plain DDP:
the small CNN of torch_tiering_check trains to bit-identical losses and parameters on every rank
under sentinel and the oracle at 20% and under random moves, and the plans run on DDP's steps.

DDP allocates its rebuilt buckets in its second step, the one profiled: the steps after it are of
another kind, so the runtime profiles that kind too and makes the plan again from it (no step of
the first plan's kind ran). Checked here: after that, every step runs on the plan and it moves.

Usage: PYTHONPATH=<build>/python python3 torch_ddp_check.py   (exit 0: every check passed)
"""

import os
import socket
import sys

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel

import tensortier.torch as tt
from torch_tiering_check import TIERS, SmallNet, _nothing, batches, same

STEPS = 12
RANKS = 2


def train(policy=None, budget="", chaos_moves=0):
    """(losses, parameters, stats) of STEPS steps of this rank: plain DDP (policy None) or under a runtime."""
    # No trial: which of its phases wins depends on this machine's times (each phase moves alike).
    rt = tt.Runtime(TIERS, policy or "", budget, chaos_moves=chaos_moves, trial_steps=0) if policy is not None \
        else None
    torch.manual_seed(0)
    model = SmallNet()
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    if rt:
        rt.attach(model, opt)
    net = rt.ddp(model) if rt else DistributedDataParallel(model)
    losses, off_plan_before_last = [], 0
    g = torch.Generator().manual_seed(dist.get_rank())  # each rank its own batches
    shuffle = torch.randperm(STEPS, generator=g).tolist()
    data = batches(STEPS)
    for i in range(STEPS):
        if rt and i == STEPS - 4:
            off_plan_before_last = rt.stats()["off_plan_steps"]
        x, y = data[shuffle[i] % len(data)]
        with rt.step() if rt else _nothing():
            opt.zero_grad()
            loss = F.cross_entropy(net(x), y)
            loss.backward()
            opt.step()
        losses.append(loss.item())
    params = {k: v.detach().clone() for k, v in model.state_dict().items()}
    stats = rt.stats() if rt else {}
    if rt:
        stats["off_plan_in_last_steps"] = stats["off_plan_steps"] - off_plan_before_last
        stats["chaos_moved"] = getattr(rt, "chaos_moved", 0)
        rt.close()
    return losses, params, stats


def rank_main(rank, port):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(RANKS))
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    failures = []

    def check(ok, what):
        print(f"rank {rank}: " + ("ok   " if ok else "FAIL ") + what, flush=True)
        if not ok:
            failures.append(what)

    try:
        plain = train()
        for policy, budget in [("sentinel", "20%"), ("oracle", "20%")]:
            run = train(policy, budget)
            s = run[2]
            check(same(plain, run), f"{policy} {budget}: bit-identical losses and parameters to plain DDP "
                  f"({s['moves']} moves)")
            check(s["moves"] > 0 and s["off_plan_in_last_steps"] == 0,
                  f"{policy} {budget}: its plan runs on DDP's steps ({s['moves']} moves, "
                  f"{s['profiled_steps']} profiled steps, {s['off_plan_steps']} steps off the plan, "
                  f"{s['off_plan_in_last_steps']} of them in the last 4)")
        chaos = train("", chaos_moves=4)
        check(same(plain, chaos) and chaos[2]["chaos_moved"] > 100,
              f"random moves (4 objects to another tier at every layer boundary): bit-identical losses and "
              f"parameters to plain DDP ({chaos[2]['chaos_moved']} moves)")
    finally:
        dist.destroy_process_group()
    if failures:
        sys.exit(1)


def main():
    with socket.socket() as s:  # a free port for the ranks' rendezvous
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    try:
        torch.multiprocessing.spawn(rank_main, (port,), nprocs=RANKS)
    except Exception as e:  # a rank's failure (its checks printed above)
        print(f"torch_ddp_check: FAILED: {str(e).strip().splitlines()[-1]}")
        return 1
    print("torch_ddp_check: every check passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
