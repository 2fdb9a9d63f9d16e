// NVFP4 weights kept packed on the GPU, weight-only (issue 35; docs/nvfp4.md): w as the
// checkpoint stores it, packed E2M1 [N, K / 2] (element 2i the low nibble of byte i, a nibble
// sign << 3 | code), one E4M3 scale byte [N, K / 16] per 16 values of a row, and one f32
// multiplier [N] a row (ModelOpt's weight_scale_2, 1 / weight_global_scale for
// compressed-tensors; a row's own so fused projections keep each part's global). A weight's
// value is e2m1 · (e4m3 · global): 0.5625 bytes a weight instead of bf16's 2.
//
// e2m1_exact (prelude/fp4.cuh): a nibble's exact value.
//
// gemv_nvfp4_mma_r<RT>_b<NB> (nvfp4_gemv.cu; any M, K % 32 == 0, sm_80+): the product on tensor
// cores for decode batches, its A operands built by the helpers below (nvfp4_pair_bits_mul,
// nvfp4_pair_bits, nvfp4_scale_pairs; mul_bf16x2 is prelude/mma.cuh's), which nvfp4_gemm.cu's tile GEMM shares.
// gemv_nvfp4_rows: any K % 16 == 0 (scalar loads), one x row at a time (the lab's first
// version, kernels/dev/nvfp4/gemv_nvfp4.cu; not launched: the host emulation's reference for
// the value decode).
// dequant_nvfp4_bf16 (K % 32 == 0): the weight as bf16 [N, K] for GEMMs of more rows (cuBLAS's
// bf16 GEMM on the scratch copy): e2m1 · f32(e4m3 · global), rounded once to bf16.
// fill_random_nvfp4_bytes: dummy NVFP4 weights drawn on the device, byte for byte what
// `random_nvfp4_parts` gives on the host (`HostData::RandomNvfp4`): the splitmix64 chunks of
// fill_random_fp8, each draw's bits from `shift` up, or'ed with `bits` (packed pairs: the top
// byte; E4M3 scales: the top three bits as the mantissa of 0x38, values 1 to 1.875).
//
// Versions tried: the first tensor-core GEMV (gemv_nvfp4_mma_*, v1: shifts and masks for every
// pair, loads and conversion in turn): slower than today's at every row count on an H100 (a 27B
// step's GEMVs 7.24 against 6.70 ms at one row, 10.74 against 8.76 at 16, 17.24 against 13.39 at
// 32; performance log part 17). Deleted. gemv_nvfp4_m<M> (M = 1..8, a warp a weight row, each weight widened to f32 for
// every x row, ~8 instructions a weight a row): on an H100 (performance log parts 13 and 14)
// 1.0-1.6 TB/s at one row, each further row adding about the one-row time; a 27B step's GEMVs
// 9.37 ms at one row against the tensor-core kernel's 7.23, 176 at eight against 8.23.
// Deleted.

#define NVFP4_WARPS 8

extern "C" __global__ void __launch_bounds__(NVFP4_WARPS * 32)
    gemv_nvfp4_rows(float* out, const bf16* x, const unsigned char* w, const unsigned char* scales,
                    const float* globals, int m_total, int n_total, int k) {
    pdl_start();
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int n = blockIdx.x * NVFP4_WARPS + warp;
    if (n >= n_total) return;
    const int blocks = k >> 4;
    const unsigned char* wr = w + (u64)n * (k >> 1);
    const unsigned char* sr = scales + (u64)n * blocks;
    for (int m = 0; m < m_total; ++m) {
        const bf16* xr = x + (u64)m * k;
        float acc = 0.f;
        for (int b = lane; b < blocks; b += 32) {
            float part = 0.f;
#pragma unroll
            for (int j = 0; j < 8; ++j) {
                const u32 byte = wr[b * 8 + j];
                part = fmaf(e2m1_exact(byte & 15u), to_f32(xr[b * 16 + 2 * j]), part);
                part = fmaf(e2m1_exact(byte >> 4), to_f32(xr[b * 16 + 2 * j + 1]), part);
            }
            acc = fmaf(e4m3_value(sr[b]) * globals[n], part, acc);
        }
        acc = warp_sum(acc);
        if (lane == 0) out[(u64)m * n_total + n] = acc;
    }
}

