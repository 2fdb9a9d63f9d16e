// The flash prefill kernel (attention_flash.cu) against double-precision causal attention:
// tiles of 128 rows, chunks after a cached prefix, GQA groups, block sizes that split a key tile,
// rows past a tile's end, head dims 64/128/256, bf16 and FP8 caches. Included by test.cpp.

// (first row, end row) pairs of each sequence's rows, FlashCfg's BQ at a time.
static std::vector<u32> flash_tiles(const std::vector<std::pair<int, int>>& seqs, int bq) {
    std::vector<u32> tiles;
    int row = 0;
    for (auto [s, n] : seqs) {
        for (int a = 0; a < n; a += bq) {
            tiles.push_back(row + a);
            tiles.push_back(row + std::min(n, a + bq));
        }
        row += n;
    }
    return tiles;
}

// Worst |error| of out against causal attention in double precision, relative to the rms of
// the reference: bf16 weights p carry 2^-9 of each term, so an output that nearly cancels has a
// large relative error however right the kernel is (Tol::FLASH in cuda_check, the same bound).
template <class KF, class VF>
double flash_worst(const PagedBatch& b, const std::vector<float>& qkv, int nh, int nkv, int hd,
                   float scale, const std::vector<bf16>& out, KF K, VF V, AttnExtras x = {}) {
    const auto ref = attention_ref(b, qkv, nh, nkv, hd, scale, K, V, x);
    double ms = 0, worst = 0;
    for (double v : ref) ms += v * v;
    const double rms = std::sqrt(ms / ref.size());
    for (size_t i = 0; i < ref.size(); ++i) worst = std::max(worst, std::fabs(F(out[i]) - ref[i]) / rms);
    return worst;
}

template <int D>
void t_flash(int nh, int nkv, std::vector<std::pair<int, int>> seqs, int bs = 16, bool fp8 = false,
             bool bf16_q = false, int window = 0, bool sinks = false, bool wg = false) {
    const std::vector<float> sink_v = random_sinks(nh);
    const AttnExtras x{window, sinks ? &sink_v : nullptr};
    const float* sk = x.sink_ptr();
    const int W = (nh + 2 * nkv) * D;
    PagedBatch b(seqs, bs, 2);
    const size_t heads = (size_t)b.total_blocks * bs * nkv, csz = heads * D;
    const int groups = (D + 127) / 128;
    std::vector<bf16> kc(csz), vc(csz), out((size_t)b.T * nh * D, B(NAN));
    std::vector<unsigned char> k8(csz), v8(csz);
    std::vector<float> ksc(heads * groups), vsc(heads * groups);
    for (size_t i = 0; i < csz; ++i) {
        kc[i] = B(U(1));
        vc[i] = B(U(1));
        // What write_kv stores for values within ±1: e4m3 of x / scale, scales near 1 / 448.
        k8[i] = (unsigned char)f32_to_e4m3(U(448));
        v8[i] = (unsigned char)f32_to_e4m3(U(448));
    }
    for (auto& s : ksc) s = (1.f + 0.5f * U(1)) / 448.f;
    for (auto& s : vsc) s = (1.f + 0.5f * U(1)) / 448.f;
    std::vector<float> qkv((size_t)b.T * W);
    for (auto& v : qkv) v = U(3);
    std::vector<bf16> qkv16(qkv.size());
    for (size_t i = 0; i < qkv.size(); ++i) {
        qkv16[i] = B(qkv[i]);
        if (bf16_q) qkv[i] = F(qkv16[i]);
    }
    const auto tiles = flash_tiles(seqs, FlashCfg<D>::BQ);
    const float scale = 1.0f / std::sqrt((float)D);
    const unsigned grid = (unsigned)(tiles.size() / 2 * nh);
    // The build the launcher picks: the _win one for a window.
    // The build the launcher picks: the _win one for a window; `wg`: the wgmma kernel
    // (attention_flash_wg.cu) instead of the mma.sync one.
#define FLASH_IMPL(TQ, TC, q, k, v, ks, vs)                                                          \
    if (wg)                                                                                        \
        attention_flash_wg_impl<TQ, TC, D, W>(out.data(), q, k, v, pos, rs, tab, tiles.data(), b.maxb, bs, nh, nkv, scale, ks, vs, window, sk); \
    else                                                                                           \
        attention_flash_impl<TQ, TC, D, W>(out.data(), q, k, v, pos, rs, tab, tiles.data(), b.maxb, bs, nh, nkv, scale, ks, vs, window, sk);
    auto run = [&](auto win) {
        constexpr bool W = decltype(win)::value;
        const u32 *pos = b.positions.data(), *rs = b.row_seq.data(), *tab = b.tables.data();
        if (fp8 && bf16_q) {
            FLASH_IMPL(bf16, unsigned char, qkv16.data(), k8.data(), v8.data(), ksc.data(), vsc.data())
        } else if (fp8) {
            FLASH_IMPL(float, unsigned char, qkv.data(), k8.data(), v8.data(), ksc.data(), vsc.data())
        } else if (bf16_q) {
            FLASH_IMPL(bf16, bf16, qkv16.data(), kc.data(), vc.data(), nullptr, nullptr)
        } else {
            FLASH_IMPL(float, bf16, qkv.data(), kc.data(), vc.data(), nullptr, nullptr)
        }
    };
#undef FLASH_IMPL
    const unsigned threads = wg ? FwgCfg<D>::THREADS : FlashCfg<D>::THREADS;
    launch({grid}, {threads}, [&] {
        if (window > 0)
            run(std::true_type{});
        else
            run(std::false_type{});
    });
    // The reference sees the cache's values (FP8: e4m3 · scale) and q as given (bf16 q: its
    // bf16 values); the kernel rounds q, p and an FP8 cache's scaled values to bf16.
    auto K = [&](size_t r, int d) { return fp8 ? e4m3_ref(k8[r * D + d]) * ksc[r * groups + d / 128] : (double)F(kc[r * D + d]); };
    auto V = [&](size_t r, int d) { return fp8 ? e4m3_ref(v8[r * D + d]) * vsc[r * groups + d / 128] : (double)F(vc[r * D + d]); };
    const double worst = flash_worst(b, qkv, nh, nkv, D, scale, out, K, V, x);
    char name[140];
    snprintf(name, sizeof name, "attention_flash%s d%d h%d/%d bs%d T%d%s%s window %d%s", wg ? "_wg" : "",
             D, nh, nkv, bs, b.T, fp8 ? " kv8" : "", bf16_q ? " bf16 q" : "", window, sinks ? " sinks" : "");
    report(name, worst, 3e-2);
}

