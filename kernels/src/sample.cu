// Sampling on the device: the host sampler's arithmetic (engine/src/backend/sampling.rs), so the
// CUDA backend draws the CPU backend's tokens while only a few bytes a row come back.
//
// The host (engine/src/backend/cuda/sample.rs) uploads one `plan` of u32 words: an 18-word record
// per row (PLAN_* below), then each row's penalty entries (token id, count in the output) and
// masked tokens, then lists of which rows each kernel takes. The kernels, in order:
//
// sample_penalty_absorb: a running sequence's penalty state (PLAN_FLAGS & 8; sample/penalty_state.rs
//   keeps one per sequence) is a u32 a vocabulary token: the count of the token in the output
//   (bits 0..30) and STATE_PROMPT when it occurs in the prompt, so the token is in the history
//   when the word is not 0. This kernel adds tokens to states (a state is zeroed, then given its
//   whole history once; after that only the tokens appended since): integer atomics, so any
//   order gives the same words.
// sample_prepare_{f32,bf16}: blocks of PREPARE_THREADS, each owning a slice of a row, copy the
//   logits row into an f32 scratch row and apply the penalties: for a row with a state, to
//   every column whose state word (plus the row's few tokens past the state, its entries:
//   a speculative draft's row) says it is in the history; else, after a barrier, to the row's
//   distinct history tokens listed as entries
//   (`penalise` on the host, here with __fdiv_rn/__fmul_rn/__fadd_rn/__fsub_rn so NVRTC cannot
//   fuse `frequency * count + presence` into an FMA: bit for bit the host's f32 result), then
//   (after another barrier) write -inf over the masked tokens (eos/stop before min_tokens).
//   The input logits are never written; the scratch costs 2 x 600 KB of traffic a row, a state
//   another 600 KB of reads.
// sample_token_mask: a grammar's mask (engine/src/grammar/token_mask.rs: one bit a token id,
//   32 to a u32 word, uploaded in the plan for the constrained rows only) on their scratch rows,
//   after sample_prepare: every column whose bit is clear becomes -inf (TokenMask::apply on the
//   host, after penalties; a row with a grammar has no min_tokens masks). Grid (rows, slices)
//   as prepare's; `which` holds (scratch row, word offset of its mask in the plan) pairs.
// argmax_part_f32 + argmax_final_f32 (softmax.cu) on the scratch: greedy rows with penalties
// or masks.
// sample_gumbel: temperature without top-k/top-p/min-p. One block per row: every finite logit v
//   scores (double)(v / T) + gumbel(seed, output index, id), the noise ported from the host's
//   `uniform`/`gumbel` (splitmix-style u64 mixing, two det_ln); the highest score wins, the
//   lowest id on ties (the host keeps the first of equal scores in id order). 4 bytes come back;
//   0xffffffff when the row has no finite logit (the host then samples that row itself).
// sample_candidates: top-k/top-p/min-p. One block per row finds the row's `want` (<= KMAX)
//   largest v / T among finite logits, ordered as the host sorts them (value descending by
//   total order, then id ascending): a radix select on the 64-bit key (order-preserving f32 bits
//   << 32 | ~id, unique per token) with 8-bit digits (at most 8 passes over the row, usually
//   4 to 5, stopping as soon as a bucket holds exactly what is still needed), then a bitonic
//   sort of the <= 1024 winners in shared memory. It also returns the number of finite logits,
//   a flag when some finite v / T overflowed (the host then falls back), and the sum of
//   exp(v / T - max) over every finite token in 128-bit fixed point (each term floor(q * 2^96),
//   integer adds: any order, the device's tree or the host's loop, gives the same bits). The host
//   finishes top-k/top-p/min-p on that head with the same code as its own sampler
//   (`sampling::kept`) and draws among the kept tokens with `gumbel_pick`; when the head cannot
//   decide the cut (top_k > KMAX, or top-p/min-p reach past it) it samples the whole row itself.
//
// Exactness: by construction. Penalties, masks, v / T (IEEE division), the noise's integer
// mixing, its two logs and the probabilities' exps (det_ln / det_exp below: the host's
// sampling/detmath.rs, the same IEEE operations in the same order, no FMA, instead of libdevice's
// log/exp, which differ from glibc's in the last ulp now and then), the candidate order, the
// fixed-point total and every comparison give the host's bits. NaN, +-inf, -0.0 and ties follow
// the host's rules. Checked by kernels/dev/host_emulation/test.cpp (every kernel against a C++
// port of the host code, the noise and det_ln/det_exp against bits printed by the Rust code) and,
// on a GPU, by engine/examples/cuda_check/sampling.rs. What could still break it: a compiler
// that ignored the _rn intrinsics, or a host build that fused multiply-adds (Rust never does).

