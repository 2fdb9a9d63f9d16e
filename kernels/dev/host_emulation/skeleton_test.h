// probe.cu's decode skeletons (EMU_ONLY=skeleton): both kernels, every mode, on a small grid and
// a table of stages of uneven sizes and producers (a producer with an empty share, one block
// alone, a stage not known ahead), against the words a plain loop folds: each producer's chunks
// XOR the previous stage's words as its 512 threads read them. Also that no hand-off gave up.
static void skeleton_tests() {
    const unsigned grid = 4;
    struct S { u64 bytes; u32 producers; u32 ahead; };
    const std::vector<S> spec = {{4096, 4, 1}, {48, 4, 1}, {16, 1, 1}, {100000 & ~15ull, 3, 0},
                                 {65536, 4, 1}, {0, 2, 1}, {262144, 4, 0}, {1024, 2, 1}};
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
    for (int ring = 0; ring < 2; ++ring)
        for (int mode : {0, 1, 2}) {
            if (ring && mode == 2) continue;
            std::vector<u32> done(n, 0), out(n * grid, 0), failed(1, 0);
            launch_all({grid}, {512}, ring ? ring_smem : 64, [&] {
                if (ring)
                    decode_skeleton_ring((const u32x4*)w.data(), st.data(), n, done.data(), out.data(), failed.data(), mode);
                else
                    decode_skeleton((const u32x4*)w.data(), st.data(), n, done.data(), out.data(), failed.data(), mode);
            });
            const auto want = expect((mode & 1) == 0);
            int bad = failed[0] != 0;
            for (int s = 0; s < n; ++s) {
                bad += done[s] != st[s].producers;
                for (u32 b = 0; b < grid; ++b) bad += out[s * grid + b] != want[s * grid + b];
            }
            char name[80];
            snprintf(name, 80, "decode_skeleton%s mode %d: words, counts", ring ? "_ring" : "", mode);
            report(name, bad, 0);
        }
}
