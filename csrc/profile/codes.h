/* codes: what the profiler knows about each code object it has met.
 *
 * A code object is looked up on every sample, so the per-code facts are computed
 * once, at first sight: whether its file is reported (filter.h), and for each
 * instruction whether a thread parked there was running Python or native code.
 * Every registered code object is kept alive (one reference) until codes_release(),
 * so that samples keyed by code address stay valid for the report.
 * Callers hold the GIL.
 */
#ifndef PYROMETER_CODES_H
#define PYROMETER_CODES_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

typedef struct {
    int reported;
    int n_units;                  /* length of the bytecode in code units */
    const uint8_t *python_parked; /* per unit: 1 at an eval-breaker point that is not a call */
} code_info;

/* Reads the opcode numbers the classification needs; -1 with an exception set. */
int codes_init(void);
/* NULL when memory runs out (the sample is then dropped, never raised).  The
 * first lookup of a code registers it, which calls CPython (it allocates). */
const code_info *codes_lookup(PyCodeObject *code);
/* The facts of a code object registered already, else NULL; never registers,
 * never calls CPython (usable inside an allocator, GIL held). */
const code_info *codes_find(PyCodeObject *code);
/* Whether the live opcode (specialised or not) calls something: a running thread
 * whose innermost frame executes it is in a call into native code.  Callable
 * without the GIL once codes_init has run. */
int codes_opcode_calls(int opcode);
/* Whether a thread stopped at this instruction was executing Python bytecode. */
int codes_python_at(const code_info *info, int lasti);
/* The nearest frame of a reported file on a thread's stack, from the innermost
 * outward: *reported is NULL when there is none, *innermost the thread's current
 * frame (NULL: no Python frame).  Returns 0 when memory runs out. */
#include "../cpython/pyframe.h"
int codes_locate(PyThreadState *ts, pyframe *innermost, pyframe *reported);
size_t codes_count(void);
size_t codes_memory_bytes(void);
void codes_release(void);

#endif
