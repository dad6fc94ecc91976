"""tensortier.torch against plain PyTorch: an unmodified training loop (a small CNN with batch
norms, in-place ReLUs, a residual add and SGD with momentum) trains to bit-identical losses and
parameters under fast-only, slow-only, sentinel and the oracle at 20% and 10% of its peak, with its
tensors runtime objects and (under the policies) moved between layers; bad input is refused with a
line; a DataLoader's forked workers allocate through PyTorch's own allocator.

Usage: PYTHONPATH=<build>/python python3 torch_tiering_check.py   (exit 0: every check passed)
"""

import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

import tensortier.torch as tt

TIERS = "fast=dram:1GiB,slow=emulated:optane-server:2GiB"
STEPS = 14
failures = []
CHECKED_STORAGES = []  # (policy, budget, storages owned by the runtime, storages) of each run


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what)
    if not ok:
        failures.append(what)


class Block(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(c, c, 3, padding=1, bias=False), nn.BatchNorm2d(c)
        self.conv2, self.bn2 = nn.Conv2d(c, c, 3, padding=1, bias=False), nn.BatchNorm2d(c)
        self.relu = nn.ReLU(inplace=True)

    def forward(self, x):
        out = self.relu(self.bn1(self.conv1(x)))
        return F.relu(self.bn2(self.conv2(out)) + x)  # functional code between modules


class SmallNet(nn.Module):
    def __init__(self, classes=10):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 24, 3, padding=1, bias=False), nn.BatchNorm2d(24), nn.ReLU(inplace=True))
        self.block1, self.block2 = Block(24), Block(24)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(24, classes)

    def forward(self, x):
        x = self.block2(self.block1(self.stem(x)))
        return self.fc(torch.flatten(self.pool(x), 1))


def batches(steps, batch=12, size=20):
    """Three batches in turn: few enough that a few steps lower the loss."""
    g = torch.Generator().manual_seed(7)
    three = [(torch.randn(batch, 3, size, size, generator=g), torch.randint(0, 10, (batch,), generator=g))
             for _ in range(3)]
    return [three[i % 3] for i in range(steps)]


def train(policy=None, budget="", chaos_moves=0, masked=False, **options):
    """Losses and final parameters of STEPS steps, plainly (policy None) or under a runtime. masked:
    each batch times a mask made after the runtime, outside the steps (neither parameter nor buffer)."""
    rt = tt.Runtime(TIERS, "" if policy in (None, "none", "chaos") else policy, budget, chaos_moves=chaos_moves,
                    **options) if policy else None
    torch.manual_seed(0)
    model = SmallNet()
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    mask = (torch.arange(20 * 20) % 3 != 0).float().reshape(1, 1, 20, 20) if masked else None
    if rt:
        rt.attach(model, opt)
    losses = []
    for x, y in batches(STEPS):
        with rt.step() if rt else _nothing():
            opt.zero_grad()
            loss = F.cross_entropy(model(x if mask is None else x * mask), y)
            loss.backward()
            opt.step()
        losses.append(loss.item())
    if rt:  # every storage of the step's parameters, gradients and optimizer state is an object
        kept = [t for p in model.parameters() for t in (p, p.grad)] + \
               [v for st in opt.state.values() for v in st.values() if isinstance(v, torch.Tensor)]
        owned = sum(rt._rt.owns(tt._storage_ptr(t)) for t in kept)
        CHECKED_STORAGES.append((policy, budget, owned, len(kept)))
    params = {k: v.detach().clone() for k, v in model.state_dict().items()}
    stats = rt.stats() if rt else None
    if rt:
        stats["chaos_moved"] = getattr(rt, "chaos_moved", 0)
    # Small tensors share pages in chunks the policies leave on the fast tier: the others' tiers.
    tiers = sorted({rt.tier_of(p) for p in model.parameters() if p.numel() * 4 >= 16384}) if rt else None
    if rt:
        rt.close()
    return losses, params, stats, tiers


class _nothing:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False


def same(a, b):
    return a[0] == b[0] and a[1].keys() == b[1].keys() and all(torch.equal(a[1][k], b[1][k]) for k in a[1])


