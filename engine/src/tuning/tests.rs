use super::registry::{DOCS_BEGIN, DOCS_END};
use super::*;

fn vars(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[test]
fn defaults_parse_and_read_back() {
    let t = Tuning::default();
    for s in SETTINGS {
        let mut u = t;
        assert_eq!((s.set)(&mut u, s.default), Ok(()), "{}'s default", s.var);
        assert_eq!((s.get)(&t), s.default, "{} reads back its default", s.var);
    }
}

#[test]
fn defaults_are_todays() {
    let t = Tuning::default();
    assert!(!t.launch.cuda_sync && t.launch.cuda_graphs && t.launch.pdl);
    assert_eq!(t.gemm.gemv_max_rows, 1);
    assert!(!t.gemm.gemv_full && t.gemm.gemm_tune && t.gemm.fp8_gemv_mma);
    assert!(!t.gemm.fp8_matmul_mma);
    assert_eq!(t.gemm.nvfp4_tile_rows_min, Some(128));
    assert!(!t.gemm.nvfp4_w4a4);
    assert_eq!(t.gemm.fp8_tile_rows_min, Some(97));
    assert_eq!(t.gemm.fp8_tile_max_splits, 4);
    assert!(t.moe.small_paths && t.moe.decode_gate_up && t.moe.small_mma);
    assert_eq!((t.moe.down_cols, t.moe.gemm), (None, MoeGemm::Auto));
    assert!(!t.moe.fp8_activations);
    assert_eq!(t.attention.kernel, AttnKernelChoice::Auto);
    assert_eq!(
        (t.attention.blocks_per_sm, t.attention.min_split_keys),
        (4, 64)
    );
    assert_eq!((t.gdn.chunk_min, t.gdn.decode_splits), (Some(32), None));
    assert!(t.gdn.fused_decode);
    assert_eq!(t.mamba2.chunk_min, Some(32));
    assert_eq!(t.kernels.cache, KernelCache::Default);
    assert!(!t.kernels.show_ptxas);
    assert_eq!(t.debug.step_profile, 0);
    assert_eq!(t.debug.step_delay_ms, 0);
    assert_eq!(t.debug.spec_force_accept, None);
}

#[test]
fn every_setting_names_a_distinct_metrale_variable() {
    let mut seen = std::collections::HashSet::new();
    for s in SETTINGS {
        assert!(s.var.starts_with("METRALE_"), "{}", s.var);
        assert!(seen.insert(s.var), "{} twice", s.var);
        assert!(!registry::OTHER_VARS.contains(&s.var), "{}", s.var);
    }
}

#[test]
fn variables_set_their_fields() {
    let (t, warnings) = Tuning::from_vars(vars(&[
        ("METRALE_CUDA_GRAPHS", "0"),
        ("METRALE_GEMV_MAX_ROWS", "8"),
        ("METRALE_MOE_DOWN_COLS", "4"),
        ("METRALE_MOE_GEMM", "cuda-cores"),
        ("METRALE_NVFP4_TILE_ROWS_MIN", "off"),
        ("METRALE_FP8_TILE_ROWS_MIN", "33"),
        ("METRALE_ATTN_KERNEL", "simt"),
        ("METRALE_GDN_CHUNK_MIN", "off"),
        ("METRALE_MAMBA2_CHUNK_MIN", "128"),
        ("METRALE_KERNEL_CACHE", "/tmp/k"),
        ("METRALE_SPEC_FORCE_ACCEPT", "0.5"),
        ("METRALE_CUDA_SYNC", ""),
        ("PATH", "/bin"),
    ]))
    .expect("valid values");
    assert!(warnings.is_empty(), "{warnings:?}");
    assert!(!t.launch.cuda_graphs && !t.launch.cuda_sync);
    assert_eq!(t.gemm.gemv_max_rows, 8);
    assert_eq!(t.moe.down_cols, Some(4));
    assert_eq!(t.moe.gemm, MoeGemm::CudaCores);
    assert_eq!(t.gemm.nvfp4_tile_rows_min, None);
    assert_eq!(t.gemm.fp8_tile_rows_min, Some(33));
    assert_eq!(t.attention.kernel, AttnKernelChoice::Simt);
    assert_eq!(t.gdn.chunk_min, None);
    assert_eq!(t.mamba2.chunk_min, Some(128));
    assert_eq!(t.kernels.cache, KernelCache::Dir("/tmp/k"));
    assert_eq!(t.debug.spec_force_accept, Some(0.5));
    let back: Vec<_> = t
        .values()
        .into_iter()
        .filter(|(k, _)| *k == "METRALE_MOE_GEMM")
        .collect();
    assert_eq!(back, [("METRALE_MOE_GEMM", "cuda-cores".to_string())]);
}

#[test]
fn a_bad_value_is_an_error_naming_variable_value_and_accepted() {
    for (var, value) in [
        ("METRALE_CUDA_GRAPHS", "maybe"),
        ("METRALE_GEMV_MAX_ROWS", "9"),
        ("METRALE_MOE_DOWN_COLS", "3"),
        ("METRALE_ATTN_BLOCKS_PER_SM", "0"),
        ("METRALE_ATTN_KERNEL", "mma"),
        ("METRALE_SPEC_FORCE_ACCEPT", "1.5"),
        ("METRALE_FP8_TILE_ROWS_MIN", "0"),
    ] {
        let e = Tuning::from_vars(vars(&[(var, value)])).expect_err("a bad value");
        let accepts = SETTINGS
            .iter()
            .find(|s| s.var == var)
            .expect("registered")
            .accepts;
        assert_eq!(e.var, var);
        assert_eq!(e.value, value);
        let text = e.to_string();
        assert!(
            text.contains(var) && text.contains(value) && text.contains(accepts),
            "{text}"
        );
    }
}

#[test]
fn an_unknown_variable_warns_with_the_nearest() {
    let (_, w) = Tuning::from_vars(vars(&[
        ("METRALE_CUDA_GRAPH", "0"),
        ("METRALE_STATE_DIR", "/s"),
        ("METRALE_ZZZ", "1"),
    ]))
    .expect("valid values");
    assert_eq!(w.len(), 2, "{w:?}");
    assert!(
        w[0].contains("METRALE_CUDA_GRAPH ") && w[0].contains("did you mean METRALE_CUDA_GRAPHS?")
    );
    assert!(
        w[1].contains("METRALE_ZZZ") && !w[1].contains("did you mean"),
        "{}",
        w[1]
    );
}

#[test]
fn the_tuning_serialises_by_group() {
    let v = serde_json::to_value(Tuning::default()).expect("serialises");
    assert_eq!(v["launch"]["cuda_graphs"], true);
    assert_eq!(v["moe"]["gemm"], "auto");
    assert_eq!(v["gemm"]["nvfp4_tile_rows_min"], 128);
    assert_eq!(v["kernels"]["cache"], "default");
}

/// The table between the markers of docs/cuda.md.
fn docs_path() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/cuda.md")
}

fn with_table(doc: &str) -> Option<String> {
    let (head, rest) = doc.split_once(DOCS_BEGIN)?;
    let (_, tail) = rest.split_once(DOCS_END)?;
    Some(format!(
        "{head}{DOCS_BEGIN}\n{}{DOCS_END}{tail}",
        docs_table()
    ))
}

#[test]
fn docs_cuda_md_carries_the_registry_table() {
    let doc = std::fs::read_to_string(docs_path()).expect("docs/cuda.md");
    let want = with_table(&doc).expect("docs/cuda.md has the tuning-table markers");
    assert!(
        doc == want,
        "docs/cuda.md's Tuning table differs from engine/src/tuning/registry.rs: regenerate it \
         with `cargo test -p metrale-engine --lib tuning::tests::write_docs_table -- --ignored` \
         (or paste `met print-tuning-table` between the markers)"
    );
}

/// Rewrites docs/cuda.md's table from the registry.
#[test]
#[ignore = "rewrites docs/cuda.md"]
fn write_docs_table() {
    let doc = std::fs::read_to_string(docs_path()).expect("docs/cuda.md");
    std::fs::write(docs_path(), with_table(&doc).expect("markers")).expect("docs/cuda.md written");
}
