"""Call stacks (the profile's call_stacks, csrc/profile/stacks.h): each sample is
charged to its stack of reported frames as well as to its line, with the same
figures.  Ground truth from programs whose call tree is known: which caller's
stack gets which share of a shared function's time or bytes, recursion past the
depth cap, threads, a native call, the cap on distinct stacks, children, and the
invariant that stacks and lines hold the same totals."""

from __future__ import annotations

import json
import os

import pytest

from pyrometer import model

MIB = 1 << 20
# Time figures agree to within float rounding of sums taken in another order.
TIME_REL = 1e-6
TIME_ABS = 1e-6

LINE_FIELD = {"python_sec": "n_cpu_python_sec", "native_sec": "n_cpu_native_sec", "system_sec": "n_sys_sec",
              "gil_wait_sec": "n_gil_wait_sec", "cpu_wait_sec": "n_cpu_wait_sec"}


def named_stacks(profile) -> list[tuple[tuple, dict]]:
    """Each stack as ((function, line), ...) root first, with its entry."""
    cs = profile["call_stacks"]
    frames = cs["frames"]
    return [(tuple((frames[i]["function"], frames[i]["lineno"]) for i in s["path"]), s) for s in cs["stacks"]]


def functions_of(path: tuple) -> tuple:
    return tuple(name for name, _ in path)


def cpu(entry) -> float:
    return entry["python_sec"] + entry["native_sec"]


def check_invariants(profile) -> None:
    """Sums over stacks and other == sums over every line plus the unattributed
    part; the leaf of every stack is a line of the files that has figures."""
    cs = profile["call_stacks"]
    everything = [*cs["stacks"], cs["other"]]
    lines = [e for f in profile["files"].values() for e in f["lines"]]
    for name, field in LINE_FIELD.items():
        stacks_total = sum(s[name] for s in everything)
        lines_total = sum(e[field] for e in lines) + profile["unattributed"][name]
        assert stacks_total == pytest.approx(lines_total, rel=TIME_REL, abs=TIME_ABS), name
    # Samples: the lines' count has no unattributed part; the empty stack's is that.
    assert sum(s["samples"] for s in everything if s.get("path", [None])) == sum(e["n_samples"] for e in lines)
    if profile["memory"]:
        unattributed = profile["unattributed_memory"]
        for name, field, top in (("malloc_bytes", "n_malloc_bytes", "malloc_mb"),
                                 ("free_bytes", "n_free_bytes", "free_mb"),
                                 ("copy_bytes", "n_copy_bytes", "copy_mb")):
            assert sum(s[name] for s in everything) == sum(e[field] for e in lines) + round(unattributed[top] * MIB), \
                name
        python_lines = sum(e["n_python_fraction"] * e["n_malloc_bytes"] for e in lines)
        python_lines += unattributed["python_mb"] * MIB
        assert sum(s["python_malloc_bytes"] for s in everything) == pytest.approx(python_lines, rel=1e-9, abs=1)
    if profile["gpu"]:
        gpu_lines = sum(e.get("n_gpu_sec", 0.0) for e in lines) + profile["gpu_unattributed_sec"]
        assert sum(s["gpu_sec"] for s in everything) == pytest.approx(gpu_lines, rel=TIME_REL, abs=TIME_ABS)
    # The leaf of a stack is a line the profile reports with figures.
    reported = {(name, e["lineno"]) for name, f in profile["files"].items() for e in f["lines"]}
    for s in cs["stacks"]:
        if s["path"]:
            leaf = cs["frames"][s["path"][-1]]
            assert (leaf["filename"], leaf["lineno"]) in reported, leaf
    model.check(json.loads(json.dumps(profile)))


CALL_TREE = """
def c(n):
    s = 0
    for i in range(n):
        s += i * i          # C LOOP
    return s

def a():
    for _ in range(100):
        c(200_000)          # A CALLS C

def b():
    for _ in range(50):
        c(200_000)          # B CALLS C

def main():
    a()                     # MAIN CALLS A
    b()                     # MAIN CALLS B

main()                      # MODULE CALLS MAIN
"""


