/* awaits: where an asyncio program's coroutines wait, and when its event loops
 * are idle.
 *
 * A thread running an event loop spends its idle time blocked in the selector,
 * inside the loop's own code; charged like any other blocked call, that time was
 * "system" time of the line that started the loop (`asyncio.run(main())`), and the
 * lines that actually waited (the `await`s) got nothing.  At each snapshot:
 *  - a thread standing in an event loop's own code (BaseEventLoop._run_once, not
 *    inside a callback or task step it runs) is marked, so that its time off CPU
 *    is kept apart as the loop's idle time (line_stats.h: loop_idle_ns);
 *  - every task of a running loop that is suspended at an await (it waits on a
 *    future: `_fut_waiter`) is charged the snapshot's window as await time, at
 *    the innermost reported line of its await chain (the task's coroutine, the
 *    coroutine it awaits, and so on, through `cr_await`/`gi_yieldfrom`).
 * The tasks are asyncio's own registry (`asyncio.tasks._scheduled_tasks` on 3.12
 * and 3.13, `_all_tasks` before), read through the C API: no Python code of the
 * profiler runs.  3.14 keeps native tasks in per-thread lists instead, which
 * asyncio.all_tasks(loop) (C) reads: it is called for each thread's running
 * loop (the thread state's, pyframe_running_loop).  A program that never imports asyncio pays one dictionary lookup
 * a snapshot.  Callers hold the GIL.
 */
#ifndef PYROMETER_AWAITS_H
#define PYROMETER_AWAITS_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

#include "../profile/line_stats.h"

/* At the start of every snapshot: whether asyncio is in use (imported), which
 * the two calls below need. */
int awaits_begin(void);
/* Whether a thread stands in an event loop's own code (waiting in the selector,
 * or the loop's bookkeeping between callbacks). */
int awaits_loop_waiting(PyThreadState *ts);
/* The same, of the code objects a look without the GIL saw, innermost first
 * (only compared: they may be gone). */
int awaits_loop_waiting_at(const uintptr_t *codes, int n);
/* Charges window_ns to every task suspended at an await; a task whose await chain
 * has no reported frame is charged to `unattributed`.  With very many tasks, a
 * rotating slice of them stands for all (each weighted by how many it stands
 * for), so that a snapshot's cost stays bounded. */
void awaits_charge(uint64_t window_ns, cpu_sums *unattributed);
/* Drops what awaits_begin found (GIL held). */
void awaits_release(void);

#endif