// Cost (not measured yet; one block a row, rows in parallel): prepare moves 1.2 MB a row. The
// Gumbel kernel reads the row twice and computes the exact f64 noise only for tokens that could
// still win (see sample_gumbel): on a peaked row a few hundred of 152k, the rest cost an integer
// hash and one f32 log. The candidates kernel reads the row 5 to 10 times from L2; its first
// radix passes put most tokens in a few buckets, so its shared-memory histogram is where to look
// first if it shows up in a profile (lanes of a warp sharing a bucket already add once).
// Splitting a row's draw over several blocks is the next step if batch-1 latency matters.

#define SAMPLE_THREADS 1024
#define PREPARE_THREADS 256
#define KMAX 1024
#define PLAN_WORDS 18
#define NONE 0xffffffffu

// Record fields (u32 words; floats as bits).
#define PLAN_SRC_ROW 0
#define PLAN_ENTRIES 1      // word offset of (id, count) pairs in the plan
#define PLAN_N_ENTRIES 2
#define PLAN_MASKS 3        // word offset of masked ids
#define PLAN_N_MASKS 4
#define PLAN_REPETITION 5   // f32 bits; applied when PLAN_FLAGS & 1
#define PLAN_FREQUENCY 6    // f32 bits; with presence, applied when PLAN_FLAGS & 2
#define PLAN_PRESENCE 7
#define PLAN_FLAGS 8        // 1: repetition, 2: frequency/presence, 4: the row total is wanted,
                            // 8: penalties from the state at PLAN_STATE_LO/HI, the entries being
                            // the row's tokens past it (at most MAX_EXTRAS; count = outputs)
#define PLAN_TEMPERATURE 9  // f32 bits, > 0
#define PLAN_SEED_LO 10
#define PLAN_SEED_HI 11
#define PLAN_INDEX_LO 12
#define PLAN_INDEX_HI 13
#define PLAN_WANT 14        // candidates to return, 1..=KMAX
#define PLAN_STATE_LO 15    // the state's device address (PLAN_FLAGS & 8)
#define PLAN_STATE_HI 16

// Penalty states (sample_penalty_absorb): STATE_PROMPT marks a prompt token, the low bits count
// the token in the output. An absorb work list is ABSORB_WORDS words a segment (state address lo,
// hi, offset of its tokens in the list, their number, the index of the first output token among
// them), then the tokens.
#define STATE_PROMPT 0x80000000u
#define MAX_EXTRAS 64
#define ABSORB_WORDS 5

// Candidates output per row: META_WORDS words, then KMAX ids, then KMAX values (f32 bits).
#define META_WORDS 6        // finite count, flags (1 = overflow), the fixed-point total (4 words)
#define CAND_WORDS (META_WORDS + 2 * KMAX)

__device__ __forceinline__ bool finite_f32(float v) {
    return (__float_as_uint(v) & 0x7f800000u) != 0x7f800000u;
}

__device__ __forceinline__ u64 plan_u64(const u32* rec, int lo) {
    return (u64)rec[lo] | ((u64)rec[lo + 1] << 32);
}

// The host's `uniform(seed, index)`: two rounds of splitmix64 finalisation, top 53 bits.
__device__ __forceinline__ double sample_uniform(u64 seed, u64 index) {
    u64 m = index * 0x9e3779b97f4a7c15ull;
    u64 z = seed ^ ((m << 17) | (m >> 47));
    for (int r = 0; r < 2; ++r) {
        z += 0x9e3779b97f4a7c15ull;
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        z ^= z >> 31;
    }
    return (double)(z >> 11) / 9007199254740992.0;  // 2^53
}