// A thread a packed word (8 weights, half a scale block): one 4-byte load, one 16-byte store;
// the scale block is word i / 2, the row's multiplier from for_row_chunks's row.
extern "C" __global__ void dequant_nvfp4_bf16(bf16* out, const unsigned char* w, const unsigned char* scales,
                                              const float* globals, u64 rows, int k) {
    pdl_start();
    const u32 per_row = (u32)k >> 3;
    for_row_chunks(rows * per_row, per_row, [&](u64 i, u64 r, u32) {
        const float s = e4m3_value(scales[i >> 1]) * globals[r];
        fp4_word_to_bf16(load_stream4((const u32*)w + i), s, out + (i << 3));
    });
}

// Thread `chunk` draws bytes [chunk · 65536, +65536) in order, as random_nvfp4_parts does.
extern "C" __global__ void fill_random_nvfp4_bytes(unsigned char* out, u64 n, u64 seed, int shift, u32 bits) {
    pdl_start();
    u64 start, end, state;
    if (!random_chunk(n, seed, &start, &end, &state)) return;
    for (u64 i = start; i < end; ++i) {
        state = splitmix64(state);
        out[i] = (unsigned char)((u32)(state >> shift) | bits);
    }
}

// ---- NVFP4 weights times bf16 rows on tensor cores: the operands (nvfp4_gemv.cu, nvfp4_gemm.cu)
//
// out^T = W · x^T as in fp8_mma.cuh: W's rows the mma's A operand (RT tiles of 16 rows a block),
// x rows its B columns (NB tiles of 8 a block; grid.x walks chunks of 8·NB rows of x, the
// fastest so that a weight row block's chunks run together and share its bytes in L2), the
// block's FP8_MMA_WARPS warps splitting K into 128-wide slices (warp w: slices w, w + 8, ...),
// BATCH slices' weight loads in flight a warp. In a slice lane (g, t) loads the 16 packed bytes
// (32 weights, two scale blocks) of rows g and g + 8 at k = 128j + 32t and the matching 32
// elements of its x row, and the mma's k order is permuted to what those loads give: word q of
// the 16 bytes (8 nibbles e0..e7) makes two k16 steps, pairs (e0, e4), (e1, e5) then (e2, e6),
// (e3, e7); x's pairs are permuted alike (pair_halves).
//
// A operand, exactly: a pair's nibbles placed in a bf16 pair (nvfp4_pair_bits: code at bits
// 6..8, sign at 15) are e2m1 · 2^-126 (code 1, 0.5, a bf16 subnormal), and one bf16x2 multiply
// by e4m3 · 2^118 gives e2m1 · e4m3 · 2^-8 with no rounding (at most six significant bits,
// at least 2^-18; bf16x2 arithmetic keeps subnormals, as e4m3_halves_to_bf16x2 relies on).
// Products with x are exact in the mma's f32 sums; the row's sum is scaled by 2^8 · global at
// the end. The same arithmetic as the CPU's (exact products, f32 sums) in another order.
// Cost a weight: 5 instructions a pair of weights + the pair's share of the mma, about a third
// of the deleted CUDA-core GEMV's for one row, and the same for 8 rows of x.

// Nibbles I and I + 4 of w as a bf16 pair of value · 2^-126 (low half element I).
template <int I> __device__ __forceinline__ u32 nvfp4_pair_bits(u32 w) {
    constexpr int MAG = 6 - 4 * I, SGN = 12 - 4 * I;
    const u32 mag = (MAG >= 0 ? w << (MAG & 31) : w >> ((-MAG) & 31)) & 0x01c001c0u;
    return mag | ((w << SGN) & 0x80008000u);
}

// A row's two scale bytes of a slice lane (sc: block 2t in the low byte) as the broadcast
// bf16 pairs (s0, s0) and (s1, s1) of e4m3 · 2^118 (exact: four significant bits).
__device__ __forceinline__ void nvfp4_scale_pairs(u32 sc, u32 (&s)[2]) {
    const u32 v = mul_bf16x2(e4m3_halves_to_bf16x2(byte_halves<0x4140>(sc)), 0x7a807a80u);
    s[0] = pair_halves<false>(v, v);
    s[1] = pair_halves<true>(v, v);
}

#define NVFP4_MMA_SLICE_BYTES 64  // a row's packed bytes in a 128-wide slice

// The kernels themselves: nvfp4_gemv.cu (1 to gemm.nvfp4_tile_rows_min - 1 rows) and
// nvfp4_gemm.cu (more).
