/* CPython 3.13 to 3.15: _PyInterpreterFrames from ts->current_frame, the code
 * in f_executable (which may also hold other objects), the instruction at
 * instr_ptr.  3.14 made f_executable a _PyStackRef (a pointer whose low bit
 * tags a deferred reference) and moved the frame to pycore_interpframe*.h; its
 * frames owned by the interpreter (3.14: FRAME_OWNED_BY_INTERPRETER and
 * FRAME_OWNED_BY_CSTACK, 3.15: the former only, also the base frame every
 * thread state embeds at the bottom of its stack) are shims a walk passes
 * over, as 3.13's FRAME_OWNED_BY_CSTACK.  See pyframe.h. */
#define Py_BUILD_CORE 1
#include "pyframe.h"

#if PY_VERSION_HEX < 0x030D0000 || (PY_VERSION_HEX >= 0x03100000 && !defined(PYROMETER_UNTESTED_VERSION))
#error "pyframe_313.c is the CPython 3.13-3.15 layout (newer versions only with -Dforce_version=true)"
#endif

#if PY_VERSION_HEX >= 0x030E0000
/* The internal headers' inline helpers leave parameters unused in a build
 * with the GIL. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-parameter"
#include <internal/pycore_frame.h>
#include <internal/pycore_interpframe.h>
#include <internal/pycore_interp.h>
#include <internal/pycore_tstate.h>
#pragma GCC diagnostic pop
/* The object f_executable refers to, its tag masked off. */
#define EXECUTABLE(f) PyStackRef_AsPyObjectBorrow((f)->f_executable)
/* Frames a walk passes over: shims between C and the eval loop, and the thread
 * state's base frame (_PyFrame_IsIncomplete's own first test). */
#define SHIM_OWNER(owner) ((owner) >= FRAME_OWNED_BY_INTERPRETER)
/* A generator's own frame, a member of it (3.13: an array of words). */
#define GEN_FRAME(g) ((pyframe)&(g)->gi_iframe)
#else
#include <internal/pycore_frame.h>
#include <internal/pycore_interp.h>
#define EXECUTABLE(f) ((f)->f_executable)
#define SHIM_OWNER(owner) ((owner) == FRAME_OWNED_BY_CSTACK)
#define GEN_FRAME(g) ((pyframe)(g)->gi_iframe)
#endif
#include "../common/safe_read.h"

#include <stddef.h>

/* The address of a member of the object at p, computed without reading p. */
/* An address computed as an integer: p may be garbage read from a changing frame,
 * and pointer arithmetic outside an object is not defined C. */
#define MEMBER(p, type, member) ((const void *)((uintptr_t)(p) + offsetof(type, member)))

#if PY_VERSION_HEX >= 0x030E0000
const char pyframe_layout[] = "3.14-3.15";
#else
const char pyframe_layout[] = "3.13";
#endif

/* Function entry and loop back-edges (see codes.c). */
const char *const pyframe_python_park_opcodes[] = {"RESUME", "JUMP_BACKWARD", NULL};

/* JUMP_BACKWARD keeps one cache entry (the optimiser's counter). */
const pyframe_jump pyframe_back_jumps[] = {{"JUMP_BACKWARD", 1, 1}, {NULL, 0, 0}};

static int frame_is_complete(const _PyInterpreterFrame *f)
{
    if (SHIM_OWNER(f->owner) || !PyCode_Check(EXECUTABLE(f))) {
        return 0;
    }
    /* _PyFrame_IsIncomplete casts away const; the check only reads. */
    return !_PyFrame_IsIncomplete((_PyInterpreterFrame *)f);
}

static pyframe first_complete(const _PyInterpreterFrame *f)
{
    while (f != NULL && !frame_is_complete(f)) {
        f = f->previous;
    }
    return f;
}

pyframe pyframe_innermost(PyThreadState *ts)
{
    return first_complete(ts->current_frame);
}

pyframe pyframe_caller(pyframe f)
{
    return first_complete(((const _PyInterpreterFrame *)f)->previous);
}

PyCodeObject *pyframe_code(pyframe f)
{
    return (PyCodeObject *)EXECUTABLE((const _PyInterpreterFrame *)f);
}

int pyframe_lasti(pyframe f)
{
    const _PyInterpreterFrame *frame = f;
    return (int)(frame->instr_ptr - _PyCode_CODE(pyframe_code(f)));
}

PyObject *pyframe_globals(pyframe f)
{
    return ((const _PyInterpreterFrame *)f)->f_globals;
}

pyframe pyframe_suspended(PyObject *gen)
{
    /* Generators, coroutines and async generators share _PyGenObject_HEAD, whose
     * last member is the frame itself; 3.13 tells a frame suspended inside a
     * `yield from`/`await` (FRAME_SUSPENDED_YIELD_FROM; 3.15 also
     * FRAME_SUSPENDED_YIELD_FROM_LOCKED) from one at a yield. */
    PyGenObject *g = (PyGenObject *)gen;
    return FRAME_STATE_SUSPENDED(g->gi_frame_state) ? GEN_FRAME(g) : NULL;
}

