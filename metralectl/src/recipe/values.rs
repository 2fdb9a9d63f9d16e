//! Recipe values with a format of their own, each checked as it is parsed so the TOML error
//! points at the bad value: a commit hash, an image digest, a parameter count, a compute
//! capability.

use std::fmt;

use serde::{Deserialize, Serialize};

macro_rules! string_newtype {
    ($(#[$meta:meta])* $name:ident, $check:expr) => {
        $(#[$meta])*
        #[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
        #[serde(try_from = "String", into = "String")]
        pub struct $name(String);

        impl TryFrom<String> for $name {
            type Error = String;
            fn try_from(value: String) -> Result<Self, String> {
                let check: fn(&str) -> Result<(), String> = $check;
                check(&value).map(|()| Self(value))
            }
        }

        impl From<$name> for String {
            fn from(value: $name) -> String {
                value.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl $name {
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }
    };
}

fn is_lower_hex(s: &str, len: usize) -> bool {
    s.len() == len
        && s.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

string_newtype!(
    /// A full 40-hex-digit git commit hash.
    CommitHash,
    |s| {
        if is_lower_hex(s, 40) {
            Ok(())
        } else {
            Err(format!(
                "revision {s:?} is not a commit hash: pin the full 40-character lowercase hex \
                 commit (a branch or tag can move), or leave `revision` out"
            ))
        }
    }
);

string_newtype!(
    /// `sha256:` followed by 64 lowercase hex digits.
    ImageDigest,
    |s| match s.strip_prefix("sha256:") {
        Some(hex) if is_lower_hex(hex, 64) => Ok(()),
        _ => Err(format!(
            "digest {s:?} is not `sha256:` followed by 64 lowercase hex digits; \
             leave `digest` out until the image is published"
        )),
    }
);

/// A parameter count written like `"27B"` or `"600M"`.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(try_from = "String", into = "String")]
pub struct ParamCount {
    text: String,
    count: f64,
}

impl ParamCount {
    /// The number of parameters.
    pub fn count(&self) -> f64 {
        self.count
    }

    pub fn as_str(&self) -> &str {
        &self.text
    }
}

impl TryFrom<String> for ParamCount {
    type Error = String;
    fn try_from(text: String) -> Result<Self, String> {
        let bad = || {
            format!(
                "parameter count {text:?} is not a number with an M or B suffix, e.g. \"27B\" or \"600M\""
            )
        };
        let (number, scale) = if let Some(n) = text.strip_suffix('B') {
            (n, 1e9)
        } else if let Some(n) = text.strip_suffix('M') {
            (n, 1e6)
        } else {
            return Err(bad());
        };
        match number.parse::<f64>() {
            Ok(n) if n.is_finite() && n > 0.0 => Ok(Self {
                count: n * scale,
                text,
            }),
            _ => Err(bad()),
        }
    }
}

impl From<ParamCount> for String {
    fn from(value: ParamCount) -> String {
        value.text
    }
}

/// A CUDA compute capability, `"major.minor"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Deserialize, Serialize)]
#[serde(try_from = "String", into = "String")]
pub struct ComputeCapability {
    pub major: u32,
    pub minor: u32,
}

impl std::str::FromStr for ComputeCapability {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let parsed = s
            .split_once('.')
            .and_then(|(major, minor)| Some((major.parse().ok()?, minor.parse().ok()?)));
        match parsed {
            Some((major, minor)) => Ok(Self { major, minor }),
            None => Err(format!(
                "compute capability {s:?} is not of the form \"major.minor\", e.g. \"9.0\""
            )),
        }
    }
}

impl TryFrom<String> for ComputeCapability {
    type Error = String;
    fn try_from(s: String) -> Result<Self, String> {
        s.parse()
    }
}

impl From<ComputeCapability> for String {
    fn from(value: ComputeCapability) -> String {
        value.to_string()
    }
}

impl fmt::Display for ComputeCapability {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.major, self.minor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parameter_counts_read_their_suffix() {
        let count = |s: &str| ParamCount::try_from(s.to_owned()).map(|p| p.count());
        assert_eq!(count("27B"), Ok(27e9));
        assert_eq!(count("0.6B"), Ok(0.6e9));
        assert_eq!(count("600M"), Ok(600e6));
        for bad in ["27", "27b", "B", "-1B", "0B", "inf B", "twoB"] {
            assert!(count(bad).is_err(), "{bad} accepted");
        }
    }

    #[test]
    fn hashes_and_digests_need_full_lowercase_hex() {
        let commit = "0123456789abcdef0123456789abcdef01234567";
        assert!(CommitHash::try_from(commit.to_owned()).is_ok());
        assert!(CommitHash::try_from(commit.to_uppercase()).is_err());
        assert!(CommitHash::try_from(commit[..39].to_owned()).is_err());
        assert!(CommitHash::try_from("main".to_owned()).is_err());
        let digest = format!("sha256:{}", "ab".repeat(32));
        assert!(ImageDigest::try_from(digest.clone()).is_ok());
        assert!(ImageDigest::try_from(digest.replace("sha256", "sha512")).is_err());
        assert!(ImageDigest::try_from(digest[..70].to_owned()).is_err());
    }

    #[test]
    fn compute_capabilities_compare_as_versions() {
        let cc = |s: &str| s.parse::<ComputeCapability>().expect("parses");
        assert!(cc("10.0") > cc("9.0"));
        assert!(cc("12.0") > cc("10.0"));
        assert!(cc("8.9") > cc("8.6"));
        assert_eq!(cc("9.0").to_string(), "9.0");
        assert!("sm_90".parse::<ComputeCapability>().is_err());
        assert!("9".parse::<ComputeCapability>().is_err());
    }
}
