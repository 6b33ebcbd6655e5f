/* paused: whether profiling is paused now, as the sampler has acted on it.
 *
 * The run control decides pauses and resumes (control.h: the program's
 * start()/stop() count, a hold from outside); the sampler carries them out
 * (what is charged up to a pause, where the windows restart after it) and then
 * publishes the outcome here.  Every collector that sees something between two
 * snapshots (a memory sample, a GPU launch) reads it with one relaxed load and
 * drops what it sees while paused.  It lives in the floor so that the
 * collectors read it without depending on the run control above them.
 */
#ifndef PYROMETER_PAUSED_H
#define PYROMETER_PAUSED_H

/* Any thread, one relaxed load. */
int paused_now(void);
/* The sampler (GIL held), once it has acted on a pause (1) or a resume (0). */
void paused_set(int paused);

#endif
