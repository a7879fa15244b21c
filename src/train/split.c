/* Checkpoints of split models (tensor and pipeline parallelism) and of
 * ZeRO's shards, written and read a tensor at a time: no rank holds the
 * whole model or the whole optimizer state. */
#include <string.h>

#include "trainer_internal.h"
#include "../backend/backend.h"

/* ---- split models (tensor and pipeline parallelism): checkpoints hold the whole model ----
 * A split run's checkpoint is the file a whole run writes (the same names,
 * shapes and flat optimizer state), so it resumes at any split, in one
 * process too, and test, evaluate and export read it as any other.
 *
 * Nothing holds the whole model to do so. The whole model's parameter list
 * (names, full shapes, and the stage that holds each) is put together from
 * the stages' lists. To save, each tensor in file order is gathered over
 * the tp group of the stage that holds it (a tied weight's copy on the last
 * stage is the same values: the first stage's is taken), sent to rank 0
 * over its pipeline group, and written there (ut_ckpt_writer): a process
 * holds its part and one whole tensor. To load, every rank reads the whole
 * tensors of its own parameters from the file, one at a time, and keeps
 * its part (ut_ckpt_reader). */

/* The whole model's parameters: this stage's list, as lines "key name ndim
 * d0 d1 ...", key the parameter's place in the whole model's order (-1: the
 * stages' lists one after the other are that order). */
static char *stage_list(const ut_params *p, int64_t *len) {
    size_t cap = 256, at = 0;
    char *s = ut_malloc_check(cap);
    for (int i = 0; i < p->n; i++) {
        size_t need = strlen(p->names[i]) + 40 + (size_t)UT_MAX_DIMS * 21;
        if (at + need >= cap) s = ut_realloc_check(s, cap = 2 * (at + need));
        at += (size_t)snprintf(s + at, cap - at, "%lld %s %d", p->ordered ? (long long)p->order[i] : -1LL, p->names[i],
                               p->t[i]->ndim);
        for (int d = 0; d < p->t[i]->ndim; d++) at += (size_t)snprintf(s + at, cap - at, " %lld", (long long)p->part[i].full_ne[d]);
        s[at++] = '\n';
    }
    s[at] = 0;
    *len = (int64_t)at;
    return s;
}

/* Appends stage's list text to t->wl: a name seen before (a tied weight)
 * keeps its first stage, and must have the same shape. */
static int add_stage(ut_trainer *t, int stage, char *text) {
    for (char *line = text, *next; line && *line; line = next) {
        next = strchr(line, '\n');
        if (next) *next++ = 0;
        ut_split_param e = {.owner = stage};
        char name[256];
        int used = 0;
        long long key;
        if (sscanf(line, "%lld %255s %d%n", &key, name, &e.ndim, &used) != 3 || e.ndim < 1 || e.ndim > UT_MAX_DIMS) {
            snprintf(t->err, sizeof t->err, "pipeline stage %d's parameter list: '%s'", stage, line);
            return -1;
        }
        e.numel = 1;
        for (int d = 0; d < e.ndim; d++) {
            long long v;
            int k;
            if (sscanf(line + used, " %lld%n", &v, &k) != 1) {
                snprintf(t->err, sizeof t->err, "pipeline stage %d's parameter list: '%s'", stage, line);
                return -1;
            }
            e.shape[d] = v, e.numel *= v, used += k;
        }
        int j = 0;
        while (j < t->nwl && strcmp(t->wl[j].name, name)) j++;
        if (j < t->nwl) {
            if (t->wl[j].numel != e.numel) {
                snprintf(t->err, sizeof t->err, "%s has %lld elements on pipeline stage %d and %lld on stage %d", name,
                         (long long)t->wl[j].numel, t->wl[j].owner, (long long)e.numel, stage);
                return -1;
            }
            continue;
        }
        size_t nl = strlen(name) + 1;
        e.name = memcpy(ut_malloc_check(nl), name, nl);
        e.order = key;
        t->wl = ut_realloc_check(t->wl, (size_t)(t->nwl + 1) * sizeof *t->wl);
        t->wl[t->nwl++] = e;
    }
    return 0;
}

