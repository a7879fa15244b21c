/* Hugging Face model directories, as save_pretrained writes them: config.json
 * read into model options, model.safetensors loaded into a model's parameters
 * by name with every tensor's shape and dtype checked. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>

#include "utrain/base.h"
#include "utrain/io.h"

static bool is_file(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

static char *read_text(const char *path, char *err, size_t n) {
    int fd = ut_open_regular(path, err, n);
    FILE *f = fd < 0 ? NULL : fdopen(fd, "rb");
    if (!f) {
        if (fd >= 0) close(fd), ut_errorf(err, n, "%s: cannot read: %s", path, strerror(errno));
        return NULL;
    }
    size_t cap = 4096, len = 0;
    char *s = ut_malloc_check(cap);
    for (size_t got; (got = fread(s + len, 1, cap - len - 1, f)) > 0;)
        if ((len += got) + 1 == cap) s = ut_realloc_check(s, cap *= 2);
    bool bad = ferror(f);
    fclose(f);
    s[len] = 0;
    if (bad) {
        ut_free(s);
        return ut_errorf(err, n, "%s: read error", path), NULL;
    }
    return s;
}

/* One top-level entry as an option value: numbers in full precision, strings
 * as they are, booleans true/false; other kinds are skipped (NULL). */
static const char *entry_text(const cJSON *e, char *buf, size_t n) {
    if (cJSON_IsString(e)) return e->valuestring;
    if (cJSON_IsBool(e)) return cJSON_IsTrue(e) ? "true" : "false";
    if (!cJSON_IsNumber(e)) return NULL;
    double v = e->valuedouble;
    if (v == floor(v) && fabs(v) < 9e15) snprintf(buf, n, "%.0f", v);
    else snprintf(buf, n, "%.17g", v);
    return buf;
}

ut_kv *ut_hf_config_read(const char *dir, char *err, size_t n) {
    char path[4096];
    snprintf(path, sizeof path, "%s/config.json", dir);
    struct stat st;
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode))
        return ut_errorf(err, n, "%s: not a directory (model.pretrained names a directory as "
                                 "save_pretrained writes it: config.json, model.safetensors)", dir), NULL;
    if (!is_file(path))
        return ut_errorf(err, n, "%s: no config.json (a Hugging Face model directory has config.json "
                                 "and model.safetensors)", dir), NULL;
    char *text = read_text(path, err, n);
    if (!text) return NULL;
    cJSON *root = cJSON_Parse(text);
    ut_free(text);
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return ut_errorf(err, n, "%s: not a JSON object", path), NULL;
    }
    ut_kv *kv = ut_kv_new();
    char buf[64];
    for (const cJSON *e = root->child; e; e = e->next) {
        const char *v = entry_text(e, buf, sizeof buf);
        if (v && e->string) ut_kv_set(kv, e->string, v);
    }
    /* a classification checkpoint names its labels: their count is num_labels */
    const cJSON *labels = cJSON_GetObjectItemCaseSensitive(root, "id2label");
    if (cJSON_IsObject(labels) && cJSON_GetArraySize(labels) > 0 && !ut_kv_get(kv, "num_labels")) {
        snprintf(buf, sizeof buf, "%d", cJSON_GetArraySize(labels));
        ut_kv_set(kv, "num_labels", buf);
    }
    /* and their names, as "id2label.K" */
    for (const cJSON *l = cJSON_IsObject(labels) ? labels->child : NULL; l; l = l->next)
        if (cJSON_IsString(l) && l->string && strlen(l->string) < 24) {
            snprintf(buf, sizeof buf, "id2label.%s", l->string);
            ut_kv_set(kv, buf, l->valuestring);
        }
    cJSON_Delete(root);
    if (!ut_kv_get(kv, "model_type")) {
        ut_kv_free(kv);
        return ut_errorf(err, n, "%s: no \"model_type\"", path), NULL;
    }
    return kv;
}

/* ---- weights ---- */

