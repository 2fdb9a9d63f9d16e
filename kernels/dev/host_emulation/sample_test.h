// sample.cu against the host sampler's arithmetic. Included by test.cpp.
#pragma once
#include <map>

// ---- sample.cu: the host sampler's arithmetic (engine/src/backend/sampling.rs) ----

static u32 fbits(float v) { u32 u; memcpy(&u, &v, 4); return u; }
static bool finite_host(float v) { return std::isfinite(v); }

// gumbel(seed, index, token) as the Rust host sampler computes it (with its own det_ln, printed by
// Rust; the test gumbel_matches_the_values_the_device_port_is_checked_against holds the same
// bits): the device port must give these bits.
// sample_token_mask: every column whose bit is clear becomes -inf, the others keep their value
// (a vocabulary not a multiple of 32, rows listed out of order, slices of the row per block).
void t_sample_token_mask() {
    const int V = 70, words = (V + 31) / 32;
    std::vector<float> scratch(3 * V);
    for (auto& v : scratch) v = U(4);
    const auto before = scratch;
    // The plan holds two masks: rows 2 and 0 are masked, row 1 is free.
    std::vector<u32> plan(2 * words + 3, 0u);
    for (int i = 0; i < V; ++i) {
        if (i % 3 == 0) plan[3 + (i >> 5)] |= 1u << (i & 31);
        if (i == V - 1) plan[3 + words + (i >> 5)] |= 1u << (i & 31);
    }
    std::vector<u32> which = {2, 3, 0, (u32)(3 + words)};
    launch({2, 3}, {16}, [&] { sample_token_mask(scratch.data(), plan.data(), which.data(), V); });
    int bad = 0;
    for (int i = 0; i < V; ++i) {
        bad += scratch[2 * V + i] != (i % 3 == 0 ? before[2 * V + i] : NEG_INF);
        bad += scratch[0 * V + i] != (i == V - 1 ? before[i] : NEG_INF);
        bad += scratch[1 * V + i] != before[1 * V + i];
    }
    report("sample_token_mask", bad, 0);
}

void t_sample_noise() {
    struct { u64 seed, index; u32 token; u64 bits; } want[] = {
        {0ull, 0ull, 0u, 0x3feb3ab6afcf9b8eull},
        {42ull, 0ull, 1u, 0x3fbdd49f9cdb852dull},
        {42ull, 7ull, 151935u, 0xbfc39daef06dc734ull},
        {18446744073709551615ull, 123456789ull, 77u, 0xbfd3d63b3856f69eull},
        {1ull, 1ull, 1u, 0xbff039a16fbf513aull},
        {987654321ull, 3ull, 5000u, 0x3ff36829638a30f4ull},
        {5ull, 0ull, 0u, 0x400f26d348261cc3ull},
        {9223372036854775808ull, 1099511627776ull, 12345u, 0xbfe9ffbab1b2a3edull},
    };
    double bad = 0;
    for (auto& w : want) {
        double g = sample_gumbel_noise(w.seed, w.index, w.token);
        if ((u64)__double_as_longlong(g) != w.bits) { bad += 1; printf("  noise (%llu,%llu,%u): %.17g\n", w.seed, w.index, w.token, g); }
    }
    report("sample noise = host gumbel bits", bad, 0);
    // det_ln / det_exp against the Rust detmath's bits (printed by Rust).
    u64 ln_cases[][2] = {
        {0x3fe0000000000000ull, 0xbfe62e42fefa39efull}, {0x01a56e1fc2f8f359ull, 0xc085963447f87fb5ull},
        {0x3fefffffff768fa1ull, 0xbe112e0be024e4bcull}, {0x3ca0000000000000ull, 0xc0425e4f7b2737faull},
        {0x4086231eb851eb85ull, 0x401a4081b4c2b8c5ull}, {0x4008000000000000ull, 0x3ff193ea7aad030bull},
        {0x0000000000000001ull, 0xc0874385446d71c3ull}, {0x3fe6a09e667f3bcdull, 0xbfd62e42fefa39eeull},
    };
    u64 exp_cases[][2] = {
        {0x0000000000000000ull, 0x3ff0000000000000ull}, {0xbbc79ca10c924223ull, 0x3ff0000000000000ull},
        {0xbfd3333333333333ull, 0x3fe7b4c869c37c05ull}, {0xbfd62e42fefa39efull, 0x3fe6a09e667f3bccull},
        {0xbff8000000000000ull, 0x3fcc8f87724b5c1dull}, {0xc034000000000000ull, 0x3e21b48655f37267ull},
        {0xc050accccccccccdull, 0x39eb53a46280df9dull}, {0xc085e00000000000ull, 0x00d14f2b0fb9307full},
        {0xc087400000000000ull, 0x0000000000000002ull}, {0xc08748cccccccccdull, 0x0000000000000001ull},
    };
    bad = 0;
    for (auto& c : ln_cases) bad += (u64)__double_as_longlong(det_ln(__longlong_as_double(c[0]))) != c[1];
    for (auto& c : exp_cases) bad += (u64)__double_as_longlong(det_exp(__longlong_as_double(c[0]))) != c[1];
    report("det_ln / det_exp = host bits", bad, 0);
}

