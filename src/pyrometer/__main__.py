"""The pyrometer command's entry: `pyrometer` and `python -m pyrometer`.

Before anything else, the mark from which pyrometer's own objects are kept out
of the program's garbage collections (core/gc_aside.py)."""

from pyrometer.core import gc_aside

gc_aside.mark()


def main() -> int:
    from pyrometer.cli import main as command
    try:
        return command()
    finally:
        gc_aside.release()


if __name__ == "__main__":
    raise SystemExit(main())
