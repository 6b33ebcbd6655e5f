/* Which line a thread's time goes to: the nearest reported frame on its
 * stack, and the kind of what runs there, from the thread's frames now and
 * what the looks saw at the request (state.h: the rooms). */
#include "state.h"
#include "../profile/codes.h"
#include "../profile/stacks.h"

/* Position i of a peek: 0 its own frame, i its caller i - 1. */
pyframe_position peeked_position(const pyframe_peeked *at, int i)
{
    return i == 0 ? (pyframe_position){at->frame, at->code, at->lasti} : at->callers[i - 1];
}

/* Frames of the current stack searched for one seen at t0 (t0_on_stack). */
#define MEET_DEPTH 8

/* Where the position seen at t0 meets the current stack: the innermost frame
 * of it (from innermost outward, at most MEET_DEPTH) that is at's own frame
 * (0) or at's caller k - 1 (k), the same frame running the same code, in
 * *meet; -1 when there is none.  Frames of at's inside *meet have returned
 * since t0; frames of the stack inside *meet were called since. */
static int t0_on_stack(const pyframe_peeked *at, pyframe innermost, pyframe *meet)
{
    pyframe f = innermost;
    for (int depth = 0; f != NULL && depth < MEET_DEPTH; depth++, f = pyframe_caller(f)) {
        uintptr_t frame = (uintptr_t)f, code = (uintptr_t)pyframe_code(f);
        for (int k = 0; k <= PYFRAME_PEEK_CALLERS; k++) {
            pyframe_position p = peeked_position(at, k);
            if (p.frame == 0) {
                break;
            }
            if (p.frame == frame && p.code == code) {
                *meet = f;
                return k;
            }
        }
    }
    return -1;
}

/* The place of a sample whose frames seen at t0 have partly returned (k of
 * them: at's own and its first k - 1 callers) into `innermost` (the frame
 * where t0 meets the stack, t0_on_stack): the nearest of them in a reported
 * file, at its t0 instruction, on the stack through them and on from
 * innermost (at its t0 call, innermost_lasti; -1: not reported).
 * A native operation in a small function (`return a * 3` on a large bytes)
 * holds the thread until it returns, and the caller's jump back is where it
 * answers.  Only codes known alive are read (codes_find_through: registered,
 * and forgotten by their weak reference's callback before their memory can be
 * reused, or found held by a function of the caller's module or of the
 * program's, or by the code of a frame still running: a lambda's); 0 when
 * none of those read, up to the first not known, is reported. */
static int locate_returned(location *loc, const pyframe_peeked *at, int k, pyframe innermost, int innermost_lasti)
{
    stack_frame gone[1 + PYFRAME_PEEK_CALLERS];
    int n = 0;
    for (int i = 0; i < k; i++) {
        pyframe_position p = peeked_position(at, i);
        PyCodeObject *code = (PyCodeObject *)p.code;
        const code_info *info = codes_find_through(code, innermost);
        if (info == NULL || p.lasti < 0 || p.lasti >= info->n_units) {
            /* This code and its callers' cannot be read: the frames read
             * so far are the sample's, if one is reported (a script's
             * top-level code is freed as it returns; the function of its
             * last call, found in its dictionary, is still the line), their
             * stack going on from innermost without the frames between. */
            break;
        }
        if (info->reported && info->site != SITE_NONE) {
            gone[n].site = info->site;
            gone[n].lineno = codes_line_known(info, code, p.lasti);
            n++;
        }
    }
    if (n == 0) {
        return 0;
    }
    int innermost_line = -1;
    if (innermost_lasti >= 0) {
        const code_info *info = codes_lookup(pyframe_code(innermost)); /* registered by codes_locate */
        if (info != NULL && innermost_lasti < info->n_units) {
            innermost_line = codes_line_known(info, pyframe_code(innermost), innermost_lasti);
        }
    }
    loc->site = gone[0].site;
    loc->lineno = gone[0].lineno;
    loc->stack = stacks_of_returned(gone, n, innermost, innermost_line);
    return 1;
}