static void flash_tests() {
    t_flash<128>(4, 2, {{0, 150}});                    // two tiles, the second partial
    t_flash<128>(8, 2, {{100, 30}, {0, 5}, {7, 128}}); // after a prefix, a short chunk, a full tile
    t_flash<64>(4, 1, {{0, 40}, {3, 20}}, 12);        // key tiles straddling 12-key blocks
    t_flash<256>(4, 2, {{20, 50}}, 16);               // 32-key tiles
    t_flash<128>(2, 2, {{0, 33}}, 16, true);          // FP8 cache
    t_flash<256>(2, 1, {{5, 20}}, 16, true, true);    // FP8, two scale groups, bf16 q
    t_flash<128>(4, 4, {{130, 9}}, 16, false, true);  // bf16 q, keys far past the chunk
    // Sliding windows: 1 key; smaller than a key tile; not a multiple of the block size; larger
    // than the context; a chunk continuing a cached context (key tiles before every row's
    // window skipped); GQA; 32-key tiles; FP8; then sinks with and without a window.
    t_flash<128>(4, 2, {{0, 150}}, 16, false, false, 1);
    t_flash<128>(8, 2, {{100, 30}, {0, 5}, {7, 128}}, 16, false, false, 20);
    t_flash<64>(4, 1, {{0, 40}, {3, 20}}, 12, false, false, 13);
    t_flash<128>(4, 2, {{10, 40}}, 16, false, false, 500);
    t_flash<128>(8, 2, {{300, 140}}, 16, false, true, 100);
    t_flash<256>(4, 2, {{70, 50}}, 16, false, false, 33);
    t_flash<128>(2, 2, {{200, 33}}, 16, true, false, 64);
    t_flash<128>(4, 2, {{0, 150}}, 16, false, false, 0, true);
    t_flash<64>(8, 2, {{100, 30}, {0, 5}}, 16, false, true, 17, true);
}

// The wgmma kernel (attention_flash_wg.cu) on the same kinds of cases: 128-key tiles at D = 128
// (one partial, one reaching past a prefix), 64-key tiles at 64 and 256, FP8 caches, bf16 q,
// sliding windows and sinks.
static void flash_wg_tests() {
    t_flash<128>(4, 2, {{0, 150}}, 16, false, false, 0, false, true);
    t_flash<128>(8, 2, {{100, 30}, {0, 5}, {7, 128}}, 16, false, false, 0, false, true);
    t_flash<64>(4, 1, {{0, 40}, {3, 20}}, 12, false, false, 0, false, true);
    t_flash<256>(4, 2, {{20, 50}}, 16, false, false, 0, false, true);
    t_flash<128>(2, 2, {{0, 33}}, 16, true, false, 0, false, true);
    t_flash<256>(2, 1, {{5, 20}}, 16, true, true, 0, false, true);
    t_flash<128>(4, 4, {{130, 9}}, 16, false, true, 0, false, true);
    t_flash<128>(8, 2, {{300, 140}}, 16, false, true, 100, false, true);
    t_flash<64>(8, 2, {{100, 30}, {0, 5}}, 16, false, true, 17, true, true);
    // Three to five key tiles: several stage swaps, warpgroups whose later tiles are all past
    // their rows, a prefix.
    t_flash<128>(4, 2, {{0, 300}}, 16, false, false, 0, false, true);
    t_flash<256>(2, 1, {{100, 90}}, 16, true, true, 0, false, true);
    t_flash<64>(4, 2, {{60, 200}, {0, 3}}, 16, false, true, 0, false, true);
    t_flash<128>(4, 2, {{0, 150}}, 16, false, false, 0, true, true);
    // The producer's ring reused: four 128-key tiles after a prefix, four 64-key tiles of an
    // FP8 cache in a window, five 64-key tiles through a 64-wide head's four stages.
    t_flash<128>(2, 1, {{200, 200}}, 16, false, false, 0, false, true);
    t_flash<256>(2, 1, {{150, 60}}, 16, true, false, 100, false, true);
    t_flash<64>(2, 2, {{260, 40}}, 16, false, false, 0, false, true);
}