// A plan as engine/src/backend/cuda/sample.rs builds it.
struct PlanRow {
    u32 src; std::vector<std::pair<u32,u32>> entries; std::vector<u32> masks;
    float rep = 1, freq = 0, pres = 0, temp = 1; u64 seed = 0, index = 0; u32 want = KMAX; bool total = true;
    const u32* state = nullptr;  // a penalty state: `entries` are then the row's extras
};
static std::vector<u32> build_plan(const std::vector<PlanRow>& rows) {
    std::vector<u32> plan(rows.size() * PLAN_WORDS, 0);
    for (size_t r = 0; r < rows.size(); ++r) {
        const PlanRow& p = rows[r]; u32* rec = &plan[r * PLAN_WORDS];
        rec[PLAN_SRC_ROW] = p.src;
        rec[PLAN_REPETITION] = fbits(p.rep); rec[PLAN_FREQUENCY] = fbits(p.freq); rec[PLAN_PRESENCE] = fbits(p.pres);
        rec[PLAN_FLAGS] = (p.rep != 1.0f ? 1u : 0u) | ((p.freq != 0.0f || p.pres != 0.0f) ? 2u : 0u) | (p.total ? 4u : 0u);
        rec[PLAN_TEMPERATURE] = fbits(p.temp);
        rec[PLAN_SEED_LO] = (u32)p.seed; rec[PLAN_SEED_HI] = (u32)(p.seed >> 32);
        rec[PLAN_INDEX_LO] = (u32)p.index; rec[PLAN_INDEX_HI] = (u32)(p.index >> 32);
        rec[PLAN_WANT] = p.want;
        if (p.state) {
            rec[PLAN_FLAGS] |= 8u;
            rec[PLAN_STATE_LO] = (u32)(u64)p.state; rec[PLAN_STATE_HI] = (u32)((u64)p.state >> 32);
        }
    }
    for (size_t r = 0; r < rows.size(); ++r) {
        u32 at = plan.size();
        plan[r * PLAN_WORDS + PLAN_ENTRIES] = at; plan[r * PLAN_WORDS + PLAN_N_ENTRIES] = rows[r].entries.size();
        for (auto [id, c] : rows[r].entries) { plan.push_back(id); plan.push_back(c); }
        at = plan.size();
        plan[r * PLAN_WORDS + PLAN_MASKS] = at; plan[r * PLAN_WORDS + PLAN_N_MASKS] = rows[r].masks.size();
        for (u32 m : rows[r].masks) plan.push_back(m);
    }
    return plan;
}

// The host's `penalise` and mask, on one row.
static std::vector<float> host_prepare(const float* in, int V, const PlanRow& p) {
    std::vector<float> l(in, in + V);
    for (auto [id, c] : p.entries) {
        float v = l[id];
        if (p.rep != 1.0f) v = v > 0.0f ? v / p.rep : v * p.rep;
        if ((p.freq != 0.0f || p.pres != 0.0f) && c > 0) v -= p.freq * (float)c + p.pres;
        l[id] = v;
    }
    for (u32 m : p.masks) l[m] = -INFINITY;
    return l;
}

