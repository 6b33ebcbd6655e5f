/* Where each thread was started from: the program's line whose call started
 * it (threading.Thread.start, noted by the thread that called it), for the
 * threads that then run no code of the program.  A library's pool (joblib's
 * threading backend under scikit-learn's n_jobs, dask's threaded scheduler,
 * concurrent.futures) runs the program's work in threads whose stacks hold only
 * the library's frames: their CPU was charged to no line, and the line that
 * asked for the work showed only the main thread's wait (state.h: the rooms). */
#include "state.h"
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

static PyThreadState *thread_of(unsigned long ident)
{
    for (PyThreadState *ts = PyInterpreterState_ThreadHead(sampler.interp); ts != NULL; ts = PyThreadState_Next(ts)) {
        if (ts->thread_id == ident) {
            return ts;
        }
    }
    return NULL;
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

void sampler_note_thread_starting(uint64_t begun_ns)
{
    if (sampler.starts_pending++ == 0 || begun_ns < sampler.starts_begun_ns) {
        sampler.starts_begun_ns = begun_ns;
    }
}

uint64_t thread_starts_begun_ns(void)
{
    return sampler.starts_pending > 0 ? sampler.starts_begun_ns : 0;
}

int sampler_note_thread_origin(unsigned long ident, uint64_t begun_ns)
{
    if (sampler.starts_pending > 0) {
        sampler.starts_pending--;
    }
    if (ident == 0 || !sampler.active || sampler.interp == NULL) {
        return 0;
    }
    PyThreadState *started = thread_of(ident);
    if (started == NULL || started == sampler.main_ts) {
        return 0; /* ended already, or never had a state */
    }
    /* Read before anything calls CPython: the thread may end meanwhile. */
    table_key key = {pyframe_thread_serial(started), 0};
    thread_end_watch(started);
    location origin = here_as_own_work();
    if (origin.site == SITE_NONE) {
        origin.ok = 0;
    }
    if (sampler.origins.slots == NULL && table_init(&sampler.origins, sizeof(origin_note), 64) != 0) {
        return -1;
    }
    if (sampler.origins.count >= ORIGINS_MAX) {
        table_release(&sampler.origins);
        if (table_init(&sampler.origins, sizeof(origin_note), 64) != 0) {
            return -1;
        }
    }
    int created;
    origin_note *into = table_upsert(&sampler.origins, key, &created);
    if (into == NULL) {
        return -1;
    }
    into->at = origin;
    into->begun_ns = begun_ns;
    return 0;
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
    return note != NULL ? note->begun_ns : 0;
}

void release_origins(void)
{
    if (sampler.origins.slots != NULL) {
        table_release(&sampler.origins);
    }
}
