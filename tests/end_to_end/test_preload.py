"""The memory library installed under a path LD_PRELOAD cannot carry (the
dynamic loader splits it at spaces and colons): attached from there (dlopen
takes any path) in the program and in its children; or, where it is preloaded
instead (PYROMETER_MEMORY_BY_PRELOAD), preloaded through a private link that
lives as long as the command."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from conftest import program_env

# Runs pyrometer from the directory given first (sys.argv[1]), as an installation
# there would; the re-executed process runs the same command line again.
FROM_INSTALL = "import sys; sys.path.insert(0, sys.argv.pop(1)); from pyrometer.cli import main; sys.exit(main())"

PROGRAM = """
import json, os, subprocess, sys
child = subprocess.run([sys.executable, "-c", "print(open('/proc/self/maps').read())"],
                       capture_output=True, text=True)
keep = [bytearray(1 << 20) for _ in range(40)]
with open(sys.argv[1], "w") as f:
    json.dump({"LD_PRELOAD": os.environ.get("LD_PRELOAD", ""),
               "points_to": os.path.realpath(os.environ.get("LD_PRELOAD", "").split(":")[0]),
               "environment": sorted(k for k in os.environ if k.startswith("PYROMETER_")),
               "child_has_library": "libpyrometer_memhooks.so" in child.stdout,
               "child_stderr": child.stderr}, f)
"""


@pytest.mark.parametrize("how", ["attached", "preloaded"])
@pytest.mark.parametrize("where", ["with space", "with:colon", "both: here"])
def test_library_under_a_path_with_a_space_or_a_colon(tmp_path, where, how, groundtruth_dir):
    import pyrometer  # noqa: PLC0415
    install = tmp_path / where
    shutil.copytree(os.path.dirname(pyrometer.__file__), install / "pyrometer")
    (tmp_path / "prog.py").write_text(PROGRAM)
    seen, out = tmp_path / "seen.json", tmp_path / "profile.json"
    # A temporary directory LD_PRELOAD could not carry either: the link goes elsewhere.
    tmpdir = tmp_path / "temp dir"
    tmpdir.mkdir()
    proc = subprocess.run([sys.executable, "-c", FROM_INSTALL, str(install), "--quiet", "--json", "--outfile", out,
                           "prog.py", seen], cwd=tmp_path, capture_output=True, text=True, timeout=60,
                          env=program_env(groundtruth_dir, {"TMPDIR": str(tmpdir), **(
                              {"PYROMETER_MEMORY_BY_PRELOAD": "1"} if how == "preloaded" else {})}),
                          stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == "", "the dynamic loader complained: " + proc.stderr
    profile = json.loads(out.read_text())
    assert profile["memory"] and profile["max_footprint_mb"] > 30, profile.get("max_footprint_mb")
    record = json.loads(seen.read_text())
    assert record["child_has_library"] and record["child_stderr"] == "", record
    assert os.listdir(tmpdir) == []
    # What the test's own environment carries (tests/pythons.py sets some
    # PYROMETER_* variables for the suite, this test one) is the program's;
    # pyrometer adds none.
    theirs = {k for k in os.environ if k.startswith("PYROMETER_")} | {"PYROMETER_MEMORY_BY_PRELOAD"}
    assert [k for k in record["environment"] if k not in theirs] == [], "the program sees pyrometer's own variables"
    if how == "attached":
        assert record["LD_PRELOAD"] == os.environ.get("LD_PRELOAD", ""), record
        return
    link = record["LD_PRELOAD"].split(":")[0]
    assert os.path.basename(link) == "libpyrometer_memhooks.so" and " " not in link, record
    assert record["points_to"] == str(install / "pyrometer" / "libpyrometer_memhooks.so"), record
    assert not os.path.exists(os.path.dirname(link)), "the private link outlived the command"
