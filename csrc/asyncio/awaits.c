#include "awaits.h"
#include "../cpython/pyframe.h"
#include "../profile/codes.h"

/* Tasks examined in one snapshot.  Each costs a few attribute reads and a walk
 * down its await chain, 0.3-0.5 us measured, nearly all of it cache misses on
 * objects the program has not touched lately; a server with 100,000 pending
 * tasks would otherwise spend most of its time in the profiler.  Beyond this, a
 * slice of the task list, starting where the previous snapshot's ended, stands
 * for all of them: every task is in a snapshot's slice equally often, so each
 * line's await time stays right on average.  256 keeps a snapshot under about
 * 100 us, 1% of the default interval. */
#define AWAITS_TASKS_MAX 256

/* 3.14+: tasks listed per snapshot, on average (awaits_charge).  Listing a
 * task costs some 8 ns, examining one 0.3-0.5 us: 2,048 listed cost about a
 * sixth of the 256 examined, and up to 2,048 tasks every snapshot lists them
 * all, as before. */
#define AWAITS_LISTED_MAX 2048

/* Lines of await points met in one snapshot: many tasks wait at the same few
 * awaits, and turning an instruction into a line walks the code's line table. */
#define AWAITS_LINE_MEMO 16

/* Coroutines followed down one await chain; chains are a few deep, and a cycle
 * (which CPython refuses to build anyway) must not hang a snapshot. */
#define AWAITS_CHAIN_MAX 64

static struct {
    int names_ready;
    PyObject *tasks_module, *base_events_module, *events_module; /* module names */
    PyObject *scheduled_tasks, *all_tasks, *data, *fut_waiter, *coro, *loop, *thread_id, *cr_await,
        *gi_yieldfrom; /* attribute names */
    /* The code of BaseEventLoop._run_once (the loop's own step: select, then run
     * what is ready) and of Handle._run (a callback or task step run by it), held
     * so that a frame's code can be compared by address. */
    PyCodeObject *run_once, *handle_run;
    int in_use; /* asyncio imported: set by awaits_begin for this snapshot */
    /* Where the next slice of the registry's table starts (up to 3.13); the
     * state of the generator of 3.14+'s slices' starts (slice_of_list). */
    uint64_t rotation;
#if PY_VERSION_HEX >= 0x030E0000
    /* 3.14+: the list of tasks is made whole (running_loops_tasks), so it is
     * made only every `stride` snapshots (the tasks last counted over
     * AWAITS_LISTED_MAX, rounded up), and its slice charged the windows since
     * (`pending_ns`, `skipped` snapshots). */
    uint64_t pending_ns;
    size_t stride, skipped;
#endif
} awaits_state;

#define A awaits_state

static int intern_names(void)
{
    struct {
        PyObject **into;
        const char *text;
    } names[] = {
        {&A.tasks_module, "asyncio.tasks"}, {&A.base_events_module, "asyncio.base_events"},
        {&A.events_module, "asyncio.events"}, {&A.scheduled_tasks, "_scheduled_tasks"},
        {&A.all_tasks, "_all_tasks"}, {&A.data, "data"}, {&A.fut_waiter, "_fut_waiter"},
        {&A.coro, "_coro"}, {&A.loop, "_loop"}, {&A.thread_id, "_thread_id"},
        {&A.cr_await, "cr_await"}, {&A.gi_yieldfrom, "gi_yieldfrom"},
    };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        if (*names[i].into == NULL && (*names[i].into = PyUnicode_InternFromString(names[i].text)) == NULL) {
            return -1;
        }
    }
    A.names_ready = 1;
    return 0;
}

/* sys.modules[name], a new reference, or NULL (no exception) when it is not
 * there: a dictionary lookup, which runs no Python code.  Not
 * PyImport_GetModule: for a module still being imported that goes through
 * importlib's Python code to wait on the module's lock, which a snapshot must
 * not run.  Taken on the main thread at a bytecode boundary inside importlib's
 * own _ModuleLock.acquire (while `import asyncio` ran asyncio.tasks), the
 * nested acquire removed the outer one's entry from _blocking_on, and the
 * program's import failed with a KeyError (3.10, 3.11; 3.12 made that
 * reentrant); on another thread the snapshot would wait for the import. */
