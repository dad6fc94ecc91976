#!/usr/bin/python3
"""tensortier-run around the plain oneDNN example (interpose/examples/plain_cnn.cc).

Usage: run_check.py TENSORTIER_RUN PLAIN_CNN HANDLES WORK_DIR

Checks, on emulated tiers: the program's output is bit-identical to its run without the
interposer under fast-only, sentinel, autoswap and oracle at 20%, and with one object of every
layer moved to the other tier after it (--random-moves), and with the program's scratchpads made
objects (--scratchpads), also to a memkind heap tier, where a move
gives the object a new address and each layer re-points its memories; every memory oneDNN would allocate is an object; the step
detector finds the 22-execution step, and steps and layers are counted as the program runs them;
aliases, the program's own buffers, a memory given its buffer later and one re-pointed (handles.cc)
are told apart and compute the same;
the argument table agrees with oneDNN on every primitive; the profiled step's
accesses are all declared. Then a step hint, tiers too small (oneDNN keeps what finds no room), and bad input refused with
a clear line.
"""
import json
import os
import subprocess
import sys

RUN, PROGRAM, HANDLES, WORK = sys.argv[1:5]
TIERS = "fast=dram:1GiB,slow=emulated:optane:2GiB"
failures = []


def check(condition, what):
    if not condition:
        failures.append(what)
        print("FAIL:", what)


def run(args, **kw):
    return subprocess.run(args, capture_output=True, text=True, timeout=300, **kw)


def interposed(name, flags, program_args=(), program=PROGRAM, tiers=TIERS):
    report = os.path.join(WORK, name + ".json")
    profile = os.path.join(WORK, name + "-profile.json")
    cmd = [RUN, "--tiers", tiers, "--report", report, "--profile-json", profile, *flags, "--", program,
           *program_args]
    r = run(cmd)
    print(f"== {name}: rc {r.returncode}\n{r.stderr.strip().splitlines()[-1] if r.stderr.strip() else ''}")
    check(r.returncode == 0, f"{name}: exit code {r.returncode}: {r.stderr[-2000:]}")
    with open(report) as f:
        rep = json.load(f)
    return r, rep, profile


def check_report(name, rep, period, min_steps):
    check(rep["memories"] > 0 and rep["objects"] == rep["memories"],
          f"{name}: {rep['objects']} objects for {rep['memories']} memories: every memory oneDNN would allocate is one")
    check(rep["program_buffers"] == 0 and rep["passed_through"] == 0, f"{name}: memories not made objects")
    check(rep["freed"] == rep["objects"], f"{name}: {rep['freed']} of {rep['objects']} objects freed with their memory")
    check(rep["mismatches"] == 0, f"{name}: argument table mismatches: {rep['warnings']}")
    check(rep["failed_marks"] == 0, f"{name}: marks refused: {rep['warnings']}")
    check(rep["layers"] + rep["unmarked"] == rep["executions"], f"{name}: executions not all counted")
    check(rep["detector"]["state"] == "tracking" and rep["detector"]["period"] == period,
          f"{name}: detector {rep['detector']}, expected tracking a {period}-execution step")
    rt = rep["runtime"]
    check(rt["steps_completed"] == rep["steps"] and rep["steps"] >= min_steps,
          f"{name}: {rep['steps']} steps begun, {rt['steps_completed']} completed, expected {min_steps}+")
    # A move may fail (a chunk another object's host pin holds, a move that would come late): the
    # object stays where it is, and the outputs above show nothing was lost. Counted, not judged.
    check(rt["policy_failure"] == "", f"{name}: the policy did not run: {rt['policy_failure']}")
    check(rt["live_objects_at_exit"] == 0, f"{name}: {rt['live_objects_at_exit']} objects live at exit")


def check_profile(name, path, layers):
    with open(path) as f:
        prof = json.load(f)
    check(len(prof["layers"]) == layers, f"{name}: the profiled step has {len(prof['layers'])} layers, not {layers}")
    for layer in prof["layers"]:
        declared = set(layer["declared_reads"]) | set(layer["declared_writes"])
        for a in layer["accesses"]:
            check(a["is_group"] or a["id"] in declared,
                  f"{name}: layer {layer['index']} ({layer['name']}) touched object {a['id']} it did not declare")


