/* What every layout reads the same way (3.10 to 3.15).  See pyframe.h. */
#include "pyframe.h"

uint64_t pyframe_thread_serial(PyThreadState *ts)
{
    return ts->id;
}

PyThreadState *pyframe_my_thread_state(void)
{
    return PyGILState_GetThisThreadState();
}

int pyframe_gil_is_mine(void)
{
    /* 3.10, 3.11: the "current" thread state is the GIL holder's; 3.12+: it is
     * this thread's while attached, i.e. while it holds the GIL.  Either way a
     * match means this thread holds it. */
    PyThreadState *mine = PyGILState_GetThisThreadState();
#if PY_VERSION_HEX >= 0x030D0000
    return mine != NULL && mine == PyThreadState_GetUnchecked();
#else
    return mine != NULL && mine == _PyThreadState_UncheckedGet();
#endif
}

int pyframe_is_current(PyThreadState *ts)
{
#if PY_VERSION_HEX >= 0x030D0000
    return ts != NULL && ts == PyThreadState_GetUnchecked();
#else
    return ts != NULL && ts == _PyThreadState_UncheckedGet();
#endif
}

int pyframe_gil_held_by(PyInterpreterState *interp, PyThreadState *ts)
{
    return ts != NULL && pyframe_gil_holder(interp) == ts;
}

int pyframe_on_stack(PyThreadState *ts, pyframe frame, PyCodeObject *code)
{
    int depth = 0;
    for (pyframe f = pyframe_innermost(ts); f != NULL && depth < 1024; f = pyframe_caller(f), depth++) {
        if (f == frame) {
            return pyframe_code(f) == code;
        }
    }
    return 0;
}