/* Copies a checkpoint tensor (F32, F16 or BF16; file bytes, not tensor
 * data) into parameter p through ut_tensor_set; a transposed one is a 2-D
 * (in, out) matrix written into p's (out, in). pt says which part of the
 * tensor p holds (NULL or parts 1: all of it): the whole tensor is read and
 * the part takes its rows (ut_partition_full_row), so a model split over a
 * tensor-parallel group loads a whole Hugging Face checkpoint. */
static int copy_into(ut_tensor *p, const ut_partition *pt, const ut_st_tensor *s, bool transposed) {
    const ut_st_tensor st = *s;
    bool split = pt && pt->parts > 1;
    if (st.dtype == UT_ST_F32 && !transposed && !split) return ut_tensor_set(p, st.data, st.nbytes);
    int64_t k = ut_st_numel(&st), rows = transposed ? st.shape[0] : 1, cols = k / rows;
    float *tmp = ut_malloc_check((size_t)(k ? k : 1) * sizeof *tmp);
    if (transposed) {
        for (int64_t r = 0; r < rows; r++)
            for (int64_t c = 0; c < cols; c++) tmp[c * rows + r] = ut_st_float(&st, r * cols + c);
    } else {
        for (int64_t e = 0; e < k; e++) tmp[e] = ut_st_float(&st, e);
    }
    int64_t mine = ut_nelem(p);
    if (split) { /* this rank's rows of the whole, in place at the front */
        int64_t inner = 1;
        for (int d = pt->dim + 1; d < p->ndim; d++) inner *= p->ne[d];
        float *part = ut_malloc_check((size_t)(mine ? mine : 1) * sizeof *part);
        for (int64_t r = 0; r < mine / inner; r++)
            memcpy(part + r * inner, tmp + ut_partition_full_row(p, pt, pt->part, r) * inner,
                   (size_t)inner * sizeof(float));
        ut_free(tmp);
        tmp = part;
    }
    int rc = ut_tensor_set(p, tmp, (size_t)mine * sizeof *tmp);
    ut_free(tmp);
    return rc;
}

/* ne: the whole tensor's shape (a part's full_ne for a split parameter) */
static bool shape_equal(int ndim, const int64_t *ne, const ut_st_tensor *s, bool transposed) {
    if (ndim != s->ndim || (transposed && ndim != 2)) return false;
    for (int i = 0; i < ndim; i++)
        if (ne[transposed ? ndim - 1 - i : i] != s->shape[i]) return false;
    return true;
}

static const char *shape_text(int ndim, const int64_t *ne, char *buf, size_t n) {
    size_t o = (size_t)snprintf(buf, n, "(");
    for (int i = 0; i < ndim && o < n; i++)
        o += (size_t)snprintf(buf + o, n - o, "%s%lld", i ? ", " : "", (long long)ne[i]);
    if (o < n) snprintf(buf + o, n - o, ")");
    return buf;
}

/* The checkpoint's tensor for parameter name: under the same name, or
 * without the model's base prefix (sentence-transformers saves the bare
 * encoder: "embeddings...." for "bert.embeddings...."). */
static const ut_st_tensor *find(const ut_st_file *f, const char *name, const ut_hf_load_opts *o) {
    const ut_st_tensor *s = ut_st_get(f, name);
    size_t bl = o->base_prefix ? strlen(o->base_prefix) : 0;
    if (!s && bl && !strncmp(name, o->base_prefix, bl)) s = ut_st_get(f, name + bl);
    if (!s && o->file_prefix) {
        char full[512];
        snprintf(full, sizeof full, "%s%s", o->file_prefix, name);
        s = ut_st_get(f, full);
    }
    return s;
}

static bool has_suffix(const char *name, const char *const *suffixes) {
    size_t nl = strlen(name);
    for (int i = 0; suffixes && suffixes[i]; i++) {
        size_t sl = strlen(suffixes[i]);
        if (nl >= sl && !strcmp(name + nl - sl, suffixes[i])) return true;
    }
    return false;
}

static bool has_prefix(const char *name, const char *const *prefixes) {
    for (int i = 0; prefixes && prefixes[i]; i++)
        if (!strncmp(name, prefixes[i], strlen(prefixes[i]))) return true;
    return false;
}

static bool contains_any(const char *name, const char *const *parts) {
    for (int i = 0; parts && parts[i]; i++)
        if (strstr(name, parts[i])) return true;
    return false;
}

