/* Dynamic loss scaling for fp16, with torch.amp.GradScaler's rules. */
#include <math.h>

#include "utrain/optim.h"

void ut_grad_scaler_init(ut_grad_scaler *s, float init_scale, int64_t growth_interval) {
    *s = (ut_grad_scaler){.scale = init_scale, .growth_factor = 2.0f, .backoff_factor = 0.5f,
                          .growth_interval = growth_interval};
}

/* torch's _amp_update_scale_: an overflow backs off and restarts the count;
 * growth_interval clean steps in a row grow the scale (unless that would
 * overflow float) and restart it. */
void ut_grad_scaler_update(ut_grad_scaler *s, bool found_inf) {
    if (found_inf) {
        s->scale *= s->backoff_factor;
        s->growth_tracker = 0;
        return;
    }
    if (++s->growth_tracker < s->growth_interval) return;
    float grown = s->scale * s->growth_factor;
    if (isfinite(grown)) s->scale = grown;
    s->growth_tracker = 0;
}
