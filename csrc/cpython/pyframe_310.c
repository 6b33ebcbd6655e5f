/* CPython 3.10: frames are PyFrameObjects linked by f_back from ts->frame.  See
 * pyframe.h. */
#define Py_BUILD_CORE 1
#include "pyframe.h"

#if PY_VERSION_HEX < 0x030A0000 || PY_VERSION_HEX >= 0x030B0000
#error "pyframe_310.c is the CPython 3.10 layout"
#endif

#include <frameobject.h>
#include <internal/pycore_interp.h>
#include <internal/pycore_runtime.h>
#include <pthread.h>
#include <time.h>
#include "../common/safe_read.h"

#include <stddef.h>

/* The address of a member of the object at p, computed without reading p. */
/* An address computed as an integer: p may be garbage read from a changing frame,
 * and pointer arithmetic outside an object is not defined C. */
#define MEMBER(p, type, member) ((const void *)((uintptr_t)(p) + offsetof(type, member)))

const char pyframe_layout[] = "3.10";

/* The jumps that check the eval breaker: JUMP_ABSOLUTE (a `for` loop's
 * back-edge) and the conditional jumps (a `while` loop's test).  The eval
 * breaker is also checked after CALL_FUNCTION & co., but a thread parked there
 * cannot be told from one still inside the call (both leave f_lasti at the call),
 * so those count as native; a frame that has not started (f_lasti -1) counts as
 * Python (codes.c). */
const char *const pyframe_python_park_opcodes[] = {"JUMP_ABSOLUTE", "POP_JUMP_IF_TRUE", "POP_JUMP_IF_FALSE",
                                                   NULL};

/* An absolute target: backward when it is not after the jump. */
const pyframe_jump pyframe_back_jumps[] = {{"JUMP_ABSOLUTE", 0, 0}, {NULL, 0, 0}};

pyframe pyframe_innermost(PyThreadState *ts)
{
    return ts->frame;
}

pyframe pyframe_caller(pyframe f)
{
    return ((const PyFrameObject *)f)->f_back;
}

PyCodeObject *pyframe_code(pyframe f)
{
    return ((const PyFrameObject *)f)->f_code;
}

int pyframe_lasti(pyframe f)
{
    return ((const PyFrameObject *)f)->f_lasti; /* 3.10 counts code units */
}

PyObject *pyframe_globals(pyframe f)
{
    return ((const PyFrameObject *)f)->f_globals;
}

pyframe pyframe_suspended(PyObject *gen)
{
    /* Generators, coroutines and async generators share _PyGenObject_HEAD. */
    PyFrameObject *f = ((PyGenObject *)gen)->gi_frame;
    return f != NULL && f->f_state == FRAME_SUSPENDED ? f : NULL;
}

/* The peek's callers, from frame f outward (without the GIL: every read
 * through safe_read, every address only compared). */
static void peek_callers(PyFrameObject *f, pyframe_peeked *out)
{
    int n = 0;
    for (; f != NULL && n < PYFRAME_PEEK_CALLERS; n++) {
        PyFrameObject copy;
        if (safe_read(f, &copy, offsetof(PyFrameObject, f_localsplus)) != 0 || copy.f_lasti < 0) {
            break; /* unreadable, or torn (a caller has always started) */
        }
        out->callers[n].frame = (uintptr_t)f;
        out->callers[n].code = (uintptr_t)copy.f_code;
        out->callers[n].lasti = copy.f_lasti;
        f = copy.f_back;
    }
    for (; n < PYFRAME_PEEK_CALLERS; n++) {
        out->callers[n] = (pyframe_position){0, 0, -1};
    }
}

/* Without the GIL: ts's innermost frame (*f), read into *leaf. */
static int peek_leaf(PyThreadState *ts, PyFrameObject **f, PyFrameObject *leaf)
{
    if (safe_read(MEMBER(ts, PyThreadState, frame), f, sizeof *f) != 0) {
        return PYFRAME_PEEK_FAILED;
    }
    if (*f == NULL) {
        return PYFRAME_PEEK_NO_FRAME;
    }
    if (safe_read(*f, leaf, offsetof(PyFrameObject, f_localsplus)) != 0) {
        return PYFRAME_PEEK_FAILED;
    }
    return leaf->f_lasti < 0 ? PYFRAME_PEEK_STARTING : PYFRAME_PEEK_OPCODE;
}

