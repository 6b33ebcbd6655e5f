/* filter: which files the report shows.  The rules, in the order they win:
 * pseudo-files and the profiler's own files never; --profile-exclude substrings
 * never; --profile-only substrings, when given, decide alone; profile_all shows
 * everything else; otherwise under an include prefix and not under an exclude one. */
#include "unit.h"
#include "mmap_probe.h"
#include "profile/filter.h"

#include <stdlib.h>
#include <string.h>

#define LIST(...) ((const char *const[]){__VA_ARGS__, NULL})

#define PROJECT "/home/u/proj/"
#define VENV PROJECT ".venv/lib/python3.11/site-packages/"
#define STDLIB "/usr/lib/python3.11/"
#define OWN "/usr/lib/python3/dist-packages/pyrometer/"

/* The rules pyrometer sets up for `pyrometer /home/u/proj/main.py`.  (Static lists:
 * a compound literal inside the function would die when it returns.) */
static const char *const usual_include[] = {PROJECT, "/srv/app/", NULL};
static const char *const usual_exclude[] = {STDLIB, VENV, NULL};
static const char *const usual_own[] = {OWN, NULL};
static const char *const no_strings[] = {NULL};

static filter_rules usual_rules(void)
{
    return (filter_rules){
        .include_prefixes = usual_include,
        .exclude_prefixes = usual_exclude,
        .own_prefixes = usual_own,
        .only_substrings = no_strings,
        .exclude_substrings = no_strings,
        .profile_all = 0,
    };
}

static void filter_reports_nothing_unconfigured(void)
{
    filter_release();
    CHECK(filter_reports(PROJECT "main.py") == 0);
    filter_rules rules = usual_rules();
    rules.profile_all = 1;
    REQUIRE(filter_configure(&rules) == 0);
    CHECK(filter_reports(PROJECT "main.py") == 1);
    filter_release();
    CHECK(filter_reports(PROJECT "main.py") == 0);
    CHECK(filter_reports("/anything.py") == 0);
    filter_release(); /* twice is harmless */
}

static void filter_include_and_exclude_prefixes(void)
{
    filter_rules rules = usual_rules();
    REQUIRE(filter_configure(&rules) == 0);
    CHECK(filter_reports(PROJECT "main.py") == 1);
    CHECK(filter_reports(PROJECT "pkg/deep/mod.py") == 1);
    CHECK(filter_reports("/srv/app/handlers.py") == 1);
    CHECK(filter_reports(VENV "numpy/core/numeric.py") == 0);
    CHECK(filter_reports(STDLIB "json/decoder.py") == 0);
    CHECK(filter_reports("/elsewhere/tool.py") == 0);
    CHECK(filter_reports("/home/u/proj") == 0);  /* shorter than the prefix */
    CHECK(filter_reports("/home/u/project2/x.py") == 0);
    CHECK(filter_reports("relative/main.py") == 0);
    filter_release();
}

static void filter_own_files_never_shown(void)
{
    filter_rules rules = usual_rules();
    rules.include_prefixes = LIST("/usr/lib/python3/");
    rules.own_prefixes = LIST(OWN, PROJECT "vendored/pyrometer/");
    REQUIRE(filter_configure(&rules) == 0);
    CHECK(filter_reports(OWN "profiler.py") == 0);
    CHECK(filter_reports("/usr/lib/python3/dist-packages/other.py") == 1);
    filter_release();

    rules.profile_all = 1;
    REQUIRE(filter_configure(&rules) == 0);
    CHECK(filter_reports(OWN "profiler.py") == 0);
    CHECK(filter_reports(PROJECT "vendored/pyrometer/cli.py") == 0);
    CHECK(filter_reports(PROJECT "main.py") == 1);
    filter_release();

    rules.only_substrings = LIST("pyrometer");
    REQUIRE(filter_configure(&rules) == 0);
    CHECK(filter_reports(OWN "profiler.py") == 0);
    CHECK(filter_reports(PROJECT "test_pyrometer_output.py") == 1);
    filter_release();
}

