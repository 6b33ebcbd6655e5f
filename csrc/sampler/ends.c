/* Where a thread's last CPU goes: each thread the sampler meets carries a
 * capsule in its state's dictionary (the one PyThreadState_GetDict gives C
 * code) whose destructor runs when the thread clears its own state as it ends
 * (PyThreadState_Clear, GIL held, in the ending thread, on every version).  It
 * reads the thread's CPU clock there, its last reading, and the next snapshot
 * charges what the thread used since the one before where it was last seen
 * running (charge_ended_thread).
 *
 * Without it, that CPU was the untracked CPU of threads without Python state
 * (snapshot.c, charge_untracked), charged to the main thread's line: with a
 * thread per request or task, living a few windows each, 40-55% of a
 * pure-Python thread's CPU went to the main thread's `join()` as native time
 * (thread per task, 30 ms each, 3.10), and Django's runserver, a thread per
 * request, had most of its requests' CPU on manage.py's line.
 *
 * The capsule is no object the collector tracks, and the dictionary holding
 * only it and a string key stays untracked: gc.get_objects() is as bare.
 * Only C code that lists its thread's dictionary can see the entry. */
#include "state.h"
#include "../common/clock.h"

#include <stdlib.h>

#define END_CAPSULE "pyrometer.thread_end"

typedef struct {
    PyThreadState *ts; /* the state it was put in: only its own thread's clear counts */
    uint64_t serial;
} end_note;

static PyObject *end_key; /* the entry's key, made once (GIL held) */

static void thread_end_seen(PyObject *capsule)
{
    end_note *note = PyCapsule_GetPointer(capsule, END_CAPSULE);
    if (note == NULL) {
        PyErr_Clear();
        return;
    }
    /* Cleared by its own thread as it ends, not by another (a forked child
     * clearing its parent's other threads, the interpreter's finalization). */
    if (sampler.active && sampler.threads.slots != NULL && pyframe_is_current(note->ts)) {
        table_key key = {note->serial, 0};
        thread_track *t = table_find(&sampler.threads, key);
        if (t != NULL && t->seen_in != 0 && t->ended_cpu_ns == 0) {
            uint64_t cpu = clock_self_cpu_ns();
            t->ended_cpu_ns = cpu != CLOCK_UNAVAILABLE && cpu > 0 ? cpu : 0;
            t->ended_wall_ns = clock_wall_ns();
            t->ended_runq_ns = t->schedstat > 0 ? read_runq_fd(t->schedstat - 1) : CLOCK_UNAVAILABLE;
            sampler.ended_threads += t->ended_cpu_ns != 0;
        }
    }
    free(note);
}

/* The capsule put in ts's dictionary; without collections (on 3.10 and 3.11
 * an allocation may collect right there, run finalizers that release the
 * GIL, and let ts end and be freed meanwhile), as pyrometer's own work. */
static void watch(PyThreadState *ts)
{
    if (end_key == NULL && (end_key = PyUnicode_InternFromString(END_CAPSULE)) == NULL) {
        PyErr_Clear();
        return;
    }
    PyObject *dict = ts->dict;
    if (dict != NULL && PyDict_GetItemWithError(dict, end_key) != NULL) {
        return; /* watched already */
    }
    PyErr_Clear();
    end_note *note = malloc(sizeof *note);
    if (note == NULL) {
        return;
    }
    note->ts = ts;
    note->serial = pyframe_thread_serial(ts);
    PyObject *capsule = PyCapsule_New(note, END_CAPSULE, thread_end_seen);
    if (capsule == NULL) {
        free(note);
        PyErr_Clear();
        return;
    }
    if (dict == NULL) {
        dict = PyDict_New(); /* as PyThreadState_GetDict makes it, for the thread itself */
        ts->dict = dict;
    }
    if (dict == NULL || PyDict_SetItem(dict, end_key, capsule) != 0) {
        PyErr_Clear();
    }
    Py_DECREF(capsule);
}

void thread_end_watch(PyThreadState *ts)
{
    if (ts == NULL || ts == sampler.main_ts || ts == sampler.sampler_ts) {
        return;
    }
    own_work_begin();
    int collecting = PyGC_Disable();
    watch(ts);
    if (collecting) {
        PyGC_Enable();
    }
    own_work_end();
}