int pyframe_peek_leaf(PyThreadState *ts, pyframe_position *out)
{
    PyFrameObject *f;
    PyFrameObject leaf;
    int status = peek_leaf(ts, &f, &leaf);
    if (status == PYFRAME_PEEK_OPCODE) {
        *out = (pyframe_position){(uintptr_t)f, (uintptr_t)leaf.f_code, leaf.f_lasti};
    }
    return status;
}

int pyframe_peek(PyThreadState *ts, pyframe_peeked *out)
{
    PyFrameObject *f;
    PyFrameObject leaf;
    PyObject *bytes;
    int status = peek_leaf(ts, &f, &leaf);
    if (status != PYFRAME_PEEK_OPCODE) {
        return status;
    }
    int lasti = leaf.f_lasti;
    PyCodeObject *code = leaf.f_code;
    Py_ssize_t size;
    if (safe_read(MEMBER(code, PyCodeObject, co_code), &bytes, sizeof bytes) != 0 ||
        safe_read(MEMBER(bytes, PyVarObject, ob_size), &size, sizeof size) != 0 ||
        (Py_ssize_t)(2 * (size_t)lasti) >= size) {
        return PYFRAME_PEEK_FAILED;
    }
    _Py_CODEUNIT unit;
    uintptr_t units = (uintptr_t)MEMBER(bytes, PyBytesObject, ob_sval);
    if (safe_read((const void *)(units + 2 * (uintptr_t)lasti), &unit, sizeof unit) != 0) {
        return PYFRAME_PEEK_FAILED;
    }
    out->frame = (uintptr_t)f;
    out->code = (uintptr_t)code;
    out->lasti = lasti;
    out->opcode = _Py_OPCODE(unit);
    out->oparg = _Py_OPARG(unit);
    peek_callers(leaf.f_back, out);
    return PYFRAME_PEEK_OPCODE;
}

PyObject *pyframe_code_bytes(PyCodeObject *code)
{
    Py_INCREF(code->co_code); /* 3.10 specialises nothing: co_code is the bytecode */
    return code->co_code;
}

PyObject *pyframe_code_qualname(PyCodeObject *code)
{
    return code->co_name; /* 3.10 code objects carry no qualified name */
}


PyObject *pyframe_running_loop(PyThreadState *ts)
{
    (void)ts;
    return NULL; /* the tasks are in asyncio's registries (awaits.c) */
}

pid_t pyframe_thread_tid(PyThreadState *ts)
{
    /* 3.10 records no kernel thread id, only a pthread_t, and not always the
     * right one: a new thread's state is made by its parent (with the parent's
     * pthread_t) before the thread starts, and a state left behind by C code
     * (PyGILState_Ensure without Release) keeps the pthread_t of a thread that
     * has ended, which is undefined behaviour to use.  A state with a frame
     * belongs to a thread that is running Python right now (frames exist only
     * while their code runs), so its pthread_t is its own and alive: only those
     * get a tid (GIL held).  The CPU clock id of a pthread encodes the kernel tid
     * (~tid << 3 | flags, the kernel's ABI, see clock.c).  The others' CPU is the
     * program's untracked native time. */
    if (ts->frame == NULL) {
        return 0;
    }
    clockid_t cid;
    if (pthread_getcpuclockid((pthread_t)ts->thread_id, &cid) != 0) {
        return 0;
    }
    return (pid_t)(~(unsigned int)cid >> 3);
}

void pyframe_wake_main_thread(PyInterpreterState *interp)
{
    /* The same store CPython makes when a thread asks for the GIL: harmless to
     * other threads, which recompute the flag and carry on. */
    _Py_atomic_store_relaxed(&interp->ceval.eval_breaker, 1);
}

uint64_t pyframe_next_thread_serial(PyInterpreterState *interp)
{
    return interp->tstate_next_unique_id + 1; /* a new state takes the counter once raised */
}

PyThreadState *pyframe_gil_holder(PyInterpreterState *interp)
{
    (void)interp; /* one GIL for the runtime */
    struct _gil_runtime_state *gil = &_PyRuntime.ceval.gil;
    return _Py_atomic_load_relaxed(&gil->locked) ? (PyThreadState *)_Py_atomic_load_relaxed(&gil->last_holder)
                                                 : NULL;
}

void pyframe_gil_span(PyInterpreterState *interp, uintptr_t *start, size_t *size)
{
    (void)interp;
    *start = (uintptr_t)&_PyRuntime.ceval.gil;
    *size = sizeof _PyRuntime.ceval.gil;
}
