"""private_files: the run's private files and directories (what tempfile and
shutil did), made under fresh names with modes only this user can use, and
removed without following links."""

import os
import stat

import pytest

from pyrometer import private_files


def test_a_file_is_new_private_and_open(tmp_path):
    fd, path = private_files.make_file(str(tmp_path), ".pyrometer-", ".tmp")
    try:
        assert os.path.dirname(path) == str(tmp_path)
        name = os.path.basename(path)
        assert name.startswith(".pyrometer-") and name.endswith(".tmp")
        assert stat.S_IMODE(os.fstat(fd).st_mode) == 0o600
        os.write(fd, b"x")
        assert open(path, "rb").read() == b"x"
    finally:
        os.close(fd)
    fd2, path2 = private_files.make_file(str(tmp_path), ".pyrometer-", ".tmp")
    os.close(fd2)
    assert path2 != path


def test_a_directory_is_new_and_private(tmp_path):
    paths = {private_files.make_directory(str(tmp_path), "pyrometer-run-") for _ in range(20)}
    assert len(paths) == 20
    for p in paths:
        assert os.path.isabs(p) and os.path.basename(p).startswith("pyrometer-run-")
        assert stat.S_IMODE(os.lstat(p).st_mode) == 0o700


def test_an_existing_name_is_never_taken(tmp_path, monkeypatch):
    # The first names drawn exist already (someone else's): they are skipped.
    draws = iter([b"\0" * 6, b"\0" * 6, b"\1" * 6])
    monkeypatch.setattr(private_files.os, "urandom", lambda n: next(draws))
    taken = tmp_path / ("pyrometer-run-" + (b"\0" * 6).hex())
    taken.mkdir()
    (taken / "theirs").write_text("keep")
    path = private_files.make_directory(str(tmp_path), "pyrometer-run-")
    assert path == str(tmp_path / ("pyrometer-run-" + (b"\1" * 6).hex()))
    assert (taken / "theirs").read_text() == "keep"


def test_no_name_left_is_an_error(tmp_path, monkeypatch):
    monkeypatch.setattr(private_files.os, "urandom", lambda n: b"\0" * n)
    (tmp_path / (".pyrometer-" + (b"\0" * 6).hex())).write_text("")
    with pytest.raises(FileExistsError):
        private_files.make_file(str(tmp_path), ".pyrometer-")


def test_a_tree_is_removed_without_following_links(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "precious").write_text("keep")
    tree = tmp_path / "tree"
    (tree / "a" / "b").mkdir(parents=True)
    (tree / "a" / "b" / "file").write_text("x")
    (tree / "top").write_text("y")
    os.symlink(outside, tree / "a" / "link-to-dir")
    os.symlink(outside / "precious", tree / "link-to-file")
    private_files.remove_tree(str(tree))
    assert not tree.exists()
    assert (outside / "precious").read_text() == "keep"


def test_a_link_is_not_a_tree_to_remove(tmp_path):
    target = tmp_path / "target"
    target.mkdir()
    (target / "precious").write_text("keep")
    os.symlink(target, tmp_path / "link")
    private_files.remove_tree(str(tmp_path / "link"))
    assert (target / "precious").read_text() == "keep"


def test_removing_what_is_gone_is_quiet(tmp_path):
    private_files.remove_tree(str(tmp_path / "never-made"))