int ut_split_whole_list(ut_trainer *t) {
    if (t->wl) return 0;
    int64_t len;
    char *mine = stage_list(&t->m->params, &len);
    int rc = 0;
    for (int s = 0; s < t->pp && !rc; s++) {
        int64_t n = len;
        char *text = mine;
        if (t->pp > 1) { /* stage s's list to every stage of this pipeline */
            if (ut_comm_bcast(t->mesh.pp_group, &n, sizeof n, s)) rc = ut_pp_fail(t, "the stages' parameter lists");
            if (!rc && s != t->mesh.pp_rank) text = ut_malloc_check((size_t)n + 1);
            if (!rc && ut_comm_bcast(t->mesh.pp_group, text, (size_t)n, s)) rc = ut_pp_fail(t, "the stages' parameter lists");
            text[n] = 0;
        }
        if (!rc) rc = add_stage(t, s, text);
        if (text != mine) ut_free(text);
    }
    ut_free(mine);
    /* a model whose stages know their parameters' places: the whole order
     * (a stable sort of a few hundred entries) */
    for (int i = 1; !rc && i < t->nwl && t->wl[0].order >= 0; i++)
        for (int j = i; j > 0 && t->wl[j - 1].order > t->wl[j].order; j--) {
            ut_split_param x = t->wl[j];
            t->wl[j] = t->wl[j - 1], t->wl[j - 1] = x;
        }
    return rc;
}

int64_t ut_split_whole_numel(ut_trainer *t) {
    int64_t n = 0;
    if (ut_split_whole_list(t)) return -1;
    for (int k = 0; k < t->nwl; k++) n += t->wl[k].numel;
    return n;
}

/* Where parameter i's values start in state buffer s of o (which covers
 * the whole of p): the states of the parameters before it. */
static int64_t state_at(const ut_optim *o, int s, const ut_params *p, int i) {
    int64_t at = 0;
    for (int k = 0; k < i; k++) at += ut_optim_seg_state_len(ut_optim_get_config(o), s, &p->segs[k]);
    return at;
}

