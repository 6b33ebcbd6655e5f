/* CPython 3.13: _PyInterpreterFrames from ts->current_frame, the code in
 * f_executable (which may also hold other objects), the instruction at
 * instr_ptr.  See pyframe.h. */
#define Py_BUILD_CORE 1
#include "pyframe.h"

#if PY_VERSION_HEX < 0x030D0000 || (PY_VERSION_HEX >= 0x030E0000 && !defined(PYROMETER_UNTESTED_VERSION))
#error "pyframe_313.c is the CPython 3.13 layout (newer versions only with -Dforce_version=true)"
#endif

#include <internal/pycore_frame.h>
#include <internal/pycore_interp.h>
#include "../common/safe_read.h"

#include <stddef.h>

/* The address of a member of the object at p, computed without reading p. */
/* An address computed as an integer: p may be garbage read from a changing frame,
 * and pointer arithmetic outside an object is not defined C. */
#define MEMBER(p, type, member) ((const void *)((uintptr_t)(p) + offsetof(type, member)))

const char pyframe_layout[] = "3.13";

/* Function entry and loop back-edges (see codes.c). */
const char *const pyframe_python_park_opcodes[] = {"RESUME", "JUMP_BACKWARD", NULL};

/* JUMP_BACKWARD keeps one cache entry (the optimiser's counter). */
const pyframe_jump pyframe_back_jumps[] = {{"JUMP_BACKWARD", 1, 1}, {NULL, 0, 0}};

static int frame_is_complete(const _PyInterpreterFrame *f)
{
    if (f->owner == FRAME_OWNED_BY_CSTACK || !PyCode_Check(f->f_executable)) {
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
    return (PyCodeObject *)((const _PyInterpreterFrame *)f)->f_executable;
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
     * `yield from`/`await` (FRAME_SUSPENDED_YIELD_FROM) from one at a yield. */
    PyGenObject *g = (PyGenObject *)gen;
    return FRAME_STATE_SUSPENDED(g->gi_frame_state) ? (pyframe)g->gi_iframe : NULL;
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
        if (copy->owner == FRAME_OWNED_BY_CSTACK || copy->f_executable == NULL ||
            safe_read(MEMBER(copy->f_executable, PyObject, ob_type), &type, sizeof type) != 0 ||
            type != &PyCode_Type) {
            *f = copy->previous; /* a shim between C and the eval loop: its caller is in a call */
            continue;
        }
        uintptr_t first = (uintptr_t)MEMBER(copy->f_executable, PyCodeObject, co_code_adaptive);
        if ((uintptr_t)copy->instr_ptr < first) {
            return PYFRAME_PEEK_STARTING;
        }
        at->frame = (uintptr_t)*f;
        at->code = (uintptr_t)copy->f_executable;
        at->lasti = (int)(((uintptr_t)copy->instr_ptr - first) / sizeof(_Py_CODEUNIT));
        return PYFRAME_PEEK_OPCODE;
    }
    return *f == NULL ? PYFRAME_PEEK_NO_FRAME : PYFRAME_PEEK_FAILED;
}

int pyframe_peek(PyThreadState *ts, pyframe_peeked *out)
{
    const _PyInterpreterFrame *f;
    if (safe_read(MEMBER(ts, PyThreadState, current_frame), &f, sizeof f) != 0) {
        return PYFRAME_PEEK_FAILED;
    }
    _PyInterpreterFrame copy;
    pyframe_position leaf;
    int status = peek_frame(&f, &copy, &leaf);
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


pid_t pyframe_thread_tid(PyThreadState *ts)
{
    /* 0 until the thread binds its state, when it first runs (bind_tstate). */
    return (pid_t)ts->native_thread_id;
}

void pyframe_wake_main_thread(PyInterpreterState *interp)
{
    (void)interp; /* Py_AddPendingCall signals the main thread itself. */
}

PyThreadState *pyframe_gil_holder(PyInterpreterState *interp)
{
    struct _gil_runtime_state *gil = interp->ceval.gil; /* the interpreter's, maybe shared */
    return _Py_atomic_load_int_relaxed(&gil->locked) ? (PyThreadState *)_Py_atomic_load_ptr_relaxed(&gil->last_holder)
                                                     : NULL;
}