static PyObject *loaded_module(PyObject *name)
{
    PyObject *modules = PySys_GetObject("modules"); /* borrowed; NULL without an exception */
    PyObject *module = modules != NULL && PyDict_Check(modules) ? PyDict_GetItemWithError(modules, name) : NULL;
    if (module == NULL || module == Py_None) {
        PyErr_Clear();
        return NULL;
    }
    Py_INCREF(module);
    return module;
}

/* module.cls.method.__code__, a new reference; NULL (no exception) when any of
 * them is missing. */
static PyCodeObject *method_code(PyObject *module_name, const char *cls, const char *method)
{
    PyObject *module = loaded_module(module_name);
    PyObject *type = module != NULL ? PyObject_GetAttrString(module, cls) : NULL;
    PyObject *function = type != NULL ? PyObject_GetAttrString(type, method) : NULL;
    PyObject *code = function != NULL ? PyObject_GetAttrString(function, "__code__") : NULL;
    Py_XDECREF(function);
    Py_XDECREF(type);
    Py_XDECREF(module);
    PyErr_Clear();
    if (code != NULL && !PyCode_Check(code)) {
        Py_CLEAR(code);
    }
    return (PyCodeObject *)code;
}

int awaits_begin(void)
{
    A.in_use = 0;
    if (!A.names_ready && intern_names() != 0) {
        PyErr_Clear();
        return 0;
    }
    /* The gate: without asyncio.tasks in sys.modules no task can exist. */
    PyObject *tasks = loaded_module(A.tasks_module);
    if (tasks == NULL) {
        return 0;
    }
    Py_DECREF(tasks);
    if (A.run_once == NULL || A.handle_run == NULL) {
        Py_CLEAR(A.run_once);
        Py_CLEAR(A.handle_run);
        A.run_once = method_code(A.base_events_module, "BaseEventLoop", "_run_once");
        A.handle_run = method_code(A.events_module, "Handle", "_run");
    }
    A.in_use = 1;
    return 1;
}

int awaits_loop_waiting_at(const uintptr_t *codes, int n)
{
    if (!A.in_use || A.run_once == NULL || A.handle_run == NULL) {
        return 0;
    }
    for (int i = 0; i < n && codes[i] != 0; i++) {
        if (codes[i] == (uintptr_t)A.handle_run) {
            return 0;
        }
        if (codes[i] == (uintptr_t)A.run_once) {
            return 1;
        }
    }
    return 0;
}

int awaits_loop_waiting(PyThreadState *ts)
{
    if (!A.in_use || A.run_once == NULL || A.handle_run == NULL) {
        return 0;
    }
    /* Inside a step the loop runs, Handle._run is met before _run_once. */
    for (pyframe f = pyframe_innermost(ts); f != NULL; f = pyframe_caller(f)) {
        PyCodeObject *code = pyframe_code(f);
        if (code == A.handle_run) {
            return 0;
        }
        if (code == A.run_once) {
            return 1;
        }
    }
    return 0;
}

#if PY_VERSION_HEX >= 0x030E0000
/* 3.14+: asyncio.all_tasks(loop) (C, the _asyncio module's: it walks every
 * thread's list of native tasks and the registry of the others, into a new
 * set) for each loop running in a thread, as a list of tasks; NULL when none
 * runs.  Its cost grows with the tasks alive (pyperformance's async_tree, tens
 * of thousands of them, read 1.19x under the full profile on 3.15 when it was
 * made at every snapshot): awaits_charge makes it once a stride of snapshots,
 * so that some AWAITS_LISTED_MAX tasks are listed per snapshot on average. */
