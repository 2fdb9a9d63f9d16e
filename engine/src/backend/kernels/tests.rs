//! The declarations against the kernels' sources: each `extern "C" __global__` signature of
//! every module, expanded by the system C preprocessor (`cc -E -P`, for the `##`-pasted
//! families), must be declared exactly once with the same parameter types in the same order.

use std::collections::BTreeMap;
use std::io::Write;
use std::process::{Command, Stdio};

use super::{Module, all};

/// `PRELUDE + source` through `cc -E -P`.
fn preprocess(module: Module) -> String {
    let mut child = Command::new("cc")
        .args(["-E", "-P", "-x", "c", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("this test needs a C preprocessor: `cc -E` (install gcc or clang)");
    let text = format!("{}\n{}", metrale_kernels::PRELUDE, module.source());
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(text.as_bytes())
        .expect("writing to cc -E");
    let out = child.wait_with_output().expect("cc -E");
    String::from_utf8(out.stdout).expect("cc -E printed UTF-8")
}

/// A C parameter's type in the declarations' spelling: `const float* __restrict__ x` is
/// `*const f32`, `int n` is `i32`, an unnamed `const float*` is `*const f32`.
fn rust_type(param: &str) -> String {
    let param = param.replace("__restrict__", "");
    let star = param.rfind('*');
    let (base, pointer) = match star {
        Some(i) => (&param[..i], true),
        None => {
            // Drop the name: the last word.
            let p = param.trim();
            (p.rsplit_once(' ').map_or(p, |(t, _)| t), false)
        }
    };
    let base = base.trim();
    let (konst, base) = match base.strip_prefix("const ") {
        Some(b) => (true, b.trim()),
        None => (false, base),
    };
    let ty = match base {
        "float" => "f32",
        "int" => "i32",
        "u32" | "unsigned" | "unsigned int" => "u32",
        "u64" | "unsigned long long" => "u64",
        "bf16" => "bf16",
        "unsigned char" | "u8" => "u8",
        "void" => "c_void",
        // The lab's records (probe.cu), declared as opaque pointees.
        "u32x4" => "u32x4",
        "SkelStage" => "SkelStage",
        other => panic!("no Rust spelling for the C type `{other}` (in `{param}`)"),
    };
    match (pointer, konst) {
        (true, true) => format!("*const {ty}"),
        (true, false) => format!("*mut {ty}"),
        (false, _) => ty.to_string(),
    }
}

/// Every `extern "C" __global__` kernel of the expanded text: name to parameter types.
fn signatures(text: &str) -> Vec<(String, Vec<String>)> {
    let mut found = Vec::new();
    for (at, _) in text.match_indices("extern \"C\"") {
        let rest = &text[at..];
        let Some(open) = rest.find('(') else { continue };
        let head = &rest[..open];
        if !head.contains("__global__") {
            continue;
        }
        // Skip `__launch_bounds__(...)` between the qualifier and the name.
        let (head, rest) = if head.trim_end().ends_with("__launch_bounds__") {
            let close = rest[open..].find(')').expect("launch bounds close") + open;
            let rest = &rest[close + 1..];
            let open = rest.find('(').expect("parameter list");
            (&rest[..open], &rest[open..])
        } else {
            (head, &rest[open..])
        };
        let name = head
            .split_whitespace()
            .last()
            .expect("kernel name")
            .to_string();
        let close = rest.find(')').expect("parameter list close");
        let params = rest[1..close]
            .split(',')
            .map(str::trim)
            .filter(|p| !p.is_empty() && *p != "void")
            .map(str::to_string)
            .collect();
        found.push((name, params));
    }
    found
}

#[test]
fn kernel_declarations_match_the_cu_signatures() {
    let mut declared: BTreeMap<(&str, String), Vec<String>> = BTreeMap::new();
    for d in all() {
        let params = d
            .params
            .iter()
            .map(|p| {
                p.replace(' ', "")
                    .replace("*const", "*const ")
                    .replace("*mut", "*mut ")
            })
            .collect();
        let before = declared.insert((d.module.name(), d.name.to_string()), params);
        assert!(before.is_none(), "{} is declared twice", d.name);
    }
    let mut problems = Vec::new();
    let mut in_sources = 0;
    // Every module of this build: the serving ones, and the lab's under the `lab` feature.
    for m in Module::ALL {
        for (name, params) in signatures(&preprocess(m)) {
            in_sources += 1;
            let params: Vec<String> = params.iter().map(|p| rust_type(p)).collect();
            match declared.remove(&(m.name(), name.clone())) {
                None => problems.push(format!(
                    "{}.cu: {name}({}) is not declared",
                    m.name(),
                    params.join(", ")
                )),
                Some(d) if d != params => problems.push(format!(
                    "{}.cu: {name} takes ({}) but is declared with ({})",
                    m.name(),
                    params.join(", "),
                    d.join(", ")
                )),
                Some(_) => {}
            }
        }
    }
    for (module, name) in declared.keys() {
        problems.push(format!(
            "{name} is declared in {module} but no such kernel is in {module}.cu"
        ));
    }
    assert!(
        problems.is_empty(),
        "kernel declarations out of date:\n{}",
        problems.join("\n")
    );
    assert!(
        in_sources > 300,
        "only {in_sources} kernels found in the sources"
    );
}
