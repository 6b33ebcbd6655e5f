/* filter: which source files the report shows.
 *
 * A file is reported when it belongs to the profiled program (under one of the
 * include prefixes, by default the program's directory) and not to the Python
 * installation (exclude prefixes: the standard library, site-packages) -- or, with
 * profile_all, any file.  --profile-only substrings, when given, select files by
 * name among all files; --profile-exclude substrings always remove.  The
 * profiler's own files and pseudo-files ("<frozen runpy>", "<string>") never show.
 *
 * What the user named is the program wherever it lives: program prefixes (the
 * package of a `-m` module, even in the standard library or site-packages) are
 * reported as the program's directory is, and so are a program prefix that is a
 * pseudo-file ("<stdin>", which nothing else compiles under) and the program's
 * own code objects (`-c`): those are told by identity, not by their pseudo-file
 * name, which the code that dataclasses and namedtuple generate shares
 * ("<string>").
 */
#ifndef PYROMETER_FILTER_H
#define PYROMETER_FILTER_H

typedef struct {
    const char *const *include_prefixes;
    const char *const *exclude_prefixes;
    const char *const *own_prefixes;     /* the profiler's own package */
    const char *const *only_substrings;  /* empty list: no restriction */
    const char *const *exclude_substrings;
    int profile_all;
    const char *const *program_prefixes; /* reported even under exclude_prefixes */
    const void *const *program_codes;    /* code objects, by address; the caller keeps them alive */
} filter_rules; /* every list ends with NULL (a NULL list: empty) */

/* Copies the rules into profiler-owned memory; 0 on success, -1 out of memory. */
int filter_configure(const filter_rules *rules);
/* Whether the rules configured now are these (the same lists, in the same
 * order, and the same flag): a run started with its predecessor's rules keeps
 * what was worked out under them (codes.h: codes_new_run, codes_forget). */
int filter_is(const filter_rules *rules);
int filter_reports(const char *filename);
/* As filter_reports, for a code object of that file: also the program's own codes. */
int filter_reports_code(const char *filename, const void *code);
void filter_release(void);

#endif
