/* Checkpoints of split models (tensor and pipeline parallelism): the whole
 * model gathered from the ranks' parts, and the parts taken from it. */
#include <string.h>

#include "trainer_internal.h"

/* ---- split models (tensor and pipeline parallelism): checkpoints hold the whole model ----
 * A split run's checkpoint is the file a whole run writes (the same names,
 * shapes and flat optimizer state), so it resumes at any split, in one
 * process too, and test, evaluate and export read it as any other. Each
 * parameter and each of its optimizer state's segments is gathered from
 * the parts over the tp group and from the pipeline stage that holds it
 * (the first that does: a tied weight's copy on the last stage is the same
 * values) into a whole model built from the config (t->whole, made at the
 * first save, load or pipeline evaluation and kept), which rank 0 writes;
 * loading reads the file into that model and hands each rank its part, by
 * name. The whole model costs one copy of the parameters (and, while a
 * checkpoint is read or written, of the optimizer's state) on every rank. */
int64_t ut_split_whole_numel(const ut_trainer *t) {
    int64_t n = 0;
    for (int i = 0; i < t->m->params.n; i++) n += ut_tp_full_numel(&t->m->params, i);
    return n;
}


ut_model *ut_split_whole_model(ut_trainer *t) {
    if (t->whole) return t->whole;
    char why[512];
    ut_model *w = ut_model_from_config(t->cfg, t->train, why, sizeof why);
    if (!w) {
        snprintf(t->err, sizeof t->err, "the whole model for checkpoints: %s", why);
        return NULL;
    }
    const ut_params *p = &t->m->params, *q = &w->params;
    for (int i = 0; i < p->n; i++) {
        int k = param_index(q, p->names[i]);
        if (k < 0 || ut_tp_full_numel(p, i) != q->segs[k].numel) {
            snprintf(t->err, sizeof t->err, "the split model's parameter %s is not the whole model's", p->names[i]);
            ut_model_free(w);
            return NULL;
        }
    }
    /* which stage holds each whole parameter: a bit per stage, summed over the pipeline */
    t->owner = ut_calloc_check((size_t)(q->n ? q->n : 1), sizeof *t->owner);
    int64_t *bits = ut_calloc_check((size_t)(q->n ? q->n : 1), sizeof *bits);
    for (int k = 0; k < q->n; k++) bits[k] = param_index(p, q->names[k]) >= 0 ? (int64_t)1 << t->mesh.pp_rank : 0;
    if (t->pp > 1 && ut_comm_allreduce_i64(t->mesh.pp_group, bits, q->n)) {
        snprintf(t->err, sizeof t->err, "the stages' parameters: %s", ut_comm_error(t->mesh.pp_group));
        ut_free(bits);
        ut_model_free(w);
        return NULL;
    }
    for (int k = 0; k < q->n; k++) {
        int s = 0;
        while (s < 63 && !(bits[k] >> s & 1)) s++;
        t->owner[k] = s;
        if (!bits[k]) {
            snprintf(t->err, sizeof t->err, "no pipeline stage holds %s", q->names[k]);
            ut_free(bits);
            ut_model_free(w);
            return NULL;
        }
    }
    ut_free(bits);
    return t->whole = w;
}

ut_optim *ut_split_whole_optimizer(ut_trainer *t) {
    ut_params *q = &t->whole->params;
    return ut_optim_new(ut_optim_get_config(t->o), q->flat, q->flat_grad, q->segs, q->n, 0, q->numel);
}

/* The parts' parameters (and, with wo, the optimizer state of o, which
 * covers this rank's whole part) into the whole model, on every rank
 * (collectives over the tp group and the pipeline). */
int ut_split_gather(ut_trainer *t, ut_optim *o, ut_optim *wo) {
    const ut_params *p = &t->m->params;
    ut_params *q = &t->whole->params;
    const ut_backend *be = ut_backend_get(q->device);
    int ns = wo ? ut_optim_nstate(o) : 0, rc = 0;
    for (int k = 0; k < q->n && !rc; k++) {
        int i = param_index(p, q->names[k]);
        bool mine = t->owner[k] == t->mesh.pp_rank;
        size_t bytes = (size_t)q->segs[k].numel * sizeof(float);
        float *full = ut_malloc_check(bytes ? bytes : 1);
        for (int s = -1; s < ns && !rc; s++) {
            const char *name;
            if (mine) {
                const float *part = s < 0 ? p->flat + p->segs[i].offset : ut_optim_state(o, s, &name) + p->segs[i].offset;
                rc = ut_tp_gather_values(p, i, part, t->mesh.tp_group, full, t->err, sizeof t->err);
            }
            if (!rc && t->pp > 1 && ut_comm_bcast(t->mesh.pp_group, full, bytes, t->owner[k])) {
                snprintf(t->err, sizeof t->err, "%s from pipeline stage %d: %s", q->names[k], t->owner[k],
                         ut_comm_error(t->mesh.pp_group));
                rc = -1;
            }
            float *dst = s < 0 ? q->flat + q->segs[k].offset : ut_optim_state(wo, s, &name) + q->segs[k].offset;
            if (!rc) be->copy(dst, full, bytes, UT_COPY_H2D);
        }
        ut_free(full);
    }
    if (wo) ut_optim_set_steps(wo, ut_optim_steps(o));
    return rc;
}

/* The whole model's parameters (and, with wo, optimizer state into o, which
 * covers this rank's whole part) into this rank's parts, by name (no
 * communication). */
void ut_split_scatter(ut_trainer *t, ut_optim *wo, ut_optim *o) {
    ut_params *p = &t->m->params;
    const ut_params *q = &t->whole->params;
    const ut_backend *be = ut_backend_get(q->device);
    int ns = wo ? ut_optim_nstate(o) : 0;
    for (int i = 0; i < p->n; i++) {
        int k = param_index(q, p->names[i]);
        float *full = ut_malloc_check((size_t)(q->segs[k].numel ? q->segs[k].numel : 1) * sizeof(float));
        size_t bytes = (size_t)q->segs[k].numel * sizeof(float);
        for (int s = -1; s < ns; s++) {
            const char *name;
            const float *src = s < 0 ? q->flat + q->segs[k].offset : ut_optim_state(wo, s, &name) + q->segs[k].offset;
            float *part = s < 0 ? p->flat + p->segs[i].offset : ut_optim_state(o, s, &name) + p->segs[i].offset;
            be->copy(full, src, bytes, UT_COPY_D2H);
            ut_tp_scatter_values(p, i, part, full);
        }
        ut_free(full);
    }
    if (wo) ut_optim_set_steps(o, ut_optim_steps(wo));
}