@pytest.mark.accuracy  # a share of sampled time against the program's clock: run again once
def test_call_tree_splits_a_shared_function_by_caller(profile_program):
    p = profile_program(CALL_TREE, options=["--cpu-only"])
    check_invariants(p.profile)
    loop = p.lineno("C LOOP")
    via_a = via_b = 0.0
    for path, s in named_stacks(p.profile):
        if path and path[-1] == ("c", loop):
            assert functions_of(path) in (("<module>", "main", "a", "c"), ("<module>", "main", "b", "c")), path
            assert path[:3] in ((("<module>", p.lineno("MODULE CALLS MAIN")), ("main", p.lineno("MAIN CALLS A")),
                                 ("a", p.lineno("A CALLS C"))),
                                (("<module>", p.lineno("MODULE CALLS MAIN")), ("main", p.lineno("MAIN CALLS B")),
                                 ("b", p.lineno("B CALLS C")))), path
            if path[2][0] == "a":
                via_a += cpu(s)
            else:
                via_b += cpu(s)
    line = p.line("C LOOP")
    assert via_a + via_b == pytest.approx(line["n_cpu_python_sec"] + line["n_cpu_native_sec"], rel=TIME_REL)
    # a runs c twice as long as b: a's stack gets 2/3 of c's line.  Tolerance:
    # +-0.15, three standard deviations of the share with ~100 samples of 10 ms
    # (a 1 s loop; more on a loaded machine).
    assert via_a / (via_a + via_b) == pytest.approx(2 / 3, abs=0.15), p.describe("C LOOP")


RECURSION = """
import json, sys, time
sys.setrecursionlimit(10_000)

def spin():
    s = 0
    for i in range(10_000_000):
        s += i              # SPIN
    return s

def down(n):
    if n == 0:
        return spin()
    return down(n - 1)      # RECURSE

t0 = time.perf_counter()
down(300)
t1 = time.perf_counter()
spin()                      # SHALLOW
t2 = time.perf_counter()
with open("truth.json", "w") as f:
    json.dump({"deep": t1 - t0, "shallow": t2 - t1}, f)
"""


@pytest.mark.accuracy  # a share of sampled time against the program's clock: run again once
def test_recursion_past_the_depth_cap_is_cut_and_sums_right(profile_program):
    p = profile_program(RECURSION, options=["--cpu-only"])
    check_invariants(p.profile)
    cs = p.profile["call_stacks"]
    assert cs["max_depth"] == 128
    spin_line = p.lineno("SPIN")
    deep = shallow = 0.0
    for path, s in named_stacks(p.profile):
        assert len(path) <= cs["max_depth"]
        if path and path[-1] == ("spin", spin_line):
            if len(path) == cs["max_depth"]:
                # The innermost frames kept: down's recursion up to spin.
                assert functions_of(path) == ("down",) * 127 + ("spin",), path[:3]
                deep += cpu(s)
            else:
                assert functions_of(path) == ("<module>", "spin"), path
                shallow += cpu(s)
    line = p.line("SPIN")
    assert deep + shallow == pytest.approx(line["n_cpu_python_sec"] + line["n_cpu_native_sec"], rel=TIME_REL)
    # The same loop run twice, once 301 frames deep: about half each, as the
    # program measures it (0.46-0.51 on 3.11-3.15 here), +-0.2 (about 30
    # samples each).
    truth = json.loads((p.program.parent / "truth.json").read_text())
    true_deep = truth["deep"] / (truth["deep"] + truth["shallow"])
    assert deep / (deep + shallow) == pytest.approx(true_deep, abs=0.2), p.describe("SPIN") + f" truth {truth}"