static void filter_pseudo_files_never_shown(void)
{
    const char *const pseudo[] = {"<frozen runpy>", "<frozen importlib._bootstrap>", "<string>",
                                  "<stdin>", "<module>", ""};
    filter_rules everything = {
        .include_prefixes = LIST(""), /* the empty prefix starts every name */
        .only_substrings = no_strings,
        .profile_all = 1,
    };
    filter_rules only_them = everything;
    only_them.only_substrings = LIST("<", "frozen", "string", "stdin");
    const filter_rules *variants[] = {&everything, &only_them};
    for (size_t v = 0; v < 2; v++) {
        REQUIRE(filter_configure(variants[v]) == 0);
        for (size_t i = 0; i < sizeof pseudo / sizeof pseudo[0]; i++) {
            CHECK(filter_reports(pseudo[i]) == 0);
        }
        filter_release();
    }
}

static void filter_only_substrings_decide_alone(void)
{
    filter_rules rules = usual_rules();
    rules.only_substrings = LIST("json", "mylib");
    REQUIRE(filter_configure(&rules) == 0);
    CHECK(filter_reports(STDLIB "json/decoder.py") == 1); /* under an exclude prefix */
    CHECK(filter_reports("/elsewhere/mylib/core.py") == 1); /* under no include prefix */
    CHECK(filter_reports(PROJECT "mylib/x.py") == 1);
    CHECK(filter_reports(PROJECT "main.py") == 0);         /* under an include prefix */
    CHECK(filter_reports(STDLIB "os.py") == 0);
    filter_release();

    /* profile_all does not widen an only-list. */
    rules.profile_all = 1;
    REQUIRE(filter_configure(&rules) == 0);
    CHECK(filter_reports("/elsewhere/tool.py") == 0);
    CHECK(filter_reports("/elsewhere/json_tool.py") == 1);
    filter_release();
}

static void filter_exclude_substrings_always_remove(void)
{
    filter_rules rules = usual_rules();
    rules.exclude_substrings = LIST("test_", "/vendor/");
    REQUIRE(filter_configure(&rules) == 0);
    CHECK(filter_reports(PROJECT "main.py") == 1);
    CHECK(filter_reports(PROJECT "tests/test_main.py") == 0);
    CHECK(filter_reports(PROJECT "vendor/lib.py") == 0);
    CHECK(filter_reports(PROJECT "vendors.py") == 1);
    filter_release();

    rules.profile_all = 1;
    REQUIRE(filter_configure(&rules) == 0);
    CHECK(filter_reports("/elsewhere/test_x.py") == 0);
    CHECK(filter_reports("/elsewhere/x.py") == 1);
    filter_release();

    rules.only_substrings = LIST("test_");
    REQUIRE(filter_configure(&rules) == 0);
    CHECK(filter_reports(PROJECT "tests/test_main.py") == 0);
    filter_release();
}

static void filter_profile_all_shows_every_real_file(void)
{
    filter_rules rules = usual_rules();
    rules.profile_all = 1;
    REQUIRE(filter_configure(&rules) == 0);
    CHECK(filter_reports(STDLIB "os.py") == 1);
    CHECK(filter_reports(VENV "requests/api.py") == 1);
    CHECK(filter_reports("/elsewhere/tool.py") == 1);
    CHECK(filter_reports("relative.py") == 1);
    CHECK(filter_reports(PROJECT "main.py") == 1);
    filter_release();
}

static void filter_null_lists_are_empty(void)
{
    filter_rules rules = {0};
    REQUIRE(filter_configure(&rules) == 0);
    CHECK(filter_reports(PROJECT "main.py") == 0);
    filter_release();
    rules.profile_all = 1;
    REQUIRE(filter_configure(&rules) == 0);
    CHECK(filter_reports(PROJECT "main.py") == 1);
    filter_release();
}

static char *heap_copy(const char *s)
{
    size_t n = strlen(s) + 1;
    char *p = malloc(n);
    if (p != NULL) {
        memcpy(p, s, n);
    }
    return p;
}

/* The caller's strings are gone once configure returns (module.c frees them right
 * after); a use-after-free here is what ASan and valgrind are watching for. */
static void filter_keeps_its_own_copy_of_the_rules(void)
{
    const char **include = malloc(3 * sizeof *include);
    const char **only = malloc(2 * sizeof *only);
    REQUIRE(include != NULL && only != NULL);
    char *a = heap_copy(PROJECT), *b = heap_copy("/srv/app/"), *c = heap_copy("main");
    REQUIRE(a != NULL && b != NULL && c != NULL);
    include[0] = a;
    include[1] = b;
    include[2] = NULL;
    only[0] = c;
    only[1] = NULL;
    filter_rules rules = usual_rules();
    rules.include_prefixes = include;
    REQUIRE(filter_configure(&rules) == 0);
    memset(a, 'x', strlen(a));
    free(a);
    free(b);
    free(include);
    CHECK(filter_reports(PROJECT "main.py") == 1);
    CHECK(filter_reports("/srv/app/x.py") == 1);
    CHECK(filter_reports("xxxxxxxxxxxxx/x.py") == 0);
    filter_release();

    rules = usual_rules();
    rules.only_substrings = only;
    REQUIRE(filter_configure(&rules) == 0);
    free(c);
    free(only);
    CHECK(filter_reports("/elsewhere/main.py") == 1);
    filter_release();
}

