// Row-wise log-softmax in place on f32 logits `[R, V]`, and a greedy argmax per row.
//
// log_softmax_f32: one block of 1024 threads per row (a vocabulary of 152k is 148 elements a
// thread). Pass one: block max. Pass two: sum of exp(x - max) in f32 (a tree of per-thread partial
// sums, so the rounding error stays near 1e-7 relative even for large vocabularies). Pass three:
// x - (max + log(sum)). The row is read three times; at 600 KB a row it stays in L2.
//
// argmax_f32: one block per row; each thread keeps its best (value, lowest index) and a block
// reduction through shared memory keeps the larger value, the lower index on ties — the host
// sampler's rule — so greedy decoding needs 4 bytes a row back instead of the whole row. NaN is
// skipped (a row of NaN gives 0), except that a NaN in column 0 gives 0 as on the host (whose
// scan starts at column 0 and finds nothing greater than NaN). sample.cu's rows reuse it.

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

#define ARGMAX_THREADS 1024

extern "C" __global__ void argmax_f32(u32* out, const float* x, const u32* rows, int vocab) {
    pdl_start();
    __shared__ float best_v[ARGMAX_THREADS];
    __shared__ u32 best_i[ARGMAX_THREADS];
    const float* row = x + (u64)rows[blockIdx.x] * vocab;
    float v = NEG_INF;
    u32 idx = 0xffffffffu;
    for (int i = threadIdx.x; i < vocab; i += blockDim.x) {
        const float y = row[i];
        // Strictly greater, so the lowest index wins ties; NaN is never chosen.
        if (y > v || (idx == 0xffffffffu && y == y)) {
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
            const float mv = best_v[threadIdx.x];
            const u32 mi = best_i[threadIdx.x];
            if (oi != 0xffffffffu && (mi == 0xffffffffu || ov > mv || (ov == mv && oi < mi))) {
                best_v[threadIdx.x] = ov;
                best_i[threadIdx.x] = oi;
            }
        }
        __syncthreads();
    }
    if (threadIdx.x == 0)
        out[blockIdx.x] = (best_i[0] == 0xffffffffu || row[0] != row[0]) ? 0u : best_i[0];
}