// det_ln / det_exp: engine/src/backend/sampling/detmath.rs operation for operation, with
// round-to-nearest intrinsics so NVRTC fuses nothing: the host's bits, not libdevice's log/exp
// (which differ from glibc's in the last ulp now and then).
__device__ __forceinline__ double det_add(double a, double b) { return __dadd_rn(a, b); }
__device__ __forceinline__ double det_mul(double a, double b) { return __dmul_rn(a, b); }

// 1 / n for n = 1..23, correctly rounded (what the host's `1.0 / f64::from(n)` gives), as
// constants: the series loops below must not pay a division a term.
__device__ const double RECIPROCAL[24] = {
    0.0, 0x1.0000000000000p+0, 0x1.0000000000000p-1, 0x1.5555555555555p-2, 0x1.0000000000000p-2,
    0x1.999999999999ap-3, 0x1.5555555555555p-3, 0x1.2492492492492p-3, 0x1.0000000000000p-3,
    0x1.c71c71c71c71cp-4, 0x1.999999999999ap-4, 0x1.745d1745d1746p-4, 0x1.5555555555555p-4,
    0x1.3b13b13b13b14p-4, 0x1.2492492492492p-4, 0x1.1111111111111p-4, 0x1.0000000000000p-4,
    0x1.e1e1e1e1e1e1ep-5, 0x1.c71c71c71c71cp-5, 0x1.af286bca1af28p-5, 0x1.999999999999ap-5,
    0x1.8618618618618p-5, 0x1.745d1745d1746p-5, 0x1.642c8590b2164p-5};

__device__ double det_ln(double x) {
    if (x != x || x < 0.0) return __longlong_as_double(0x7ff8000000000000ll);
    if (x == 0.0) return __longlong_as_double((long long)0xfff0000000000000ull);
    if (x == __longlong_as_double(0x7ff0000000000000ll)) return x;
    u64 bits = (u64)__double_as_longlong(x);
    long long e = 0;
    if ((bits >> 52) == 0) {
        bits = (u64)__double_as_longlong(det_mul(x, 18014398509481984.0));  // 2^54
        e = -54;
    }
    e += (long long)((bits >> 52) & 0x7ffull) - 1023;
    double m = __longlong_as_double((long long)((bits & 0x000fffffffffffffull) | 0x3ff0000000000000ull));
    if (m > __longlong_as_double(0x3ff6a09e667f3bcdll)) {  // sqrt(2)
        m = det_mul(m, 0.5);
        e += 1;
    }
    const double f = det_add(m, -1.0);
    const double s = __ddiv_rn(f, det_add(m, 1.0));
    const double z = det_mul(s, s);
    double p = RECIPROCAL[23];
#pragma unroll
    for (int k = 10; k >= 1; --k) p = det_add(det_mul(p, z), RECIPROCAL[2 * k + 1]);
    const double r = det_add(det_add(det_mul(det_mul(s, det_mul(z, p)), 2.0), -det_mul(s, f)), f);
    const double ed = (double)e;
    return det_add(det_mul(ed, __longlong_as_double(0x3fe62e42fee00000ll)),             // ln2 hi
                det_add(r, det_mul(ed, __longlong_as_double(0x3dea39ef35793c76ll))));  // ln2 lo
}

__device__ double det_exp(double x) {
    if (x != x) return x;
    if (x < -745.2) return 0.0;
    if (x > 709.8) return __longlong_as_double(0x7ff0000000000000ll);
    const double k = floor(det_add(det_mul(x, __longlong_as_double(0x3ff71547652b82fell)), 0.5));
    const double r = det_add(det_add(x, -det_mul(k, __longlong_as_double(0x3fe62e42fee00000ll))),
                          -det_mul(k, __longlong_as_double(0x3dea39ef35793c76ll)));
    double p = 1.0;
#pragma unroll
    for (int n = 14; n >= 1; --n) p = det_add(det_mul(det_mul(p, r), RECIPROCAL[n]), 1.0);
    const long long ki = (long long)k, half = ki / 2;
    return det_mul(det_mul(p, __longlong_as_double((half + 1023) << 52)),
                __longlong_as_double((ki - half + 1023) << 52));
}

