//! Comparing a device result with the CPU reference, and writing what the check found: lines
//! to stdout as they happen (the script tees them to a log), a JSON record and a summary file
//! under `--out`, rewritten after every section so a killed run still leaves its results.

use std::path::PathBuf;

use serde::Serialize;
use serde_json::{Value, json};

/// How far a device value may be from the reference `want`:
/// `|got - want| <= atol + atol_rms · rms(want) + rtol · |want|`.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Tol {
    pub atol: f32,
    pub atol_rms: f32,
    pub rtol: f32,
}

impl Tol {
    /// Bit-exact: copies, casts, the random generator.
    pub const EXACT: Tol = Tol {
        atol: 0.0,
        atol_rms: 0.0,
        rtol: 0.0,
    };
    /// A bf16 output: one rounding (at most 2^-8 relative) of an f32 value that may itself
    /// differ a little from the CPU's (another summation order), so a rounding can flip.
    pub const BF16: Tol = Tol {
        atol: 0.0,
        atol_rms: 1e-4,
        rtol: 5e-3,
    };
    /// The flash prefill kernel: q and the softmax weights enter the tensor cores as bf16
    /// (2^-9 of each term, as in FlashAttention): a score moves by up to 2^-9 of its size, so
    /// an output carries an error relative to the row's scale, not its own value (the host
    /// emulation measures about 1.5e-2 of the rms on random inputs, the H200 up to 2.2e-2).
    pub const FLASH: Tol = Tol {
        atol: 0.0,
        atol_rms: 3e-2,
        rtol: 5e-3,
    };
    /// The flash kernel over an FP8 cache: each key and value, e4m3 times its scale, is
    /// rounded to bf16 on its way to the tensor cores (one more 2^-9 a term).
    pub const FLASH_KV8: Tol = Tol {
        atol: 0.0,
        atol_rms: 6e-2,
        rtol: 1e-2,
    };
    /// An f32 result of an f32 computation done in another order.
    pub const F32: Tol = Tol {
        atol: 0.0,
        atol_rms: 1e-4,
        rtol: 1e-4,
    };
    /// cuBLAS bf16 GEMM with f32 accumulation vs the CPU's f32 GEMM on the same bf16 inputs.
    pub const GEMM: Tol = Tol {
        atol: 0.0,
        atol_rms: 1e-3,
        rtol: 1e-3,
    };
    /// An FP8 KV cache written from a bf16 value the CPU holds in f32: the two may round to
    /// neighbouring e4m3 values (one step is at most 2^-3 of the value; 2^-9 of the group's
    /// largest magnitude in the subnormal range).
    pub const KV8: Tol = Tol {
        atol: 0.0,
        atol_rms: 2e-3,
        rtol: 0.126,
    };

    /// Log-probabilities (values around -12): absolute.
    pub const LOGPROB: Tol = Tol {
        atol: 1e-4,
        atol_rms: 0.0,
        rtol: 1e-5,
    };

