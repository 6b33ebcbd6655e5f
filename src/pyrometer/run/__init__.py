"""Running a program under the profiler: as `python` would run it
(launcher.py), its ends (endings.py), every Python child it starts
(children.py), the report rewritten while it runs (periodic.py), the live view
(top.py), and pausing or resuming it from outside (remote.py)."""
