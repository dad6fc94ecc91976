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

# Hostile input (issue 13): a profile missing a field, a non-UTF-8 file, a directory, an
# unwritable --png-dir: each a one-line error and exit 2, never a traceback.
def refused(args, pattern):
    r = subprocess.run([tool] + args, capture_output=True, text=True)
    assert r.returncode == 2 and "Traceback" not in r.stderr and re.search(pattern, r.stderr), (args, r)


cut = os.path.join(work, "cut.json")
with open(cut, "w", encoding="utf-8") as f:
    json.dump({k: v for k, v in profile.items() if k != "layers"}, f)
refused([cut], r"lacks the field 'layers'")
typed = os.path.join(work, "typed.json")
with open(typed, "w", encoding="utf-8") as f:
    json.dump(dict(profile, peak_live_bytes="lots"), f)
refused([typed], r"wrong type")
binary = os.path.join(work, "binary.json")
with open(binary, "wb") as f:
    f.write(b"\xff\xfe\x00garbage")
refused([binary], r"not UTF-8")
refused([work], r"is a directory")
blocker = os.path.join(work, "a-file")
open(blocker, "w").close()
refused([profile_path, "--png-dir", os.path.join(blocker, "png")], r"cannot make --png-dir")
# JSON nested deeper than Python's parser goes (issue 49): one line, not a RecursionError's traceback.
deep = os.path.join(work, "deep.json")
with open(deep, "w", encoding="utf-8") as f:
    f.write("[" * 100000 + "]" * 100000)
refused([deep], r"nests its JSON deeper")
# The PNGs follow the outputs' rule: a symbolic link in their place is refused, what it names kept.
links = os.path.join(work, "links")
os.makedirs(links, exist_ok=True)
kept = os.path.join(work, "kept.txt")
with open(kept, "w") as f:
    f.write("keep")
if os.path.lexists(os.path.join(links, "live_bytes.png")):
    os.remove(os.path.join(links, "live_bytes.png"))
os.symlink(kept, os.path.join(links, "live_bytes.png"))
refused([profile_path, "--png-dir", links], r"symbolic link")
with open(kept) as f:
    assert f.read() == "keep", "the link's target was written"

# A small fuzzer of the reader (Python: libFuzzer does not reach it): seeded random mutations of
# the real profile (a key dropped or a value of another type at any depth, the text cut short
# or its bytes flipped); every answer must be a report (exit 0) or a one-line error (exit 2).
import random

rng = random.Random(13)
text = json.dumps(profile)


def paths(node, prefix=()):
    yield prefix
    if isinstance(node, dict):
        for k, v in node.items():
            yield from paths(v, prefix + (k,))
    elif isinstance(node, list):
        for i, v in enumerate(node[:3]):
            yield from paths(v, prefix + (i,))


all_paths = [p for p in paths(profile) if p]
mutant = os.path.join(work, "mutant.json")
for trial in range(40):
    kind = trial % 4
    if kind < 2:
        doc = json.loads(text)
        path = rng.choice(all_paths)
        parent = doc
        for k in path[:-1]:
            parent = parent[k]
        if kind == 0:
            del parent[path[-1]]
        else:
            parent[path[-1]] = rng.choice([None, "x", -1, 1e308, [], {}, True])
        data = json.dumps(doc).encode()
    elif kind == 2:
        data = text.encode()[: rng.randrange(len(text))]
    else:
        data = bytearray(text.encode())
        for _ in range(rng.randrange(1, 8)):
            data[rng.randrange(len(data))] = rng.randrange(256)
        data = bytes(data)
    with open(mutant, "wb") as f:
        f.write(data)
    r = subprocess.run([tool, mutant], capture_output=True, text=True)
    assert r.returncode in (0, 2) and "Traceback" not in r.stderr, (trial, kind, r.returncode, r.stderr[-2000:])
    assert r.returncode == 0 or len(r.stderr.strip().splitlines()) == 1, (trial, r.stderr)
print(f"report: {len(layers)} layer rows, 5 object rows, 2 PNGs; bad input named; 40 mutants answered")
