/* pyframe: the one place that knows how a CPython version lays out thread states,
 * frames and code objects.  Every subsystem (the CPU sampler, the memory side)
 * reads frames through this door.
 *
 * Frames are read without creating frame objects: PyThreadState_GetFrame() would
 * allocate a PyFrameObject per frame, which perturbs memory profiles and costs
 * more than the sample.  One file per frame layout implements this header, and
 * the build picks the file for the interpreter it compiles against:
 *   pyframe_310.c  3.10        PyFrameObject chain from ts->frame, f_lasti
 *   pyframe_311.c  3.11, 3.12  _PyInterpreterFrame via ts->cframe, prev_instr
 *   pyframe_313.c  3.13        _PyInterpreterFrame at ts->current_frame, f_executable
 * and pyframe_common.c has what they all read the same way.
 * A version without a file is refused by the build (module_unsupported.c), never
 * guessed.  Callers hold the GIL unless a function says otherwise.
 */
#ifndef PYROMETER_PYFRAME_H
#define PYROMETER_PYFRAME_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <sys/types.h>

typedef const void *pyframe; /* an interpreter frame; NULL ends a walk */

/* The layout this build reads, e.g. "3.11-3.12", for the profile's header. */
extern const char pyframe_layout[];

pyframe pyframe_innermost(PyThreadState *ts); /* the thread's current complete frame */
pyframe pyframe_caller(pyframe f);            /* next complete frame outward */
PyCodeObject *pyframe_code(pyframe f);
int pyframe_lasti(pyframe f);                 /* index in code units of the instruction; -1: not started */
PyObject *pyframe_globals(pyframe f);         /* its module's dictionary (borrowed) */
/* The frame of a generator, coroutine or async generator (anything PyGen_Check,
 * PyCoro_CheckExact or PyAsyncGen_CheckExact accepts) while it is suspended at a
 * yield or an await; NULL when it has not started, is running or has finished.
 * Its instruction is the one it is suspended at.  A suspended frame is linked to
 * no caller: pyframe_caller gives nothing meaningful for it. */
pyframe pyframe_suspended(PyObject *gen);
/* Whether frame f, running code, is on thread ts's stack now (then code is
 * alive: the frame holds it).  GIL held.  For a frame noted earlier, e.g. by an
 * allocation or a GPU launch taken without the GIL, whose code may be gone. */
int pyframe_on_stack(PyThreadState *ts, pyframe f, PyCodeObject *code);

/* Where a running thread stands, read from another thread without the GIL
 * (through safe_read, see common/safe_read.h): its innermost frame, that frame's
 * code and instruction, and the opcode there as the live bytecode holds it
 * (specialised forms included), and its first callers.  A sample, not a fact:
 * the thread keeps running, so the values may be a few instructions stale; a
 * read that fails or looks torn says so.  frame and code are addresses, never to be followed: the owner
 * compares them with a frame it reads later with the GIL (pyframe_innermost),
 * and trusts lasti only for that same frame running that same code. */
enum {
    PYFRAME_PEEK_FAILED = -1,   /* unreadable, or a torn copy */
    PYFRAME_PEEK_NO_FRAME = 0,  /* no Python frame: outside Python altogether */
    PYFRAME_PEEK_STARTING = 1,  /* a frame that has not reached its first instruction */
    PYFRAME_PEEK_OPCODE = 2,    /* every field is set */
};
#define PYFRAME_PEEK_CALLERS 2
typedef struct {
    uintptr_t frame; /* 0: none */
    uintptr_t code;
    int lasti;
} pyframe_position;
typedef struct {
    uintptr_t frame; /* the innermost complete frame, as pyframe_innermost gives it */
    uintptr_t code;  /* its code object */
    int lasti;       /* the instruction, in code units, as pyframe_lasti counts */
    int opcode;
    int oparg; /* its argument's low byte (EXTENDED_ARG not followed) */
    /* The complete frames it was called from, innermost first, as pyframe_caller
     * walks them, each at its call: the owner tells from them a frame that has
     * returned since (a native operation in a small function ends, and the
     * thread answers in its caller).  A frame of 0 ends the list: the stack's
     * root, or a read that failed (the leaf is good without them). */
    pyframe_position callers[PYFRAME_PEEK_CALLERS];
} pyframe_peeked;
int pyframe_peek(PyThreadState *ts, pyframe_peeked *out);
/* Only the innermost frame's position, as pyframe_peek gives it (its status;
 * out set only for PYFRAME_PEEK_OPCODE): for reading again, cheaply, whether
 * the thread has moved. */
