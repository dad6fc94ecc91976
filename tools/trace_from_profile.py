#!/usr/bin/env python3
"""A step's buffers, from a step profile (docs/PROFILE.md), as the GPU backend's fixtures:
  OUT.csv   google/minimalloc's form (id,lower,upper,size): every object of the step, alive over
            layer boundaries [lower, upper) (0: before the first layer; layers + 1: after the last),
            its bytes as asked; what SmartPool and the allocator models plan over;
  OUT.json  the same objects with the layers that use and write them, and each layer's time (ns,
            as the profile measured it on the CPU): what AutoSwap plans over.
Usage: trace_from_profile.py PROFILE.json OUT_BASE MODEL BATCH"""
import csv
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.realpath(__file__)))
from tt_outputs import write_output  # noqa: E402 (beside this script; outputs by the project's rule)


def main():
    profile_path, out, model, batch = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    p = json.load(open(profile_path))
    layers = len(p["layers"])
    uses, writes = {}, {}
    for i, layer in enumerate(p["layers"]):
        for oid in layer["declared_reads"] + layer["declared_writes"]:
            uses.setdefault(oid, set()).add(i)
        for oid in layer["declared_writes"]:
            writes.setdefault(oid, set()).add(i)
    objects = []
    for o in p["objects"]:
        born = 0 if o["born_at_layer"] is None else o["born_at_layer"]
        freed = layers + 1 if o["freed_at_layer"] is None else max(o["freed_at_layer"], born + 1)
        objects.append({"key": o["key"], "name": o["name"], "bytes": o["bytes"], "born": born, "freed": freed,
                        "persistent": o["born_at_layer"] is None and o["freed_at_layer"] is None,
                        "uses": sorted(uses.get(o["id"], ())), "writes": sorted(writes.get(o["id"], ()))})
    import io
    rows = io.StringIO(newline="")
    w = csv.writer(rows)
    w.writerow(["id", "lower", "upper", "size"])
    for i, o in enumerate(objects):
        w.writerow([i, o["born"], o["freed"], o["bytes"]])
    write_output(out + ".csv", rows.getvalue(), "the offset-planning instance")
    layer_ns = [l["unprofiled_duration_ns"] or l["duration_ns"] for l in p["layers"]]
    write_output(out + ".json", json.dumps({"model": model, "batch": batch, "layers": layers, "layer_ns": layer_ns,
               "source": "tensortier-train --data synthetic --width 64 --image-size 32, CPU engine (oneDNN)",
               "objects": objects}, separators=(",", ":")), "the step trace")
    print(f"{out}: {len(objects)} objects over {layers} layers")


if __name__ == "__main__":
    main()