// sampling::penalty_entries: (id, count in the output), sorted, for a history whose first
// `prompt` tokens are the prompt; ids >= V dropped.
static std::vector<std::pair<u32,u32>> penalty_entries(const std::vector<u32>& all, size_t prompt, int V, bool rep, bool freq) {
    std::map<u32, u32> counts;
    for (size_t i = 0; i < all.size(); ++i) {
        if (all[i] >= (u32)V) continue;
        if (rep) counts[all[i]] += 0;
        if (freq && i >= prompt) counts[all[i]] += 1;
    }
    return std::vector<std::pair<u32,u32>>(counts.begin(), counts.end());
}

static std::vector<float> logits_row(int V, float scale) {
    std::vector<float> x(V); for (auto& v : x) v = U(scale); return x;
}

void t_sample_prepare(int V, bool bf) {
    int R = 3;
    std::vector<float> x; for (int r = 0; r < R + 1; ++r) { auto row = logits_row(V, 6); x.insert(x.end(), row.begin(), row.end()); }
    if (bf) for (auto& v : x) v = F(B(v));
    x[5] = NAN; x[V + 7] = INFINITY; x[V + 8] = -INFINITY; x[2 * V + 3] = -0.0f; x[2 * V + 4] = 0.0f;
    std::vector<PlanRow> rows(R);
    rows[0].src = 3; rows[0].rep = 1.3f;
    rows[1].src = 1; rows[1].freq = 0.7f; rows[1].pres = 0.3f;
    rows[2].src = 2; rows[2].rep = 0.8f; rows[2].freq = -0.25f; rows[2].pres = 1.5f;
    for (int r = 0; r < R; ++r) {
        std::vector<u32> ids; for (int i = 0; i < V; ++i) ids.push_back(i);
        std::shuffle(ids.begin(), ids.end(), rng);
        int n = std::min(V, 1500 + 37 * r);  // more entries than threads
        for (int i = 0; i < n; ++i) rows[r].entries.push_back({ids[i], (u32)(rng() % 4) * (u32)(r != 0)});
        rows[r].entries.push_back({5, 2}); rows[r].entries.push_back({(u32)V - 1, 1});
        rows[r].entries.push_back({3, 1}); rows[r].entries.push_back({4, 3}); rows[r].entries.push_back({7, 1}); rows[r].entries.push_back({8, 1});
        // distinct ids: drop duplicates, keep the first
        std::vector<bool> seen(V); std::vector<std::pair<u32,u32>> e;
        for (auto pr : rows[r].entries) if (!seen[pr.first]) { seen[pr.first] = true; e.push_back(pr); }
        rows[r].entries = e;
        rows[r].masks = {(u32)V - 1, 0, ids[0], 0};  // a penalised token, a duplicate
    }
    rows[0].masks.clear();
    auto plan = build_plan(rows);
    std::vector<float> scratch(R * V, 12345.f);
    std::vector<bf16> xb(x.size()); for (size_t i = 0; i < x.size(); ++i) xb[i] = B(x[i]);
    // Slices of about 1000 columns (the launcher uses 4096): entries and masks land in many.
    unsigned P = (V + 999) / 1000;
    if (bf) launch({(unsigned)R, P}, {PREPARE_THREADS}, [&] { sample_prepare_bf16(scratch.data(), xb.data(), plan.data(), V); });
    else launch({(unsigned)R, P}, {PREPARE_THREADS}, [&] { sample_prepare_f32(scratch.data(), x.data(), plan.data(), V); });
    double bad = 0;
    for (int r = 0; r < R; ++r) {
        auto want = host_prepare(&x[rows[r].src * V], V, rows[r]);
        for (int i = 0; i < V; ++i) bad += fbits(want[i]) != fbits(scratch[r * V + i]);
    }
    char name[64]; snprintf(name, 64, "sample_prepare %s V%d (bits differ)", bf ? "bf16" : "f32", V);
    report(name, bad, 0);
}

