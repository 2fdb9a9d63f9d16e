//! `cuda_check`: proves the CUDA backend against the CPU reference and transformers on a GPU
//! machine, then probes its speed. Build with `--features cuda`; `scripts/gpu/check.sh` runs it.
//!
//! Sections: `kernels` (NVRTC compile, then the disk cache), `ops` (every op against the CPU
//! op on random inputs), `sampling` (the device sampler against the CPU's, token for token), `e2e` (fixture checkpoints against transformers and the CPU backend),
//! `ops-f32` and `e2e-f32` (the same on the float32 path, `--dtype float32`, with the hybrid
//! ops too, every fixture family), `kv-groups` (the sliding-window fixtures served with KV
//! groups, their sliding layers keeping only the window, against serving them plain), `hybrid` (the
//! Gated DeltaNet and Mamba-2 ops against the CPU's, and their speed at 35B-A3B's heads),
//! `nvfp4-speed` (NVFP4/FP8/bf16 GEMVs at Qwen3.6-27B's shapes; not pass/fail), `fp8-rows-speed`
//! (FP8 matmul of 16-128 rows, `gemv_fp8_mma_many` against the tile GEMM), `speed` (the
//! Qwen3-8B shape). Exit status: 0 all passed, 1 a check failed, 2 the
//! backend could not start.

mod e2e;
mod hybrid;
mod hybrid_speed;
mod kv_groups;
mod mamba2;
mod mamba2_speed;
mod ops;
mod report;
mod sampling;
mod speed;
mod speed_fp8_rows;
mod speed_moe;
mod speed_moe_fp4;
mod speed_moe_wg;
mod speed_nvfp4;
mod speed_prefill;
mod speed_probe;

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use clap::Parser;
use metrale_engine::backend::cuda::{CudaBackend, DType, Tuning};
use metrale_kernels::Kernels;

use report::Report;

#[derive(Debug, Parser)]
#[command(about = "Check the CUDA backend against the CPU reference and transformers")]
struct Args {
    /// The fixtures directory (models/ and *.reference.json).
    #[arg(long, default_value = "tests/fixtures")]
    fixtures: PathBuf,
    /// Where to write results.json and summary.txt.
    #[arg(long)]
    out: Option<PathBuf>,
    /// Sections to skip: kernels, ops, ops-gpt-oss, ops-nvfp4, ops-nemotron-moe,
    /// ops-fp8-rows, ops-flash and ops-experts (parts of ops), sampling, e2e, ops-f32, e2e-f32, ops-kv8, e2e-kv8,
    /// kv-groups, hybrid, nvfp4-speed, fp8-rows-speed, speed, moe-speed, moe-fp4-speed,
    /// prefill-attn, profile.
    #[arg(long, value_delimiter = ',')]
    skip: Vec<String>,
    /// Sections to run, all others skipped (the same names as --skip): scripts name what they
    /// want, so a section added later does not slip into their calls.
    #[arg(long, value_delimiter = ',')]
    only: Vec<String>,
}

/// Every section, in the order they run.
const SECTIONS: [&str; 24] = [
    "kernels",
    "ops",
    "ops-gpt-oss",
    "ops-nvfp4",
    "ops-nemotron-moe",
    "ops-fp8-rows",
    "ops-flash",
    "ops-experts",
    "sampling",
    "e2e",
    "ops-f32",
    "e2e-f32",
    "ops-kv8",
    "e2e-kv8",
    "kv-groups",
    "hybrid",
    "nvfp4-speed",
    "fp8-rows-speed",
    "speed",
    "moe-speed",
    "moe-fp4-speed",
    "prefill-attn",
    "moe-wg-speed",
    "profile",
];