// The uniform behind the host's `gumbel(seed, index, token)`, clamped to f64::MIN_POSITIVE.
__device__ __forceinline__ double noise_uniform(u64 seed, u64 index, u32 token) {
    const double u = sample_uniform(seed ^ ((u64)token * 0xd6e8feb86659fd93ull), index);
    return u > 2.2250738585072014e-308 ? u : 2.2250738585072014e-308;
}

// The host's `gumbel(seed, index, token)`: -ln(-ln(u)).
__device__ __forceinline__ double sample_gumbel_noise(u64 seed, u64 index, u32 token) {
    return -det_ln(-det_ln(noise_uniform(seed, index, token)));
}

// --- penalties and masks -------------------------------------------------------------------

// The host's `penalise`: the repetition penalty on a history token, then frequency and presence
// on a token the output holds `count` times. Round-to-nearest intrinsics: no FMA.
__device__ __forceinline__ float penalise(float v, bool seen, u32 count, u32 flags, float rep,
                                          float freq, float pres) {
    if ((flags & 1u) && seen) v = v > 0.f ? __fdiv_rn(v, rep) : __fmul_rn(v, rep);
    if ((flags & 2u) && count > 0u) v = __fsub_rn(v, __fadd_rn(__fmul_rn(freq, (float)count), pres));
    return v;
}

// Grid (rows, slices): block (r, y) owns columns [y * slice, (y + 1) * slice) of scratch row r,
// so a row is copied by many multiprocessors. A row with a state penalises each column as it
// copies it (its extras, in shared memory, on top of the state word); any other row's block
// applies the entries that fall in its columns (every block scans the row's list) after a
// barrier. Masks come after another barrier, so each column sees them in the host's order.
template <typename T>
__device__ void prepare(float* scratch, const T* logits, const u32* plan, int vocab) {
    __shared__ u32 extra_id[MAX_EXTRAS], extra_count[MAX_EXTRAS];
    const u32* rec = plan + (u64)blockIdx.x * PLAN_WORDS;
    const T* in = logits + (u64)rec[PLAN_SRC_ROW] * vocab;
    float* out = scratch + (u64)blockIdx.x * vocab;
    const u32 slice = ((u32)vocab + gridDim.y - 1) / gridDim.y;
    const u32 lo = blockIdx.y * slice, hi = min((u32)vocab, lo + slice);
    const u32 flags = rec[PLAN_FLAGS];
    const float rep = __uint_as_float(rec[PLAN_REPETITION]);
    const float freq = __uint_as_float(rec[PLAN_FREQUENCY]);
    const float pres = __uint_as_float(rec[PLAN_PRESENCE]);
    const u32* entries = plan + rec[PLAN_ENTRIES];
    if (flags & 8u) {
        const u32* state = (const u32*)plan_u64(rec, PLAN_STATE_LO);
        const u32 n = min(rec[PLAN_N_ENTRIES], (u32)MAX_EXTRAS);
        for (u32 e = threadIdx.x; e < n; e += blockDim.x) {
            extra_id[e] = entries[2 * e];
            extra_count[e] = entries[2 * e + 1];
        }
        __syncthreads();
        for (u32 i = lo + threadIdx.x; i < hi; i += blockDim.x) {
            const u32 w = state[i];
            bool seen = w != 0u;
            u32 count = w & ~STATE_PROMPT;
            for (u32 e = 0; e < n; ++e)
                if (extra_id[e] == i) {
                    seen = true;
                    count += extra_count[e];
                }
            out[i] = penalise(to_f32(in[i]), seen, count, flags, rep, freq, pres);
        }
    } else {
        for (u32 i = lo + threadIdx.x; i < hi; i += blockDim.x) out[i] = to_f32(in[i]);
        __syncthreads();
        // Entries are distinct ids below vocab (the host checks), so no two threads share one.
        for (u32 e = threadIdx.x; e < rec[PLAN_N_ENTRIES]; e += blockDim.x) {
            const u32 id = entries[2 * e];
            if (id < lo || id >= hi) continue;
            out[id] = penalise(out[id], true, entries[2 * e + 1], flags, rep, freq, pres);
        }
    }
    __syncthreads();
    const u32* masks = plan + rec[PLAN_MASKS];
    for (u32 m = threadIdx.x; m < rec[PLAN_N_MASKS]; m += blockDim.x)
        if (masks[m] >= lo && masks[m] < hi) out[masks[m]] = NEG_INF;
}