THREADS = """
import threading

def spin(n):
    s = 0
    for i in range(n):
        s += i              # SPIN
    return s

def left():
    spin(5_000_000)         # LEFT

def right():
    spin(5_000_000)         # RIGHT

threads = [threading.Thread(target=left), threading.Thread(target=right)]
for t in threads:
    t.start()
for t in threads:
    t.join()                # JOIN
"""


def test_threads_have_their_own_stacks(profile_program):
    p = profile_program(THREADS, options=["--cpu-only"])
    check_invariants(p.profile)
    spin = p.lineno("SPIN")
    by_root = {}
    for path, s in named_stacks(p.profile):
        names = functions_of(path)
        # threading's own frames are not reported: a thread's stack starts at its target.
        assert not ("left" in names and "right" in names), path
        assert not ("<module>" in names and ("left" in names or "right" in names)), path
        # On spin's loop: the `for` line (its jump back is the loop's) or SPIN.
        if path and path[-1][0] == "spin" and path[-1][1] in (spin - 1, spin):
            by_root[path[0]] = by_root.get(path[0], 0.0) + cpu(s)
    assert set(by_root) == {("left", p.lineno("LEFT")), ("right", p.lineno("RIGHT"))}, by_root
    assert all(t > 0.05 for t in by_root.values()), by_root
    # The main thread waits in join: its stack there is <module> at JOIN.
    joins = [s for path, s in named_stacks(p.profile) if path == (("<module>", p.lineno("JOIN")),)]
    assert joins and joins[0]["samples"] > 0


NATIVE = """
import _groundtruth

def caller():
    _groundtruth.spin_gil(400)      # NATIVE CALL

def python_part():
    s = 0
    for i in range(2_000_000):
        s += i                      # PYTHON PART

caller()
python_part()
"""


def test_native_time_is_on_the_stack_whose_leaf_is_the_calling_line(profile_program):
    p = profile_program(NATIVE, options=["--cpu-only"])
    check_invariants(p.profile)
    native = sorted((s for path, s in named_stacks(p.profile)
                     if path and path[-1] == ("caller", p.lineno("NATIVE CALL"))), key=lambda s: -cpu(s))
    # One stack holds the call's time.  A peek of the main thread torn by its
    # call's return (its frame read before, its caller after: the caller at
    # its next line, docs/how-it-works.md "Known limit") can put a peek's
    # worth, about a millisecond, on a second one.
    assert native and sum(cpu(s) for s in native[1:]) < 0.01, native
    # 400 ms of C holding the GIL: native time of that stack (+-0.15 s).
    assert native[0]["native_sec"] == pytest.approx(0.4, abs=0.15), p.describe("NATIVE CALL")
    assert native[0]["python_sec"] < 0.1 * native[0]["native_sec"]


MEMORY = """
def make():
    return bytearray(1 << 20)       # ALLOCATE

def often():
    for _ in range(300):
        make()                      # OFTEN

def seldom():
    for _ in range(100):
        make()                      # SELDOM

often()
seldom()
"""


def test_allocations_are_split_by_caller(profile_program):
    p = profile_program(MEMORY)
    check_invariants(p.profile)
    alloc = p.lineno("ALLOCATE")
    by_caller = {}
    for path, s in named_stacks(p.profile):
        if path and path[-1] == ("make", alloc):
            caller = path[-2][0]
            by_caller[caller] = by_caller.get(caller, 0) + s["malloc_bytes"]
            assert s["free_bytes"] <= s["malloc_bytes"]
    assert set(by_caller) == {"often", "seldom"}, by_caller
    line = p.line("ALLOCATE")
    assert sum(by_caller.values()) == line["n_malloc_bytes"]
    # 300 MiB against 100 MiB, one sample per MiB: 3/4 (+-0.1).
    share = by_caller["often"] / sum(by_caller.values())
    assert share == pytest.approx(0.75, abs=0.1), by_caller
    # Every block was freed: so were the stacks' blocks.
    assert sum(s["free_bytes"] for path, s in named_stacks(p.profile) if path and path[-1] == ("make", alloc)) \
        == line["n_free_bytes"]