// Penalty states: sequences' histories absorbed in two rounds (the whole history up to a point,
// then a delta, as the host does from step to step), rows reading them (one with extras past the
// state, as a speculative draft row does) beside a row with plain entries, against the host's
// penalties on the whole history.
void t_sample_state(int V, bool bf) {
    struct Seq { std::vector<u32> all; size_t prompt; size_t first; std::vector<u32> state; };
    std::vector<Seq> seqs;
    for (int k = 0; k < 3; ++k) {
        Seq q; q.prompt = 40 + 900 * k; size_t n = q.prompt + 30 + 700 * k;
        for (size_t i = 0; i < n; ++i) q.all.push_back(rng() % 3 == 0 ? (u32)(rng() % 50) : (u32)(rng() % (V + 20)));  // repeats, some >= V
        q.first = k == 2 ? q.prompt / 2 : q.prompt + 10;  // the second round starts inside the prompt for one
        q.state.assign(V, 0xdeadbeefu);
        seqs.push_back(q);
    }
    // A long output repeating one token: a count far past any small width.
    for (int i = 0; i < 3000; ++i) seqs[1].all.push_back(7);
    for (auto& q : seqs) std::fill(q.state.begin(), q.state.end(), 0u);
    for (int round = 0; round < 2; ++round) {
        std::vector<u32> work(seqs.size() * ABSORB_WORDS);
        for (size_t k = 0; k < seqs.size(); ++k) {
            Seq& q = seqs[k];
            size_t from = round == 0 ? 0 : q.first, to = round == 0 ? q.first : q.all.size() - (k == 0 ? 3 : 0);
            u32* seg = &work[k * ABSORB_WORDS];  // valid until the pushes below
            seg[0] = (u32)(u64)q.state.data(); seg[1] = (u32)((u64)q.state.data() >> 32);
            seg[2] = work.size(); seg[3] = to - from;
            seg[4] = q.prompt > from ? std::min(q.prompt, to) - from : 0;
            for (size_t i = from; i < to; ++i) work.push_back(q.all[i]);
        }
        launch({(unsigned)seqs.size()}, {PREPARE_THREADS}, [&] { sample_penalty_absorb(work.data(), V); });
    }
    int R = 5;
    std::vector<float> x; for (int r = 0; r < R; ++r) { auto row = logits_row(V, 6); x.insert(x.end(), row.begin(), row.end()); }
    if (bf) for (auto& v : x) v = F(B(v));
    x[3] = NAN; x[50 + V] = INFINITY; x[7 + 2 * V] = -0.0f;
    std::vector<PlanRow> rows(R);
    std::vector<std::vector<u32>> histories(R);
    std::vector<size_t> prompts(R);
    float mix[5][3] = {{1.3f, 0, 0}, {1, 0.7f, 0.3f}, {0.8f, -0.25f, 1.5f}, {1.2f, 0.5f, 0.1f}, {1.1f, 0.2f, 0.2f}};
    for (int r = 0; r < R; ++r) {
        rows[r].src = (R - 1 - r); rows[r].rep = mix[r][0]; rows[r].freq = mix[r][1]; rows[r].pres = mix[r][2];
        const Seq& q = seqs[r % 3];
        histories[r] = q.all; prompts[r] = q.prompt;
        if (r < 3) rows[r].state = q.state.data();
    }
    // Row 0's state lacks its last 3 tokens: they are its extras; row 3 extends sequence 0 by
    // two more tokens past those; row 4 takes the plain entries.
    histories[3].push_back(7); histories[3].push_back((u32)V - 1); rows[3].state = seqs[0].state.data();
    for (int r : {0, 3}) {
        std::map<u32, u32> extra;
        for (size_t i = seqs[0].all.size() - 3; i < histories[r].size(); ++i)
            if (histories[r][i] < (u32)V) extra[histories[r][i]] += i >= prompts[r] ? 1 : 0;
        rows[r].entries.assign(extra.begin(), extra.end());
    }
    rows[4].entries = penalty_entries(histories[4], prompts[4], V, rows[4].rep != 1.0f, rows[4].freq != 0 || rows[4].pres != 0);
    rows[1].masks = {0, (u32)V - 1};
    auto plan = build_plan(rows);
    std::vector<float> scratch(R * V, 12345.f);
    std::vector<bf16> xb(x.size()); for (size_t i = 0; i < x.size(); ++i) xb[i] = B(x[i]);
    unsigned P = (V + 999) / 1000;
    if (bf) launch({(unsigned)R, P}, {PREPARE_THREADS}, [&] { sample_prepare_bf16(scratch.data(), xb.data(), plan.data(), V); });
    else launch({(unsigned)R, P}, {PREPARE_THREADS}, [&] { sample_prepare_f32(scratch.data(), x.data(), plan.data(), V); });
    double bad = 0;
    for (int r = 0; r < R; ++r) {
        PlanRow host = rows[r];
        host.entries = penalty_entries(histories[r], prompts[r], V, host.rep != 1.0f, host.freq != 0 || host.pres != 0);
        auto want = host_prepare(&x[rows[r].src * V], V, host);
        for (int i = 0; i < V; ++i) bad += fbits(want[i]) != fbits(scratch[r * V + i]);
    }
    char name[80]; snprintf(name, 80, "sample_prepare %s V%d from penalty states (bits differ)", bf ? "bf16" : "f32", V);
    report(name, bad, 0);
}

