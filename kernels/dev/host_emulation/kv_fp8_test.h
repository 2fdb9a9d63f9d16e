// The FP8 KV cache's kernels (`--kv-cache-dtype fp8`) against plain C++ references: the e4m3
// encoder against a nearest-value search, the cache writes against a reference quantizer, and
// attention over e4m3 caches against double-precision attention on the dequantized values.
// Included by test.cpp (after its helpers).

// e4m3 byte b's value, independently of the kernels' bit trick.
static double e4m3_ref(int b) {
    int s = b & 0x80 ? -1 : 1, e = (b >> 3) & 15, m = b & 7;
    if (e == 15 && m == 7) return NAN;
    return s * (e == 0 ? std::ldexp(m / 8.0, -6) : std::ldexp(1 + m / 8.0, e - 7));
}

// The byte nearest x (ties to the even byte), saturated at ±448.
static int e4m3_nearest(float x) {
    if (std::isnan(x)) return 0x7f;
    int sign = std::signbit(x) ? 0x80 : 0;
    double a = std::fabs((double)x);
    int best = 0;
    double bd = 1e300;
    for (int b = 0; b <= 0x7e; ++b) {
        double d = std::fabs(e4m3_ref(b) - a);
        if (d < bd || (d == bd && (b & 1) == 0)) { bd = d; best = b; }
    }
    return sign | best;
}

static void t_kv_fp8_encode() {
    int bad = 0;
    for (int i = 0; i < 200000; ++i) {
        float x = i < 256 ? (float)e4m3_ref(i == 0x7f || i == 0xff ? 0 : i) : U(1) * std::ldexp(1.0f, (int)(rng() % 24) - 12);
        if (i >= 256 && i % 3 == 0) {  // exact midpoints between neighbours
            int b = rng() % 0x7e;
            x = (float)((e4m3_ref(b) + e4m3_ref(b + 1)) / 2) * (rng() & 1 ? 1 : -1);
        }
        bad += (int)f32_to_e4m3(x) != e4m3_nearest(x);
    }
    bad += f32_to_e4m3(1000.f) != 0x7e;
    bad += f32_to_e4m3(-1e30f) != 0xfe;
    for (int b = 0; b < 256; ++b)  // the exact widening to bf16 the tensor-core kernel uses
        if ((b & 0x7f) != 0x7f) bad += (double)lo(e4m3x2_to_bf16x2((u32)b)) != e4m3_ref(b);
    report("f32_to_e4m3 = nearest e4m3, ties to even", bad, 0);
    // The tensor-core kernel's widening of eight bytes (byte order kept, every byte value).
    int wbad = 0;
    for (int i = 0; i < 4096; ++i) {
        unsigned char b[8];
        for (int j = 0; j < 8; ++j) {
            b[j] = i < 256 ? (unsigned char)(i + 37 * j) : (unsigned char)(rng() & 0xff);
            if ((b[j] & 0x7f) == 0x7f) b[j] = 0;
        }
        u32x2 w; memcpy(&w, b, 8);
        u32x4 r = e4m3x8_to_bf16x8(w);
        u32 words[4] = {r.x, r.y, r.z, r.w};
        for (int j = 0; j < 8; ++j) {
            float got = j & 1 ? hi(words[j / 2]) : lo(words[j / 2]);
            wbad += (double)got != e4m3_ref(b[j]) || std::signbit(got) != ((b[j] & 0x80) != 0);
        }
    }
    report("e4m3x8_to_bf16x8 = exact values", wbad, 0);
}

// Reference quantizer of one head vector: bytes and group scales.
static void quantize_ref(const float* x, int hd, unsigned char* q, float* scales) {
    for (int g0 = 0; g0 < hd; g0 += 128) {
        int end = std::min(hd, g0 + 128);
        float amax = 0;
        for (int d = g0; d < end; ++d) amax = std::max(amax, std::fabs(x[d]));
        float s = amax / 448.f;
        if (!(s > 0)) s = 1;
        scales[g0 / 128] = s;
        for (int d = g0; d < end; ++d) q[d] = (unsigned char)e4m3_nearest(x[d] / s);
    }
}

