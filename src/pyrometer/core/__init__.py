"""The measuring core (the C extension `pyrometer._core`) as Python starts and
controls it: a run's session (session.py), the raw profile as it travels
(document.py), @profile (focus.py), start/stop from the program
(control.py) and the memory library in the process (preload.py).  Above the
core, nothing here builds a profile or renders one."""
