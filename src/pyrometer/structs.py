"""@record: what @dataclasses.dataclass gives a plain class of settings (an
__init__ taking every annotated field by keyword or in order, each default taken
from the class body, equality, repr), for the modules every run imports.

dataclasses imports inspect (with ast, dis, tokenize): about 5 ms of every
pyrometer start, twice with memory profiling, where the command runs twice
(preload.py).  A mutable default (a list, a dict) is copied for each instance,
as default_factory would make a new one.
"""

from __future__ import annotations

_MUTABLE = (list, dict, set)


def record(cls):
    names = tuple(n for klass in reversed(cls.__mro__) for n in klass.__dict__.get("__annotations__", {}))
    defaults = {n: cls.__dict__[n] for n in names if n in cls.__dict__}
    required = [n for n in names if n not in defaults]
    if any(names.index(r) > names.index(d) for r in required for d in defaults):
        raise TypeError(f"{cls.__name__}: a field without a default follows one with a default")

    def __init__(self, *args, **kwargs):
        if len(args) > len(names):
            raise TypeError(f"{cls.__name__}() takes {len(names)} arguments, {len(args)} given")
        values = dict(zip(names, args))
        for name, value in kwargs.items():
            if name not in names:
                raise TypeError(f"{cls.__name__}() got an unexpected keyword argument {name!r}")
            if name in values:
                raise TypeError(f"{cls.__name__}() got multiple values for argument {name!r}")
            values[name] = value
        for name in names:
            if name in values:
                value = values[name]
            elif name in defaults:
                value = defaults[name]
                if isinstance(value, _MUTABLE):
                    value = type(value)(value)
            else:
                raise TypeError(f"{cls.__name__}() missing argument {name!r}")
            object.__setattr__(self, name, value)

    def __eq__(self, other):
        if other.__class__ is not self.__class__:
            return NotImplemented
        return all(getattr(self, n) == getattr(other, n) for n in names)

    def __repr__(self):
        return f"{cls.__name__}(" + ", ".join(f"{n}={getattr(self, n)!r}" for n in names) + ")"

    cls.__init__ = __init__
    cls.__eq__ = __eq__
    cls.__hash__ = None  # mutable, as a dataclass without frozen=True
    cls.__repr__ = __repr__
    cls.__record_fields__ = names
    return cls


def fields(cls) -> tuple[str, ...]:
    """The field names of a @record class, in order."""
    return cls.__record_fields__