// The host's draw without filtering: first of the best scores in id order; NONE when no finite.
static u32 host_gumbel(const float* l, int V, float t, u64 seed, u64 index) {
    u32 best = NONE; double bs = -INFINITY;
    for (int i = 0; i < V; ++i) {
        if (!finite_host(l[i])) continue;
        double s = (double)(l[i] / t) + sample_gumbel_noise(seed, index, i);
        if (best == NONE) best = i;
        if (s > bs) { bs = s; best = i; }
    }
    return best;
}

void t_sample_gumbel(int V) {
    std::vector<std::vector<float>> rows;
    std::vector<PlanRow> plan_rows;
    auto add = [&](std::vector<float> row, float t, u64 seed, u64 index) {
        PlanRow p; p.src = rows.size(); p.temp = t; p.seed = seed; p.index = index;
        rows.push_back(row); plan_rows.push_back(p);
    };
    for (int k = 0; k < 4; ++k) add(logits_row(V, 8), 0.3f + 0.5f * k, rng(), rng() % 1000);
    auto r = logits_row(V, 3); for (int i = 0; i < V; i += 3) r[i] = -INFINITY; r[1] = NAN; r[V - 1] = INFINITY;
    add(r, 1.0f, 7, 3);                                            // masked, NaN and +inf skipped
    add(std::vector<float>(V, -INFINITY), 1.0f, 1, 1);               // all masked: NONE
    auto big = logits_row(V, 1); big[V / 2] = 3e38f; big[V / 3] = 3e38f; big[7] = -3e38f;
    add(big, 0.01f, 9, 9);                                         // v / T = +inf twice: lower id
    add(std::vector<float>(V, -3e38f), 0.01f, 2, 2);                 // every score -inf: lowest id
    std::vector<float> flat(V, 1.25f); add(flat, 0.7f, 11, 0);     // all equal logits
    // Peaked rows, as a language model's: the skipping in pass 2 decides most tokens.
    for (int k = 0; k < 3; ++k) {
        auto peaked = logits_row(V, 3); for (int j = 0; j < 30; ++j) peaked[rng() % V] = 12 + U(3);
        add(peaked, 0.5f + 0.5f * k, rng(), k);
    }
    auto near = logits_row(V, 1); for (auto& v : near) v = 20 + v * 1e-3f; add(near, 1.0f, 5, 5);  // close scores
    auto huge = logits_row(V, 1); for (auto& v : huge) v = 1e30f + v * 1e24f; add(huge, 1e-3f, 6, 6);  // no skipping
    int R = rows.size();
    std::vector<float> scratch; for (auto& row : rows) scratch.insert(scratch.end(), row.begin(), row.end());
    auto plan = build_plan(plan_rows);
    std::vector<u32> which(R); for (int i = 0; i < R; ++i) which[i] = R - 1 - i;  // reversed order
    std::vector<u32> out(R, 0);
    launch({(unsigned)R}, {SAMPLE_THREADS}, [&] { sample_gumbel(out.data(), scratch.data(), plan.data(), which.data(), V); });
    double bad = 0;
    for (int b = 0; b < R; ++b) {
        const PlanRow& p = plan_rows[which[b]];
        u32 want = host_gumbel(rows[which[b]].data(), V, p.temp, p.seed, p.index);
        if (want != out[b]) { bad += 1; printf("  row %u: device %u host %u\n", which[b], out[b], want); }
    }
    char name[64]; snprintf(name, 64, "sample_gumbel V%d, %d rows", V, R);
    report(name, bad, 0);
}