static int load_param(ut_model *m, int i, const ut_st_file *f, const char *path, const ut_hf_load_opts *o,
                      int *used, char *err, size_t n) {
    const char *name = m->params.names[i];
    const ut_st_tensor *s = find(f, name, o);
    bool tr = has_suffix(name, o->transposed);
    char a[128], b[128];
    if (!s) {
        if (has_prefix(name, o->optional)) { /* a new head keeps its initialisation */
            if (o->missing && (*o->missing)++ == 0 && o->first_missing)
                snprintf(o->first_missing, o->first_missing_n, "%s", name);
            return 0;
        }
        return ut_errorf(err, n, "%s: tensor '%s' is missing (the model needs it with shape %s)", path,
                         name, shape_text(m->params.t[i]->ndim, m->params.t[i]->ne, a, sizeof a));
    }
    const ut_tensor *p = m->params.t[i];
    const ut_partition *pt = m->params.part ? &m->params.part[i] : NULL;
    const int64_t *whole = pt && pt->parts > 1 ? pt->full_ne : p->ne; /* a split model reads whole tensors */
    if (!shape_equal(p->ndim, whole, s, tr)) {
        int64_t want[2] = {p->ndim == 2 ? whole[1] : 0, whole[0]};
        shape_text(s->ndim, s->shape, a, sizeof a);
        if (tr && p->ndim == 2) shape_text(2, want, b, sizeof b);
        else shape_text(p->ndim, whole, b, sizeof b);
        if (o->ignore_mismatched) { /* the parameter keeps its initialisation */
            if (o->mismatched && (*o->mismatched)++ == 0 && o->first_mismatched)
                snprintf(o->first_mismatched, o->first_mismatched_n, "'%s' %s in the checkpoint, %s in the model",
                         name, a, b);
            return 0;
        }
        return ut_errorf(err, n, "%s: tensor '%s' has shape %s, the model needs %s%s%s", path, name, a, b,
                         tr ? " (Conv1D layout: in, out)" : "",
                         has_prefix(name, o->optional) ? " (a head of another size: model.ignore_mismatched_sizes: "
                                                         "true starts it anew, as transformers' "
                                                         "ignore_mismatched_sizes)" : "");
    }
    if (s->dtype != UT_ST_F32 && s->dtype != UT_ST_F16 && s->dtype != UT_ST_BF16)
        return ut_errorf(err, n, "%s: tensor '%s' has dtype %s, expected F32, F16 or BF16", path, name,
                         ut_st_dtype_name(s->dtype));
    int64_t bad = ut_st_first_bad(s, false);
    if (bad >= 0)
        return ut_errorf(err, n, "%s: tensor '%s' holds %g at element %lld: the weights are damaged (non-finite)",
                         path, name, ut_st_float(s, bad), (long long)bad);
    (*used)++;
    if (copy_into(m->params.t[i], pt, s, tr)) return ut_errorf(err, n, "%s: tensor '%s': copy failed", path, name);
    return 0;
}

static bool type_known(const char *type, const char *const *types, char *list, size_t ln) {
    bool found = false;
    list[0] = 0;
    for (int i = 0; types[i]; i++) {
        found |= !strcmp(type, types[i]);
        size_t at = strlen(list);
        snprintf(list + at, ln - at, "%s%s", i ? " or " : "", types[i]);
    }
    return found;
}

ut_kv *ut_hf_config_checked(const ut_kv *opts, const char *dir, const ut_hf_config_spec *s, char *err, size_t n) {
    char why[1024], list[256];
    ut_kv *kv = ut_hf_config_read(dir, why, sizeof why);
    if (!kv) return ut_errorf(err, n, "model.pretrained: %s", why), NULL;
    const char *type = ut_kv_get(kv, "model_type");
    int rc = 0;
    if (!type_known(type, s->types, list, sizeof list))
        rc = ut_errorf(err, n, "model.pretrained: %s/config.json has model_type '%s'; model %s reads "
                               "model_type %s (%s)",
                       dir, type, s->model, list, s->others);
    for (int i = 0; s->arch_keys[i] && !rc; i++)
        if (ut_kv_get(opts, s->arch_keys[i]))
            rc = ut_errorf(err, n, "model.%s: set by model.pretrained (%s/config.json); remove it", s->arch_keys[i],
                           dir);
    if (!rc && s->check) rc = s->check(kv, dir, err, n);
    if (rc) ut_kv_free(kv);
    return rc ? NULL : kv;
}

