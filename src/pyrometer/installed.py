"""Where pyrometer is installed, said once: the package's folder (its own
files, never reported; where the memory library ships) and the folder that
holds it (what a child process, the report writer and an attached program put
on sys.path to import the same pyrometer)."""

import os

PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))
PACKAGE_PARENT = os.path.dirname(PACKAGE_DIR)
