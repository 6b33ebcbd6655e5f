/* CPython 3.11 and 3.12: _PyInterpreterFrames reached through ts->cframe, the
 * instruction at prev_instr.  See pyframe.h. */
#define Py_BUILD_CORE 1
#include "pyframe.h"

#if PY_VERSION_HEX < 0x030B0000 || PY_VERSION_HEX >= 0x030D0000
#error "pyframe_311.c is the CPython 3.11/3.12 layout"
#endif

#include <internal/pycore_frame.h>
#include <internal/pycore_interp.h>
#include <internal/pycore_runtime.h>
#include "../common/safe_read.h"

#include <stddef.h>

/* The address of a member of the object at p, computed without reading p. */
/* An address computed as an integer: p may be garbage read from a changing frame,
 * and pointer arithmetic outside an object is not defined C. */
#define MEMBER(p, type, member) ((const void *)((uintptr_t)(p) + offsetof(type, member)))

#if PY_VERSION_HEX >= 0x030C0000
const char pyframe_layout[] = "3.12";
#else
const char pyframe_layout[] = "3.11";
#endif

/* Function entry and loop back-edges (see codes.c); 3.11 also has conditional
 * backward jumps (a `while` loop's test), which 3.12 dropped. */
const char *const pyframe_python_park_opcodes[] = {
    "RESUME", "JUMP_BACKWARD", "POP_JUMP_BACKWARD_IF_TRUE", "POP_JUMP_BACKWARD_IF_FALSE",
    "POP_JUMP_BACKWARD_IF_NONE", "POP_JUMP_BACKWARD_IF_NOT_NONE", NULL};

const pyframe_jump pyframe_back_jumps[] = {{"JUMP_BACKWARD", 1, 0}, {NULL, 0, 0}};

static int frame_is_complete(const _PyInterpreterFrame *f)
{
#if PY_VERSION_HEX >= 0x030C0000
    if (f->owner == FRAME_OWNED_BY_CSTACK) {
        return 0; /* 3.12's shim frames between C and the eval loop */
    }
#endif
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
    return ts->cframe == NULL ? NULL : first_complete(ts->cframe->current_frame);
}

pyframe pyframe_caller(pyframe f)
{
    return first_complete(((const _PyInterpreterFrame *)f)->previous);
}

PyCodeObject *pyframe_code(pyframe f)
{
    return ((const _PyInterpreterFrame *)f)->f_code;
}

int pyframe_lasti(pyframe f)
{
    const _PyInterpreterFrame *frame = f;
    return (int)(frame->prev_instr - _PyCode_CODE(frame->f_code));
}

PyObject *pyframe_globals(pyframe f)
{
    return ((const _PyInterpreterFrame *)f)->f_globals;
}

pyframe pyframe_suspended(PyObject *gen)
{
    /* Generators, coroutines and async generators share _PyGenObject_HEAD, whose
     * last member is the frame itself. */
    PyGenObject *g = (PyGenObject *)gen;
    return g->gi_frame_state == FRAME_SUSPENDED ? (pyframe)g->gi_iframe : NULL;
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
        if (safe_read(*f, copy, offsetof(_PyInterpreterFrame, localsplus)) != 0) {
            return PYFRAME_PEEK_FAILED;
        }
#if PY_VERSION_HEX >= 0x030C0000
        if (copy->owner == FRAME_OWNED_BY_CSTACK) {
            *f = copy->previous; /* a shim between C and the eval loop: its caller is in a call */
            continue;
        }
#endif
        uintptr_t first = (uintptr_t)MEMBER(copy->f_code, PyCodeObject, co_code_adaptive);
        if ((uintptr_t)copy->prev_instr < first) {
            return PYFRAME_PEEK_STARTING;
        }
        at->frame = (uintptr_t)*f;
        at->code = (uintptr_t)copy->f_code;
        at->lasti = (int)(((uintptr_t)copy->prev_instr - first) / sizeof(_Py_CODEUNIT));
        return PYFRAME_PEEK_OPCODE;
    }
    return *f == NULL ? PYFRAME_PEEK_NO_FRAME : PYFRAME_PEEK_FAILED;
}

/* Without the GIL: ts's innermost complete frame (peek_frame). */
static int peek_leaf(PyThreadState *ts, const _PyInterpreterFrame **f, _PyInterpreterFrame *copy,
                     pyframe_position *at)
{
    _PyCFrame *cframe;
    if (safe_read(MEMBER(ts, PyThreadState, cframe), &cframe, sizeof cframe) != 0) {
        return PYFRAME_PEEK_FAILED;
    }
    if (cframe == NULL) {
        return PYFRAME_PEEK_NO_FRAME;
    }
    if (safe_read(MEMBER(cframe, _PyCFrame, current_frame), f, sizeof *f) != 0) {
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
    if (safe_read(copy.prev_instr, &unit, sizeof unit) != 0) {
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
    (void)ts;
    return NULL; /* the tasks are in asyncio's registries (awaits.c) */
}

pid_t pyframe_thread_tid(PyThreadState *ts)
{
#if PY_VERSION_HEX < 0x030C0000
    /* 3.11 makes a new thread's state in the thread that starts it
     * (_PyThreadState_Prealloc), with that thread's ids; the new thread writes
     * its own when it first runs, just before it notes the state as its own,
     * which sets gilstate_counter (0 until then, at least 1 while the thread
     * lives).  Until then the id is the creator's, whose CPU is not this
     * thread's. */
    if (ts->gilstate_counter == 0) {
        return 0;
    }
#endif
    /* 3.12 leaves it 0 until the thread binds its state (bind_tstate). */
    return (pid_t)ts->native_thread_id;
}

void pyframe_wake_main_thread(PyInterpreterState *interp)
{
    /* The same store CPython makes when a thread asks for the GIL: harmless to
     * other threads, which recompute the flag and carry on. */
    _Py_atomic_store_relaxed(&interp->ceval.eval_breaker, 1);
}

uint64_t pyframe_next_thread_serial(PyInterpreterState *interp)
{
    return interp->threads.next_unique_id + 1; /* a new state takes the counter once raised */
}

PyThreadState *pyframe_gil_holder(PyInterpreterState *interp)
{
#if PY_VERSION_HEX >= 0x030C0000
    struct _gil_runtime_state *gil = interp->ceval.gil; /* the interpreter's, maybe shared */
#else
    (void)interp; /* one GIL for the runtime */
    struct _gil_runtime_state *gil = &_PyRuntime.ceval.gil;
#endif
    return _Py_atomic_load_relaxed(&gil->locked) ? (PyThreadState *)_Py_atomic_load_relaxed(&gil->last_holder)
                                                 : NULL;
}

void pyframe_gil_span(PyInterpreterState *interp, uintptr_t *start, size_t *size)
{
#if PY_VERSION_HEX >= 0x030C0000
    *start = (uintptr_t)interp->ceval.gil;
#else
    (void)interp;
    *start = (uintptr_t)&_PyRuntime.ceval.gil;
#endif
    *size = sizeof(struct _gil_runtime_state);
}
