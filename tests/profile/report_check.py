"""Checks tools/tensortier-profile on a profile the trainer wrote: one table row per layer, the
two PNGs drawn, and bad input named. Usage: report_check.py TRAIN_BINARY TOOL WORK_DIR"""
import json
import os
import re
import shutil
import subprocess
import sys

train, tool, work = sys.argv[1:4]
shutil.rmtree(work, ignore_errors=True)
os.makedirs(work)
profile_path = os.path.join(work, "profile.json")
trained = subprocess.run([train, "--model", "vgg11", "--data", "synthetic", "--width", "4", "--batch", "2",
                          "--image-size", "32", "--synthetic-count", "8", "--steps", "2", "--tiers",
                          "fast=dram:256MiB", "--profile-json", profile_path],
                         capture_output=True, text=True, check=True)
assert "profile of step 1:" in trained.stdout, trained.stdout
with open(profile_path, encoding="utf-8") as f:
    profile = json.load(f)
layers = profile["layers"]
assert len(layers) > 20, len(layers)

png_dir = os.path.join(work, "png")
report = subprocess.run([tool, profile_path, "--png-dir", png_dir, "--all-layers", "--top", "5"],
                        capture_output=True, text=True)
assert report.returncode == 0, report.stderr
rows = [line for line in report.stdout.splitlines() if re.match(r"^ *\d+ \S+\s+[-\d.]+\s", line)]
layer_rows = rows[:len(layers)]
for layer, row in zip(layers, layer_rows):
    index, name = row.split()[:2]
    assert int(index) == layer["index"] and layer["name"].startswith(name), (layer["name"], row)
assert len(rows) == len(layers) + 5, f"{len(rows)} rows for {len(layers)} layers + 5 objects"
for png in ("live_bytes.png", "objects.png"):
    with open(os.path.join(png_dir, png), "rb") as f:
        data = f.read()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10000, (png, len(data))

missing = subprocess.run([tool, os.path.join(work, "nope.json")], capture_output=True, text=True)
assert missing.returncode == 2 and "nope.json" in missing.stderr and "does not exist" in missing.stderr, missing
other = os.path.join(work, "other.json")
with open(other, "w", encoding="utf-8") as f:
    json.dump({"schema": "something/else"}, f)
wrong = subprocess.run([tool, other], capture_output=True, text=True)
assert wrong.returncode == 2 and "something/else" in wrong.stderr, wrong
print(f"report: {len(layers)} layer rows, 5 object rows, 2 PNGs; bad input named")
