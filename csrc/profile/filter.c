#include "filter.h"
#include "../common/arena.h"

#include <string.h>

static arena filter_arena;
static filter_rules active;
static int configured;

static const char *const empty_list[] = {NULL};
static const void *const no_codes[] = {NULL};

static const char *const *copy_list(const char *const *list)
{
    if (list == NULL) {
        return empty_list;
    }
    size_t n = 0;
    while (list[n] != NULL) {
        n++;
    }
    const char **out = arena_alloc(&filter_arena, (n + 1) * sizeof *out);
    if (out == NULL) {
        return NULL;
    }
    for (size_t i = 0; i < n; i++) {
        size_t len = strlen(list[i]);
        char *s = arena_alloc(&filter_arena, len + 1);
        if (s == NULL) {
            return NULL;
        }
        memcpy(s, list[i], len + 1);
        out[i] = s;
    }
    out[n] = NULL;
    return out;
}

static const void *const *copy_codes(const void *const *codes)
{
    if (codes == NULL) {
        return no_codes;
    }
    size_t n = 0;
    while (codes[n] != NULL) {
        n++;
    }
    const void **out = arena_alloc(&filter_arena, (n + 1) * sizeof *out);
    if (out != NULL) {
        memcpy(out, codes, (n + 1) * sizeof *out);
    }
    return out;
}

int filter_configure(const filter_rules *rules)
{
    filter_release();
    arena_init(&filter_arena);
    active.include_prefixes = copy_list(rules->include_prefixes);
    active.exclude_prefixes = copy_list(rules->exclude_prefixes);
    active.own_prefixes = copy_list(rules->own_prefixes);
    active.only_substrings = copy_list(rules->only_substrings);
    active.exclude_substrings = copy_list(rules->exclude_substrings);
    active.profile_all = rules->profile_all;
    active.program_prefixes = copy_list(rules->program_prefixes);
    active.program_codes = copy_codes(rules->program_codes);
    if (!active.include_prefixes || !active.exclude_prefixes || !active.own_prefixes ||
        !active.only_substrings || !active.exclude_substrings || !active.program_prefixes ||
        !active.program_codes) {
        /* Not configured yet, so filter_release() would keep what was mapped so far. */
        arena_release(&filter_arena);
        return -1;
    }
    configured = 1;
    return 0;
}

void filter_release(void)
{
    if (configured) {
        arena_release(&filter_arena);
        configured = 0;
    }
}

static int same_list(const char *const *a, const char *const *b)
{
    b = b != NULL ? b : empty_list;
    size_t i = 0;
    for (; a[i] != NULL && b[i] != NULL; i++) {
        if (strcmp(a[i], b[i]) != 0) {
            return 0;
        }
    }
    return a[i] == NULL && b[i] == NULL;
}

static int same_codes(const void *const *a, const void *const *b)
{
    b = b != NULL ? b : no_codes;
    size_t i = 0;
    for (; a[i] != NULL && a[i] == b[i]; i++) {
    }
    return a[i] == b[i];
}

int filter_is(const filter_rules *rules)
{
    return configured && same_list(active.include_prefixes, rules->include_prefixes) &&
           same_list(active.exclude_prefixes, rules->exclude_prefixes) &&
           same_list(active.own_prefixes, rules->own_prefixes) &&
           same_list(active.only_substrings, rules->only_substrings) &&
           same_list(active.exclude_substrings, rules->exclude_substrings) &&
           active.profile_all == rules->profile_all &&
           same_list(active.program_prefixes, rules->program_prefixes) &&
           same_codes(active.program_codes, rules->program_codes);
}

static int has_prefix(const char *s, const char *const *prefixes)
{
    for (; *prefixes != NULL; prefixes++) {
        if (strncmp(s, *prefixes, strlen(*prefixes)) == 0) {
            return 1;
        }
    }
    return 0;
}

static int has_substring(const char *s, const char *const *needles)
{
    for (; *needles != NULL; needles++) {
        if (strstr(s, *needles) != NULL) {
            return 1;
        }
    }
    return 0;
}

static int is_program_code(const void *code)
{
    for (const void *const *c = active.program_codes; code != NULL && *c != NULL; c++) {
        if (*c == code) {
            return 1;
        }
    }
    return 0;
}

int filter_reports(const char *filename)
{
    return filter_reports_code(filename, NULL);
}

int filter_reports_code(const char *filename, const void *code)
{
    if (!configured || filename[0] == '\0') {
        return 0;
    }
    /* The program's own code, or its own pseudo-file ("<stdin>", a program
     * prefix), stands for a file of the program's directory, so that
     * --profile-only and --profile-exclude select it by its name as they would a
     * file; every other pseudo-file is never reported. */
    int program = is_program_code(code) || has_prefix(filename, active.program_prefixes);
    if ((filename[0] == '<' && !program) || has_prefix(filename, active.own_prefixes) ||
        has_substring(filename, active.exclude_substrings)) {
        return 0;
    }
    if (active.only_substrings[0] != NULL) {
        return has_substring(filename, active.only_substrings);
    }
    if (active.profile_all || program) {
        return 1;
    }
    return has_prefix(filename, active.include_prefixes) &&
           !has_prefix(filename, active.exclude_prefixes);
}