int ut_split_save(ut_trainer *t, const char *path, ut_optim *o, const ut_train_state *st) {
    if (ut_split_whole_list(t)) return -1;
    const ut_params *p = &t->m->params;
    int ns = o ? ut_optim_nstate(o) : 0;
    char state[128] = "";
    if (o) ut_ckpt_state_names(o, state, sizeof state);
    ut_ckpt_writer *w = NULL;
    int wrc = 0, rc = 0; /* rank 0's writing, and the transfers (every rank's) */
    if (t->rank == 0) {
        ut_ckpt_entry *e = ut_calloc_check((size_t)t->nwl + 1, sizeof *e);
        for (int k = 0; k < t->nwl; k++) {
            e[k] = (ut_ckpt_entry){.name = t->wl[k].name, .ndim = t->wl[k].ndim};
            memcpy(e[k].shape, t->wl[k].shape, sizeof t->wl[k].shape);
        }
        w = ut_ckpt_writer_open(path, t->m->type, t->nwl, e, o ? state : NULL, o ? ut_optim_steps(o) : 0, st, t->err,
                                sizeof t->err);
        ut_free(e);
        wrc = w ? 0 : -1;
    }
    /* rank 0 keeps taking part when its writing failed: the others' transfers
     * must meet, and the confirmation after the save tells them */
    ut_device sdev = o ? ut_optim_get_config(o)->device : p->device;
    for (int s = -1; s < ns && !rc; s++)
        for (int k = 0; k < t->nwl && !rc; k++) {
            const ut_split_param *e = &t->wl[k];
            /* its values in this state: a float per element, but Adafactor's factored second moment */
            int64_t cnt = e->numel;
            if (s >= 0) {
                ut_param_seg whole = {0, e->numel, false, e->ndim >= 2 ? e->shape[e->ndim - 2] : 0,
                                      e->ndim >= 2 ? e->shape[e->ndim - 1] : 0};
                cnt = ut_optim_seg_state_len(ut_optim_get_config(o), s, &whole);
            }
            float *full = NULL;
            if (e->owner == t->mesh.pp_rank && t->mesh.dp_rank == 0) { /* this stage's tp group gathers it */
                int i = param_index(p, e->name);
                full = ut_malloc_check((size_t)(cnt ? cnt : 1) * sizeof(float));
                if (cnt != e->numel) { /* a state of its own size: whole on this stage (no tensor parallelism) */
                    ut_backend_get(sdev)->copy(full, ut_optim_state(o, s, NULL) + state_at(o, s, p, i),
                                               (size_t)cnt * sizeof(float), UT_COPY_D2H);
                } else {
                    const float *part = s < 0 ? p->flat + p->segs[i].offset : ut_optim_state(o, s, NULL) + state_at(o, s, p, i);
                    rc = ut_tp_gather_values(p, i, s < 0 ? p->device : sdev, part, t->mesh.tp_group, full, t->err,
                                             sizeof t->err);
                }
                if (!rc && e->owner != 0 && t->mesh.tp_rank == 0 &&
                    ut_comm_wait(t->mesh.pp_group, ut_comm_isend(t->mesh.pp_group, full, cnt, 0)))
                    rc = ut_pp_fail(t, "sending a tensor of the checkpoint");
            } else if (t->rank == 0) { /* from the stage that holds it */
                full = ut_malloc_check((size_t)(cnt ? cnt : 1) * sizeof(float));
                if (ut_comm_wait(t->mesh.pp_group, ut_comm_irecv(t->mesh.pp_group, full, cnt, e->owner)))
                    rc = ut_pp_fail(t, "receiving a tensor of the checkpoint");
            }
            if (!rc && t->rank == 0 && !wrc) wrc = ut_ckpt_writer_put(w, full, cnt, t->err, sizeof t->err);
            ut_free(full);
        }
    if (t->rank == 0 && ut_ckpt_writer_close(w, !rc && !wrc, !rc && !wrc ? t->err : NULL, sizeof t->err)) wrc = -1;
    return rc || wrc ? -1 : 0;
}

int ut_split_agree(ut_trainer *t, int *lrc, char *why, size_t n) {
    int64_t failed[2] = {*lrc != 0, *lrc != 0 ? t->rank : 0};
    if (ut_comm_allreduce_i64(t->comm, failed, 2)) {
        snprintf(t->err, sizeof t->err, "agreeing on a checkpoint: %s", ut_comm_error(t->comm));
        return -1;
    }
    if (failed[0] && !*lrc) {
        *lrc = -1;
        snprintf(why, n, "%lld rank%s could not read %s part%s of it (rank %lld's log says why)", (long long)failed[0],
                 failed[0] == 1 ? "" : "s", failed[0] == 1 ? "its" : "their", failed[0] == 1 ? "" : "s",
                 (long long)(failed[0] == 1 ? failed[1] : 0));
    }
    return 0;
}

