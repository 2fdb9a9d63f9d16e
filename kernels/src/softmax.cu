// Row-wise log-softmax in place on f32 logits `[R, V]`, and a greedy argmax per row.
//
// log_softmax_f32: one block of 1024 threads per row (a vocabulary of 152k is 148 elements a
// thread). Pass one: block max. Pass two: sum of exp(x - max) in f32 (a tree of per-thread partial
// sums, so the rounding error stays near 1e-7 relative even for large vocabularies). Pass three:
// x - (max + log(sum)). The row is read three times; at 600 KB a row it stays in L2.
//
// argmax_part_f32 + argmax_final_f32: the greedy token of each listed row, keeping the larger
// value, the lower index on ties — the host sampler's rule — so greedy decoding needs 4 bytes a
// row back instead of the whole row. NaN is skipped (a row of NaN gives 0), except that a NaN in
// column 0 gives 0 as on the host (whose scan starts at column 0 and finds nothing greater than
// NaN). sample.cu's rows reuse them.

extern "C" __global__ void log_softmax_f32(float* x, int vocab) {
    pdl_start();
    float* row = x + (u64)blockIdx.x * vocab;
    float mx = NEG_INF;
    for (int i = threadIdx.x; i < vocab; i += blockDim.x) mx = fmaxf(mx, row[i]);
    mx = block_max(mx);
    float sum = 0.f;
    for (int i = threadIdx.x; i < vocab; i += blockDim.x) sum += expf(row[i] - mx);
    const float log_z = mx + logf(block_sum(sum));
    for (int i = threadIdx.x; i < vocab; i += blockDim.x) row[i] -= log_z;
}

// argmax in two launches, so that a row of 152k logits is read by many multiprocessors (one
// block a row took 35 µs on the H200 at Qwen3's vocabulary, about 1.2% of a one-token decode
// step): argmax_part_f32's grid is (splits, rows), block s scanning the s-th of `splits`
// contiguous column ranges of its row and keeping its best (value, lowest index); then
// argmax_final_f32, one warp a row, folds the splits in order with the same rule. The rule is a
// total order on (value, index) pairs, so the result is the one-pass scan's, bit for bit.
#define ARGMAX_THREADS 512
#define ARGMAX_NONE 0xffffffffu

// Whether (ov, oi) beats (mv, mi): a real index beats none, then the larger value, then on equal
// values the lower index.
__device__ __forceinline__ bool argmax_better(float ov, u32 oi, float mv, u32 mi) {
    return oi != ARGMAX_NONE && (mi == ARGMAX_NONE || ov > mv || (ov == mv && oi < mi));
}

extern "C" __global__ void __launch_bounds__(ARGMAX_THREADS)
    argmax_part_f32(float* part_v, u32* part_i, const float* x, const u32* rows, int vocab) {
    pdl_start();
    __shared__ float best_v[ARGMAX_THREADS];
    __shared__ u32 best_i[ARGMAX_THREADS];
    const float* row = x + (u64)(rows ? rows[blockIdx.y] : blockIdx.y) * vocab;
    const int chunk = (vocab + (int)gridDim.x - 1) / (int)gridDim.x;
    const int lo = (int)blockIdx.x * chunk, hi = min(vocab, lo + chunk);
    float v = NEG_INF;
    u32 idx = ARGMAX_NONE;
    for (int i = lo + (int)threadIdx.x; i < hi; i += blockDim.x) {
        const float y = row[i];
        // Strictly greater, so the lowest index wins ties; NaN is never chosen.
        if (y > v || (idx == ARGMAX_NONE && y == y)) {
            v = y;
            idx = (u32)i;
        }
    }
    best_v[threadIdx.x] = v;
    best_i[threadIdx.x] = idx;
    __syncthreads();
    for (int stride = blockDim.x / 2; stride > 0; stride >>= 1) {
        if (threadIdx.x < stride) {
            const float ov = best_v[threadIdx.x + stride];
            const u32 oi = best_i[threadIdx.x + stride];
            if (argmax_better(ov, oi, best_v[threadIdx.x], best_i[threadIdx.x])) {
                best_v[threadIdx.x] = ov;
                best_i[threadIdx.x] = oi;
            }
        }
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        const u64 at = (u64)blockIdx.y * gridDim.x + blockIdx.x;
        part_v[at] = best_v[0];
        part_i[at] = best_i[0];
    }
}

// One warp a row (grid: rows): the row's `splits` partial bests folded, then the answer (0 for
// a row with no number, and for a NaN in column 0, as the host's scan from column 0 gives), in
// every lane. rows == null: row r of the grid is row r of x (both kernels).
__device__ __forceinline__ u32 argmax_fold(const float* part_v, const u32* part_i, const float* x,
                                           const u32* rows, int vocab, int splits) {
    const int lane = threadIdx.x & 31;
    const u64 base = (u64)blockIdx.x * splits;
    float v = NEG_INF;
    u32 idx = ARGMAX_NONE;
    for (int s = lane; s < splits; s += 32)
        if (argmax_better(part_v[base + s], part_i[base + s], v, idx)) {
            v = part_v[base + s];
            idx = part_i[base + s];
        }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        const float ov = __shfl_xor_sync(0xffffffffu, v, o);
        const u32 oi = shfl_xor_u32(idx, o);
        if (argmax_better(ov, oi, v, idx)) {
            v = ov;
            idx = oi;
        }
    }
    const float first = x[(u64)(rows ? rows[blockIdx.x] : blockIdx.x) * vocab];
    return (idx == ARGMAX_NONE || first != first) ? 0u : idx;
}

extern "C" __global__ void argmax_final_f32(u32* out, const float* part_v, const u32* part_i,
                                            const float* x, const u32* rows, int vocab,
                                            int splits) {
    pdl_start();
    const u32 id = argmax_fold(part_v, part_i, x, rows, vocab, splits);
    if ((threadIdx.x & 31) == 0) out[blockIdx.x] = id;
}

// A chained MTP pass's drafts (CudaBackend::argmax_ids): the ids as exact f32 values (a
// vocabulary is far below 2^24), an f32 tensor's row that the next pass's feed_token_ids reads.
extern "C" __global__ void argmax_final_ids_f32(float* out, const float* part_v,
                                                const u32* part_i, const float* x, const u32* rows,
                                                int vocab, int splits) {
    pdl_start();
    const u32 id = argmax_fold(part_v, part_i, x, rows, vocab, splits);
    if ((threadIdx.x & 31) == 0) out[blockIdx.x] = (float)id;
}

// The next chained pass's token ids (its batch's array) from argmax_final_ids_f32's row.
extern "C" __global__ void feed_token_ids(u32* token_ids, const float* ids, int n) {
    pdl_start();
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) token_ids[i] = (u32)ids[i];
}