// Block (b, y): columns [y * slice, (y + 1) * slice) of the pair b's scratch row; a clear bit
// makes the column -inf. Each column is one thread's, so the order against prepare's writes is
// the launch order (this kernel waits for prepare).
extern "C" __global__ void sample_token_mask(float* scratch, const u32* plan, const u32* which,
                                             int vocab) {
    pdl_start();
    const u32 row = which[2 * blockIdx.x];
    const u32* bits = plan + which[2 * blockIdx.x + 1];
    float* out = scratch + (u64)row * vocab;
    const u32 slice = ((u32)vocab + gridDim.y - 1) / gridDim.y;
    const u32 lo = blockIdx.y * slice, hi = min((u32)vocab, lo + slice);
    for (u32 i = lo + threadIdx.x; i < hi; i += blockDim.x)
        if (((bits[i >> 5] >> (i & 31u)) & 1u) == 0u) out[i] = NEG_INF;
}

// One block a segment of `work` (ABSORB_WORDS words each, `segments` of them, then the tokens):
// its prompt tokens set STATE_PROMPT in the segment's state, its output tokens add 1; ids at or
// past vocab are skipped (the host's penalties ignore them too).
extern "C" __global__ void sample_penalty_absorb(const u32* work, int vocab) {
    pdl_start();
    const u32* seg = work + (u64)blockIdx.x * ABSORB_WORDS;
    u32* state = (u32*)plan_u64(seg, 0);
    const u32* tokens = work + seg[2];
    const u32 n = seg[3], first_output = seg[4];
    for (u32 i = threadIdx.x; i < n; i += blockDim.x) {
        const u32 id = tokens[i];
        if (id >= (u32)vocab) continue;
        if (i >= first_output) atomicAdd(&state[id], 1u);
        else atomicOr(&state[id], STATE_PROMPT);
    }
}

extern "C" __global__ void sample_prepare_f32(float* scratch, const float* logits, const u32* plan,
                                              int vocab) {
    pdl_start();
    prepare(scratch, logits, plan, vocab);
}

extern "C" __global__ void sample_prepare_bf16(float* scratch, const bf16* logits, const u32* plan,
                                               int vocab) {
    pdl_start();
    prepare(scratch, logits, plan, vocab);
}

// --- Gumbel-max over the whole row ---------------------------------------------------------

// Is (s, i) better than (bs, bi)? Higher score, then lower id; NONE loses to anything.
__device__ __forceinline__ bool better(double s, u32 i, double bs, u32 bi) {
    if (i == NONE) return false;
    if (bi == NONE) return true;
    return s > bs || (s == bs && i < bi);
}

// The block's best (score, id) by `better`; every thread gets it. The arrays are the caller's
// shared scratch (SAMPLE_THREADS entries); the first barrier lets a kernel call this twice.
__device__ void block_best(double* ss, u32* ii, double& s, u32& i) {
    __syncthreads();
    ss[threadIdx.x] = s;
    ii[threadIdx.x] = i;
    __syncthreads();
    for (int stride = blockDim.x / 2; stride > 0; stride >>= 1) {
        if (threadIdx.x < stride && better(ss[threadIdx.x + stride], ii[threadIdx.x + stride],
                                           ss[threadIdx.x], ii[threadIdx.x])) {
            ss[threadIdx.x] = ss[threadIdx.x + stride];
            ii[threadIdx.x] = ii[threadIdx.x + stride];
        }
        __syncthreads();
    }
    s = ss[0];
    i = ii[0];
}