int ut_split_load(ut_trainer *t, const char *path, ut_optim *o, ut_train_state *st, char *err, size_t n) {
    if (ut_split_whole_list(t)) return snprintf(err, n, "%s", t->err), -1;
    ut_ckpt_reader *r = ut_ckpt_reader_open(path, t->m->type, st, err, n);
    if (!r) return -1;
    const ut_params *p = &t->m->params;
    int rc = 0;
    /* the file's parameters are the whole model's */
    for (int j = 0; j < ut_ckpt_reader_nparams(r) && !rc; j++) {
        const char *name = ut_ckpt_reader_param_name(r, j);
        int k = 0;
        while (k < t->nwl && strcmp(t->wl[k].name, name)) k++;
        if (k == t->nwl) rc = ut_errorf(err, n, "%s: tensor model.%s is not a parameter of this %s model", path, name,
                                        t->m->type);
    }
    int ns = o ? ut_optim_nstate(o) : 0;
    char want[128] = "";
    if (o) ut_ckpt_state_names(o, want, sizeof want);
    int64_t steps = 0;
    if (!rc && o) rc = ut_ckpt_reader_optim(r, want, &steps, err, n);
    /* read into host parts first: nothing changes unless all of it loads;
     * parts holds the parameters, then each state buffer (len[s] floats) */
    int64_t len[3] = {p->numel, 0, 0}, base[3] = {0, 0, 0};
    for (int s = 0; s < ns; s++) len[s + 1] = ut_optim_state_len(o, s);
    for (int s = 1; s <= ns; s++) base[s] = base[s - 1] + len[s - 1];
    int64_t total = base[ns] + len[ns];
    float *parts = rc ? NULL : ut_malloc_check((size_t)(total ? total : 1) * sizeof(float));
    for (int i = 0; i < p->n && !rc; i++) {
        const ut_tensor *pt = p->t[i];
        const ut_partition *part = &p->part[i];
        int64_t full_n = ut_tp_full_numel(p, i);
        float *full = ut_malloc_check((size_t)(full_n ? full_n : 1) * sizeof(float));
        for (int s = -1; s < ns && !rc; s++) {
            const char *sname = "";
            if (s >= 0) ut_optim_state(o, s, &sname);
            int64_t cnt = s < 0 ? p->segs[i].numel : ut_optim_seg_state_len(ut_optim_get_config(o), s, &p->segs[i]);
            float *dst = parts + base[s + 1] + (s < 0 ? p->segs[i].offset : state_at(o, s, p, i));
            if (s >= 0 && cnt != p->segs[i].numel) { /* a state of its own size, whole here (no tensor parallelism) */
                rc = ut_ckpt_reader_state(r, sname, p->names[i], cnt, dst, err, n);
                continue;
            }
            rc = s < 0 ? ut_ckpt_reader_param(r, p->names[i], pt->ndim, part->full_ne, full, err, n)
                       : ut_ckpt_reader_state(r, sname, p->names[i], full_n, full, err, n);
            if (!rc) ut_tp_part_values(p, i, full, dst);
        }
        ut_free(full);
    }
    ut_ckpt_reader_close(r);
    if (!rc) { /* all of it read: into the parameters and the optimizer */
        ut_backend_get(p->device)->copy(p->flat, parts, (size_t)p->numel * sizeof(float), UT_COPY_H2D);
        for (int s = 0; s < ns; s++)
            ut_backend_get(ut_optim_get_config(o)->device)
                ->copy(ut_optim_state(o, s, NULL), parts + base[s + 1], (size_t)len[s + 1] * sizeof(float), UT_COPY_H2D);
        if (o) ut_optim_set_steps(o, steps);
    }
    ut_free(parts);
    return rc;
}