// write_kv_f32_kv8 against the reference quantizer, bytes and scales exactly; then
// qk_norm_rope_kv_f32_kv8 = qk_norm_rope_f32 + write_kv_f32_kv8 bit for bit.
static void t_write_kv_fp8(int T, int nh, int nkv, int hd) {
    int W = (nh + 2 * nkv) * hd, blocks = T + 2, bs = 2, groups = (hd + 127) / 128;
    size_t rows = (size_t)blocks * bs * nkv;
    std::vector<float> qkv(T * W);
    for (size_t i = 0; i < qkv.size(); ++i) qkv[i] = U(2) * (i % 97 == 0 ? 50 : 1);
    for (int d = 0; d < hd; ++d) qkv[(size_t)nh * hd + d] = 0;  // an all-zero k head: scale 1
    std::vector<u32> slots; for (int i = 0; i < blocks * bs; ++i) slots.push_back(i);
    std::shuffle(slots.begin(), slots.end(), rng); slots.resize(T);
    std::vector<unsigned char> k(rows * hd, 0xee), v(k);
    std::vector<float> ks(rows * groups, NAN), vs(ks);
    launch({(unsigned)T}, {128}, [&] { write_kv_f32_kv8(k.data(), v.data(), ks.data(), vs.data(), qkv.data(), slots.data(), nh, nkv, hd); });
    int bad = 0;
    std::vector<unsigned char> q(hd); std::vector<float> sc(groups);
    for (int t = 0; t < T; ++t) for (int kv = 0; kv < 2; ++kv) for (int h = 0; h < nkv; ++h) {
        quantize_ref(&qkv[(size_t)t * W + (nh + kv * nkv + h) * hd], hd, q.data(), sc.data());
        size_t r = (size_t)slots[t] * nkv + h;
        const auto& c = kv ? v : k; const auto& s = kv ? vs : ks;
        for (int d = 0; d < hd; ++d) bad += c[r * hd + d] != q[d];
        for (int g = 0; g < groups; ++g) bad += fbits(s[r * groups + g]) != fbits(sc[g]);
    }
    char name[96]; snprintf(name, 96, "write_kv_kv8 = reference quantizer h%d/%d hd%d", nh, nkv, hd);
    report(name, bad, 0);

    // The fused rope + FP8 write against rope then write_kv_kv8.
    std::vector<bf16> qw(hd), kw(hd);
    std::vector<u32> pos(T);
    for (auto& w : qw) w = B(1 + U(0.2));
    for (auto& w : kw) w = B(1 + U(0.2));
    for (auto& p : pos) p = rng() % 4096;
    std::vector<float> inv(hd / 2);
    for (int i = 0; i < hd / 2; ++i) inv[i] = 1.0f / std::pow(1e4f, 2.0f * i / hd);
    auto q1 = qkv, q2 = qkv;
    std::vector<unsigned char> k1(k.size(), 0), v1(k1), k2(k1), v2(k1);
    std::vector<float> ks1(ks.size(), 0), vs1(ks1), ks2(ks1), vs2(ks1);
    launch({(unsigned)T, (unsigned)((nh + nkv + 3) / 4)}, {128}, [&] {
        qk_norm_rope_f32(q1.data(), pos.data(), qw.data(), kw.data(), inv.data(), nh, nkv, hd, hd / 2, 1.0f, 1e-6f); });
    launch({(unsigned)T}, {128}, [&] { write_kv_f32_kv8(k1.data(), v1.data(), ks1.data(), vs1.data(), q1.data(), slots.data(), nh, nkv, hd); });
    launch({(unsigned)T, (unsigned)((nh + 2 * nkv + 3) / 4)}, {128}, [&] {
        qk_norm_rope_kv_f32_kv8(q2.data(), pos.data(), qw.data(), kw.data(), inv.data(), nh, nkv, hd, hd / 2, 1.0f, 1e-6f,
                                k2.data(), v2.data(), slots.data(), ks2.data(), vs2.data()); });
    int diff = 0;
    for (size_t i = 0; i < q1.size(); ++i) diff += fbits(q1[i]) != fbits(q2[i]);
    for (size_t i = 0; i < k1.size(); ++i) diff += (k1[i] != k2[i]) + (v1[i] != v2[i]);
    for (size_t i = 0; i < ks1.size(); ++i) diff += (fbits(ks1[i]) != fbits(ks2[i])) + (fbits(vs1[i]) != fbits(vs2[i]));
    snprintf(name, 96, "qk_norm_rope_kv_kv8 = rope+write_kv_kv8 h%d/%d hd%d", nh, nkv, hd);
    report(name, diff, 0);
}