def main():
    torch.set_num_threads(2)
    plain = train()
    check(plain[0][-1] < plain[0][0], f"plain PyTorch learns: loss {plain[0][0]:.4f} -> {plain[0][-1]:.4f}")

    runs = {"none": train("none")}
    check(same(plain, runs["none"]), "no policy: bit-identical losses and parameters")
    check(runs["none"][2]["allocations"] > 0 and runs["none"][2]["steps"] == STEPS,
          f"every tensor an object: {runs['none'][2]['allocations']} allocations, {runs['none'][2]['steps']} steps")
    for policy, budget in [("fast-only", ""), ("slow-only", ""), ("sentinel", "20%"), ("oracle", "20%"),
                           ("sentinel", "10%"), ("oracle", "10%"), ("first-touch", "20%"), ("interleave", "20%"),
                           ("reactive", "20%"), ("autoswap", "20%"), ("search", "20%"), ("channel", "20%")]:
        run = train(policy, budget)
        s = run[2]
        check(same(plain, run), f"{policy} {budget}: bit-identical losses and parameters "
              f"({s['moves']} moves, {s['bytes_in'] >> 10} KiB in, {s['bytes_out'] >> 10} KiB out, "
              f"{s['failed_moves']} failed; parameters on tiers {run[3]})")
        check(s["policy"] == policy and s["profiled_steps"] >= 1, f"{policy} {budget}: ran ({s['policy']!r}, "
              f"{s['profiled_steps']} profiled steps)")
        # Every step after the profiled one is of its kind: a backward names its forward's tensors
        # only while they live (an address freed since may hold another object in one step only).
        check(s["profiled_steps"] == 1 and s["off_plan_steps"] == 0, f"{policy} {budget}: every step of the "
              f"profiled kind ({s['off_plan_steps']} off the plan, {s['profiled_steps']} profiled)")
        runs[f"{policy} {budget}"] = run
    chaos = train("chaos", chaos_moves=4)
    check(same(plain, chaos) and chaos[2]["chaos_moved"] > 100, f"random moves (4 objects to another tier at "
          f"every layer boundary): bit-identical losses and parameters ({chaos[2]['chaos_moved']} moves)")
    check(runs["slow-only "][3] == [1], f"slow-only: every parameter of 16 KiB or more on the slow tier "
          f"(tiers {runs['slow-only '][3]})")
    moved = sum(r[2]["moves"] for k, r in runs.items() if k.split()[0] in ("sentinel", "oracle"))
    check(moved > 0, f"the policies moved objects between layers ({moved} moves)")

    closed_in_a_profile_window()
    extra_births_in_the_profiled_step()
    check(all(owned == n for _, _, owned, n in CHECKED_STORAGES),
          f"every parameter, gradient and optimizer state of every run an object "
          f"({sum(o for _, _, o, _ in CHECKED_STORAGES)} of {sum(n for *_, n in CHECKED_STORAGES)})")
    no_leak()
    bad_input()
    hostile_training()
    version_check()
    forked_child()
    print("torch_tiering_check:", "FAILED: " + "; ".join(failures) if failures else "every check passed")
    return 1 if failures else 0


def bad_input():
    try:
        tt.Runtime("fast=dram:1GiB,slow=nonsense:2GiB")
        check(False, "a bad tier spec is refused")
    except RuntimeError as e:
        check("nonsense" in str(e), f"a bad tier spec is refused with a line naming it: {e}")
    try:
        tt.Runtime(TIERS, "sentinel", "1KiB")
        check(False, "a fast budget below the small objects' chunk is refused")
    except RuntimeError as e:
        check("1.00 KiB" in str(e), f"a fast budget below the small objects' chunk is refused: {str(e)[:80]}...")
    rt = tt.Runtime(TIERS)
    try:
        with rt.step():
            with rt.step():
                pass
        check(False, "nested steps are refused")
    except RuntimeError as e:
        check("nest" in str(e), f"nested steps are refused: {e}")
    rt.close()


def hostile_training():
    """A tensor made outside any step (a mask, after the runtime, neither parameter nor buffer) used
    in every step by functional code; and a fast budget below the largest layer's working set
    (3% of the peak). Both train as plain PyTorch does, to the bit."""
    reference = train(masked=True)
    for policy, budget in [("sentinel", "20%"), ("sentinel", "3%"), ("oracle", "3%")]:
        got = train(policy, budget, masked=True)
        s = got[2]
        check(same(reference, got) and s["policy"] == policy,
              f"{policy} {budget}, a mask made outside the steps used in each: bit-identical losses and parameters "
              f"({s['moves']} moves, policy {s['policy']!r})")