// out[b] = the drawn id of scratch row which[b] (NONE when the row has no finite logit).
//
// Pass 1 finds the largest v / T (lowest id) and scores it exactly: a lower bound of the winning
// score. Pass 2 scores the row, skipping a token whose score cannot reach the bound (or the
// thread's best so far): the noise is -ln(w) with w = -ln(u) >= 1 - u, so it is at most
// -ln(1 - u), which one f32 log bounds to within 1e-5; a token is skipped only when that bound
// plus a 0.01 margin is below the gap (and the scores are below 1e12, where rounding stays far
// inside the margin). Skipped tokens score strictly less than an achieved score, so the winner
// (and its tie-break) is the host's; most tokens of a peaked row cost an integer hash and one
// f32 log instead of two det_ln.
extern "C" __global__ void sample_gumbel(u32* out, const float* scratch, const u32* plan,
                                         const u32* which, int vocab) {
    pdl_start();
    __shared__ double best_s[SAMPLE_THREADS];
    __shared__ u32 best_i[SAMPLE_THREADS];
    const u32 r = which[blockIdx.x];
    const u32* rec = plan + (u64)r * PLAN_WORDS;
    const float* row = scratch + (u64)r * vocab;
    const float t = __uint_as_float(rec[PLAN_TEMPERATURE]);
    const u64 seed = plan_u64(rec, PLAN_SEED_LO), index = plan_u64(rec, PLAN_INDEX_LO);
    double bs = 0.0;
    u32 bi = NONE;
    for (int i = threadIdx.x; i < vocab; i += blockDim.x) {
        const float v = row[i];
        if (!finite_f32(v)) continue;
        const double vt = (double)__fdiv_rn(v, t);
        if (bi == NONE || vt > bs) {
            bs = vt;
            bi = (u32)i;
        }
    }
    block_best(best_s, best_i, bs, bi);
    if (bi == NONE) {
        if (threadIdx.x == 0) out[blockIdx.x] = NONE;
        return;
    }
    const double bound = bs + sample_gumbel_noise(seed, index, bi);
    // Past ~1e12 a score's rounding (ulp > 1e-4) could eat the margin: no skipping there.
    const bool prune = fabs(bound) < 1e12;
    bs = 0.0;
    bi = NONE;
    for (int i = threadIdx.x; i < vocab; i += blockDim.x) {
        const float v = row[i];
        if (!finite_f32(v)) continue;
        const double vt = (double)__fdiv_rn(v, t);
        const double floor_s = (bi != NONE && bs > bound) ? bs : bound;
        // The noise never exceeds -ln(2^-53) = 36.74: far tokens skip even the hash.
        if (prune && 37.01 < floor_s - vt) continue;
        const double u = noise_uniform(seed, index, (u32)i);
        const float most = -__logf((float)(1.0 - u));  // >= the noise, up to 1e-5
        if (prune && (double)most + 0.01 < floor_s - vt) continue;  // never for NaN gaps
        const double s = vt + -det_ln(-det_ln(u));
        // Ids grow along a thread's walk, so strictly greater keeps the lowest id on ties.
        if (bi == NONE || s > bs) {
            bs = s;
            bi = (u32)i;
        }
    }
    block_best(best_s, best_i, bs, bi);
    if (threadIdx.x == 0) out[blockIdx.x] = bi;
}

// --- top candidates for top-k / top-p / min-p ----------------------------------------------

// f32 bits mapped so unsigned order is the total order (Rust's f32::total_cmp): -0.0 < +0.0.
__device__ __forceinline__ u32 order_key(float v) {
    const u32 b = __float_as_uint(v);
    return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}

__device__ __forceinline__ float from_order_key(u32 k) {
    return __uint_as_float((k & 0x80000000u) ? (k & 0x7fffffffu) : ~k);
}

// Larger value first, then lower id: unique per token, so the selection has no ties.
__device__ __forceinline__ u64 cand_key(float vt, u32 id) {
    return ((u64)order_key(vt) << 32) | (u64)(NONE - id);
}

