/* Where the threads stand, read by the sampler thread without the GIL: the
 * main thread's standing and the other threads' peeks at a request, and the
 * second looks while the request waits (state.h: the rooms). */
#include "state.h"
#include "../common/clock.h"
#include "../profile/codes.h"

/* Keeps a look (the sampler thread's). */
void store_look(stored_look *into, int standing, const pyframe_peeked *at)
{
    atomic_store(&into->standing, standing);
    for (int i = 0; i <= PYFRAME_PEEK_CALLERS; i++) {
        pyframe_position p = peeked_position(at, i);
        atomic_store(&into->frame[i], p.frame);
        atomic_store(&into->code[i], p.code);
        atomic_store(&into->lasti[i], p.lasti);
    }
}

/* A stored look's position (frame 0: not known); returns its standing. */
int load_look(stored_look *from, pyframe_peeked *at)
{
    at->frame = atomic_load(&from->frame[0]);
    at->code = atomic_load(&from->code[0]);
    at->lasti = atomic_load(&from->lasti[0]);
    at->opcode = -1; /* not kept: unknown */
    at->oparg = 0;
    for (int i = 0; i < PYFRAME_PEEK_CALLERS; i++) {
        at->callers[i] = (pyframe_position){atomic_load(&from->frame[i + 1]), atomic_load(&from->code[i + 1]),
                                            atomic_load(&from->lasti[i + 1])};
    }
    return atomic_load(&from->standing);
}

/* Where the main thread stands now (the sampler thread, without the GIL: the main
 * thread's state lives as long as the interpreter, and everything read from it
 * goes through safe_read). */
int main_standing(pyframe_peeked *at)
{
    if (!sampler.peek_available) {
        return STANDING_UNKNOWN;
    }
    switch (pyframe_peek(sampler.main_ts, at)) {
    case PYFRAME_PEEK_OPCODE:
        return codes_opcode_calls(at->opcode) ? STANDING_IN_CALL : STANDING_PYTHON;
    case PYFRAME_PEEK_STARTING:
        return STANDING_PYTHON;
    case PYFRAME_PEEK_NO_FRAME:
        return STANDING_IN_CALL; /* no Python frame: outside Python */
    default:
        return STANDING_UNKNOWN;
    }
}

/* The sampler thread, without the GIL: where the threads chosen at the last
 * snapshot stand now, and the thread that holds the GIL now.  The holder is the
 * one running bytecode: where it stands is where the CPU of bytecode goes at
 * this moment, and the only place its running position can be seen (threads
 * that wait for the GIL are found parked).  With more threads running than
 * PEEK_THREADS, a holder left out of the list was seen running only when the
 * rotation (choose_peek) happened to meet it holding the GIL. */
static void peek_one(thread_peek *out, uintptr_t ts)
{
    out->ts = 0;
    out->gil_wait = THREAD_WAIT_UNKNOWN;
    out->state = THREAD_STATE_UNKNOWN;
    out->held_gil = 0;
    out->on_cpu = -1;
    /* A state freed meanwhile is only read through safe_read; what it gives is
     * used only for a live state whose frame and code match. */
    if (ts != 0 && sampler.peek_available && pyframe_peek((PyThreadState *)ts, &out->at) == PYFRAME_PEEK_OPCODE) {
        out->ts = ts;
    }
}

