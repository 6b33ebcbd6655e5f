/* code_life: whether a code object that a queued sample names is still alive
 * when the sample is charged.
 *
 * A sample taken without the GIL records the code objects of its thread's
 * frames; they are alive then (the frames hold them, and the frames cannot go
 * while the thread is in native code).  By the time the sample is charged the
 * thread may have returned and ended, and a code object nobody else holds may
 * have been freed: touching it then would read freed memory.  So each such code
 * object is watched in the library's watch table (as a sampled block is, with a
 * token here), which tells its free: every free of a Python object passes the
 * wrapped allocator, which reports watched blocks.  A code object watched
 * continuously since it was recorded, and not reported freed, is the same live
 * object.  Valid only while pyalloc wraps Python's allocators. */
#ifndef PYROMETER_CODE_LIFE_H
#define PYROMETER_CODE_LIFE_H

#include "memhooks_api.h"

#include <stdint.h>

/* Starts following codes, through the library's api (GIL held). */
void code_life_start(const memhooks_api *api);
/* The library is stopping: nothing is followed any more (GIL held). */
void code_life_stop(void);
/* From inside an allocator, on any thread, GIL or not: atomics only.  The
 * thread's frame holds code, which the sample queued at ring position `index`
 * names.  Returns 0 when the table is full (code is then not followed). */
int code_life_note(const void *code, uint64_t index);
/* GIL held: whether code was noted and has not been freed since. */
int code_life_alive(const void *code);
/* GIL held, after a drain: codes named by no sample at or after ring position
 * `tail` are no longer followed. */
void code_life_forget(uint64_t tail);

#endif