// Add q in [0, 1] to the 128-bit fixed-point sum (hi, lo) = floor(q * 2^96): hi holds the units of
// 2^-32, lo the next 64 bits. Sums of up to 2^31 terms cannot overflow hi.
__device__ __forceinline__ void fixed_add(u64& hi, u64& lo, double q) {
    const double x = q * 4294967296.0;  // exact
    const double h = floor(x);
    const u64 l = (u64)((x - h) * 18446744073709551616.0);  // exact, then truncated
    lo += l;
    hi += (u64)h + (lo < l ? 1ull : 0ull);
}

// out + b * CAND_WORDS: [finite count, flags, total lo (2 words), total hi (2 words),
// ids[KMAX], values[KMAX]].
extern "C" __global__ void sample_candidates(u32* out, const float* scratch, const u32* plan,
                                             const u32* which, int vocab) {
    pdl_start();
    __shared__ u64 keys[KMAX];
    __shared__ u64 part_hi[SAMPLE_THREADS], part_lo[SAMPLE_THREADS];
    __shared__ u32 hist[256];
    __shared__ u32 counter, overflow;
    __shared__ u64 sel_prefix;
    __shared__ int sel_shift;
    __shared__ u32 sel_need, sel_done;
    const u32 r = which[blockIdx.x];
    const u32* rec = plan + (u64)r * PLAN_WORDS;
    const float* row = scratch + (u64)r * vocab;
    const float t = __uint_as_float(rec[PLAN_TEMPERATURE]);
    const u32 want = rec[PLAN_WANT] < KMAX ? rec[PLAN_WANT] : KMAX;
    u32* o = out + (u64)blockIdx.x * CAND_WORDS;
    if (threadIdx.x == 0) {
        counter = 0;
        overflow = 0;
    }
    __syncthreads();

    // Pass 1: how many finite logits, the largest v / T, and whether any v / T overflowed.
    float mx = NEG_INF;
    u32 n = 0, ovf = 0;
    for (int i = threadIdx.x; i < vocab; i += blockDim.x) {
        const float v = row[i];
        if (!finite_f32(v)) continue;
        const float vt = __fdiv_rn(v, t);
        ovf |= finite_f32(vt) ? 0u : 1u;
        mx = fmaxf(mx, vt);
        ++n;
    }
    mx = block_max(mx);
    if (n) atomicAdd(&counter, n);
    if (ovf) atomicOr(&overflow, 1u);
    __syncthreads();
    const u32 finite = counter;

    // Pass 2: sum of exp(v / T - max) over every finite token, each term cut to 128-bit fixed
    // point (`fixed_add`) so the sum is exact integer arithmetic: any order gives the host's
    // result (`sampling::fixed_sum`), bit for bit. Only when the host may need it (no top-k, or
    // a top-k past KMAX): under a top-k it sums the head itself.
    u64 hi = 0, lo = 0;
    if (!overflow && (rec[PLAN_FLAGS] & 4u)) {
        for (int i = threadIdx.x; i < vocab; i += blockDim.x) {
            const float v = row[i];
            if (!finite_f32(v)) continue;
            const float x = __fsub_rn(__fdiv_rn(v, t), mx);
            // exp(-67) < 2^-96: such terms add 0 to the fixed-point sum, no need for exp.
            if (x >= -67.f) fixed_add(hi, lo, det_exp((double)x));
        }
    }
    part_hi[threadIdx.x] = hi;
    part_lo[threadIdx.x] = lo;
    __syncthreads();
    for (int stride = blockDim.x / 2; stride > 0; stride >>= 1) {
        if (threadIdx.x < stride) {
            const u64 l = part_lo[threadIdx.x] + part_lo[threadIdx.x + stride];
            part_hi[threadIdx.x] += part_hi[threadIdx.x + stride] + (l < part_lo[threadIdx.x] ? 1ull : 0ull);
            part_lo[threadIdx.x] = l;
        }
        __syncthreads();
    }
    const u32 take = finite < want ? finite : want;

    // Radix select: the smallest key among the `take` largest. Skipped when every finite
    // logit is taken (threshold 0 keeps them all) or the row is hopeless (overflow).
    u64 threshold = 0;
    if (finite > want && !overflow) {
        if (threadIdx.x == 0) {
            sel_prefix = 0;
            sel_shift = 64;
            sel_need = take;
            sel_done = 0;
        }
        __syncthreads();
        while (true) {
            const int shift = sel_shift - 8;
            const u64 prefix = sel_prefix;
            for (int b = threadIdx.x; b < 256; b += blockDim.x) hist[b] = 0;
            __syncthreads();
            // The first digits put most tokens in a few buckets: lanes of a warp that share
            // a bucket add once through their lowest lane (every lane runs every iteration,
            // as __match_any_sync needs).
            for (int base = 0; base < vocab; base += blockDim.x) {
                const int i = base + threadIdx.x;
                u32 bin = NONE;
                if (i < vocab) {
                    const float v = row[i];
                    if (finite_f32(v)) {
                        const u64 k = cand_key(__fdiv_rn(v, t), (u32)i);
                        if (shift + 8 == 64 || (k >> (shift + 8)) == prefix)
                            bin = (u32)(k >> shift) & 255u;
                    }
                }
                const u32 peers = __match_any_sync(0xffffffffu, bin);
                if (bin != NONE && (int)(threadIdx.x & 31u) == __ffs(peers) - 1)
                    atomicAdd(&hist[bin], (u32)__popc(peers));
            }
            __syncthreads();
            if (threadIdx.x == 0) {
                u32 above = 0, need = sel_need;
                int b = 255;
                for (; b > 0; --b) {
                    if (above + hist[b] >= need) break;
                    above += hist[b];
                }
                need -= above;
                sel_prefix = (prefix << 8) | (u64)b;
                sel_shift = shift;
                sel_need = need;
                sel_done = (hist[b] == need || shift == 0) ? 1u : 0u;
            }
            __syncthreads();
            if (sel_done) break;
        }
        threshold = sel_prefix << sel_shift;
    }

    // Collect the winners (any order), pad, and sort descending: value, then lower id.
    if (!overflow) {
        for (int i = threadIdx.x; i < vocab; i += blockDim.x) {
            const float v = row[i];
            if (!finite_f32(v)) continue;
            const u64 k = cand_key(__fdiv_rn(v, t), (u32)i);
            if (k >= threshold) {
                const u32 at = atomicAdd(&counter, 1u) - finite;
                if (at < KMAX) keys[at] = k;
            }
        }
    }
    __syncthreads();
    const u32 got = overflow ? 0u : counter - finite;
    for (int j = threadIdx.x; j < KMAX; j += blockDim.x)
        if ((u32)j >= got) keys[j] = 0;  // below every real key
    __syncthreads();
    for (int k = 2; k <= KMAX; k <<= 1) {
        for (int j = k >> 1; j > 0; j >>= 1) {
            for (int i = threadIdx.x; i < KMAX; i += blockDim.x) {
                const int l = i ^ j;
                if (l > i) {
                    const u64 a = keys[i], b = keys[l];
                    const bool descending = (i & k) == 0;
                    if (descending ? a < b : a > b) {
                        keys[i] = b;
                        keys[l] = a;
                    }
                }
            }
            __syncthreads();
        }
    }
    for (int j = threadIdx.x; j < KMAX; j += blockDim.x) {
        const u64 k = keys[j];
        const bool real = (u32)j < take && !overflow;
        o[META_WORDS + j] = real ? NONE - (u32)k : NONE;
        o[META_WORDS + KMAX + j] = real ? __float_as_uint(from_order_key((u32)(k >> 32))) : 0u;
    }
    if (threadIdx.x == 0) {
        o[0] = finite;
        o[1] = overflow | (got != take && !overflow ? 2u : 0u);
        o[2] = (u32)part_lo[0];
        o[3] = (u32)(part_lo[0] >> 32);
        o[4] = (u32)part_hi[0];
        o[5] = (u32)(part_hi[0] >> 32);
    }
}