/* Without the GIL: the first complete frame from *f outward (shims passed over,
 * 8 frames at most), read into *copy, with *f set to it and *at to its
 * position; a peek status.  Every read goes through safe_read, and addresses
 * are kept as integers: what was read may be garbage (the frame was changing),
 * and neither a member access through it nor a comparison of pointers into
 * different objects is defined C. */
static int peek_frame(const _PyInterpreterFrame **f, _PyInterpreterFrame *copy, pyframe_position *at)
{
    for (int depth = 0; *f != NULL && depth < 8; depth++) {
        PyTypeObject *type;
        if (safe_read(*f, copy, offsetof(_PyInterpreterFrame, localsplus)) != 0) {
            return PYFRAME_PEEK_FAILED;
        }
        PyObject *executable = EXECUTABLE(copy);
        if (SHIM_OWNER(copy->owner) || executable == NULL ||
            safe_read(MEMBER(executable, PyObject, ob_type), &type, sizeof type) != 0 ||
            type != &PyCode_Type) {
            *f = copy->previous; /* a shim between C and the eval loop: its caller is in a call */
            continue;
        }
        uintptr_t first = (uintptr_t)MEMBER(executable, PyCodeObject, co_code_adaptive);
        if ((uintptr_t)copy->instr_ptr < first) {
            return PYFRAME_PEEK_STARTING;
        }
        at->frame = (uintptr_t)*f;
        at->code = (uintptr_t)executable;
        at->lasti = (int)(((uintptr_t)copy->instr_ptr - first) / sizeof(_Py_CODEUNIT));
        return PYFRAME_PEEK_OPCODE;
    }
    return *f == NULL ? PYFRAME_PEEK_NO_FRAME : PYFRAME_PEEK_FAILED;
}

/* Without the GIL: ts's innermost complete frame (peek_frame). */
static int peek_leaf(PyThreadState *ts, const _PyInterpreterFrame **f, _PyInterpreterFrame *copy,
                     pyframe_position *at)
{
    if (safe_read(MEMBER(ts, PyThreadState, current_frame), f, sizeof *f) != 0) {
        return PYFRAME_PEEK_FAILED;
    }
    return peek_frame(f, copy, at);
}

int pyframe_peek_leaf(PyThreadState *ts, pyframe_position *out)
{
    const _PyInterpreterFrame *f;
    _PyInterpreterFrame copy;
    return peek_leaf(ts, &f, &copy, out);
}

int pyframe_peek(PyThreadState *ts, pyframe_peeked *out)
{
    const _PyInterpreterFrame *f;
    _PyInterpreterFrame copy;
    pyframe_position leaf;
    int status = peek_leaf(ts, &f, &copy, &leaf);
    if (status != PYFRAME_PEEK_OPCODE) {
        return status;
    }
    _Py_CODEUNIT unit;
    if (safe_read(copy.instr_ptr, &unit, sizeof unit) != 0) {
        return PYFRAME_PEEK_FAILED;
    }
    out->frame = leaf.frame;
    out->code = leaf.code;
    out->lasti = leaf.lasti;
    out->opcode = _Py_OPCODE(unit);
    out->oparg = _Py_OPARG(unit);
    /* Its callers, each at its call (one that has not started is a torn read:
     * the list ends there, the leaf is good without it). */
    int n = 0;
    for (f = copy.previous; n < PYFRAME_PEEK_CALLERS && peek_frame(&f, &copy, &out->callers[n]) == PYFRAME_PEEK_OPCODE;
         n++) {
        f = copy.previous;
    }
    for (; n < PYFRAME_PEEK_CALLERS; n++) {
        out->callers[n] = (pyframe_position){0, 0, -1};
    }
    return PYFRAME_PEEK_OPCODE;
}

PyObject *pyframe_code_bytes(PyCodeObject *code)
{
    return PyCode_GetCode(code);
}

PyObject *pyframe_code_qualname(PyCodeObject *code)
{
    return code->co_qualname;
}


PyObject *pyframe_running_loop(PyThreadState *ts)
{
#if PY_VERSION_HEX >= 0x030E0000
    return ((_PyThreadStateImpl *)ts)->asyncio_running_loop;
#else
    (void)ts;
    return NULL; /* asyncio.tasks._scheduled_tasks holds every task (awaits.c) */
#endif
}

pid_t pyframe_thread_tid(PyThreadState *ts)
{
    /* 0 until the thread binds its state, when it first runs (bind_tstate). */
    return (pid_t)ts->native_thread_id;
}

void pyframe_wake_main_thread(PyInterpreterState *interp)
{
    (void)interp; /* Py_AddPendingCall signals the main thread itself. */
}

uint64_t pyframe_next_thread_serial(PyInterpreterState *interp)
{
    return interp->threads.next_unique_id + 1; /* a new state takes the counter once raised */
}

PyThreadState *pyframe_gil_holder(PyInterpreterState *interp)
{
    struct _gil_runtime_state *gil = interp->ceval.gil; /* the interpreter's, maybe shared */
    return _Py_atomic_load_int_relaxed(&gil->locked) ? (PyThreadState *)_Py_atomic_load_ptr_relaxed(&gil->last_holder)
                                                     : NULL;
}

void pyframe_gil_span(PyInterpreterState *interp, uintptr_t *start, size_t *size)
{
    *start = (uintptr_t)interp->ceval.gil;
    *size = sizeof(struct _gil_runtime_state);
}