MIXED = """
import threading, time
import _groundtruth

def work(n):
    data = [bytes(1000) for _ in range(n)]       # WORK ALLOC
    s = 0
    for i in range(n * 20):
        s += i                                   # WORK LOOP
    _groundtruth.memcpy_bytes(32 << 20, 1 << 16) # WORK COPY
    return len(data)

def sleeper():
    time.sleep(0.2)                              # SLEEP

t = threading.Thread(target=sleeper)
t.start()
work(100_000)
t.join()
"""


def test_invariants_with_memory(profile_program):
    p = profile_program(MIXED)
    check_invariants(p.profile)
    names = {functions_of(path) for path, _ in named_stacks(p.profile)}
    assert ("<module>", "work") in names and ("sleeper",) in names, names
    copy = sum(s["copy_bytes"] for path, s in named_stacks(p.profile)
               if path and path[-1] == ("work", p.lineno("WORK COPY")))
    assert copy == p.line("WORK COPY")["n_copy_bytes"] > 0


# Distinct stacks far past the cap: 1,000 generated functions, 1,500 chains of
# 40 calls each through a random sequence of them, each allocating 1 MiB at
# its end (every memory sample interns its stack, every prefix a stack).
MANY_STACKS = """
import random
random.seed(7)
names = [f"f{i}" for i in range(1000)]
source = "".join(f"def {n}(chain, k):\\n    return step(chain, k)\\n" for n in names)
def step(chain, k):
    if k == len(chain):
        return len(bytearray(1 << 20))       # LEAF
    return chain[k](chain, k + 1)
space = {"step": step}
exec(compile(source, __file__, "exec"), space)
functions = [space[n] for n in names]
for _ in range(1500):
    chain = random.sample(functions, 40)
    chain[0](chain, 1)                        # CHAIN
"""


def test_cap_gives_an_other_bucket_and_bounded_memory(profile_program):
    p = profile_program(MANY_STACKS)
    check_invariants(p.profile)
    cs = p.profile["call_stacks"]
    assert cs["cap"] == 20000
    assert len(cs["stacks"]) <= cs["cap"]
    other = cs["other"]
    assert other["malloc_bytes"] > 0, {k: v for k, v in other.items()}
    # The stack table is bounded by the cap: 20,000 stacks of a few hundred
    # bytes each, plus the lines and code objects of 1,000 functions.
    assert p.profile["profiler_memory_bytes"] < 64 * MIB, p.profile["profiler_memory_bytes"]


CHILD = """
import multiprocessing as mp

def spin(n):
    s = 0
    for i in range(n):
        s += i                  # SPIN
    return s

def in_child():
    spin(8_000_000)             # CHILD CALLS

def in_parent():
    spin(8_000_000)             # PARENT CALLS

if __name__ == "__main__":
    p = mp.get_context("fork").Process(target=in_child)
    p.start()
    p.join()
    in_parent()
"""


def test_children_stacks_are_merged(profile_program):
    p = profile_program(CHILD, options=["--cpu-only"])
    assert p.profile["process_count"] == 2, p.profile["processes"]
    check_invariants(p.profile)
    spin = p.lineno("SPIN")
    roots = {}
    for path, s in named_stacks(p.profile):
        # On spin's loop: the `for` line (its jump back is the loop's) or SPIN.
        if path and path[-1][0] == "spin" and path[-1][1] in (spin - 1, spin):
            key = "child" if "in_child" in functions_of(path) else "parent"
            roots[key] = roots.get(key, 0.0) + cpu(s)
    assert set(roots) == {"child", "parent"}, roots
    # The same loop in each process: about half each (+-0.2).
    assert roots["child"] / (roots["child"] + roots["parent"]) == pytest.approx(0.5, abs=0.2), roots
    # A frame appears once in the merged frame table.
    frames = [tuple(f.values()) for f in p.profile["call_stacks"]["frames"]]
    assert len(frames) == len(set(frames))