void peek_threads(thread_peek *out)
{
    uintptr_t holder = (uintptr_t)pyframe_gil_holder(sampler.interp);
    if (holder == (uintptr_t)sampler.main_ts || holder == (uintptr_t)sampler.sampler_ts) {
        holder = 0; /* the main thread has rules of its own; the sampler thread is not the program */
    }
    for (int i = 0; i < PEEK_THREADS; i++) {
        uintptr_t ts = atomic_load(&sampler.peek_list[i]);
        pid_t tid = atomic_load(&sampler.peek_tid[i]);
        int holds = ts != 0 && ts == holder;
        uint64_t cpu_before = holds ? clock_thread_cpu_ns(tid) : CLOCK_UNAVAILABLE;
        peek_one(&out[i], ts);
        if (holds) {
            holder = 0; /* peeked already */
            out[i].gil_wait = THREAD_WAIT_ELSEWHERE;
            out[i].state = THREAD_STATE_RUNNING;
            out[i].held_gil = 1;
            uint64_t cpu_after = clock_thread_cpu_ns(tid);
            if (cpu_before != CLOCK_UNAVAILABLE && cpu_after != CLOCK_UNAVAILABLE) {
                out[i].on_cpu = cpu_after > cpu_before;
            }
        } else if (out[i].ts != 0) {
            out[i].state = thread_state_in(&sampler.peek_waits[i], tid, sampler.gil_start, sampler.gil_size);
            out[i].gil_wait = thread_wait_of(out[i].state);
        }
    }
    peek_one(&out[PEEK_THREADS], holder);
    out[PEEK_THREADS].gil_wait = THREAD_WAIT_ELSEWHERE;
    out[PEEK_THREADS].state = holder != 0 ? THREAD_STATE_RUNNING : THREAD_STATE_UNKNOWN;
    out[PEEK_THREADS].held_gil = holder != 0;
}

/* The sampler thread, without the GIL, each time it wakes while the main
 * thread's request waits: whether the thread has moved on since the last look
 * (t0's, or the latest that found it moved).  A thread running bytecode
 * answers at its next eval-breaker check, so one that has not answered and
 * stands elsewhere went on through instructions that check nothing (a list's
 * `*`, a store that frees a large list) and perhaps into a call that keeps it;
 * or t0 caught the end of the call before, when the sampler thread lost its
 * CPU between its peek and t0.  Without these looks the whole wait went to
 * t0's line: a loop of `x = big * 4` (16 ms) and a 40 ms call gave the first
 * line 3.5 s of 3.6 (and once in CI a 1.5 s call holding the GIL got nothing
 * on its line, most likely this way).  The move is placed halfway between this look and
 * the one before, which found the thread still where it was (the unbiased
 * place for a move at an unknown moment in between); the time from there on
 * is where this look saw the thread, the time before stays t0's
 * (charge_main_answer). */
void second_look(void)
{
    if (!sampler.peek_available || atomic_load(&sampler.request_at.frame[0]) == 0) {
        return;
    }
    pyframe_peeked at = {.lasti = -1};
    int standing = main_standing(&at);
    uint64_t cpu = clock_thread_cpu_ns(sampler.main_tid);
    uint64_t now = clock_wall_ns();
    if (at.frame == 0 || cpu == CLOCK_UNAVAILABLE) {
        return;
    }
    stored_look *last = atomic_load(&sampler.moved_wall_ns) != 0 ? &sampler.moved_at : &sampler.request_at;
    if (at.frame == atomic_load(&last->frame[0]) && at.code == atomic_load(&last->code[0]) &&
        at.lasti == atomic_load(&last->lasti[0])) {
        sampler.still_wall_ns = now; /* still where the last look saw it */
        sampler.still_main_cpu_ns = cpu;
        return;
    }
    /* Asleep on the GIL where it stands now (a worker holds it): the wait
     * from here on is for the GIL (charge_answer_part). */
    int gil_wait = thread_wait_in(&sampler.main_wait, sampler.main_tid, sampler.gil_start, sampler.gil_size);
    uint64_t move_wall = sampler.still_wall_ns + delta(now, sampler.still_wall_ns) / 2;
    uint64_t move_cpu = sampler.still_main_cpu_ns + delta(cpu, sampler.still_main_cpu_ns) / 2;
    atomic_fetch_add(&sampler.moved_seq, 1u); /* odd: being written */
    store_look(&sampler.moved_at, standing, &at);
    atomic_store(&sampler.moved_gil_wait, gil_wait);
    atomic_store(&sampler.moved_main_cpu_ns, move_cpu);
    atomic_store(&sampler.moved_wall_ns, move_wall);
    atomic_fetch_add(&sampler.moved_seq, 1u);
    sampler.still_wall_ns = now;
    sampler.still_main_cpu_ns = cpu;
}
