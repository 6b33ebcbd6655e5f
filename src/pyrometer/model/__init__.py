"""The profile model: the one document every report and export reads.

- build.py: the C core's records turned into the profile (and Focus, what
  @profile narrows it to);
- rules.py: the rules every report follows (the kinds of time, time share,
  significant, hot, which columns show), decided once;
- processes.py: each row of the process table;
- schema.py: the profile's fields, and a saved profile read and checked
  against them (pyrometer view);
- stacks.py: the call stacks; verdict.py: what bounds the run; since.py: what a
  run did between two snapshots (the live view); diff.py: two profiles compared;
  units.py: what figures are counted in.

Field names follow Scalene's JSON where Scalene reports the same quantity;
docs/profile-schema.md lists every field with its unit.  Renderers never
recompute these numbers.  What follows is the model's face to the rest of the
package."""

from .build import build
from .rules import (CHURN_SHOWN_MB, FEW_SAMPLES, HOT_FACTOR, SHOWN_FROM, TIME_KINDS, gpu_columns, mark, reduced,
                    sampling, shown_error, shows_awaits, shows_churn, shows_waits, significant, thresholds,
                    time_share, wait_share)
from .schema import SCHEMA_VERSION, ProfileError, check, load, loads
from .since import since

__all__ = ["build", "FEW_SAMPLES", "HOT_FACTOR", "TIME_KINDS", "mark", "reduced", "sampling", "significant",
           "thresholds", "time_share", "wait_share", "shows_waits", "shows_awaits", "shows_churn", "shown_error",
           "SHOWN_FROM", "CHURN_SHOWN_MB",
           "SCHEMA_VERSION", "ProfileError", "check", "load", "loads", "since"]