int ut_split_whole_model(ut_trainer *t) {
    if (ut_split_whole_list(t)) return -1;
    /* every rank builds it (the same initial values), then takes the stages' */
    int brc = 0;
    if (!t->whole && !(t->whole = ut_model_from_config(t->cfg, t->train, t->err, sizeof t->err))) brc = -1;
    int64_t bad = brc != 0;
    if (ut_comm_allreduce_i64(t->comm, &bad, 1)) return ut_pp_fail(t, "building the whole model to generate");
    if (bad) {
        if (!brc) snprintf(t->err, sizeof t->err, "building the whole model to generate failed on another rank");
        return -1;
    }
    const ut_params *p = &t->m->params;
    ut_params *wp = &t->whole->params;
    const ut_backend *be = ut_backend_get(wp->device);
    int rc = 0;
    for (int k = 0; k < t->nwl && !rc; k++) {
        const ut_split_param *e = &t->wl[k];
        int wi = param_index(wp, e->name);
        if (wi < 0 || wp->segs[wi].numel != e->numel) {
            /* the same on every rank: the lists and the whole model agree everywhere */
            snprintf(t->err, sizeof t->err, "the whole model built to generate has %s %s",
                     wi < 0 ? "no" : "another shape of", e->name);
            return -1;
        }
        float *full = ut_malloc_check((size_t)e->numel * sizeof(float));
        if (e->owner == t->mesh.pp_rank) /* this stage's tp group puts it together */
            rc = ut_tp_gather_param(p, param_index(p, e->name), t->mesh.tp_group, full, t->err, sizeof t->err);
        if (!rc && ut_comm_bcast(t->mesh.pp_group, full, (size_t)e->numel * sizeof(float), e->owner))
            rc = ut_pp_fail(t, "sending the stages' parameters to generate");
        if (!rc) be->copy(wp->flat + wp->segs[wi].offset, full, (size_t)e->numel * sizeof(float), UT_COPY_H2D);
        ut_free(full);
    }
    return rc;
}

void ut_split_free(ut_trainer *t) {
    if (t->whole) ut_model_free(t->whole);
    t->whole = NULL;
    for (int k = 0; k < t->nwl; k++) ut_free(t->wl[k].name);
    ut_free(t->wl);
    t->wl = NULL;
    t->nwl = 0;
}

/* ---- ZeRO: checkpoints from the shards ----
 * A sharded strategy (zero1/2/3, with or without Offload) holds 1/N of the
 * optimizer state on each rank, as [lo, hi) of the flat buffer, the ranks'
 * ranges in rank order. The file's optim.* tensors are that flat buffer, so
 * rank 0 writes each state as the ranks' shards arrive in rank order, and
 * each rank reads back only its own range: no rank holds the whole state. */
int ut_shard_save(ut_trainer *t, const char *path) {
    const ut_params *p = &t->m->params;
    ut_optim *o = t->o;
    /* hybrid sharding: the shard group of rank 0 writes, the replicas of its
     * shards hold the same state */
    if (t->replicas && ut_comm_rank(t->replicas) != 0) return 0;
    ut_comm *c = t->shard_group ? t->shard_group : t->comm;
    int ns = ut_optim_nstate(o), W = ut_comm_size(c), me = ut_comm_rank(c);
    int64_t lo, hi;
    ut_dist_shard(t->dist, &lo, &hi);
    int64_t *cnt = ut_calloc_check((size_t)W, sizeof *cnt);
    cnt[me] = hi - lo;
    if (ut_comm_allreduce_i64(c, cnt, W)) {
        snprintf(t->err, sizeof t->err, "the shards' sizes: %s", ut_comm_error(c));
        ut_free(cnt);
        return -1;
    }
    char state[128];
    ut_ckpt_state_names(o, state, sizeof state);
    ut_ckpt_writer *w = NULL;
    int wrc = 0, rc = 0;
    if (me == 0) {
        ut_ckpt_entry *e = ut_calloc_check((size_t)p->n + 1, sizeof *e);
        for (int i = 0; i < p->n; i++) {
            e[i] = (ut_ckpt_entry){.name = p->names[i], .ndim = p->t[i]->ndim};
            memcpy(e[i].shape, p->t[i]->ne, (size_t)p->t[i]->ndim * sizeof(int64_t));
        }
        w = ut_ckpt_writer_open(path, t->m->type, p->n, e, state, ut_optim_steps(o), &t->st, t->err, sizeof t->err);
        ut_free(e);
        if (!w) wrc = -1;
        ut_stage st; /* the parameters, gathered on every rank before this */
        const float *h = ut_stage_begin(&st, ut_backend_get(p->device), p->flat, (size_t)p->numel * sizeof(float), true);
        if (!wrc) wrc = ut_ckpt_writer_put(w, h, p->numel, t->err, sizeof t->err);
        ut_stage_end(&st, false);
    }
    int64_t most = 0;
    for (int r = 0; r < W; r++) most = cnt[r] > most ? cnt[r] : most;
    float *mine = ut_malloc_check((size_t)(hi - lo + 1) * sizeof(float));
    float *buf = me == 0 ? ut_malloc_check((size_t)(most + 1) * sizeof(float)) : NULL;
    const ut_backend *obe = ut_backend_get(ut_optim_get_config(o)->device);
    for (int s = 0; s < ns && !rc; s++) {
        obe->copy(mine, ut_optim_state(o, s, NULL), (size_t)(hi - lo) * sizeof(float), UT_COPY_D2H);
        if (me != 0) {
            if (ut_comm_wait(c, ut_comm_isend(c, mine, hi - lo, 0))) rc = -1;
            continue;
        }
        for (int r = 0; r < W && !rc; r++) {
            const float *v = mine;
            if (r > 0) {
                if (ut_comm_wait(c, ut_comm_irecv(c, buf, cnt[r], r))) rc = -1;
                v = buf;
            }
            if (!rc && !wrc) wrc = ut_ckpt_writer_put(w, v, cnt[r], t->err, sizeof t->err);
        }
    }
    if (rc) snprintf(t->err, sizeof t->err, "the optimizer's shards for %s: %s", path, ut_comm_error(c));
    if (me == 0 && ut_ckpt_writer_close(w, !rc && !wrc, !rc && !wrc ? t->err : NULL, sizeof t->err)) wrc = -1;
    ut_free(mine);
    ut_free(buf);
    ut_free(cnt);
    return rc || wrc ? -1 : 0;
}