// Attention over an FP8 cache (random bytes and scales), CUDA-core and tensor-core kernels,
// plain and split, against double-precision attention on e4m3 · scale.
static void t_attn_fp8(int nh, int nkv, int hd, std::vector<std::pair<int, int>> seqs, int bs = 16, int kps = 0,
                       int window = 0) {
    const AttnExtras x{window, nullptr};
    int W = (nh + 2 * nkv) * hd, groups = (hd + 127) / 128;
    PagedBatch batch(seqs, bs, 0);
    int T = batch.T, maxb = batch.maxb, total_blocks = batch.total_blocks;
    const auto &tables = batch.tables, &positions = batch.positions, &row_seq = batch.row_seq;
    size_t rows = (size_t)total_blocks * bs * nkv;
    std::vector<unsigned char> kc(rows * hd), vc(rows * hd);
    std::vector<float> ks(rows * groups), vs(rows * groups);
    for (auto& b : kc) { b = rng() & 0xff; if ((b & 0x7f) == 0x7f) b = 0x30; }
    for (auto& b : vc) { b = rng() & 0xff; if ((b & 0x7f) == 0x7f) b = 0x31; }
    for (auto& s : ks) s = 0.002f + std::fabs(U(0.01f));
    for (auto& s : vs) s = 0.002f + std::fabs(U(0.01f));
    std::vector<float> qkv(T * W); for (auto& v : qkv) v = U(3);
    std::vector<bf16> out(T * nh * hd);
    float scale = 1.0f / std::sqrt((float)hd);
    int max_len = 0; for (auto p : positions) max_len = std::max(max_len, (int)p + 1);
    int splits = kps == 0 ? 1 : (max_len + kps - 1) / kps;
    std::vector<float> partial((size_t)T * nh * splits * (hd + 2), NAN);
    auto merge = [&] { launch({(unsigned)T, (unsigned)nh}, {128}, [&] { attention_merge(out.data(), partial.data(), nh, hd, splits, nullptr); }); };
    int group = nh / nkv;
    auto check = [&](const char* kind) {
        double worst = attention_worst(batch, qkv, nh, nkv, hd, scale, out,
            [&](size_t row, int d) { return e4m3_ref(kc[row * hd + d]) * ks[row * groups + d / 128]; },
            [&](size_t row, int d) { return e4m3_ref(vc[row * hd + d]) * vs[row * groups + d / 128]; }, x);
        char name[112]; snprintf(name, 112, "paged_attention%s_kv8 h%d/%d hd%d T%d split %d window %d", kind, nh, nkv, hd, T, kps, window);
        report(name, worst, 6e-3);
    };
    int nper = (hd + 31) / 32;
    int d = nper == 1 ? 32 : nper == 2 ? 64 : nper <= 4 ? 128 : 256;
    int g = group % 4 == 0 ? 4 : group % 2 == 0 ? 2 : 1;
#define KV8_ARGS o, pp, qkv.data(), kc.data(), vc.data(), positions.data(), row_seq.data(), tables.data(), maxb, bs, nh, nkv, hd, scale, ks.data(), vs.data(), window, nullptr
#define KV8_SIMT(D, G) \
    if (d == D && g == G) return split ? paged_attention_split_f32_kv8_d##D##_g##G(KV8_ARGS) : paged_attention_f32_kv8_d##D##_g##G(KV8_ARGS);
    auto simt = [&](bool split, bf16* o, float* pp) {
        KV8_SIMT(32, 1) KV8_SIMT(32, 2) KV8_SIMT(32, 4) KV8_SIMT(64, 1) KV8_SIMT(64, 2) KV8_SIMT(64, 4)
        KV8_SIMT(128, 1) KV8_SIMT(128, 2) KV8_SIMT(128, 4) KV8_SIMT(256, 1) KV8_SIMT(256, 2) KV8_SIMT(256, 4)
        fprintf(stderr, "no kv8 kernel d %d g %d\n", d, g);
    };
#undef KV8_SIMT
    auto run = [&](auto kernel, unsigned blocks) {
        std::fill(out.begin(), out.end(), B(NAN));
        std::fill(partial.begin(), partial.end(), NAN);
        if (kps == 0) {
            launch({blocks}, {128}, [&] { kernel(false, out.data(), nullptr); });
        } else {
            launch({blocks, 1, (unsigned)splits}, {128}, [&] { kernel(true, nullptr, partial.data()); });
            merge();
        }
    };
    run(simt, (unsigned)(T * (nh / g)));
    check("");
    if ((hd == 64 || hd == 128) && group <= 16) {
        bool wide = group > 8;
        auto mma = [&](bool split, bf16* o, float* pp) {
            if (!split && !wide && hd == 64) return paged_attention_mma_f32_kv8_d64(KV8_ARGS);
            if (!split && !wide && hd == 128) return paged_attention_mma_f32_kv8_d128(KV8_ARGS);
            if (!split && wide && hd == 64) return paged_attention_mma_f32_kv8_d64_wide(KV8_ARGS);
            if (!split && wide && hd == 128) return paged_attention_mma_f32_kv8_d128_wide(KV8_ARGS);
            if (split && !wide && hd == 64) return paged_attention_mma_split_f32_kv8_d64(KV8_ARGS);
            if (split && !wide && hd == 128) return paged_attention_mma_split_f32_kv8_d128(KV8_ARGS);
            if (split && wide && hd == 64) return paged_attention_mma_split_f32_kv8_d64_wide(KV8_ARGS);
            if (split && wide && hd == 128) return paged_attention_mma_split_f32_kv8_d128_wide(KV8_ARGS);
        };
        run(mma, (unsigned)(T * nkv));
        check("_mma");
    }
#undef KV8_ARGS
}

