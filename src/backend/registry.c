/* The backend registry, generated from backends.def;
 * host staging of device memory (device-neutral: it uses only the table). */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>

#include "backend.h"
#include "utrain/base.h"

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
    const ut_backend *be = ut_backend_get(dev);
    if (be && be->available) {
        char why[256];
        if (be->available(why, sizeof why) == 0) return 0;
        if (err && n) snprintf(err, n, "device %s: %s", ut_device_name(dev), why);
        return -1;
    }
    if (be) return 0;
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


// --- kernel context ------------------------------------------------------------

void ut_kfail(const ut_kctx *k, const char *fmt, ...) {
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    k->fail(k, msg);
}

// --- streams and events -----------------------------------------------------------

void ut_copy_async(const ut_backend *be, void *dst, const void *src, size_t bytes, ut_copy_kind kind, void *stream) {
    if (be->copy_async) be->copy_async(dst, src, bytes, kind, stream);
    else be->copy(dst, src, bytes, kind);
}
void ut_memset_async(const ut_backend *be, void *p, int v, size_t bytes, void *stream) {
    if (be->memset_async) be->memset_async(p, v, bytes, stream);
    else be->memset(p, v, bytes);
}
/* A backend without events: a token that is not NULL, and waits that are done. */
static char no_event;
void *ut_event_new(const ut_backend *be) { return be->event_new ? be->event_new() : &no_event; }
void ut_event_record(const ut_backend *be, void *ev, void *stream) {
    if (be->event_record) be->event_record(ev, stream);
}
void ut_event_wait(const ut_backend *be, void *stream, void *ev) {
    if (be->event_wait) be->event_wait(stream, ev);
}
void ut_event_sync(const ut_backend *be, void *ev) {
    if (be->event_sync) be->event_sync(ev);
}
bool ut_event_done(const ut_backend *be, void *ev) { return be->event_done ? be->event_done(ev) : true; }
void ut_event_free(const ut_backend *be, void *ev) {
    if (be->event_free && ev) be->event_free(ev);
}

// --- host memory for copies -----------------------------------------------------

void ut_sum_sq_to(const ut_backend *be, double *dst, const float *x, int64_t n) {
    if (be->sum_sq_to) {
        be->sum_sq_to(dst, x, n);
        return;
    }
    double v = be->sum_sq(x, n);
    be->copy(dst, &v, sizeof v, UT_COPY_H2D);
}

void ut_step_scalars(const ut_backend *be, float *dst, const double *sq, double max_norm, float scale) {
    if (be->step_scalars) {
        be->step_scalars(dst, sq, max_norm, scale);
        return;
    }
    double v, norm;
    float h[2];
    be->copy(&v, sq, sizeof v, UT_COPY_D2H);
    h[1] = ut_step_scalars_rule(sqrt(v), max_norm, scale, &h[0], &norm) ? 1.0f : 0.0f;
    be->copy(dst, h, sizeof h, UT_COPY_H2D);
}

void *ut_host_alloc(const ut_backend *be, size_t bytes) {
    return be->host_alloc ? be->host_alloc(bytes) : ut_aligned_alloc_check(bytes ? bytes : 64);
}

void ut_host_free(const ut_backend *be, void *p) {
    if (be->host_free) be->host_free(p);
    else ut_free(p);
}

// --- host staging -------------------------------------------------------------

void *ut_stage_begin(ut_stage *s, const ut_backend *be, void *dev, size_t bytes, bool read) {
    *s = (ut_stage){.be = be, .dev = dev, .host = dev, .bytes = bytes, .open = true};
    if (be->host_memory) return dev;
    s->host = ut_aligned_alloc_check(bytes);
    if (read && bytes) be->copy(s->host, dev, bytes, UT_COPY_D2H);
    return s->host;
}

void ut_stage_end(ut_stage *s, bool write) {
    if (!s->open) return;
    s->open = false;
    if (s->be->host_memory) return;
    if (write && s->bytes) s->be->copy(s->dev, s->host, s->bytes, UT_COPY_H2D);
    ut_free(s->host);
    s->host = NULL;
}
