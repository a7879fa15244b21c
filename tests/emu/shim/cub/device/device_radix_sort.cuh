/* the CUDA emulator in place of CUB's DeviceRadixSort (tests/emu/cuda_emu.h):
 * SortPairs as CUB defines it (a stable sort of (key, value) pairs by bits
 * [begin_bit, end_bit) of the key; a first call with temp NULL asks for the
 * temporary storage's size), done on the host */
#ifndef UTRAIN_EMU_CUB_RADIX_SORT
#define UTRAIN_EMU_CUB_RADIX_SORT
#include <algorithm>
#include <vector>

#include "../../../cuda_emu.h"

namespace cub {
struct DeviceRadixSort {
    template <typename K, typename V>
    static cudaError_t SortPairs(void *temp, size_t &temp_bytes, const K *keys_in, K *keys_out, const V *vals_in,
                                 V *vals_out, int n, int begin_bit = 0, int end_bit = (int)(sizeof(K) * 8),
                                 cudaStream_t stream = nullptr) {
        (void)stream;
        if (!temp) {
            temp_bytes = 256;
            return cudaSuccess;
        }
        unsigned long long mask = end_bit >= 64 ? ~0ull : ((1ull << end_bit) - 1);
        std::vector<int> order((size_t)(n > 0 ? n : 0));
        for (int i = 0; i < n; i++) order[(size_t)i] = i;
        auto key = [&](int i) { return ((unsigned long long)keys_in[i] & mask) >> begin_bit; };
        std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return key(a) < key(b); });
        std::vector<K> ko((size_t)(n > 0 ? n : 0));
        std::vector<V> vo((size_t)(n > 0 ? n : 0));
        for (int i = 0; i < n; i++) ko[(size_t)i] = keys_in[order[(size_t)i]], vo[(size_t)i] = vals_in[order[(size_t)i]];
        for (int i = 0; i < n; i++) keys_out[i] = ko[(size_t)i], vals_out[i] = vo[(size_t)i];
        return cudaSuccess;
    }
};
} // namespace cub
#endif