def check_two_threads():
    """A second thread runs oneDNN beside the training loop: every thread took its alternate signal
    stack as it started, so the profile's start signalled none (a signal inside a oneDNN kernel
    corrupted its stack: 3 of 382 runs died before), and the outputs are the plain run's."""
    args = ["--epochs", "1", "--beside", "16"]
    plain = run([PROGRAM, *args])
    r, rep, profile = interposed("beside", ["--policy", "sentinel", "--fast-budget", "20%"], args)
    check(plain.returncode == 0 and r.stdout == plain.stdout, f"beside: {r.stdout!r} vs {plain.stdout!r}")
    with open(profile) as f:
        prof = json.load(f)
    notes = [n for n in prof["notes"] if n.startswith("alternate signal stacks")]
    check(prof["access_source"] == "protection", f"beside: the profile went by {prof['access_source']}")
    check(len(notes) == 1 and " 0 signalled in a system call" in notes[0] and " 0 running user code" in notes[0],
          f"beside: the hand-out signalled a thread or left one without a stack: {notes}")


def check_hostile():
    """What a hostile user tried (issue 49): each refused with one line and exit 2 before the program
    runs, or done as documented; nothing a path names replaced."""
    def refused(name, cmd, needle, rc=None, env=None):
        # A refusal exits 1..128 (2 for tensortier-run's own, 105 and up for CLI11's), says why in
        # a few lines, and the program never ran (nothing on its stdout).
        r = run(cmd, env=env)
        rc_ok = r.returncode == rc if rc is not None else 0 < r.returncode <= 128
        check(rc_ok and needle in r.stderr and r.stdout == "" and len(r.stderr) < 600,
              f"{name}: rc {r.returncode}, {r.stderr[-600:]!r}")
    base = [RUN, "--tiers", TIERS]
    refused("step-period -1", [*base, "--step-period", "-1", "--", PROGRAM], "--step-period")
    refused("step-offset without a period", [*base, "--step-offset", "5", "--", PROGRAM], "--step-offset")
    refused("trace-from 0", [*base, "--trace", os.path.join(WORK, "t.json"), "--trace-from", "0", "--", PROGRAM],
            "--trace-from")
    refused("a library that is no shared library", [*base, "--library", "/etc/hostname", "--", PROGRAM],
            "not a shared library")
    env = dict(os.environ, TENSORTIER_STEP_PERIOD="abc")
    refused("TENSORTIER_STEP_PERIOD=abc", [*base, "--", PROGRAM], "TENSORTIER_STEP_PERIOD='abc'", env=env)
    # Set behind tensortier-run's back (LD_PRELOAD by hand): refused as the interposer loads.
    library = os.path.join(os.path.dirname(RUN), "libtensortier_interpose.so")
    env = dict(os.environ, LD_PRELOAD=library, TENSORTIER_TIERS=TIERS, TENSORTIER_STEP_PERIOD="abc")
    refused("TENSORTIER_STEP_PERIOD=abc preloaded", [PROGRAM], "TENSORTIER_STEP_PERIOD='abc'", env=env)
    env = dict(os.environ, TENSORTIER_READY_MEMORY="off2")
    refused("TENSORTIER_READY_MEMORY=off2", [*base, "--", PROGRAM], "TENSORTIER_READY_MEMORY", env=env)
    not_runnable = os.path.join(WORK, "not-runnable")
    with open(not_runnable, "w") as f:
        f.write("not a program\n")
    refused("a program that is not executable", [*base, "--", not_runnable], "cannot run", rc=126)
    # Outputs: a symbolic link refused before the program runs, what it names untouched; a device
    # written in place.
    precious = os.path.join(WORK, "precious")
    with open(precious, "w") as f:
        f.write("keep")
    link = os.path.join(WORK, "report-link.json")
    if os.path.lexists(link):
        os.remove(link)
    os.symlink(precious, link)
    refused("--report to a symbolic link", [*base, "--report", link, "--", PROGRAM], "symbolic link")
    with open(precious) as f:
        check(f.read() == "keep" and os.path.islink(link), "--report to a symbolic link: its target was written")
    r = run([*base, "--trace", "/dev/null", "--trace-from", "2", "--", PROGRAM, "--epochs", "1"])
    check(r.returncode == 0 and os.path.exists("/dev/null") and not os.path.isfile("/dev/null"),
          f"--trace /dev/null: rc {r.returncode}, /dev/null is still a device")
    # TENSORTIER_INTERPOSE=OFF (any case) is off: nothing tiered, no report.
    report = os.path.join(WORK, "off.json")
    if os.path.exists(report):
        os.remove(report)
    plain = run([PROGRAM, "--epochs", "1"])
    r = run([*base, "--report", report, "--", PROGRAM, "--epochs", "1"],
            env=dict(os.environ, TENSORTIER_INTERPOSE="OFF"))
    check(r.returncode == 0 and r.stdout == plain.stdout and not os.path.exists(report),
          f"TENSORTIER_INTERPOSE=OFF: rc {r.returncode}, report written: {os.path.exists(report)}")
    # A program that never calls oneDNN: said, not silent.
    r = run([*base, "--report", report, "--", "true"])
    check(r.returncode == 0 and "never called oneDNN" in r.stderr and not os.path.exists(report),
          f"a program without oneDNN: rc {r.returncode}, {r.stderr!r}")
    # Two oneDNN programs the interposed one starts: only the first to call oneDNN is interposed and
    # writes the report; the other says so and runs as without tensortier-run.
    script = f"{PROGRAM} --epochs 1 && {PROGRAM} --epochs 1"
    r = run([*base, "--report", report, "--step-period", "22", "--", "sh", "-c", script])
    check(r.returncode == 0 and r.stdout == plain.stdout * 2, f"two programs: rc {r.returncode}, {r.stdout!r}")
    check(r.stderr.count("is interposed") == 1, f"two programs: {r.stderr[-1500:]!r}")
    with open(report) as f:
        rep = json.load(f)
    # One epoch of 7 iterations and its evaluation pass in steps of 22: about 8 steps; both would be 16.
    check(rep["runtime"]["steps_completed"] <= 10,
          f"two programs: the report counts {rep['runtime']['steps_completed']} steps: both wrote it")


