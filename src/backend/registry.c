/* The backend registry, generated from backends.def. */
#include <stdio.h>

#include "backend.h"

#define UT_BACKEND(DEV, name) extern const ut_backend ut_backend_##name;
#include "backends.def"
#undef UT_BACKEND

static const ut_backend *const registry[UT_DEVICE_COUNT] = {
#define UT_BACKEND(DEV, name) [UT_##DEV] = &ut_backend_##name,
#include "backends.def"
#undef UT_BACKEND
};

const ut_backend *ut_backend_get(ut_device dev) {
    return (unsigned)dev < UT_DEVICE_COUNT ? registry[dev] : NULL;
}

int ut_backend_check(ut_device dev, char *err, size_t n) {
    if (ut_backend_get(dev)) return 0;
    char have[128] = "";
    size_t k = 0;
    for (int d = 0; d < UT_DEVICE_COUNT && k < sizeof have; d++)
        if (registry[d])
            k += (size_t)snprintf(have + k, sizeof have - k, "%s%s", k ? ", " : "",
                                  registry[d]->name);
    if (err && n)
        snprintf(err, n, "device %s: this build of utrain has no %s backend (built in: %s)",
                 ut_device_name(dev), ut_device_name(dev), have);
    return -1;
}