class Squares(torch.utils.data.Dataset):
    def __len__(self):
        return 64

    def __getitem__(self, i):
        return torch.full((1 << 14,), float(i)) * float(i)  # allocated in a forked worker


def no_leak(steps=100):
    """100 steps under sentinel at 20%: the live objects and bytes at the end of step 10 and of the last
    are the same (each step frees what it made)."""
    rt = tt.Runtime(TIERS, "sentinel", "20%")
    torch.manual_seed(0)
    model = SmallNet()
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    rt.attach(model, opt)
    seen = {}
    for i, (x, y) in enumerate(batches(steps)):
        with rt.step():
            opt.zero_grad()
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
        del loss
        if i + 1 in (10, steps):
            s = rt.stats()
            seen[i + 1] = (s["live_objects"], s["live_bytes"])
    rt.close()
    check(seen[10] == seen[steps], f"nothing leaks over {steps} steps: live objects and bytes {seen[10]} after "
          f"step 10, {seen[steps]} after step {steps}")


def extra_births_in_the_profiled_step():
    """DDP allocates its rebuilt buckets in its second step, the profiled one: its later steps key
    their objects one place on. Such a step is of another kind (births count in the signature), so
    the plan made from the profile does not run on it: no move of a wrongly keyed object (one such
    move lost writes under DDP once in ~25 runs). The kind of the steps after it is profiled next
    and, no step having been of the first plan's kind, the plan is made again from that profile."""
    rt = tt.Runtime(TIERS, "sentinel", "20%")
    torch.manual_seed(0)
    model = SmallNet()
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    rt.attach(model, opt)
    kept, losses = [], []
    for i, (x, y) in enumerate(batches(8)):
        with rt.step():
            if i == 1:
                kept.append(torch.zeros(1 << 16))  # a birth before the first layer, in step 1 only
            opt.zero_grad()
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
        losses.append(loss.item())
    s = rt.stats()
    rt.close()
    check(0 < s["off_plan_steps"] <= 2 and losses == train()[0][:8], f"a profiled step with one more birth is "
          f"of another kind than the steps after it ({s['off_plan_steps']} steps off the plan); losses as plain "
          f"PyTorch")
    check(s["profiled_steps"] == 2 and s["moves"] > 0, f"the plan follows the kind profiled next "
          f"({s['profiled_steps']} profiled steps, {s['moves']} moves)")


def closed_in_a_profile_window():
    """A runtime closed after step 0 of a profile of step 1 (its window, open from step 0's end)
    leaves the next free to profile (the process has one fault tracker)."""
    first = tt.Runtime(TIERS, "sentinel", "20%", profile_step=1)
    torch.manual_seed(0)
    model = SmallNet()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    first.attach(model, opt)
    for x, y in batches(1):
        with first.step():
            F.cross_entropy(model(x), y).backward()
            opt.step()
    first.close()
    run = train("sentinel", "20%")
    check(run[2]["profiled_steps"] >= 1 and run[2]["policy"] == "sentinel",
          f"a runtime closed with a profile window open leaves the next one its profile "
          f"({run[2]['profiled_steps']} profiled steps, policy {run[2]['policy']!r})")


def version_check():
    """Autograd's check of a saved tensor modified in place still fires inside a step."""
    rt = tt.Runtime(TIERS)
    x = torch.randn(1 << 14, requires_grad=True)
    try:
        with rt.step():
            y = x.sigmoid()  # saves its output for backward
            y.mul_(2)
            y.sum().backward()
        check(False, "an in-place change of a saved tensor is refused by autograd")
    except RuntimeError as e:
        check("inplace" in str(e), f"an in-place change of a saved tensor is refused by autograd: {str(e)[:90]}...")
    rt.close()


def forked_child():
    """A DataLoader's forked workers allocate batches (through PyTorch's own allocator there)."""
    rt = tt.Runtime(TIERS)
    loader = torch.utils.data.DataLoader(Squares(), batch_size=8, num_workers=2)
    total = sum(float(b[:, 0].sum()) for b in loader)
    check(total == float(sum(i * i for i in range(64))), f"a DataLoader with 2 forked workers: sum {total}")
    rt.close()


if __name__ == "__main__":
    sys.exit(main())
