/* Host views of tensor data for tests. The tests run on the CPU backend,
 * whose memory is host memory, so they read and write tensors in place; the
 * library outside src/backend uses ut_tensor_get / ut_tensor_set instead.
 * defines: ut_f32, ut_i32 (while include/utrain/tensor.h still has them, its
 * definitions). */
#ifndef UTRAIN_TENSOR_HOST_H
#define UTRAIN_TENSOR_HOST_H
#include "utrain/tensor.h"

#ifndef UT_HOST_VIEWS_PUBLIC
static inline float *ut_f32(const ut_tensor *t) { return (float *)t->data; }
static inline int32_t *ut_i32(const ut_tensor *t) { return (int32_t *)t->data; }
#endif

#endif
