//! Where compiled kernels are kept between runs, and the key that names them.
//!
//! The directory is the caller's (the engine's tuning, `METRALE_KERNEL_CACHE`, may name one or
//! turn the cache off), by default `$XDG_CACHE_HOME/metrale/kernels`, else
//! `~/.cache/metrale/kernels` ([`default_cache_dir`]; this crate reads no environment). A file
//! is named `<module>-<arch>-<key>.<cubin|ptx>`, the key a 128-bit hash of everything that
//! changes the binary: the program text, the architecture, the NVRTC and driver versions and the
//! compile options. A stale or foreign file is never picked up: its name would differ.

use std::path::PathBuf;

/// Bump to invalidate every cached file (a change in how images are stored).
const FORMAT: u32 = 1;

/// The default cache directory, or `None` when no home is known. `env` reads a variable (the
/// caller passes `std::env::var_os`).
pub fn default_cache_dir(env: impl Fn(&str) -> Option<std::ffi::OsString>) -> Option<PathBuf> {
    if let Some(x) = env("XDG_CACHE_HOME").filter(|v| !v.is_empty()) {
        return Some(PathBuf::from(x).join("metrale").join("kernels"));
    }
    env("HOME").filter(|v| !v.is_empty()).map(|h| {
        PathBuf::from(h)
            .join(".cache")
            .join("metrale")
            .join("kernels")
    })
}

/// What a compiled image depends on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyParts<'a> {
    pub program_text: &'a str,
    pub arch: &'a str,
    pub nvrtc_version: (i32, i32),
    pub driver_version: i32,
    pub options: &'a [String],
}

/// 32 hex digits naming the image built from `parts`.
pub fn cache_key(parts: &KeyParts<'_>) -> String {
    let mut bytes = Vec::with_capacity(parts.program_text.len() + 256);
    let mut field = |b: &[u8]| {
        bytes.extend_from_slice(&(b.len() as u64).to_le_bytes());
        bytes.extend_from_slice(b);
    };
    field(&FORMAT.to_le_bytes());
    field(parts.program_text.as_bytes());
    field(parts.arch.as_bytes());
    field(&parts.nvrtc_version.0.to_le_bytes());
    field(&parts.nvrtc_version.1.to_le_bytes());
    field(&parts.driver_version.to_le_bytes());
    for o in parts.options {
        field(o.as_bytes());
    }
    // Two FNV-1a-64 passes from different offsets: a 128-bit name that is stable across Rust
    // versions and platforms (std's hasher is not).
    let a = fnv1a(0xcbf2_9ce4_8422_2325, &bytes);
    let b = fnv1a(0x6c62_272e_07bb_0142, &bytes);
    format!("{a:016x}{b:016x}")
}

fn fnv1a(offset: u64, bytes: &[u8]) -> u64 {
    bytes.iter().fold(offset, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// The file name of a module's cached image.
pub fn file_name(module: &str, arch: &str, key: &str, cubin: bool) -> String {
    format!(
        "{module}-{arch}-{key}.{}",
        if cubin { "cubin" } else { "ptx" }
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;
    use std::ffi::OsString;

    fn env(vars: &[(&str, &str)]) -> impl Fn(&str) -> Option<OsString> {
        let map: HashMap<String, OsString> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), OsString::from(v)))
            .collect();
        move |k| map.get(k).cloned()
    }

    #[test]
    fn default_directory_follows_xdg_then_home() {
        let all = [("XDG_CACHE_HOME", "/xdg"), ("HOME", "/home/u")];
        assert_eq!(
            default_cache_dir(env(&all)),
            Some(PathBuf::from("/xdg/metrale/kernels"))
        );
        assert_eq!(
            default_cache_dir(env(&all[1..])),
            Some(PathBuf::from("/home/u/.cache/metrale/kernels"))
        );
        assert_eq!(
            default_cache_dir(env(&[("XDG_CACHE_HOME", ""), ("HOME", "/h")])),
            Some(PathBuf::from("/h/.cache/metrale/kernels"))
        );
        assert_eq!(default_cache_dir(env(&[])), None);
    }

    #[test]
    fn key_changes_with_every_part() {
        let opts = vec!["--std=c++17".to_string()];
        let base = KeyParts {
            program_text: "kernel",
            arch: "sm_90a",
            nvrtc_version: (13, 0),
            driver_version: 13000,
            options: &opts,
        };
        let k = cache_key(&base);
        assert_eq!(k.len(), 32);
        assert_eq!(k, cache_key(&base.clone()), "deterministic");
        let other_opts = vec!["--std=c++20".to_string()];
        let variants = [
            KeyParts {
                program_text: "kernel2",
                ..base.clone()
            },
            KeyParts {
                arch: "compute_86",
                ..base.clone()
            },
            KeyParts {
                nvrtc_version: (13, 1),
                ..base.clone()
            },
            KeyParts {
                driver_version: 13010,
                ..base.clone()
            },
            KeyParts {
                options: &other_opts,
                ..base.clone()
            },
        ];
        for v in &variants {
            assert_ne!(cache_key(v), k, "{v:?}");
        }
        assert_eq!(
            file_name("norm", "sm_90a", &k, true),
            format!("norm-sm_90a-{k}.cubin")
        );
    }
}