DECORATED = """
def helper():
    s = 0
    for i in range(3_000_000):
        s += i          # HELPER
    return s

@profile
def focus():
    return helper()     # FOCUS CALLS

focus()
"""


def test_profile_decorator_keeps_the_stacks_whole(profile_program):
    p = profile_program(DECORATED, options=["--cpu-only"])
    shown = [e["lineno"] for e in p.file()["lines"]]
    assert p.lineno("FOCUS CALLS") in shown and p.lineno("HELPER") not in shown  # the files are narrowed
    names = {functions_of(path) for path, _ in named_stacks(p.profile)}
    assert ("<module>", "focus", "helper") in names, names


@pytest.mark.parametrize("damage, message", [
    (lambda cs: cs["stacks"][0]["path"].append(10_000), "must be the index of one of the"),
    (lambda cs: cs["stacks"][0]["path"].__setitem__(0, -1), "must be the index of one of the"),
    (lambda cs: cs["stacks"][0]["path"].__setitem__(0, "0"), "call_stacks.stacks[0].path[0]"),
    (lambda cs: cs["stacks"][0].__setitem__("path", {"0": 1}), "call_stacks.stacks[0].path"),
    (lambda cs: cs["stacks"][0].__setitem__("python_sec", -1.0), "call_stacks.stacks[0].python_sec"),
    (lambda cs: cs["frames"][0].__setitem__("lineno", "12"), "call_stacks.frames[0].lineno"),
    (lambda cs: cs.__setitem__("max_depth", 1), "more than max_depth"),
    (lambda cs: cs.pop("other"), "call_stacks.other is missing"),
])
def test_hostile_profile_is_refused_by_view(profile_program, run_pyrometer, tmp_path, damage, message):
    p = profile_program(CALL_TREE, options=["--cpu-only"])
    profile = p.profile
    profile["call_stacks"]["stacks"].sort(key=lambda s: -len(s["path"]))
    damage(profile["call_stacks"])
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(profile))
    proc = run_pyrometer(["view", bad], cwd=tmp_path)
    assert proc.returncode != 0
    assert "Traceback" not in proc.stderr
    assert message in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr


GPU_PROGRAM = """
import ctypes, time
nv = ctypes.CDLL("libnvidia-ml.so.1")

def gpu_wait(seconds):
    nv.fake_nvml_busy(0, 1)
    time.sleep(seconds)             # BUSY
    nv.fake_nvml_busy(0, 0)

def long_user():
    gpu_wait(1.2)                   # LONG

def short_user():
    gpu_wait(0.6)                   # SHORT

time.sleep(0.3)
long_user()
short_user()
time.sleep(0.3)
"""


@pytest.fixture
def gpu_env(fake_nvml_dir):
    previous = os.environ.get("LD_LIBRARY_PATH")
    return {"LD_LIBRARY_PATH": str(fake_nvml_dir) + (os.pathsep + previous if previous else "")}


def test_gpu_time_is_split_by_caller(profile_program, gpu_env):
    p = profile_program(GPU_PROGRAM, env=gpu_env)
    assert p.profile["gpu"] is True, p.profile["notices"]
    check_invariants(p.profile)
    busy = p.lineno("BUSY")
    by_caller = {}
    for path, s in named_stacks(p.profile):
        if path and path[-1] == ("gpu_wait", busy):
            by_caller[path[-2][0]] = by_caller.get(path[-2][0], 0.0) + s["gpu_sec"]
    assert set(by_caller) == {"long_user", "short_user"}, by_caller
    # 1.2 s against 0.6 s busy: 2/3 (+-0.1; 200 ms windows spread over the lines that ran).
    assert by_caller["long_user"] / sum(by_caller.values()) == pytest.approx(2 / 3, abs=0.1), by_caller