int pyframe_peek_leaf(PyThreadState *ts, pyframe_position *out);

/* Code objects.  The bytecode without adaptive specialisation (a new reference
 * to bytes of 2-byte code units), so that opcode numbers from the `opcode`
 * module apply; NULL with an exception set on failure. */
PyObject *pyframe_code_bytes(PyCodeObject *code);
PyObject *pyframe_code_qualname(PyCodeObject *code); /* borrowed */

/* Opcodes (names, NULL-terminated) at which the eval loop checks its eval
 * breaker while running Python and may hand over the GIL there: a thread parked
 * at one of them was running bytecode, not inside a call into C. */
extern const char *const pyframe_python_park_opcodes[];

/* The unconditional jumps that may go backward, a loop's back edge (names,
 * NULL-terminated), and how their argument (EXTENDED_ARG included) gives the
 * target in code units: relative, target = next instruction + caches -
 * argument; else absolute.  Not the conditional ones (3.11's
 * POP_JUMP_BACKWARD_IF_*): those are their test's line's (an `if` whose false
 * branch goes back to the loop's head).  Not JUMP_BACKWARD_NO_INTERRUPT: the
 * loop of an await or a yield from, not of the source. */
typedef struct {
    const char *name;
    int relative;
    int caches;
} pyframe_jump;
extern const pyframe_jump pyframe_back_jumps[];

/* After Py_AddPendingCall from a thread other than the main one, make the main
 * thread notice the request at its next bytecode boundary.  CPython 3.10-3.12
 * recompute the "eval breaker" in the calling thread, where pending calls do not
 * count, so the request would otherwise wait for an unrelated event (a GIL
 * switch, a signal).  Any thread may call this; it only stores an atomic flag. */
void pyframe_wake_main_thread(PyInterpreterState *interp);

/* The thread that holds the GIL at this moment, or NULL when it is free: the
 * GIL's own lock flag and last holder, which CPython stores atomically and keeps
 * for the interpreter's life, read without the GIL by any thread.  A moment's
 * answer (the holder may have let go since), and a state that may be freed
 * meanwhile: only compared, or read through safe_read (pyframe_peek). */
PyThreadState *pyframe_gil_holder(PyInterpreterState *interp);
/* The serial (pyframe_thread_serial) the next thread state made in interp
 * will get (GIL held). */
uint64_t pyframe_next_thread_serial(PyInterpreterState *interp);
/* Whether thread ts holds the GIL at this moment (pyframe_gil_holder), for a
 * thread deciding whether to wait for the GIL at all. */
int pyframe_gil_held_by(PyInterpreterState *interp, PyThreadState *ts);
/* Where the GIL's own state lies (its flag, lock and condition variables: a
 * thread waiting to take the GIL, or one handing it over, sleeps on an address
 * in [start, start + size)).  Fixed for the interpreter's life. */
void pyframe_gil_span(PyInterpreterState *interp, uintptr_t *start, size_t *size);

/* Whether the calling thread holds the GIL (callable without it: reads only the
 * thread's own state and the GIL holder, never allocates). */
int pyframe_gil_is_mine(void);
/* The calling thread's state whether or not it holds the GIL; NULL for a thread
 * that never ran Python. */
PyThreadState *pyframe_my_thread_state(void);

/* The asyncio event loop running in thread ts (borrowed), where the thread
 * state keeps it (3.14+, whose native tasks are in per-thread lists that only
 * asyncio.all_tasks(loop) reads); NULL when none runs, and before 3.14.  GIL
 * held. */
PyObject *pyframe_running_loop(PyThreadState *ts);

uint64_t pyframe_thread_serial(PyThreadState *ts); /* unique for the life of the interpreter */
/* Whether ts is the calling thread's current state (its own, while attached). */
int pyframe_is_current(PyThreadState *ts);
/* Kernel thread id; 0 when unknown, as for a thread that has not started
 * running yet (its state is made by the thread that starts it). */
pid_t pyframe_thread_tid(PyThreadState *ts);

#endif