/* No frame seen at t0 is on the stack any more: the thread left all of them
 * before answering (a recursion that unwound past the callers the peek keeps:
 * `recurse(x - 1)` 20 deep answers at the caller's loop or at the next call's
 * entry, which took 60% of such a program's time, its `if x == 0` line 0%).
 * The sample is still where t0 saw it, read as locate_returned reads returned
 * frames; what joins those frames to the stack is not known, so they are put on
 * the stack's outermost frame, the program's own loop as a rule. */
static int locate_unmet(location *loc, const pyframe_peeked *at, pyframe innermost)
{
    int k = 0;
    while (k <= PYFRAME_PEEK_CALLERS && peeked_position(at, k).frame != 0) {
        k++;
    }
    pyframe root = innermost;
    while (pyframe_caller(root) != NULL) {
        root = pyframe_caller(root);
    }
    return k > 0 && locate_returned(loc, at, k, root, -1);
}

/* The kind of what the thread runs where it is found now (locate): for the
 * main thread's answer, where it stood at t0 or the delay; else whether its
 * innermost instruction is in a call. */
static int native_now(pyframe innermost, int native_by_delay, int standing, uint64_t delay_ns,
                      uint64_t delay_cpu_ns)
{
    const code_info *info = codes_lookup(pyframe_code(innermost));
    /* Answered right after a call (not at a loop back-edge or a function's
     * entry): a request that found bytecode just before a blocking call was
     * kept waiting by that call. */
    int after_call = info != NULL && !codes_python_at(info, pyframe_lasti(innermost));
    if (!native_by_delay) {
        return after_call;
    }
    if (standing == STANDING_IN_CALL) {
        return 1;
    }
    if (standing == STANDING_PYTHON) {
        return delay_cpu_ns > NATIVE_DELAY_NS || (after_call && delay_ns > NATIVE_DELAY_NS);
    }
    return delay_ns > NATIVE_DELAY_NS;
}

/* The kind of another thread's window (not the main thread's answer), from
 * its position at t0 where that was read (at): `returned` is where t0's stack
 * meets the stack now (t0_on_stack: 0 the innermost frame, -1 not met), meet
 * that frame, meet_lasti its instruction then; `native` the kind read now. */
static int native_at_t0(int native, const pyframe_peeked *at, int returned, pyframe meet, pyframe innermost,
                        int meet_lasti)
{
    if (returned == 0) {
        /* The line is read where the thread stood at t0 (below), and so is the
         * kind: in a call then, or still in the instruction it stood in then
         * (an operator that released the GIL: numpy's `a += 1.0`), is native;
         * otherwise bytecode.  Read now alone, it was the kind at the moment
         * the GIL came free, which a worker gives up when it enters a native
         * call that releases it: a pool thread's Python loop before hashlib
         * read 100% native. */
        int still = meet == innermost && pyframe_lasti(innermost) == meet_lasti;
        return codes_opcode_calls(at->opcode) || (still && native);
    }
    if (at != NULL && at->opcode >= 0 && (codes_opcode_calls(at->opcode) || codes_operators_told_apart())) {
        /* The frame seen at t0 has returned since: where the thread answers
         * (its caller's loop, or the next function's entry) says nothing of
         * what it did then.  In a call then, or in an operator the specialiser
         * gave up on (`SPINNER * ms`, a numpy operation: its type's slot, in
         * C), it was native; else bytecode.  Read from where it answered,
         * the kind had followed the caller's loop: 3.13 parks after the call
         * its loop's test makes (native), 3.14 at the jump back (Python).
         * On 3.10, where every operator is generic, an operator tells
         * nothing: there the kind stays where it answered. */
        return codes_opcode_calls(at->opcode) || codes_opcode_generic_operator(at->opcode, at->oparg);
    }
    return native;
}

/* The line and stack of loc: reported frame f's line, at t0's instruction
 * where f is the frame t0 met (meet, meet_lasti). */
static void locate_line(location *loc, pyframe f, pyframe meet, int meet_lasti)
{
    const code_info *info = codes_lookup(pyframe_code(f)); /* registered by codes_locate */
    if (info == NULL) {
        loc->ok = 0;
        return;
    }
    loc->site = info->site;
    int lasti = pyframe_lasti(f);
    if (f == meet && meet_lasti >= 0 && meet_lasti < info->n_units) {
        lasti = meet_lasti;
    }
    loc->lineno = codes_line_known(info, pyframe_code(f), lasti);
    /* Walked from the line outward, after info is read (the walk may
     * register codes, which calls CPython). */
    loc->stack = loc->site != SITE_NONE ? stacks_of(f, loc->lineno) : STACKS_ROOT;
}