fn main() -> ExitCode {
    let args = Args::parse();
    if let Some(out) = &args.out
        && let Err(e) = std::fs::create_dir_all(out)
    {
        eprintln!("cannot create {}: {e}", out.display());
    }
    // A misspelt section would otherwise run nothing, or skip nothing, without a word.
    if let Some(bad) = args
        .skip
        .iter()
        .chain(&args.only)
        .find(|s| !SECTIONS.contains(&s.as_str()))
    {
        eprintln!(
            "no section {bad:?}: --skip and --only take {}",
            SECTIONS.join(", ")
        );
        return ExitCode::from(2);
    }
    let mut report = Report::new(args.out.clone());
    let start = Instant::now();
    // The environment's tuning, as `met` would read it; sections change it with `retune`.
    let tuning = match Tuning::from_env() {
        Ok(t) => t,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    let cuda = match CudaBackend::new(0, tuning) {
        Ok(c) => c,
        Err(e) => {
            report.summary_line(format!("CUDA backend failed to start: {e}"));
            report.fail(format!("start: {e}"));
            report.save();
            print!("\n{}", report.summary_text());
            return ExitCode::from(2);
        }
    };
    let i = cuda.info();
    report.summary_line(format!(
        "device: {} (cc {}.{}, {:.0} GB), kernels for {} with NVRTC {}.{}, driver {}.{}",
        i.name,
        i.compute_capability.0,
        i.compute_capability.1,
        i.total_memory as f64 / 1e9,
        i.arch,
        i.nvrtc_version.0,
        i.nvrtc_version.1,
        i.driver_version / 1000,
        i.driver_version % 1000 / 10
    ));

    // The float32 path's backend, opened when a section needs it.
    let mut cuda32: Option<CudaBackend> = None;
    // The bf16 path with an FP8 KV cache (sections ops-kv8, e2e-kv8).
    let mut cuda_kv8: Option<CudaBackend> = None;
    let mut dead = false;
    for name in SECTIONS {
        let unasked = !args.only.is_empty() && !args.only.iter().any(|s| s == name);
        if unasked || args.skip.iter().any(|s| s == name) {
            report.summary_line(format!("{name}: skipped"));
            continue;
        }
        if dead {
            report.summary_line(format!("{name}: not run (the device stopped answering)"));
            continue;
        }
        report.section(name);
        // Correctness sections wait for each kernel, so a fault names its kernel; the speed
        // probe runs as serving would.
        cuda.retune(|t| {
            t.launch.cuda_sync = !matches!(
                name,
                "nvfp4-speed"
                    | "fp8-rows-speed"
                    | "speed"
                    | "moe-speed"
                    | "moe-fp4-speed"
                    | "prefill-attn"
                    | "moe-wg-speed"
                    | "profile"
            )
        });
        let failures_before = report.failures.len();
        if name.ends_with("-f32") && cuda32.is_none() {
            match CudaBackend::with_dtype(0, DType::F32, tuning) {
                Ok(c) => {
                    c.retune(|t| t.launch.cuda_sync = true);
                    cuda32 = Some(c);
                }
                Err(e) => {
                    report.fail(format!("{name}: the float32 backend failed to start: {e}"));
                    report.summary_line(format!("{name}: FAILED to start the float32 backend"));
                    continue;
                }
            }
        }
        if name.ends_with("-kv8") && cuda_kv8.is_none() {
            match CudaBackend::new(0, tuning).and_then(|c| c.with_fp8_kv_cache(true)) {
                Ok(c) => {
                    c.retune(|t| t.launch.cuda_sync = true);
                    cuda_kv8 = Some(c);
                }
                Err(e) => {
                    report.fail(format!(
                        "{name}: the FP8-cache backend failed to start: {e}"
                    ));
                    report.summary_line(format!("{name}: FAILED to start the FP8-cache backend"));
                    continue;
                }
            }
        }
        let t = Instant::now();
        let r = catch_unwind(AssertUnwindSafe(|| match name {
            "kernels" => kernels(&cuda, &mut report),
            "ops" => ops::run(&cuda, &mut report),
            "ops-gpt-oss" => ops::run_gpt_oss(&cuda, &mut report),
            "ops-nvfp4" => ops::run_nvfp4(&cuda, &mut report),
            "ops-nemotron-moe" => ops::nemotron_moe::run(&cuda, &mut report),
            "ops-fp8-rows" => ops::run_fp8_rows(&cuda, &mut report),
            "ops-flash" => ops::attention::run_flash(&cuda, &mut report),
            "ops-experts" => ops::moe::run_experts(&cuda, &mut report),
            "sampling" => sampling::run(&cuda, &mut report),
            "e2e" => e2e::run(&cuda, &args.fixtures, &mut report),
            "ops-f32" => {
                let cuda32 = cuda32.as_ref().expect("opened above");
                ops::run(cuda32, &mut report).and_then(|()| hybrid::run_ops(cuda32, &mut report))
            }
            "e2e-f32" => e2e::run(
                cuda32.as_ref().expect("opened above"),
                &args.fixtures,
                &mut report,
            ),
            "ops-kv8" => ops::run_kv8(cuda_kv8.as_ref().expect("opened above"), &mut report),
            "e2e-kv8" => e2e::run(
                cuda_kv8.as_ref().expect("opened above"),
                &args.fixtures,
                &mut report,
            ),
            "kv-groups" => kv_groups::run(tuning, &args.fixtures, &mut report),
            "hybrid" => hybrid::run(&cuda, &mut report),
            "nvfp4-speed" => speed_nvfp4::run(&cuda, &mut report),
            "fp8-rows-speed" => speed_fp8_rows::run(&cuda, &mut report),
            "speed" => speed::run(&cuda, &mut report),
            "moe-speed" => speed_moe::run(&cuda, &mut report),
            "moe-fp4-speed" => speed_moe_fp4::run(&cuda, &mut report),
            "prefill-attn" => speed_prefill::run(&cuda, &mut report),
            "moe-wg-speed" => speed_moe_wg::run(&cuda, &mut report),
            _ => speed::profile(&cuda, &mut report),
        }));
        let outcome = match r {
            Ok(Ok(())) => String::new(),
            Ok(Err(e)) => {
                report.fail(format!("{name}: {e:#}"));
                format!(", stopped: {e:#}")
            }
            Err(_) => {
                report.fail(format!("{name}: panicked (see the log above)"));
                ", panicked".to_string()
            }
        };
        if cuda.synchronize().is_err() {
            dead = true;
        }
        let failed = report.failures.len() - failures_before;
        report.summary_line(format!(
            "{name}: {} in {:.1} s{outcome}",
            if failed == 0 {
                "passed".to_string()
            } else {
                format!("{failed} FAILED")
            },
            t.elapsed().as_secs_f64()
        ));
        report.save();
    }
    report.summary_line(format!(
        "total {:.1} s: {}",
        start.elapsed().as_secs_f64(),
        if report.failures.is_empty() {
            "PASS"
        } else {
            "FAIL"
        }
    ));
    report.save();
    print!("\n=== summary ===\n{}", report.summary_text());
    if report.failures.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// Compile (or load) every module, then load them again through a fresh loader: the second
/// time every image must come from the disk cache.
fn kernels(cuda: &CudaBackend, report: &mut Report) -> anyhow::Result<()> {
    let t = Instant::now();
    cuda.load_kernels()?;
    let first_ms = t.elapsed().as_secs_f64() * 1e3;
    for r in cuda.kernels().records() {
        report.line(format!(
            "{:<12} {:<10} {}{}",
            r.module,
            r.compile_ms
                .map_or("cached".to_string(), |ms| format!("{ms:.0} ms")),
            r.path
                .map_or("(no disk cache)".into(), |p| p.display().to_string()),
            r.note.map_or(String::new(), |n| format!(" [{n}]"))
        ));
    }
    let Some(dir) = cuda.kernels().cache_dir() else {
        report.warn("kernel disk cache is off (METRALE_KERNEL_CACHE=off or no HOME)");
        return Ok(());
    };
    let again = Kernels::new(
        cuda.stream().context().clone(),
        Some(dir.to_path_buf()),
        false,
    )?;
    let t = Instant::now();
    again.load_all()?;
    let second_ms = t.elapsed().as_secs_f64() * 1e3;
    let records = again.records();
    let cached = records.iter().filter(|r| r.compile_ms.is_none()).count();
    report.summary_line(format!(
        "kernels: first load {first_ms:.0} ms, again from {} {second_ms:.0} ms ({cached}/{} from the cache)",
        dir.display(),
        records.len()
    ));
    if cached != records.len() {
        report.fail(format!(
            "kernel cache: only {cached} of {} modules were loaded from {}: {:?}",
            records.len(),
            dir.display(),
            records
                .iter()
                .filter_map(|r| r.note.clone())
                .collect::<Vec<_>>()
        ));
    }
    Ok(())
}
