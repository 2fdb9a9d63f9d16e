// kernels/lab/probe.cu's decode skeletons (EMU_ONLY=skeleton): the three kernels, every mode, on a small grid and
// a table of stages of uneven sizes and producers (a producer with an empty share, one block
// alone, a stage not known ahead), against the words a plain loop folds: each producer's chunks
// XOR the previous stage's words as its 512 threads read them. Also that no hand-off gave up.
static void skeleton_tests() {
    const unsigned grid = 4;
    struct S { u64 bytes; u32 producers; u32 ahead; };
    // ahead: bit 0 known ahead, bit 1 routed (decode_skeleton_tma's second ring; the other two
    // kernels ignore it): a routed stage after the router-like one, and one after that; each of
    // decode_skeleton_tma's rings wraps around more than once.
    const std::vector<S> spec = {{4096, 4, 1}, {48, 4, 1}, {16, 1, 1}, {100000 & ~15ull, 3, 2},
                                 {65536, 4, 3}, {0, 2, 1}, {262144, 4, 2}, {1024, 2, 1},
                                 {40000, 4, 1}, {8192 * 5 + 16, 3, 3}, {8192 * 64, 4, 1}, {512, 1, 1}};
    std::vector<SkelStage> st;
    u64 total = 0;
    for (const S& s : spec) {
        st.push_back(SkelStage{total, s.bytes, s.producers, s.ahead});
        total += s.bytes;
    }
    std::vector<u32> w(total / 4 + 4);
    for (auto& x : w) x = (u32)rng();
    const int n = (int)st.size();
    // The words a plain loop expects, with (waits) or without the previous stage's words.
    auto expect = [&](bool waits) {
        std::vector<u32> out(n * grid, 0);
        for (int s = 0; s < n; ++s)
            for (u32 b = 0; b < st[s].producers; ++b) {
                const u64 chunks = st[s].bytes / 16, per = (chunks + st[s].producers - 1) / st[s].producers;
                const u64 lo = std::min(chunks, b * per), hi = std::min(chunks, lo + per);
                u32 r = 0;
                for (u64 c = lo; c < hi; ++c)
                    for (int i = 0; i < 4; ++i) r ^= w[(st[s].offset / 16 + c) * 4 + i];
                if (waits && s > 0)
                    for (int t = 0; t < 512; ++t) r ^= out[(s - 1) * grid + t % st[s - 1].producers];
                out[s * grid + b] = r;
            }
        return out;
    };
    const size_t ring_smem = 6 * 4 * 512 * 16 + 64;
    // kernel 0: registers (mode bit 2: the flag in the data), 1: the cp.async ring, 2 to 4: the
    // bulk-copy rings, 14 + 12 slots of 8 KB, 3 + 2 of 8 KB, 2 + 3 of 32 KB (rings that wrap
    // many times, slots of several chunks a thread).
    struct Tma { int dense, routed, slot; };
    const Tma tma[3] = {{14, 12, 8192}, {3, 2, 8192}, {2, 3, 32768}};
    for (int kernel = 0; kernel < 5; ++kernel)
        for (int mode : {0, 1, 2, 4, 6, 12, 14}) {
            if (kernel && mode >= 2) continue;
            const bool ll = (mode & 4) != 0;
            std::vector<u32> done(n, 0), out(2 * n * grid, 0), failed(1, 0);
            const unsigned threads = kernel >= 2 ? TMA_THREADS : 512;
            const size_t smem = kernel >= 2 ? TMA_SMEM : kernel == 1 ? ring_smem : 64 + 8 * grid;
            launch_all({grid}, {threads}, smem, [&] {
                const auto* wp = (const u32x4*)w.data();
                if (kernel >= 2) {
                    const Tma& r = tma[kernel - 2];
                    decode_skeleton_tma(wp, st.data(), n, done.data(), out.data(), failed.data(), mode,
                                        r.dense, r.routed, r.slot);
                } else if (kernel == 1) {
                    decode_skeleton_ring(wp, st.data(), n, done.data(), out.data(), failed.data(), mode);
                } else {
                    decode_skeleton(wp, st.data(), n, done.data(), out.data(), failed.data(), mode);
                }
            });
            // With the flag in the data, each word is the low half of a u64 whose high half is
            // the stage's tag.
            auto word = [&](int s, u32 b) { return ll ? out[2 * (s * grid + b)] : out[s * grid + b]; };
            auto tag_ok = [&](int s, u32 b) {
                return !ll || b >= st[s].producers || out[2 * (s * grid + b) + 1] == (u32)s + 1;
            };
            const auto want = expect((mode & 1) == 0);
            int bad = failed[0] != 0;
            for (int s = 0; s < n; ++s) {
                bad += done[s] != st[s].producers;
                for (u32 b = 0; b < grid; ++b) bad += word(s, b) != want[s * grid + b] || !tag_ok(s, b);
            }
            char name[80];
            const char* kind[5] = {"", "_ring", "_tma 14+12", "_tma 3+2", "_tma 2+3 of 32 KB"};
            snprintf(name, 80, "decode_skeleton%s mode %d: words, counts", kind[kernel], mode);
            report(name, bad, 0);
        }
}