static PyObject *running_loops_tasks(PyObject *tasks_module)
{
    /* The loops first, held, with no call in between: a call may run Python
     * code (all_tasks asks the tasks that are not native for their loop), the
     * GIL may change hands, and a thread that ends frees its state. */
    PyObject *loops[16];
    int n_loops = 0;
    PyInterpreterState *interp = PyInterpreterState_Get();
    for (PyThreadState *ts = PyInterpreterState_ThreadHead(interp);
         ts != NULL && n_loops < (int)(sizeof loops / sizeof loops[0]); ts = PyThreadState_Next(ts)) {
        PyObject *loop = pyframe_running_loop(ts);
        int known = 0;
        for (int i = 0; i < n_loops; i++) {
            known |= loops[i] == loop;
        }
        if (loop != NULL && !known) {
            Py_INCREF(loop);
            loops[n_loops++] = loop;
        }
    }
    PyObject *all_tasks = n_loops > 0 ? PyObject_GetAttrString(tasks_module, "all_tasks") : NULL;
    PyObject *list = all_tasks != NULL ? PyList_New(0) : NULL;
    for (int i = 0; list != NULL && i < n_loops; i++) {
        PyObject *tasks = PyObject_CallOneArg(all_tasks, loops[i]);
        PyObject *iterator = tasks != NULL ? PyObject_GetIter(tasks) : NULL;
        PyObject *task;
        while (iterator != NULL && (task = PyIter_Next(iterator)) != NULL) {
            int rc = PyList_Append(list, task);
            Py_DECREF(task);
            if (rc != 0) {
                break;
            }
        }
        Py_XDECREF(iterator);
        Py_XDECREF(tasks);
        PyErr_Clear();
    }
    for (int i = 0; i < n_loops; i++) {
        Py_DECREF(loops[i]);
    }
    Py_XDECREF(all_tasks);
    PyErr_Clear();
    if (list != NULL && PyList_GET_SIZE(list) == 0) {
        Py_CLEAR(list);
    }
    return list;
}
#endif

/* The tasks one snapshot examines: at most AWAITS_TASKS_MAX of them (weak
 * references to them before 3.14, the tasks from 3.14 on; strong references
 * held here, as charging calls CPython, whose collections remove dead tasks
 * from the registry), and how many there are in all. */
typedef struct {
    PyObject *refs[AWAITS_TASKS_MAX];
    Py_ssize_t taken, total;
} task_slice;

#if PY_VERSION_HEX >= 0x030E0000
/* 3.14+: a slice of the list of every running loop's tasks: every
 * (n / taken)-th one from a random place (`rotation` is the generator's
 * state, splitmix64), so that each task is in it with the chance taken / n,
 * and the slice is spread over the whole list.  The list is in the order the
 * tasks were made, and made once a stride, a run may not go round it once:
 * runs of tasks taken one after another from its start had 9,000 tasks made
 * in two groups read 62-65% for the first, which was 60%; from a random
 * start, 53.5-64.4%; spread, as here, 58.6-60.9%. */
