"""The profile as JSON (schema: docs/profile-schema.md), and atomic file output."""

from __future__ import annotations

import json
import os
import tempfile


def render(profile: dict) -> str:
    return json.dumps(profile, indent=1, allow_nan=False) + "\n"


def write_atomically(path: str, content: str) -> None:
    """Write to a private temporary file beside path, then rename over it: a reader
    sees the old file or the new one, never half of one."""
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".pyrometer-", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(content)
        os.chmod(tmp, 0o644 & ~_umask())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