static void kv_fp8_tests() {
    t_kv_fp8_encode();
    t_write_kv_fp8(5, 4, 2, 32);
    t_write_kv_fp8(3, 8, 2, 128);
    t_write_kv_fp8(2, 4, 1, 256);
    t_write_kv_fp8(2, 2, 2, 200);
    t_attn_fp8(8, 2, 128, {{0, 40}, {17, 1}});
    t_attn_fp8(32, 8, 128, {{200, 1}, {5, 1}}, 16, 64);
    t_attn_fp8(16, 1, 128, {{37, 1}, {0, 1}}, 16, 16);
    t_attn_fp8(8, 2, 64, {{70, 1}}, 12, 16);
    t_attn_fp8(4, 2, 96, {{10, 6}, {40, 1}});
    t_attn_fp8(12, 2, 256, {{3, 2}}, 16, 2);
    t_attn_fp8(6, 2, 128, {{45, 1}, {16, 2}}, 8);
    // Sliding windows over the FP8 cache: a window inside the first 16-key tile, one not a
    // multiple of the block size, split-K.
    t_attn_fp8(8, 2, 128, {{0, 40}, {17, 1}}, 16, 0, 5);
    t_attn_fp8(32, 8, 128, {{200, 1}, {5, 1}}, 16, 64, 37);
    t_attn_fp8(8, 2, 64, {{70, 1}}, 12, 16, 19);
}