int ut_shard_load(ut_trainer *t, const char *path, ut_train_state *st, char *err, size_t n) {
    const ut_params *p = &t->m->params;
    ut_optim *o = t->o;
    int ns = ut_optim_nstate(o);
    int64_t lo, hi, steps = 0;
    ut_dist_shard(t->dist, &lo, &hi);
    ut_ckpt_reader *r = ut_ckpt_reader_open(path, t->m->type, st, err, n);
    if (!r) return -1;
    char want[128];
    ut_ckpt_state_names(o, want, sizeof want);
    int rc = ut_ckpt_reader_optim(r, want, &steps, err, n);
    for (int j = 0; j < ut_ckpt_reader_nparams(r) && !rc; j++)
        if (!ut_model_param(t->m, ut_ckpt_reader_param_name(r, j)))
            rc = ut_errorf(err, n, "%s: tensor model.%s is not a parameter of this %s model", path,
                           ut_ckpt_reader_param_name(r, j), t->m->type);
    /* read into host memory first: nothing changes unless all of it loads */
    float *params = ut_malloc_check((size_t)(p->numel + 1) * sizeof(float));
    float *shard = ut_malloc_check((size_t)((hi - lo) * ns + 1) * sizeof(float));
    for (int i = 0; i < p->n && !rc; i++)
        rc = ut_ckpt_reader_param(r, p->names[i], p->t[i]->ndim, p->t[i]->ne, params + p->segs[i].offset, err, n);
    for (int s = 0; s < ns && !rc; s++) {
        const char *name;
        ut_optim_state(o, s, &name);
        rc = ut_ckpt_reader_state_range(r, name, p, lo, hi, shard + (size_t)s * (size_t)(hi - lo), err, n);
    }
    ut_ckpt_reader_close(r);
    if (!rc) {
        ut_backend_get(p->device)->copy(p->flat, params, (size_t)p->numel * sizeof(float), UT_COPY_H2D);
        const ut_backend *obe = ut_backend_get(ut_optim_get_config(o)->device);
        for (int s = 0; s < ns; s++)
            obe->copy(ut_optim_state(o, s, NULL), shard + (size_t)s * (size_t)(hi - lo), (size_t)(hi - lo) * sizeof(float),
                      UT_COPY_H2D);
        ut_optim_set_steps(o, steps);
    }
    ut_free(params);
    ut_free(shard);
    return rc;
}