static void filter_reconfigure_replaces_the_rules(void)
{
    mmap_usage before = mmap_probe_usage();
    filter_rules first = usual_rules();
    REQUIRE(filter_configure(&first) == 0);
    mmap_usage configured = mmap_probe_usage();
    CHECK(configured.mappings > before.mappings);
    CHECK(filter_reports(PROJECT "main.py") == 1);

    filter_rules second = usual_rules();
    second.include_prefixes = LIST("/srv/other/");
    second.exclude_substrings = LIST("skip");
    REQUIRE(filter_configure(&second) == 0);
    CHECK(filter_reports(PROJECT "main.py") == 0);
    CHECK(filter_reports("/srv/app/handlers.py") == 0);
    CHECK(filter_reports("/srv/other/run.py") == 1);
    CHECK(filter_reports("/srv/other/skip_me.py") == 0);
    /* The first rules' memory went back when the second came in. */
    CHECK_EQ(mmap_probe_usage().mappings, configured.mappings);

    for (int i = 0; i < 100; i++) {
        REQUIRE(filter_configure(i % 2 ? &first : &second) == 0);
    }
    CHECK(filter_reports(PROJECT "main.py") == 1);
    CHECK_EQ(mmap_probe_usage().mappings, configured.mappings);
    filter_release();
    CHECK_EQ(mmap_probe_usage().mappings, before.mappings);
    CHECK_EQ(mmap_probe_usage().bytes, before.bytes);
}

/* filter_is: a start with the last run's rules keeps the codes' facts, so it
 * must tell every difference (each list, its order, the flag, the program's
 * codes) and not take equal copies for different rules. */
static void filter_is_tells_the_same_rules(void)
{
    filter_rules rules = usual_rules();
    CHECK(filter_is(&rules) == 0); /* nothing configured */
    static const void *const code_a[] = {(const void *)0x1000, NULL};
    static const void *const code_b[] = {(const void *)0x2000, NULL};
    rules.program_codes = code_a;
    rules.program_prefixes = LIST("<stdin>");
    REQUIRE(filter_configure(&rules) == 0);
    filter_rules copy = rules; /* equal lists in other memory */
    copy.include_prefixes = LIST(PROJECT, "/srv/app/");
    copy.exclude_prefixes = LIST(STDLIB, VENV);
    CHECK(filter_is(&rules) == 1);
    CHECK(filter_is(&copy) == 1);

    filter_rules changed[9];
    for (int i = 0; i < 9; i++) {
        changed[i] = rules;
    }
    changed[0].include_prefixes = LIST("/srv/app/", PROJECT); /* order */
    changed[1].exclude_prefixes = LIST(STDLIB);                /* shorter */
    changed[2].own_prefixes = LIST(OWN, "/extra/");            /* longer */
    changed[3].only_substrings = LIST("x");
    changed[4].exclude_substrings = LIST("test_");
    changed[5].profile_all = 1;
    changed[6].program_prefixes = NULL; /* empty */
    changed[7].program_codes = code_b;
    changed[8].program_codes = NULL;
    for (int i = 0; i < 9; i++) {
        CHECK(filter_is(&changed[i]) == 0);
    }
    filter_release();
    CHECK(filter_is(&rules) == 0);

    filter_rules empty = usual_rules(); /* NULL lists read as empty ones */
    REQUIRE(filter_configure(&empty) == 0);
    empty.only_substrings = NULL;
    CHECK(filter_is(&empty) == 1);
    filter_release();
}

static void filter_configure_out_of_memory(void)
{
    mmap_usage before = mmap_probe_usage();
    filter_rules rules = usual_rules();
    REQUIRE(filter_configure(&rules) == 0);
    mmap_probe_refuse_after(0);
    CHECK(filter_configure(&rules) == -1);
    mmap_probe_refuse_after(-1);
    /* A failed configure leaves nothing configured: it reports nothing, not stale rules. */
    CHECK(filter_reports(PROJECT "main.py") == 0);
    CHECK_EQ(mmap_probe_usage().mappings, before.mappings);
    REQUIRE(filter_configure(&rules) == 0);
    CHECK(filter_reports(PROJECT "main.py") == 1);
    filter_release();
    CHECK_EQ(mmap_probe_usage().mappings, before.mappings);
}

