/* codes: what the profiler knows about each code object it has met.
 *
 * A code object is looked up on every sample, so the per-code facts are computed
 * once, at first sight: whether its file is reported (filter.h), its site (the
 * function the profile keys its lines by, sites.h), and for each instruction
 * whether a thread parked there was running Python or native code.  No code
 * object is kept alive: its death is told (a code watcher from 3.12, before
 * that a weak reference whose callback runs, set aside from the collector's
 * counts: gc_aside_hide), and its facts forgotten before its memory can be
 * reused, so that the
 * table follows the live code objects and a program that keeps making code (exec
 * loops, template engines, factories) does not grow through the profiler.
 * Callers hold the GIL.
 */
#ifndef PYROMETER_CODES_H
#define PYROMETER_CODES_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

#include "../cpython/pyframe.h"
#include "sites.h"

typedef struct {
    int reported;
    uint32_t site;                /* reported codes: their function (sites.h); else SITE_NONE */
    int n_units;                  /* length of the bytecode in code units */
    uint8_t *python_parked;       /* per unit: 1 at an eval-breaker point that is not a call */
    /* A loop's back edges: (jump, target) pairs of code units, in the same block
     * as python_parked (codes_line). */
    int n_back_edges;
    int32_t *back_edges;
    PyObject *watch;              /* the weak reference that tells the code's death */
    /* The line of the instruction asked last (codes_line_known): a frame that
     * calls stays at one instruction, so the outer frames of a call stack,
     * read at every snapshot, find their line here instead of in the line
     * table (PyCode_Addr2Line: ~800 instructions a frame under callgrind). */
    int memo_unit;                /* that instruction + 2; 0: none yet */
    int memo_line;
    /* A reported code's line of each instruction asked before, + 1 (0: not
     * asked yet; NULL for codes of files not reported, whose lines are never
     * asked): a memory sample's innermost frames move from one allocating
     * instruction to another, past the memo, and each sample read the line
     * table for them (about 2,900 instructions a sample under callgrind, with
     * Python's blocks sampled every 64 KiB). */
    int32_t *lines;
    /* Instructions of a reported code whose line was read from the line table
     * so far (codes_line_known fills the rest at once at a few); -1: not to be
     * filled (the fill's check failed). */
    int lines_read;
    /* A code of cloudpickle's "<dynamic-code>" registered without its file
     * (codes_lookup_in): found again with a frame's dictionary, it gets it. */
    int dynamic;
} code_info;

/* Reads the opcode numbers the classification needs; -1 with an exception set. */
int codes_init(void);
/* NULL when memory runs out (the sample is then dropped, never raised).  The
 * first lookup of a code registers it, which calls CPython (it allocates, and a
 * garbage collection there may forget other codes: a code_info pointer is good
 * only until the next call into CPython). */
const code_info *codes_lookup(PyCodeObject *code);
/* The same for a code running in frame (NULL: not known): a function
 * cloudpickle sent by value has the file "<dynamic-code>", and its frame's
 * module dictionary the original's `__file__`, which is then the code's file,
 * for the filter and the site (codes.c); the dictionary is read only then. */
const code_info *codes_lookup_in(PyCodeObject *code, pyframe frame);
/* The facts of a code object registered already, else NULL; never registers,
 * never calls CPython (usable inside an allocator, GIL held). */
const code_info *codes_find(PyCodeObject *code);
/* codes_find, or for a code not registered yet (say, of a frame that has
 * returned since it was seen without the GIL, so that it may be gone), proof
 * that it is alive, then registered: a function in frame's module dictionary
 * (frame: one still running) or in the program's (codes_follow_program) that
 * runs it, or a method of a class there, or a function of a module imported
 * there; or a constant of the code of frame or of one of its first callers, or
 * of a code nested in one (a lambda, a closure written there).  NULL when not
 * found (then not looked for again soon).  Calls CPython only to register. */
const code_info *codes_find_through(PyCodeObject *code, pyframe frame);
/* The program's module dictionary (__main__'s), searched by codes_find_through
 * besides the frame's: a reference is held until the next call (NULL: none). */
void codes_follow_program(PyObject *globals);
/* Whether the live opcode (specialised or not) calls something: a running thread
 * whose innermost frame executes it is in a call into native code.  Callable
 * without the GIL once codes_init has run. */
int codes_opcode_calls(int opcode);
/* Whether the live opcode (with its argument) is an operator in its generic,
 * unspecialised form on an interpreter that specialises it for its own types
 * (3.11+; never on 3.10): its operands' type slots do the work, natively as a
 * rule (codes.c).  Callable without the GIL once codes_init has run. */
int codes_opcode_generic_operator(int opcode, int oparg);
/* Whether codes_opcode_generic_operator tells native operators from bytecode
 * at all: 3.11+; on 3.10, whose operators are all generic, it does not. */
int codes_operators_told_apart(void);
/* Whether a thread stopped at this instruction was executing Python bytecode. */
int codes_python_at(const code_info *info, int lasti);
/* The nearest frame of a reported file on a thread's stack, from the innermost
 * outward: *reported is NULL when there is none, *innermost the thread's current
 * frame (NULL: no Python frame).  Returns 0 when memory runs out. */
int codes_locate(PyThreadState *ts, pyframe *innermost, pyframe *reported);
/* The same from frame f outward. */
int codes_reported_from(pyframe f, pyframe *reported);
/* The line of instruction lasti in code (alive: on a frame); never negative:
 * an instruction without a line gets the nearest earlier one's, and a loop's
 * jump back its loop head's (codes.c, line_of). */
int codes_line(PyCodeObject *code, int lasti);
/* The same for a registered code (info: codes_find's or codes_lookup's for it),
 * remembering the last answer; never calls into CPython but to read the line
 * table, so usable inside an allocator with the GIL. */
int codes_line_known(const code_info *info, PyCodeObject *code, int lasti);
/* Code objects known now (alive), and registered since the last run began. */
/* For tests: the line of each instruction of code, as a first ask reads it
 * (line_of) and as the one-pass fill has it (codes_line_known), as two lists. */
PyObject *codes_lines_both_ways(PyCodeObject *code);
size_t codes_count(void);
uint64_t codes_registered(void);
/* What the table, the instruction maps and the weak references hold. */
size_t codes_memory_bytes(void);
/* A run begins (the profile's aggregates were all released): the facts known
 * stay (they depend only on the code and on the filter's rules, whose change
 * calls codes_forget), so that a series of runs in one process (the pytest
 * plugin's, one per test) does not work them out again at each; the count of
 * registrations starts afresh.  The sites of so many functions that a few more
 * runs could reach SITES_MAX go, and the facts with them. */
void codes_new_run(void);
/* Forgets every code's facts, which were worked out under other rules; the
 * sites stay (they name functions, whatever is reported, and the profile's
 * aggregates may still hold their ids).  -1 with an exception set when memory
 * runs out. */
int codes_forget(void);
/* Forgets every code and site: only when no aggregate holds a site id. */
void codes_release(void);

#endif
