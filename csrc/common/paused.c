#include "paused.h"

#include <stdatomic.h>

static atomic_int paused;

int paused_now(void)
{
    return atomic_load_explicit(&paused, memory_order_relaxed);
}

void paused_set(int value)
{
    atomic_store_explicit(&paused, value, memory_order_relaxed);
}
