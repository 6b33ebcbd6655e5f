/* Where each thread was started from: the program's line whose call started
 * it, noted by the thread that called it at CPython's audit event for the
 * start ("_thread.start_new_thread", 3.13+ "_thread.start_joinable_thread":
 * threading's and _thread's alike, before the new thread's state is made;
 * module.c watches them), for the threads that then run no code of the
 * program, and when the start began, where the thread's first window begins
 * (snapshot.c).  Before, threading.Thread.start was replaced by a wrapper the
 * program could see (its identity, __wrapped__, its code's file).  A library's pool (joblib's
 * threading backend under scikit-learn's n_jobs, dask's threaded scheduler,
 * concurrent.futures) runs the program's work in threads whose stacks hold only
 * the library's frames: their CPU was charged to no line, and the line that
 * asked for the work showed only the main thread's wait (state.h: the rooms). */
#include "state.h"
#include "../common/clock.h"
#include "../profile/codes.h"
#include "../profile/stacks.h"

/* Threads noted in one run before the table starts again (entries are not
 * removed as threads end): a program that starts threads without end (one per
 * request) loses the origins noted before, its long-lived pools' among them,
 * once every ORIGINS_MAX threads. */
#define ORIGINS_MAX 4096

/* The place where the calling thread stands in the program: its nearest
 * reported frame, else where it was started from itself (a pool's thread that
 * starts threads), else none (ok 0). */
static location here(PyThreadState *ts)
{
    location loc = {SITE_NONE, 0, 0, 1, 0, STACKS_ROOT};
    pyframe innermost, f;
    if (!codes_locate(ts, &innermost, &f)) {
        return loc;
    }
    if (f == NULL) {
        const location *inherited = thread_origin(ts);
        return inherited != NULL ? *inherited : loc;
    }
    const code_info *info = codes_lookup(pyframe_code(f)); /* registered by codes_locate */
    if (info == NULL || info->site == SITE_NONE) {
        return loc;
    }
    loc.site = info->site;
    loc.lineno = codes_line_known(info, pyframe_code(f), pyframe_lasti(f));
    loc.stack = stacks_of(f, loc.lineno);
    loc.ok = 1;
    loc.native = 1; /* what the thread runs there is the library's: native unless read otherwise */
    return loc;
}

/* Where the calling thread stands, worked out as a snapshot works (snapshot_in):
 * the code objects it registers are pyrometer's memory, not the program's, and
 * no collection runs meanwhile (its finalizers could release the GIL). */
static location here_as_own_work(void)
{
    own_work_begin();
    int collecting = PyGC_Disable();
    location origin = here(PyThreadState_Get());
    if (collecting) {
        PyGC_Enable();
    }
    own_work_end();
    return origin;
}

/* What is noted of a started thread: where it was started from (at.ok 0:
 * from no line of the program) and when its start began. */
typedef struct {
    location at;
    uint64_t begun_ns;
} origin_note;

void sampler_thread_starting(void)
{
    if (!sampler.active || sampler.interp == NULL || PyInterpreterState_Get() != sampler.interp) {
        return;
    }
    uint64_t begun = clock_wall_ns();
    /* The state the start makes next gets this serial; nothing runs between
     * the event and its making (the GIL stays held). */
    table_key key = {pyframe_next_thread_serial(sampler.interp), 0};
    location origin = here_as_own_work();
    if (origin.site == SITE_NONE) {
        origin.ok = 0;
    }
    if (sampler.origins.slots == NULL && table_init(&sampler.origins, sizeof(origin_note), 64) != 0) {
        return; /* out of memory: the thread's CPU goes where it stands, its window from the snapshot before */
    }
    if (sampler.origins.count >= ORIGINS_MAX) {
        table_release(&sampler.origins);
        if (table_init(&sampler.origins, sizeof(origin_note), 64) != 0) {
            return;
        }
    }
    int created;
    origin_note *into = table_upsert(&sampler.origins, key, &created);
    if (into != NULL) {
        into->at = origin;
        into->begun_ns = begun;
    }
}

static const origin_note *note_of(PyThreadState *ts)
{
    if (sampler.origins.slots == NULL) {
        return NULL;
    }
    table_key key = {pyframe_thread_serial(ts), 0};
    return table_find(&sampler.origins, key);
}

const location *thread_origin(PyThreadState *ts)
{
    const origin_note *note = note_of(ts);
    return note != NULL && note->at.ok ? &note->at : NULL;
}

uint64_t thread_begun_ns(PyThreadState *ts)
{
    const origin_note *note = note_of(ts);
    uint64_t begun = note != NULL ? note->begun_ns : 0;
    if (note != NULL && !note->at.ok) {
        /* Started from no line of the program: its start's time was all the
         * note held.  Kept, every thread a server starts per request would
         * fill the table and, at ORIGINS_MAX, drop the pools' origins. */
        table_key key = {pyframe_thread_serial(ts), 0};
        table_remove(&sampler.origins, key);
    }
    return begun;
}

void release_origins(void)
{
    if (sampler.origins.slots != NULL) {
        table_release(&sampler.origins);
    }
}
