// Four 16-byte loads of a row, chunks c, c + 32, c + 64, c + 96 (a lane's share of 128 chunks).
__device__ __forceinline__ void load4(u32x4* a, const u32x4* row, int c) {
#pragma unroll
    for (int i = 0; i < 4; ++i) a[i] = load_stream(row + c + 32 * i);
}

// Before a weight-streaming kernel waits on the kernel that wrote its x (pdl_wait above),
// a warp loads its first 128 chunks of a weight row (read-only for the whole run), so that
// their latency overlaps the previous kernel. `first` tells whether the row has a full group of
// 128 chunks. (Also asking L2 for the rest of the row with a bulk prefetch,
// cp.async.bulk.prefetch.L2, made the Qwen3-8B step 10% slower on the H200: each SM's
// bulk-copy unit serves those at a fraction of HBM's bandwidth.)
__device__ __forceinline__ bool row_prologue(u32x4* a, const u32x4* row, int chunks, int lane) {
    const bool first = lane + 96 < chunks;
    if (first) load4(a, row, lane);
    return first;
}

// Two bf16 in a u32: element 2i in the low half, 2i + 1 in the high half.
__device__ __forceinline__ float lo(u32 u) { return __uint_as_float(u << 16); }
__device__ __forceinline__ float hi(u32 u) { return __uint_as_float(u & 0xffff0000u); }

// acc + Σ a[i]·b[i] over the 8 bf16 pairs of two 16-byte chunks, one fused multiply-add at a
// time in element order (the weight-streaming kernels' inner product; a is the weight).
__device__ __forceinline__ float dot8(float acc, u32x4 a, u32x4 b) {
    acc = fmaf(lo(a.x), lo(b.x), acc);
    acc = fmaf(hi(a.x), hi(b.x), acc);
    acc = fmaf(lo(a.y), lo(b.y), acc);
    acc = fmaf(hi(a.y), hi(b.y), acc);
    acc = fmaf(lo(a.z), lo(b.z), acc);
    acc = fmaf(hi(a.z), hi(b.z), acc);
    acc = fmaf(lo(a.w), lo(b.w), acc);
    acc = fmaf(hi(a.w), hi(b.w), acc);
    return acc;
}

// 2^x through the hardware's approximation (about 2 ulp); 2^-inf = 0.
__device__ __forceinline__ float exp2_fast(float x) {
#ifdef METRALE_HOST_EMULATION
    return exp2f(x);
#else
    float r;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x));
    return r;
#endif
}

// Grid-stride over `chunks` chunks of a row-major matrix whose rows are `per_row` chunks long,
// calling f(i, row, col) for each: a thread's (row, col) advance by the stride's quotient and
// remainder, so a thread divides once, not once a chunk (the dequantizing kernels' 64-bit
// division a chunk was one of what held them at a fraction of their bytes' rate).
template <typename F>
__device__ __forceinline__ void for_row_chunks(u64 chunks, u32 per_row, F f) {
    u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= chunks) return;
    const u64 stride = (u64)gridDim.x * blockDim.x;
    const u64 step_rows = stride / per_row;
    const u32 step_cols = (u32)(stride - step_rows * per_row);
    u64 row = i / per_row;
    u32 col = (u32)(i - row * per_row);
    for (; i < chunks; i += stride) {
        f(i, row, col);
        row += step_rows;
        col += step_cols;
        if (col >= per_row) {
            col -= per_row;
            ++row;
        }
    }
}
