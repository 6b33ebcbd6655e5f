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

line_record *line_stats_at(uint32_t site, int lineno)
{
    table_key key = {(uint64_t)site, (uint64_t)(int64_t)lineno};
    int created;
    return initialised ? table_upsert(&locations, key, &created) : NULL;
}

line_record *line_stats_next(size_t *cursor, uint32_t *site, int *lineno)
{
    table_key key;
    line_record *rec = initialised ? table_next(&locations, cursor, &key) : NULL;
    if (rec != NULL) {
        *site = (uint32_t)key.k1;
        *lineno = (int)(int64_t)key.k2;
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

void cpu_sums_add_estimate(cpu_sums *into, int native, int loop_idle, int gil_alone, double on_cpu, double runq,
                           double core_fraction)
{
    double off = 1.0 - on_cpu;
    runq = runq < 0.0 ? 0.0 : runq > off ? off : runq;
    double idle = 0.0;
    if (native && loop_idle) {
        idle = off - runq;
        into->est_native += on_cpu;
        into->est_loop_idle += idle;
    } else if (native) {
        into->est_native += on_cpu;
        into->est_system += off - runq;
    } else if (gil_alone) {
        into->est_python += on_cpu;
        runq = off;
    } else {
        into->est_python += on_cpu;
        into->est_gil_wait += off - runq;
    }
    into->est_cpu_wait += runq;
    into->est_busy += core_fraction * (1.0 - idle); /* the idle part is in no total */
    double cpu_kind = native ? on_cpu : 0.0, python = native ? 0.0 : on_cpu;
    double system = native && !loop_idle ? off - runq : 0.0;
    double gil = !native && !gil_alone ? off - runq : 0.0;
    double parts[CPU_VARS] = {python, cpu_kind, system, gil, runq, python + cpu_kind + system + gil + runq};
    for (int k = 0; k < CPU_VARS; k++) {
        into->est_var[k] += parts[k] * parts[k];
    }
}

void cpu_sums_variance(const cpu_sums *s, double unit_ns, double out[CPU_VARS])
{
    for (int k = 0; k < CPU_VARS; k++) {
        out[k] = s->var[k] + s->est_var[k] * unit_ns * unit_ns;
    }
}

void cpu_sums_add_draw(cpu_sums *into, const double parts[CPU_VARS])
{
    for (int k = 0; k < CPU_VARS; k++) {
        into->var[k] += parts[k] * parts[k];
    }
}

void cpu_sums_resolve(const cpu_sums *s, double unit_ns, cpu_totals *out)
{
    out->python_ns = (double)s->python_ns + s->est_python * unit_ns;
    out->native_ns = (double)s->native_ns + s->est_native * unit_ns;
    out->system_ns = (double)s->system_ns + s->est_system * unit_ns;
    out->gil_wait_ns = (double)s->gil_wait_ns + s->est_gil_wait * unit_ns;
    out->cpu_wait_ns = (double)s->cpu_wait_ns + s->est_cpu_wait * unit_ns;
    out->loop_idle_ns = (double)s->loop_idle_ns + s->est_loop_idle * unit_ns;
    out->busy_core_ns = s->busy_core_ns + s->est_busy * unit_ns;
}

void cpu_sums_add(cpu_sums *into, const cpu_window *w, int count_off_cpu, double core_fraction)
{
    double parts[CPU_VARS];
    cpu_sums_add_parts(into, w, count_off_cpu, core_fraction, parts);
    cpu_sums_add_draw(into, parts);
}

void cpu_sums_add_parts(cpu_sums *into, const cpu_window *w, int count_off_cpu, double core_fraction,
                        double parts[CPU_VARS])
{
    for (int k = 0; k < CPU_VARS; k++) {
        parts[k] = 0.0;
    }
    uint64_t cpu = w->cpu_ns > w->wall_ns ? w->wall_ns : w->cpu_ns;
    uint64_t off = count_off_cpu ? w->wall_ns - cpu : 0;
    uint64_t runq = w->runq_ns > off ? off : w->runq_ns;
    uint64_t idle = 0;
    if (w->native && w->loop_idle) {
        idle = off - runq;
        into->native_ns += cpu;
        into->loop_idle_ns += idle;
        parts[VAR_NATIVE] = (double)cpu;
    } else if (w->native) {
        into->native_ns += cpu;
        into->system_ns += off - runq;
        parts[VAR_NATIVE] = (double)cpu;
        parts[VAR_SYSTEM] = (double)(off - runq);
    } else if (w->gil_alone) {
        into->python_ns += cpu;
        runq = off;
        parts[VAR_PYTHON] = (double)cpu;
    } else {
        into->python_ns += cpu;
        into->gil_wait_ns += off - runq;
        parts[VAR_PYTHON] = (double)cpu;
        parts[VAR_GIL_WAIT] = (double)(off - runq);
    }
    into->cpu_wait_ns += runq;
    parts[VAR_CPU_WAIT] = (double)runq;
    parts[VAR_TIME] = (double)(cpu + off - idle);
    into->busy_core_ns += core_fraction * (double)(cpu + off - idle); /* the idle part is in no total */
    into->samples++;
}

void cpu_sums_add_cpu(cpu_sums *into, uint64_t ns, int native, double core_fraction)
{
    double x = (double)ns;
    if (native) {
        into->native_ns += ns;
        into->var[VAR_NATIVE] += x * x;
    } else {
        into->python_ns += ns;
        into->var[VAR_PYTHON] += x * x;
    }
    into->var[VAR_TIME] += x * x;
    into->busy_core_ns += core_fraction * (double)ns;
}