/* Refused memory half way through the copy: the first chunk is mapped, then a prefix
 * too long for it needs a mapping of its own, which is refused.  filter_configure
 * then calls filter_release(), which releases only when `configured` is set -- and
 * it is not yet -- so the chunk already mapped is never given back. */
static void filter_configure_failure_releases_what_it_mapped(void)
{
    enum { LONG_PREFIX = 2 << 20 };
    char *huge = malloc(LONG_PREFIX + 1);
    REQUIRE(huge != NULL);
    memset(huge, 'p', LONG_PREFIX);
    huge[0] = '/';
    huge[LONG_PREFIX] = '\0';

    mmap_usage before = mmap_probe_usage();
    filter_rules rules = usual_rules();
    rules.own_prefixes = (const char *const[]){OWN, huge, NULL};
    mmap_probe_refuse_after(1);
    CHECK(filter_configure(&rules) == -1);
    mmap_probe_refuse_after(-1);
    CHECK(filter_reports(PROJECT "main.py") == 0);
    CHECK_EQ(mmap_probe_usage().mappings, before.mappings);

    rules = usual_rules();
    REQUIRE(filter_configure(&rules) == 0);
    filter_release();
    CHECK_EQ(mmap_probe_usage().mappings, before.mappings);
    free(huge);
}

/* What the user named is the program wherever it lives: `-m json.tool` reports
 * the json package though it is in the standard library, `-` its "<stdin>", and
 * `-c` its own code objects, by identity, not every "<string>". */
static void filter_program_is_reported_wherever_it_lives(void)
{
    static int command_code, generated_code; /* stand-ins: only their addresses count */
    static const void *const codes[] = {&command_code, NULL};
    filter_rules rules = usual_rules();
    rules.program_prefixes = LIST(STDLIB "json/", "<stdin>");
    rules.program_codes = codes;
    REQUIRE(filter_configure(&rules) == 0);
    CHECK(filter_reports(STDLIB "json/decoder.py") == 1);
    CHECK(filter_reports(STDLIB "jsonish.py") == 0);
    CHECK(filter_reports(STDLIB "re/__init__.py") == 0);
    CHECK(filter_reports("<stdin>") == 1);
    CHECK(filter_reports_code("<string>", &command_code) == 1);
    CHECK(filter_reports_code("<string>", &generated_code) == 0);
    CHECK(filter_reports("<string>") == 0);
    CHECK(filter_reports(PROJECT "main.py") == 1);
    filter_release();

    /* --profile-exclude and --profile-only select the program by name as any file. */
    rules.exclude_substrings = LIST("json");
    REQUIRE(filter_configure(&rules) == 0);
    CHECK(filter_reports(STDLIB "json/decoder.py") == 0);
    filter_release();
    rules.exclude_substrings = no_strings;
    rules.only_substrings = LIST("main");
    REQUIRE(filter_configure(&rules) == 0);
    CHECK(filter_reports_code("<string>", &command_code) == 0);
    CHECK(filter_reports(PROJECT "main.py") == 1);
    filter_release();
}

const unit_test filter_tests[] = {
    UNIT_TEST(filter_program_is_reported_wherever_it_lives),
    UNIT_TEST(filter_reports_nothing_unconfigured),
    UNIT_TEST(filter_include_and_exclude_prefixes),
    UNIT_TEST(filter_own_files_never_shown),
    UNIT_TEST(filter_pseudo_files_never_shown),
    UNIT_TEST(filter_only_substrings_decide_alone),
    UNIT_TEST(filter_exclude_substrings_always_remove),
    UNIT_TEST(filter_profile_all_shows_every_real_file),
    UNIT_TEST(filter_null_lists_are_empty),
    UNIT_TEST(filter_keeps_its_own_copy_of_the_rules),
    UNIT_TEST(filter_reconfigure_replaces_the_rules),
    UNIT_TEST(filter_is_tells_the_same_rules),
    UNIT_TEST(filter_configure_out_of_memory),
    UNIT_TEST(filter_configure_failure_releases_what_it_mapped),
    {NULL, NULL, NULL},
};
