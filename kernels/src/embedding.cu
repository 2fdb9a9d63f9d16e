// Row copies: the token embedding lookup and the gather of the rows that want logits.
//
// One block per output row, its threads striding across the row, so a warp reads 32 neighbouring
// elements of the source row and writes 32 neighbouring outputs. embedding_<table dtype> widens
// into the f32 residual stream; gather_rows_<dtype> copies without changing the type. Row ids come
// from the step's batch on the device and were range-checked on the host.

template <typename T>
__device__ void embedding_impl(float* out, const T* table, const u32* token_ids, int hidden) {
    const u64 row = blockIdx.x;
    const T* src = table + (u64)token_ids[row] * hidden;
    float* dst = out + row * hidden;
    for (int i = threadIdx.x; i < hidden; i += blockDim.x) dst[i] = to_f32(src[i]);
}

extern "C" __global__ void embedding_bf16(float* out, const bf16* table, const u32* token_ids,
                                          int hidden) {
    pdl_start();
    embedding_impl(out, table, token_ids, hidden);
}

extern "C" __global__ void embedding_f32(float* out, const float* table, const u32* token_ids,
                                         int hidden) {
    pdl_start();
    embedding_impl(out, table, token_ids, hidden);
}

template <typename T>
__device__ void gather_rows_impl(T* out, const T* x, const u32* rows, int width) {
    const u64 row = blockIdx.x;
    const T* src = x + (u64)rows[row] * width;
    T* dst = out + row * width;
    for (int i = threadIdx.x; i < width; i += blockDim.x) dst[i] = src[i];
}

extern "C" __global__ void gather_rows_bf16(bf16* out, const bf16* x, const u32* rows, int width) {
    pdl_start();
    gather_rows_impl(out, x, rows, width);
}

extern "C" __global__ void gather_rows_f32(float* out, const float* x, const u32* rows, int width) {
    pdl_start();
    gather_rows_impl(out, x, rows, width);
}
