/* CPython 3.11 - 3.13 frame layout.  See pyframe.h. */
#define Py_BUILD_CORE 1
#include "pyframe.h"

#if PY_VERSION_HEX < 0x030B0000
#error "pyrometer needs CPython 3.11 or newer"
#endif

#include <internal/pycore_frame.h>
#include <internal/pycore_interp.h>

static PyCodeObject *frame_code(const _PyInterpreterFrame *f)
{
#if PY_VERSION_HEX >= 0x030D0000
    return (PyCodeObject *)f->f_executable;
#else
    return f->f_code;
#endif
}

static int frame_is_complete(const _PyInterpreterFrame *f)
{
#if PY_VERSION_HEX >= 0x030D0000
    if (f->owner == FRAME_OWNED_BY_CSTACK || !PyCode_Check(f->f_executable)) {
        return 0;
    }
#elif PY_VERSION_HEX >= 0x030C0000
    if (f->owner == FRAME_OWNED_BY_CSTACK) {
        return 0;
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
#if PY_VERSION_HEX >= 0x030D0000
    return first_complete(ts->current_frame);
#else
    return ts->cframe == NULL ? NULL : first_complete(ts->cframe->current_frame);
#endif
}

pyframe pyframe_caller(pyframe f)
{
    return first_complete(((const _PyInterpreterFrame *)f)->previous);
}

PyCodeObject *pyframe_code(pyframe f)
{
    return frame_code(f);
}

int pyframe_lasti(pyframe f)
{
    const _PyInterpreterFrame *frame = f;
#if PY_VERSION_HEX >= 0x030D0000
    return (int)(frame->instr_ptr - _PyCode_CODE(frame_code(frame)));
#else
    return (int)(frame->prev_instr - _PyCode_CODE(frame_code(frame)));
#endif
}

uint64_t pyframe_thread_serial(PyThreadState *ts)
{
    return ts->id;
}

pid_t pyframe_thread_tid(PyThreadState *ts)
{
    return (pid_t)ts->native_thread_id;
}

void pyframe_wake_main_thread(PyInterpreterState *interp)
{
#if PY_VERSION_HEX < 0x030D0000
    /* The same store CPython makes when a thread asks for the GIL: harmless to
     * other threads, which recompute the flag and carry on. */
    _Py_atomic_store_relaxed(&interp->ceval.eval_breaker, 1);
#else
    (void)interp; /* 3.13+: Py_AddPendingCall signals the main thread itself. */
#endif
}

PyThreadState *pyframe_my_thread_state(void)
{
    return PyGILState_GetThisThreadState();
}

int pyframe_gil_is_mine(void)
{
    /* 3.11: the "current" thread state is the GIL holder's; 3.12+: it is this
     * thread's while attached, i.e. while it holds the GIL.  Either way a match
     * means this thread holds it. */
    PyThreadState *mine = PyGILState_GetThisThreadState();
    return mine != NULL && mine == _PyThreadState_UncheckedGet();
}
