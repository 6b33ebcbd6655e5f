/* line_timeline: which line the program's main thread stood on, and when, over the
 * last few seconds: a bounded ring of (CLOCK_REALTIME ns, site, line, call stack) written at
 * every CPU snapshot.
 *
 * It exists for measurements that arrive late and carry their own time: a GPU's
 * utilisation is the busy share of a ~200 ms window reported after the window
 * has ended (csrc/gpu/gpu.h), so it must be charged to the lines that ran
 * *during* that window, not to whatever runs when the value arrives.  The clock
 * is CLOCK_REALTIME because that is the clock NVML stamps its samples with.
 *
 * One writer (the snapshot, GIL held) and one reader (the GPU thread, which
 * never holds the GIL): lock-free.  Each slot is a tiny seqlock (its time is set
 * to 0 while the slot is rewritten), so the reader never sees a torn entry, and
 * an entry the writer has lapped is dropped, never misread.  Pure C: no CPython
 * calls, no allocation after line_timeline_enable.
 */
#ifndef PYROMETER_LINE_TIMELINE_H
#define PYROMETER_LINE_TIMELINE_H

#include <stddef.h>
#include <stdint.h>

/* 8192 snapshots: 82 s at the default 10 ms, 0.8 s at the fastest rate (0.1 ms);
 * a GPU sample is read at most ~1.5 s after its window began. */
#define LINE_TIMELINE_SLOTS 8192u

typedef struct {
    uint64_t t_ns;   /* CLOCK_REALTIME at the snapshot */
    uint32_t site;   /* SITE_NONE (sites.h): no reported line; LINE_TIMELINE_PAUSED */
    int32_t lineno;
    uint32_t stack;  /* the main thread's call stack (stacks.h) */
} line_timeline_entry;

/* The site of the entry written when profiling resumes (csrc/control): the
 * interval it closes was paused, and nothing measured in it is charged. */
#define LINE_TIMELINE_PAUSED (UINT32_MAX - 1)

/* The ring is written only while enabled (a consumer exists). */
void line_timeline_enable(int on);
int line_timeline_enabled(void);
/* The writer: the main thread stood at (site, lineno) at t_ns, and since the
 * previous entry.  Times must not go backwards. */
void line_timeline_note(uint64_t t_ns, uint32_t site, int32_t lineno, uint32_t stack);
/* The reader: the entries with t_ns >= from_ns and the one just before them (it
 * opens the first interval), oldest first, at most max; returns how many.  Entry
 * i stands for the interval (out[i-1].t_ns, out[i].t_ns]. */
size_t line_timeline_read(uint64_t from_ns, line_timeline_entry *out, size_t max);
/* The newest entry; 0 when there is none. */
int line_timeline_latest(line_timeline_entry *out);
/* Forget every entry (GIL held, no reader running). */
void line_timeline_clear(void);
/* CLOCK_REALTIME in ns (async-signal-safe). */
uint64_t line_timeline_now_ns(void);

#endif
