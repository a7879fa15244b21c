/* Test mode on a split model's parts: `utrain test` of a run with
 * dist.tensor_parallel or dist.pipeline_parallel, started on as many
 * processes as the split takes (or a multiple), builds each rank's part as
 * training did, reads its part of the checkpoint, and evaluates through the
 * parts: a tensor-parallel group over its data-parallel share, a pipeline
 * through its stages with the last stage's results and outputs handed to
 * the others (rank 0 writes the files). No rank holds the whole model. */
#include <string.h>

#include "trainer_internal.h"

ut_trainer *ut_split_test_open(const ut_config *c, ut_comm *comm, const ut_dataset *data, const ut_hooks *h,
                               char *err, size_t n) {
    ut_trainer *t = ut_calloc_check(1, sizeof *t);
    t->cfg = c, t->comm = comm, t->rank = ut_comm_rank(comm), t->world = ut_comm_size(comm);
    t->tp = (int)c->tensor_parallel, t->pp = (int)c->pipeline_parallel;
    ut_hooks_resolve(&t->h, h);
    char why[512];
    if (ut_mesh_init(&t->mesh, comm, t->tp, t->pp, why, sizeof why)) {
        snprintf(err, n, "%s (start %d x N processes)", why, t->tp * t->pp);
        ut_free(t);
        return NULL;
    }
    t->have_mesh = true;
    t->dcomm = t->mesh.dp_group, t->drank = t->mesh.dp_rank, t->dworld = t->mesh.dp;
    ut_model_layout lay = {.tp_rank = t->mesh.tp_rank, .tp_size = t->tp,
                           .tp = t->tp > 1 ? ut_tp_hooks_of(t->mesh.tp_group) : (ut_tp_hooks){0},
                               .seq_parallel = c->sequence_parallel,
                           .pp_rank = t->mesh.pp_rank, .pp_size = t->pp};
    t->m = ut_model_from_config_layout(c, data, &lay, err, n);
    if (!t->m || ut_split_whole_list(t)) {
        if (t->m) snprintf(err, n, "%s", t->err);
        ut_split_test_free(t);
        return NULL;
    }
    t->ctx = ut_ctx_new(&(ut_ctx_opts){.seed = (uint64_t)c->seed, .device = ut_config_device(c)});
    ut_run_ctx_setup(t->ctx, c);
    ut_ctx_set_autocast(t->ctx, ut_run_eval_precision(c)); /* train.eval_precision */
    t->pp_wire = ut_run_precision(c);
    return t;
}

int ut_split_test_load(ut_trainer *t, const char *path, ut_train_state *st, char *err, size_t n) {
    int lrc = ut_split_load(t, path, NULL, st, err, n);
    if (ut_split_agree(t, &lrc, err, n)) return snprintf(err, n, "%s", t->err), -1;
    return lrc;
}

int ut_split_test_eval(void *arg, ut_dataset *ds, int64_t batch, ut_eval_result *res, double *outputs, bool *have,
                       char *err, size_t n) {
    ut_trainer *t = arg;
    if (t->pp == 1)
        return ut_evaluate_outputs(t->dcomm, t->ctx, t->m, ds, batch, &t->h, ut_cls_wanted(t->cfg), res, outputs,
                                   have, err, n);
    int rc = ut_pp_evaluate(t, ds, batch, NULL, NULL, res, outputs, have);
    if (rc) snprintf(err, n, "%s", t->err);
    return rc ? -1 : 0;
}

ut_model *ut_split_test_model(ut_trainer *t) { return t->m; }
ut_comm *ut_split_test_dcomm(ut_trainer *t) { return t->dcomm; }

void ut_split_test_free(ut_trainer *t) {
    if (!t) return;
    ut_pp_free(t);
    ut_split_free(t);
    if (t->ctx) ut_ctx_free(t->ctx);
    if (t->m) ut_model_free(t->m);
    if (t->have_mesh) ut_mesh_free(&t->mesh);
    ut_free(t);
}
