/* filter: which source files the report shows.
 *
 * A file is reported when it belongs to the profiled program (under one of the
 * include prefixes, by default the program's directory) and not to the Python
 * installation (exclude prefixes: the standard library, site-packages) -- or, with
 * profile_all, any file.  --profile-only substrings, when given, select files by
 * name among all files; --profile-exclude substrings always remove.  The
 * profiler's own files and pseudo-files ("<frozen runpy>", "<string>") never show.
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
} filter_rules; /* every list ends with NULL */

/* Copies the rules into profiler-owned memory; 0 on success, -1 out of memory. */
int filter_configure(const filter_rules *rules);
int filter_reports(const char *filename);
void filter_release(void);

#endif