def main():
    os.makedirs(WORK, exist_ok=True)
    plain = run([PROGRAM])
    check(plain.returncode == 0, f"plain run failed: {plain.stderr}")
    runs = [("fast-only", ["--policy", "fast-only"]),
            ("sentinel", ["--policy", "sentinel", "--fast-budget", "20%"]),
            ("autoswap", ["--policy", "autoswap", "--fast-budget", "20%"]),
            ("oracle", ["--policy", "oracle", "--fast-budget", "20%"]),
            ("random", ["--random-moves", "7"]),
            ("scratchpads", ["--policy", "sentinel", "--fast-budget", "20%", "--scratchpads"])]
    moves = {}
    for name, flags in runs:
        r, rep, profile = interposed(name, flags)
        check(r.stdout == plain.stdout, f"{name}: output differs from the plain run:\n{r.stdout}\nvs\n{plain.stdout}")
        # 3 epochs of 7 iterations (the last of 8 examples) and an evaluation pass; the first four
        # iterations find the step.
        check_report(name, rep, 22, 15)
        check_profile(name, profile, 22)
        moves[name] = rep["runtime"]["moves"] + rep["runtime"]["direct_moves"]
    print("moves:", moves)
    with open(os.path.join(WORK, "scratchpads.json")) as f:
        check(json.load(f)["scratchpads"] > 0, "--scratchpads: no execution was given a scratchpad object")
    with open(os.path.join(WORK, "sentinel.json")) as f:
        check(json.load(f)["scratchpads"] == 0, "scratchpads given without --scratchpads")
    check(moves["random"] > 100, "random moves: too few made for the check to mean anything")

    for name in ("fast-only", "sentinel", "random"):
        with open(os.path.join(WORK, name + ".json")) as f:
            check(json.load(f)["refreshed"] == 0, f"{name}: objects on dram and emulated tiers keep their address")
    # A memkind heap tier: a move gives the object a new address, and each layer points its
    # memories at it.
    heap = os.path.join(WORK, "pmem")
    os.makedirs(heap, exist_ok=True)
    r, rep, _ = interposed("heap", ["--random-moves", "11"], tiers=f"fast=dram:1GiB,slow=pmem:{heap}:2GiB")
    check(r.stdout == plain.stdout, "heap: output differs")
    check(rep["runtime"]["direct_moves"] > 100 and rep["refreshed"] > 100,
          f"heap: {rep['runtime']['direct_moves']} moves, {rep['refreshed']} memories re-pointed")

    check_two_threads()

    # A hint: steps every 22 executions from the first.
    args = ["--epochs", "1", "--train", "192"]
    plain_hint = run([PROGRAM, *args])
    r, rep, _ = interposed("hint", ["--policy", "sentinel", "--fast-budget", "20%", "--step-period", "22"], args)
    check(r.stdout == plain_hint.stdout, "hint: output differs")
    check(rep["unmarked"] == 0 and rep["steps"] >= 6, f"hint: {rep['steps']} steps, {rep['unmarked']} unmarked")

    # Every kind of buffer: oneDNN's (objects), aliases of them, the program's, none until later.
    plain_handles = run([HANDLES])
    r, rep, _ = interposed("handles", ["--policy", "sentinel", "--fast-budget", "50%", "--random-moves", "3"],
                           program=HANDLES)
    check(plain_handles.returncode == 0 and r.stdout == plain_handles.stdout,
          f"handles: {r.stdout!r} vs {plain_handles.stdout!r}")
    counts = {k: rep[k] for k in ("memories", "objects", "aliases", "program_buffers", "no_buffer", "freed")}
    check(counts == {"memories": 6, "objects": 2, "aliases": 2, "program_buffers": 3, "no_buffer": 1, "freed": 2},
          f"handles: {counts}")
    check(rep["detector"]["period"] == 4 and rep["steps"] >= 3 and rep["mismatches"] == 0,
          f"handles: {rep['detector']}, {rep['steps']} steps, {rep['mismatches']} mismatches")

    # Tiers too small for the program: what finds no room is oneDNN's own, said, and nothing is lost.
    r, rep, _ = interposed("no-room", [], tiers="fast=dram:1MiB")
    check(r.stdout == plain.stdout, "no-room: output differs")
    check(rep["allocation_failures"] > 0 and rep["objects"] + rep["allocation_failures"] == rep["memories"],
          f"no-room: {rep['objects']} objects, {rep['allocation_failures']} left to oneDNN, {rep['memories']} memories")
    check("oneDNN allocates it instead" in r.stderr, "no-room: no line says what happened")

    # Bad input: a clear line naming the problem, and the program never starts.
    bad = run([RUN, "--tiers", TIERS, "--policy", "nosuch", "--", PROGRAM])
    check(bad.returncode == 2 and "nosuch" in bad.stderr and bad.stdout == "",
          f"an unknown policy: rc {bad.returncode}, {bad.stderr!r}")
    bad = run([RUN, "--tiers", "fast=dram:1GiB,slow=bogus", "--", PROGRAM])
    check(bad.returncode == 2 and "bogus" in bad.stderr and bad.stdout == "", f"a bad tier spec: {bad.stderr!r}")
    bad = run([RUN, "--tiers", TIERS, "--", os.path.join(WORK, "no-such-program")])
    check(bad.returncode == 127 and "cannot run" in bad.stderr, f"a missing program: rc {bad.returncode}")
    check_hostile()
    print("FAILED" if failures else "OK", len(failures))
    return 1 if failures else 0


sys.exit(main())