/* native_by_delay: the main thread answering its request, whose kind is where it
 * stood at t0 (standing), or, for an instruction that outlasts the request, the
 * delay.  Where it stood in Python, only the delay's CPU time counts: a thread
 * kept off the CPU (a busy machine, the GIL) answers late without running any
 * native code.
 * at: where the main thread stood at t0 (NULL: not known).  A thread answers at
 * an eval-breaker check, a loop's jump back or a function's entry, so the line
 * it answers on is biased towards those (a loop whose jump back has no line of
 * its own lost nearly all its samples).  While the innermost frame is still the
 * one seen at t0, running the same code, t0's instruction is where the sample
 * is.  A frame freed and reused meanwhile is noticed unless it runs the same code
 * again (a function called in a loop), where t0's instruction is still one the
 * thread ran in this window; the index is checked against the code's size.
 * Where the frame has returned into one of its callers seen at t0, the sample
 * is where t0 saw it (locate_returned), or, if that cannot be read, at that
 * caller's call; frames called after t0 (a function's entry, where the thread
 * answers) are passed over. */
static location locate_met(PyThreadState *ts, int native_by_delay, uint64_t delay_ns, uint64_t delay_cpu_ns,
                           int standing, const pyframe_peeked *at, int *unmet);

location locate(PyThreadState *ts, int native_by_delay, uint64_t delay_ns, uint64_t delay_cpu_ns,
                int standing, const pyframe_peeked *at)
{
    int unmet = 0;
    return locate_met(ts, native_by_delay, delay_ns, delay_cpu_ns, standing, at, &unmet);
}

/* A spread peek, made up to a few windows before the snapshot (spread.c):
 * located as locate does; *unmet: none of its frames is on the stack any more
 * (locate_unmet), so that the stack above the frames it kept is not known. */
location locate_peek(PyThreadState *ts, int standing, const pyframe_peeked *at, int *unmet)
{
    *unmet = 0;
    return locate_met(ts, 0, 0, 0, standing, at, unmet);
}

static location locate_met(PyThreadState *ts, int native_by_delay, uint64_t delay_ns, uint64_t delay_cpu_ns,
                           int standing, const pyframe_peeked *at, int *unmet)
{
    location loc = {SITE_NONE, 0, 1, 1, 0, STACKS_ROOT};
    pyframe innermost, f;
    loc.loop_idle = awaits_loop_is_waiting(ts);
    if (!codes_locate(ts, &innermost, &f)) {
        loc.ok = 0;
        return loc;
    }
    if (innermost == NULL) {
        return loc; /* no Python frame at all: native */
    }
    loc.native = native_now(innermost, native_by_delay, standing, delay_ns, delay_cpu_ns);
    /* Where the stack meets the position seen at t0, and that frame's
     * instruction then: its own, or its call into frames that have returned
     * since.  The frames called since (a function entered after the native
     * work, where the thread answers) are not the sample's. */
    pyframe meet = NULL;
    int returned = at != NULL ? t0_on_stack(at, innermost, &meet) : -1;
    int meet_lasti = returned >= 0 ? peeked_position(at, returned).lasti : -1;
    if (!native_by_delay) {
        loc.native = native_at_t0(loc.native, at, returned, meet, innermost, meet_lasti);
    }
    if (meet != NULL && meet != innermost && !codes_reported_from(meet, &f)) {
        loc.ok = 0;
        return loc;
    }
    if (returned > 0 && locate_returned(&loc, at, returned, meet, f == meet ? meet_lasti : -1)) {
        return loc;
    }
    if (returned < 0 && at != NULL && locate_unmet(&loc, at, innermost)) {
        *unmet = 1;
        return loc;
    }
    if (f != NULL) {
        locate_line(&loc, f, meet, meet_lasti);
    }
    return loc;
}