static void slice_of_list(PyObject *list, task_slice *s)
{
    Py_ssize_t n = PyList_GET_SIZE(list);
    uint64_t z = (A.rotation += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    z ^= z >> 31;
    Py_ssize_t start = n > AWAITS_TASKS_MAX ? (Py_ssize_t)(z % (uint64_t)n) : 0;
    s->total = n;
    s->taken = n < AWAITS_TASKS_MAX ? n : AWAITS_TASKS_MAX;
    for (Py_ssize_t i = 0; i < s->taken; i++) {
        s->refs[i] = Py_NewRef(PyList_GET_ITEM(list, (start + i * n / s->taken) % n));
    }
}
#endif

#if PY_VERSION_HEX < 0x030E0000
/* Up to 3.13: the slice of the registry's set of weak references, read from
 * the set's table from the slot where the last slice ended, never copied
 * whole.  A copy of every reference at each snapshot cost in proportion to
 * the tasks alive: with pyperformance's async_tree (tens of thousands of
 * tasks) it was most of --cpu-only's 10% there.  A slot holds a reference, a
 * deleted entry's marker (not a weak reference) or nothing; every slot is
 * visited in turn, so every task is in a slice equally often. */
static void slice_of_set(PyObject *set, task_slice *s)
{
    s->taken = 0;
#if PY_VERSION_HEX >= 0x030D0000
    Py_BEGIN_CRITICAL_SECTION(set);
#endif
    PySetObject *so = (PySetObject *)set;
    size_t slots = (size_t)so->mask + 1;
    size_t at = A.rotation % slots, seen = 0;
    s->total = PySet_GET_SIZE(set);
    for (; seen < slots && s->taken < AWAITS_TASKS_MAX; seen++) {
        PyObject *key = so->table[(at + seen) & (size_t)so->mask].key;
        if (key != NULL && PyWeakref_Check(key)) {
            s->refs[s->taken++] = Py_NewRef(key);
        }
    }
    A.rotation = at + seen;
#if PY_VERSION_HEX >= 0x030D0000
    Py_END_CRITICAL_SECTION();
#endif
}
#endif

/* The tasks of this snapshot (none, taken 0, when there is no registry). */
static void task_slice_take(task_slice *s)
{
    s->taken = s->total = 0;
    PyObject *module = loaded_module(A.tasks_module);
    if (module == NULL) {
        return;
    }
#if PY_VERSION_HEX >= 0x030E0000
    PyObject *list = running_loops_tasks(module);
    Py_DECREF(module);
    if (list != NULL) {
        slice_of_list(list, s);
        Py_DECREF(list);
    }
#else
    /* 3.12 keeps non-eager tasks in _scheduled_tasks (an eager task that
     * suspends moves there); 3.10 and 3.11 keep all of them in _all_tasks. */
    PyObject *registry = PyObject_GetAttr(module, A.scheduled_tasks);
    if (registry == NULL) {
        PyErr_Clear();
        registry = PyObject_GetAttr(module, A.all_tasks);
    }
    Py_DECREF(module);
    PyObject *set = registry != NULL ? PyObject_GetAttr(registry, A.data) : NULL; /* WeakSet's refs */
    Py_XDECREF(registry);
    if (set != NULL && PyAnySet_Check(set)) {
        slice_of_set(set, s);
    }
    Py_XDECREF(set);
#endif
}

static void task_slice_release(task_slice *s)
{
    for (Py_ssize_t i = 0; i < s->taken; i++) {
        Py_DECREF(s->refs[i]);
    }
    s->taken = 0;
}

/* The object a weak reference points to (new reference), or NULL; a task
 * itself (3.14+'s list) as it is. */
static PyObject *referent(PyObject *ref)
{
    if (!PyWeakref_Check(ref)) {
        Py_INCREF(ref); /* 3.14+: the task itself (running_loops_tasks) */
        return ref;
    }
#if PY_VERSION_HEX >= 0x030D0000
    PyObject *obj = NULL;
    if (PyWeakref_GetRef(ref, &obj) < 0) {
        PyErr_Clear();
        return NULL;
    }
    return obj;
#else
    PyObject *obj = PyWeakref_GetObject(ref);
    if (obj == NULL || obj == Py_None) {
        PyErr_Clear();
        return NULL;
    }
    Py_INCREF(obj);
    return obj;
#endif
}

/* Whether a task's loop is running.  BaseEventLoop sets _thread_id while it
 * runs; a task of a loop that has stopped waits for nothing.  A loop of another
 * implementation, without that field, is taken as running. */
static int loop_running(PyObject *loop)
{
    PyObject *thread_id = PyObject_GetAttr(loop, A.thread_id);
    if (thread_id == NULL) {
        PyErr_Clear();
        return 1;
    }
    int running = thread_id != Py_None;
    Py_DECREF(thread_id);
    return running;
}

/* Await points whose line is known, for one snapshot only (a code object may
 * die, and its address be reused, before the next). */
typedef struct {
    int n, next;
    struct {
        PyCodeObject *code;
        int lasti, lineno;
    } known[AWAITS_LINE_MEMO];
} line_memo;

static int memo_line(line_memo *memo, PyCodeObject *code, int lasti)
{
    for (int i = 0; i < memo->n; i++) {
        if (memo->known[i].code == code && memo->known[i].lasti == lasti) {
            return memo->known[i].lineno;
        }
    }
    int lineno = codes_line(code, lasti);
    int slot = memo->n < AWAITS_LINE_MEMO ? memo->n++ : (memo->next++ % AWAITS_LINE_MEMO);
    memo->known[slot].code = code;
    memo->known[slot].lasti = lasti;
    memo->known[slot].lineno = lineno;
    return lineno;
}

/* The innermost reported line on a suspended coroutine's await chain; 0 when no
 * frame of the chain is reported. */
static int await_line(PyObject *coro, line_memo *lines, uint32_t *site, int *lineno)
{
    int found = 0;
    Py_INCREF(coro);
    PyObject *obj = coro;
    for (int depth = 0; obj != NULL && depth < AWAITS_CHAIN_MAX; depth++) {
        PyObject *next_name;
        if (PyCoro_CheckExact(obj)) {
            next_name = A.cr_await;
        } else if (PyGen_Check(obj)) {
            next_name = A.gi_yieldfrom; /* a generator-based coroutine (types.coroutine) */
        } else {
            break; /* a future, or an awaitable without frames of its own */
        }
        pyframe f = pyframe_suspended(obj);
        if (f == NULL) {
            break;
        }
        /* Read before codes_lookup, which may call CPython (and a collection may
         * run finalizers); the code is kept alive for the line. */
        PyCodeObject *code = pyframe_code(f);
        int lasti = pyframe_lasti(f);
        Py_INCREF(code);
        const code_info *info = codes_lookup(code);
        if (info != NULL && info->reported) {
            *site = info->site;
            *lineno = memo_line(lines, code, lasti);
            found = 1;
        }
        Py_DECREF(code);
        PyObject *next = PyObject_GetAttr(obj, next_name);
        Py_DECREF(obj);
        obj = next;
        if (obj == NULL) {
            PyErr_Clear();
        }
    }
    Py_XDECREF(obj);
    return found;
}

/* The loop of the previous task and whether it runs: the tasks of one loop
 * usually come together, and its state is read once for them. */
typedef struct {
    PyObject *loop; /* a strong reference, so that the address is not reused */
    int running;
} loop_memo;

static void charge_task(PyObject *task, uint64_t charge_ns, cpu_sums *unattributed, loop_memo *memo,
                        line_memo *lines)
{
    /* Suspended at an await: waiting on a future.  None: running now, or ready
     * to run (a bare yield, asyncio.sleep(0)), which is not waiting on anything. */
    PyObject *waiter = PyObject_GetAttr(task, A.fut_waiter);
    if (waiter == NULL) {
        PyErr_Clear();
        return;
    }
    int waits = waiter != Py_None;
    Py_DECREF(waiter);
    if (!waits) {
        return;
    }
    PyObject *loop = PyObject_GetAttr(task, A.loop);
    if (loop == NULL) {
        PyErr_Clear();
        return;
    }
    if (loop != memo->loop) {
        Py_XSETREF(memo->loop, loop);
        memo->running = loop_running(loop);
    } else {
        Py_DECREF(loop);
    }
    if (!memo->running) {
        return;
    }
    PyObject *coro = PyObject_GetAttr(task, A.coro);
    if (coro == NULL) {
        PyErr_Clear();
        return;
    }
    uint32_t site;
    int lineno;
    cpu_sums *into = unattributed;
    if (await_line(coro, lines, &site, &lineno)) {
        line_record *rec = line_stats_at(site, lineno);
        into = rec != NULL ? &rec->cpu : NULL;
    }
    Py_DECREF(coro);
    if (into != NULL) {
        into->await_ns += charge_ns;
    }
}

void awaits_charge(uint64_t window_ns, cpu_sums *unattributed)
{
    if (!A.in_use || window_ns == 0) {
        return;
    }
#if PY_VERSION_HEX >= 0x030E0000
    /* A task is in the slice of a snapshot that makes the list with the
     * chance taken / total, charged the windows since the last list: on
     * average its own time, as with a slice at every snapshot. */
    A.pending_ns += window_ns;
    if (++A.skipped < A.stride) {
        return;
    }
    window_ns = A.pending_ns;
    A.pending_ns = 0;
    A.skipped = 0;
#endif
    task_slice slice;
    task_slice_take(&slice);
    PyErr_Clear();
#if PY_VERSION_HEX >= 0x030E0000
    A.stride = slice.total > AWAITS_LISTED_MAX ? (size_t)(slice.total + AWAITS_LISTED_MAX - 1) / AWAITS_LISTED_MAX : 1;
#endif
    if (slice.taken == 0) {
        return;
    }
    uint64_t charge_ns = window_ns;
    if (slice.taken < slice.total) {
        charge_ns = (uint64_t)((double)window_ns * (double)slice.total / (double)slice.taken + 0.5);
    }
    loop_memo memo = {NULL, 0};
    line_memo lines;
    lines.n = lines.next = 0;
    for (Py_ssize_t i = 0; i < slice.taken; i++) {
        PyObject *task = referent(slice.refs[i]);
        if (task != NULL) {
            charge_task(task, charge_ns, unattributed, &memo, &lines);
            Py_DECREF(task);
        }
    }
    Py_XDECREF(memo.loop);
    task_slice_release(&slice);
}

void awaits_release(void)
{
    Py_CLEAR(A.run_once);
    Py_CLEAR(A.handle_run);
    A.in_use = 0;
    A.rotation = 0;
#if PY_VERSION_HEX >= 0x030E0000
    A.pending_ns = 0;
    A.stride = A.skipped = 0;
#endif
}