// The host's sorted candidate list (finite v / T, total order descending, then id), its head.
struct HostCands { std::vector<std::pair<u32,float>> head; u32 finite; double total; bool overflow; };
static HostCands host_candidates(const float* l, int V, float t, u32 want) {
    HostCands h{}; std::vector<std::pair<u32,float>> c;
    for (int i = 0; i < V; ++i) if (finite_host(l[i])) { float vt = l[i] / t; h.overflow |= !finite_host(vt); c.push_back({(u32)i, vt}); }
    auto key = [](float v) { u32 b = fbits(v); return (b & 0x80000000u) ? ~b : (b | 0x80000000u); };
    std::sort(c.begin(), c.end(), [&](auto a, auto b) { return key(a.second) != key(b.second) ? key(a.second) > key(b.second) : a.first < b.first; });
    h.finite = c.size();
    // sampling::fixed_sum: each term floor(q * 2^96) as a 128-bit integer.
    unsigned __int128 acc = 0;
    if (!c.empty()) for (auto& [i, v] : c) {
        double x = det_exp((double)(v - c[0].second)) * 4294967296.0, hi = std::floor(x);  // checked above
        acc += ((unsigned __int128)(u64)hi << 64) | (u64)((x - hi) * 18446744073709551616.0);
    }
    h.total = ((double)(u64)(acc >> 64) + (double)(u64)acc * 5.421010862427522e-20) * 2.3283064365386963e-10;
    c.resize(std::min<size_t>(c.size(), want)); h.head = c;
    return h;
}

