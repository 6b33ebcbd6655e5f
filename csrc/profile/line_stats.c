#include "line_stats.h"
#include "../common/table.h"

static table locations;
static int initialised;

int line_stats_init(void)
{
    if (initialised) {
        return 0;
    }
    if (table_init(&locations, sizeof(line_record), 4096) != 0) {
        return -1;
    }
    initialised = 1;
    return 0;
}

line_record *line_stats_at(PyCodeObject *code, int lasti)
{
    table_key key = {(uint64_t)(uintptr_t)code, (uint64_t)(int64_t)lasti};
    int created;
    return initialised ? table_upsert(&locations, key, &created) : NULL;
}

line_record *line_stats_next(size_t *cursor, PyCodeObject **code, int *lasti)
{
    table_key key;
    line_record *rec = initialised ? table_next(&locations, cursor, &key) : NULL;
    if (rec != NULL) {
        *code = (PyCodeObject *)(uintptr_t)key.k1;
        *lasti = (int)(int64_t)key.k2;
    }
    return rec;
}

size_t line_stats_memory_bytes(void)
{
    return initialised ? table_memory_bytes(&locations) : 0;
}

void line_stats_release(void)
{
    if (initialised) {
        table_release(&locations);
        initialised = 0;
    }
}

void cpu_sums_add_estimate(cpu_sums *into, int native, double on_cpu, double core_fraction)
{
    if (native) {
        into->est_native += on_cpu;
    } else {
        into->est_python += on_cpu;
    }
    into->est_system += 1.0 - on_cpu;
    into->est_busy += core_fraction;
}

void cpu_sums_resolve(const cpu_sums *s, double unit_ns, double *python_ns, double *native_ns,
                      double *system_ns, double *busy_core_ns)
{
    *python_ns = (double)s->python_ns + s->est_python * unit_ns;
    *native_ns = (double)s->native_ns + s->est_native * unit_ns;
    *system_ns = (double)s->system_ns + s->est_system * unit_ns;
    *busy_core_ns = s->busy_core_ns + s->est_busy * unit_ns;
}

void cpu_sums_add(cpu_sums *into, uint64_t python_ns, uint64_t native_ns, uint64_t system_ns,
                  double core_fraction)
{
    into->python_ns += python_ns;
    into->native_ns += native_ns;
    into->system_ns += system_ns;
    into->busy_core_ns += core_fraction * (double)(python_ns + native_ns + system_ns);
    into->samples++;
}