    pub fn describe(&self) -> String {
        let mut parts = Vec::new();
        if self.atol > 0.0 {
            parts.push(format!("{:.0e}", self.atol));
        }
        if self.atol_rms > 0.0 {
            parts.push(format!("{:.0e}·rms", self.atol_rms));
        }
        if self.rtol > 0.0 {
            parts.push(format!("{:.0e}·|ref|", self.rtol));
        }
        if parts.is_empty() {
            "exact".into()
        } else {
            parts.join(" + ")
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct Comparison {
    pub max_abs: f32,
    pub max_rel: f32,
    /// Largest |error| / allowed over all elements: the case passes at <= 1.
    pub worst: f32,
    pub worst_index: usize,
    pub got_at_worst: f32,
    pub want_at_worst: f32,
    pub len: usize,
}

pub fn compare(got: &[f32], want: &[f32], tol: Tol) -> Comparison {
    let rms = (want.iter().map(|v| f64::from(*v).powi(2)).sum::<f64>() / want.len().max(1) as f64)
        .sqrt() as f32;
    let mut c = Comparison {
        max_abs: 0.0,
        max_rel: 0.0,
        worst: if got.len() == want.len() {
            0.0
        } else {
            f32::INFINITY
        },
        worst_index: 0,
        got_at_worst: 0.0,
        want_at_worst: 0.0,
        len: want.len(),
    };
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        let d = (g - w).abs();
        let d = if g.is_nan() != w.is_nan() || (g.is_infinite() && g != w) {
            f32::INFINITY
        } else if g.is_nan() || g == w {
            0.0
        } else {
            d
        };
        let limit = tol.atol + tol.atol_rms * rms + tol.rtol * w.abs();
        let ratio = if d == 0.0 { 0.0 } else { d / limit };
        c.max_abs = c.max_abs.max(d);
        c.max_rel = c
            .max_rel
            .max(d / w.abs().max(1e-3 * rms).max(f32::MIN_POSITIVE));
        if ratio > c.worst || ratio.is_nan() {
            c.worst = if ratio.is_nan() { f32::INFINITY } else { ratio };
            c.worst_index = i;
            c.got_at_worst = g;
            c.want_at_worst = w;
        }
    }
    c
}

pub struct Report {
    out: Option<PathBuf>,
    sections: Vec<(String, Vec<Value>)>,
    pub failures: Vec<String>,
    pub warnings: Vec<String>,
    summary: Vec<String>,
}

impl Report {
    pub fn new(out: Option<PathBuf>) -> Self {
        Self {
            out,
            sections: Vec::new(),
            failures: Vec::new(),
            warnings: Vec::new(),
            summary: Vec::new(),
        }
    }

    pub fn section(&mut self, name: &str) {
        println!("\n=== {name} ===");
        self.sections.push((name.to_string(), Vec::new()));
    }

    pub fn line(&mut self, text: impl AsRef<str>) {
        println!("{}", text.as_ref());
    }

    /// A line for the final summary (also printed now).
    pub fn summary_line(&mut self, text: impl Into<String>) {
        let t = text.into();
        println!("{t}");
        self.summary.push(t);
    }

    pub fn record(&mut self, v: Value) {
        if let Some((_, items)) = self.sections.last_mut() {
            items.push(v);
        }
    }

    pub fn fail(&mut self, what: impl Into<String>) {
        let w = what.into();
        println!("FAIL: {w}");
        self.failures.push(w);
    }

    pub fn warn(&mut self, what: impl Into<String>) {
        let w = what.into();
        println!("WARN: {w}");
        self.warnings.push(w);
    }

    /// One op case: print its row, record it, count a failure. Returns whether it passed.
    pub fn case(&mut self, op: &str, case: &str, tol: Tol, c: &Comparison) -> bool {
        let pass = c.worst <= 1.0;
        println!(
            "{op:<16} {case:<60} {:>9.2e} {:>9.2e} {:>8.3} {:<24} {}",
            c.max_abs,
            c.max_rel,
            c.worst,
            tol.describe(),
            if pass { "ok" } else { "FAIL" }
        );
        self.record(json!({
            "op": op, "case": case, "pass": pass, "tolerance": tol, "comparison": c,
        }));
        if !pass {
            self.failures.push(format!(
                "{op} {case}: worst error {:.3}× the tolerance at element {} (got {}, want {})",
                c.worst, c.worst_index, c.got_at_worst, c.want_at_worst
            ));
        }
        pass
    }

    pub fn case_header(&self) {
        println!(
            "{:<16} {:<60} {:>9} {:>9} {:>8} {:<24} result",
            "op", "case", "max_abs", "max_rel", "worst", "tolerance"
        );
    }

    /// Write `results.json` and `summary.txt` under `--out` (called after every section).
    pub fn save(&self) {
        let Some(dir) = &self.out else { return };
        let sections: serde_json::Map<String, Value> = self
            .sections
            .iter()
            .map(|(n, v)| (n.clone(), Value::Array(v.clone())))
            .collect();
        let doc = json!({
            "sections": sections,
            "failures": self.failures,
            "warnings": self.warnings,
            "summary": self.summary,
        });
        let write = |name: &str, text: String| {
            if let Err(e) = std::fs::write(dir.join(name), text) {
                eprintln!("cannot write {}: {e}", dir.join(name).display());
            }
        };
        write(
            "results.json",
            serde_json::to_string_pretty(&doc).unwrap_or_default(),
        );
        write("summary.txt", self.summary_text());
    }

    pub fn summary_text(&self) -> String {
        let mut t = self.summary.join("\n");
        t.push_str(&format!(
            "\n{} failed, {} warnings\n",
            self.failures.len(),
            self.warnings.len()
        ));
        for f in self.failures.iter().take(20) {
            t.push_str(&format!("  FAIL {f}\n"));
        }
        for w in self.warnings.iter().take(10) {
            t.push_str(&format!("  WARN {w}\n"));
        }
        t
    }
}