void t_sample_candidates(int V, std::vector<u32> wants) {
    std::vector<std::vector<float>> rows; std::vector<PlanRow> plan_rows;
    auto add = [&](std::vector<float> row, float t, u32 want) {
        PlanRow p; p.src = rows.size(); p.temp = t; p.want = want; rows.push_back(row); plan_rows.push_back(p);
    };
    for (u32 w : wants) add(logits_row(V, 10), 0.8f, w);
    add(logits_row(V, 10), 0.8f, 20); plan_rows.back().total = false;  // under a top-k: no total
    // Ties across the cut: values on a coarse grid, so hundreds share each value.
    auto grid = logits_row(V, 4); for (auto& v : grid) v = std::round(v * 4) / 4; add(grid, 1.0f, 20); add(grid, 0.5f, 1000);
    // -inf / NaN / +inf are not candidates; -0.0 sorts below +0.0.
    auto odd = logits_row(V, 1); for (int i = 0; i < V; i += 2) odd[i] = -INFINITY; odd[3] = NAN; odd[9] = INFINITY;
    odd[1] = 0.0f; odd[5] = -0.0f; odd[7] = 0.0f; odd[11] = -0.0f; for (int i = 13; i < V; i += 2) odd[i] = -0.5f; add(odd, 1.0f, 4);
    std::vector<float> few(V, -INFINITY); for (int i = 0; i < 10; ++i) few[(i * 7919) % V] = U(2); add(few, 1.0f, 256);  // fewer than want
    add(std::vector<float>(V, -INFINITY), 1.0f, 64);                                         // none finite
    std::vector<float> flat(V, 0.5f); add(flat, 1.0f, 1024);                                  // all equal
    auto big = logits_row(V, 1); big[17] = 3e38f; add(big, 0.01f, 50);                        // overflow
    auto wide = logits_row(V, 60); add(wide, 0.9f, 1024);                                     // terms below 2^-96
    std::vector<float> edge(V); for (int i = 0; i < V; ++i) edge[i] = -66.0f - (float)(i % 200) * 0.005f;
    edge[V / 2] = 0.0f; add(edge, 1.0f, 300);                                                 // around exp(x) = 2^-96
    int R = rows.size();
    std::vector<float> scratch; for (auto& row : rows) scratch.insert(scratch.end(), row.begin(), row.end());
    auto plan = build_plan(plan_rows);
    std::vector<u32> which(R); for (int i = 0; i < R; ++i) which[i] = i;
    std::vector<u32> out((size_t)R * CAND_WORDS, 0xdeadbeef);
    launch({(unsigned)R}, {SAMPLE_THREADS}, [&] { sample_candidates(out.data(), scratch.data(), plan.data(), which.data(), V); });
    double bad = 0, worst_total = 0;
    for (int b = 0; b < R; ++b) {
        const PlanRow& p = plan_rows[which[b]];
        HostCands h = host_candidates(rows[which[b]].data(), V, p.temp, p.want);
        const u32* o = &out[(size_t)b * CAND_WORDS];
        u32 flags = o[1];
        if (o[0] != h.finite || (flags & 1u) != (u32)h.overflow || (flags & 2u)) { bad += 1; printf("  row %d: finite %u/%u flags %u\n", b, o[0], h.finite, flags); continue; }
        if (h.overflow) continue;
        u64 lo = (u64)o[2] | ((u64)o[3] << 32), hi = (u64)o[4] | ((u64)o[5] << 32);
        if (!p.total) { bad += (lo | hi) != 0; continue; }
        double total = ((double)hi + (double)lo * 5.421010862427522e-20) * 2.3283064365386963e-10;
        if (h.finite) worst_total = std::max(worst_total, (double)(fbits((float)total) != fbits((float)h.total) || total != h.total));
        for (size_t j = 0; j < h.head.size(); ++j)
            if (o[META_WORDS + j] != h.head[j].first || o[META_WORDS + KMAX + j] != fbits(h.head[j].second)) {
                bad += 1; printf("  row %d pos %zu: device (%u, %g) host (%u, %g)\n", b, j, o[META_WORDS + j], __uint_as_float(o[META_WORDS + KMAX + j]), h.head[j].first, h.head[j].second); break;
            }
        if (h.head.size() < KMAX && o[META_WORDS + h.head.size()] != NONE) bad += 1;
    }
    char name[64]; snprintf(name, 64, "sample_candidates V%d, %d rows", V, R);
    report(name, bad, 0);
    snprintf(name, 64, "sample_candidates V%d total (bits differ)", V);
    report(name, worst_total, 0);
}

void t_argmax_nan_first() {
    int V = 2000; std::vector<float> x(2 * V); for (auto& v : x) v = U(1);
    x[0] = NAN; x[V + 0] = -INFINITY; x[V + 1] = NAN;
    std::vector<u32> rows = {0, 1}, out(2);
    u32 want1 = 2; for (int i = 2; i < V; ++i) if (x[V + i] > x[V + want1]) want1 = i;
    for (unsigned splits : {1u, 7u, 64u}) {
        argmax_rows(out, x, rows, V, splits);
        report("argmax NaN in column 0 -> 0", (out[0] == 0 && out[1] == want1) ? 0 : 1, 0);
    }
    // A row of NaN but for two -inf and a -5 in the last column: the -5, wherever the blocks
    // split (no NaN taken, none beating a number).
    std::vector<float> y(V, NAN); y[0] = -INFINITY; y[V - 300] = -INFINITY; y[V - 1] = -5;
    std::vector<u32> one = {0}, got(1);
    for (unsigned splits : {1u, 7u, 64u}) {
        argmax_rows(got, y, one, V, splits);
        report("argmax, NaN row with a few numbers", got[0] == (u32)V - 1 ? 0 : 1, 0);
    }
    // More blocks than columns: the empty blocks have no best and lose to every real one.
    std::vector<float> z = {3, 1, 4, 1, 5, 9, 2, 6, 5, 9};
    argmax_rows(got, z, one, 10, 16);
    report("argmax, empty blocks", got[0] == 5 ? 0 : 1, 0);
}
