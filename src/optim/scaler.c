/* Dynamic loss scaling for fp16, with torch.amp.GradScaler's rules, and
 * DeepSpeed's floor and hysteresis where its config asks for them. */
#include <math.h>

#include "utrain/base.h"
#include "utrain/optim.h"

void ut_grad_scaler_init(ut_grad_scaler *s, float init_scale, int64_t growth_interval) {
    *s = (ut_grad_scaler){.scale = init_scale, .growth_factor = 2.0f, .backoff_factor = 0.5f,
                          .growth_interval = growth_interval, .hysteresis = 1, .hysteresis_left = 1};
}

void ut_grad_scaler_set_hysteresis(ut_grad_scaler *s, float min_scale, int64_t hysteresis, bool consecutive) {
    UT_ASSERT(hysteresis >= 1 && min_scale >= 0);
    s->min_scale = min_scale;
    s->hysteresis = s->hysteresis_left = hysteresis;
    s->consecutive_hysteresis = consecutive;
}

/* torch's _amp_update_scale_: an overflow backs off and restarts the count;
 * growth_interval clean steps in a row grow the scale (unless that would
 * overflow float) and restart it. DeepSpeed's update_scale besides: an
 * overflow while hysteresis is left only uses one up, and a backoff stops
 * at min_scale. */
void ut_grad_scaler_update(ut_grad_scaler *s, bool found_inf) {
    if (found_inf) {
        if (s->hysteresis_left > 1) s->hysteresis_left--;
        else s->scale = fmaxf(s->scale * s->backoff_factor, s->min_scale);
        s->growth_tracker = 0;
        return;
    }
    if (s->consecutive_hysteresis) s->hysteresis_left = s->hysteresis;
    if (++s->growth_tracker < s->growth_interval) return;
    float grown = s->scale * s->growth_factor;
    if (isfinite(grown)) s->scale = grown;
    s->growth_tracker = 0;
    s->hysteresis_left = s->hysteresis;
}
