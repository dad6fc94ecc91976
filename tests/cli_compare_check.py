#!/usr/bin/env python3
"""Checks tensortier-train --compare: one row per policy listed, in order; one loss in every row
(placement never changes results); fast-only is the reference (1.00x) and moves nothing; the
policy's fast tier holds less at its peak than fast-only's, and slow-only's holds least; every row
timed after its trial. Usage: cli_compare_check.py TENSORTIER_TRAIN"""
import re
import subprocess
import sys

POLICIES = ["fast-only", "slow-only", "sentinel"]
UNITS = {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}


def size(text):
    number, unit = text.split()
    return float(number) * UNITS[unit]


def main():
    cmd = [sys.argv[1], "--model", "resnet18", "--data", "synthetic", "--width", "4", "--batch", "8",
           "--image-size", "32", "--synthetic-count", "64", "--steps", "3",
           "--tiers", "fast=dram:512MiB,slow=emulated:cxl:2GiB", "--policy", "sentinel",
           "--fast-budget", "30%", "--compare", ",".join(POLICIES), "--compare-steps", "24"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if out.returncode != 0:
        sys.exit(f"exit {out.returncode}:\n{out.stdout}\n{out.stderr}")
    row = re.compile(
        r"^(\S+) +([\d.]+) ms +(\d+)-(\d+) +(\S+) +(\S+) +([\d.]+ \w+) +([\d.]+ \w+) / ([\d.]+ \w+) +([\d.]+)$")
    # The predicted column (5) is dropped: the groups below are as before it.
    rows = [(g[0], g[1], g[2], g[3], g[4], g[6], g[7], g[8], g[9])
            for g in (m.groups() for m in map(row.match, out.stdout.splitlines()) if m)]
    predicted = {m.group(1): m.group(6) for m in map(row.match, out.stdout.splitlines()) if m}
    if not re.match(r"^[\d.]+x$", predicted.get("sentinel", "")):
        sys.exit(f"sentinel's row has no predicted ratio: {predicted}:\n{out.stdout}")
    names = [r[0] for r in rows]
    if names != POLICIES:
        sys.exit(f"rows {names}, want {POLICIES}:\n{out.stdout}")
    by = {r[0]: r for r in rows}
    losses = {r[8] for r in rows}
    if len(losses) != 1:
        sys.exit(f"the losses differ across placements: {losses}")
    if by["fast-only"][4] != "1.00x" or size(by["fast-only"][6]) != 0 or size(by["fast-only"][7]) != 0:
        sys.exit(f"fast-only is not the reference that moves nothing: {by['fast-only']}")
    live = {name: size(by[name][5]) for name in POLICIES}
    if not live["slow-only"] < live["sentinel"] < live["fast-only"]:
        sys.exit(f"fast tier peaks not ordered slow-only < sentinel < fast-only: {live}")
    for r in rows:
        if not 2 <= int(r[2]) <= int(r[3]) == 24:
            sys.exit(f"{r[0]} timed steps {r[2]}-{r[3]}: not after its profiled step, within the 24 run")
    if "test accuracy" not in out.stdout:
        sys.exit("the training after the comparison did not finish")
    print("compare: ok;", ", ".join(f"{r[0]} {r[1]} ms" for r in rows))


main()