int ut_hf_weights_path(const char *dir, char *path, size_t pn, char *err, size_t n) {
    snprintf(path, pn, "%s/model.safetensors", dir);
    if (is_file(path)) return 0;
    char bin[4096];
    snprintf(bin, sizeof bin, "%s/pytorch_model.bin", dir);
    if (is_file(bin))
        return ut_errorf(err, n, "%s: a pickled PyTorch checkpoint is not read (it can run code when "
                                 "loaded); convert it to model.safetensors, e.g. in Python: "
                                 "AutoModel.from_pretrained(DIR).save_pretrained(DIR, "
                                 "safe_serialization=True)", bin);
    return ut_errorf(err, n, "%s: no model.safetensors in the model directory", dir);
}

int ut_hf_load_weights(ut_model *m, const char *dir, const ut_hf_load_opts *o, char *err, size_t n) {
    char path[4096];
    if (ut_hf_weights_path(dir, path, sizeof path, err, n)) return -1;
    ut_st_file *f = ut_st_open(path, err, n);
    if (!f) return -1;
    int used = 0, rc = 0;
    for (int i = 0; i < m->params.n && !rc; i++) rc = load_param(m, i, f, path, o, &used, err, n);
    if (!rc && o->unused) {
        *o->unused = 0;
        for (int i = 0; i < ut_st_count(f); i++) {
            const char *nm = ut_st_name(f, i);
            size_t bl = o->base_prefix ? strlen(o->base_prefix) : 0;
            bool ours = ut_model_param(m, nm) != NULL;
            if (!ours && bl) {
                char full[512];
                snprintf(full, sizeof full, "%s%s", o->base_prefix, nm);
                ours = ut_model_param(m, full) != NULL;
            }
            size_t fl = o->file_prefix ? strlen(o->file_prefix) : 0;
            if (!ours && fl && !strncmp(nm, o->file_prefix, fl)) ours = ut_model_param(m, nm + fl) != NULL;
            if (!ours && !contains_any(nm, o->ignored) && (*o->unused)++ == 0 && o->first_unused)
                snprintf(o->first_unused, o->first_unused_n, "%s", nm);
        }
    }
    ut_st_close(f);
    return rc;
}

int ut_hf_load_pretrained(ut_model *m, const char *dir, ut_hf_load_opts o, char *err, size_t n) {
    int unused = 0, mismatched = 0, missing = 0;
    char first[256] = "", first_mm[512] = "", first_new[256] = "", why[1024];
    /* a pipeline stage reads its own tensors: the other stages' are not unused */
    o.unused = m->pp_size > 1 ? NULL : &unused;
    o.first_unused = first;
    o.first_unused_n = sizeof first;
    o.mismatched = &mismatched;
    o.first_mismatched = first_mm;
    o.first_mismatched_n = sizeof first_mm;
    o.missing = &missing;
    o.first_missing = first_new;
    o.first_missing_n = sizeof first_new;
    if (ut_hf_load_weights(m, dir, &o, why, sizeof why)) return ut_errorf(err, n, "model.pretrained: %s", why);
    /* as transformers says it: the head the checkpoint did not have starts from its initialisation */
    if (missing)
        fprintf(stderr, "utrain: %s/model.safetensors has no %d of the model's tensors, newly initialised (a new "
                        "head, to train): the first '%s'\n", dir, missing, first_new);
    if (unused)
        fprintf(stderr, "utrain: warning: %s/model.safetensors: %d tensor(s) the model does not use, "
                        "the first '%s'\n", dir, unused, first);
    if (mismatched)
        fprintf(stderr, "utrain: warning: %s/model.safetensors: %d tensor(s) of another shape than the model's left "
                        "out (model.ignore_mismatched_sizes), newly initialised: the first %s\n", dir, mismatched,
                first_mm);
    return 0;
}
