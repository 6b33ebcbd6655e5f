"""pyrometer inside other programs: a region of a running process
(inprocess.py), IPython and Jupyter (jupyter.py, kernel.py, cells.py), pytest
(pytest_plugin.py), and a running program attached to (attach.py,
attached.py)."""
