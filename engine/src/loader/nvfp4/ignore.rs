//! What an NVFP4 config leaves unquantized, as its producer decides it: a checkpoint's loader
//! goes by each tensor's stored dtype and never needs this, but dummy weights have no dtypes,
//! so `--load-format dummy` draws NVFP4 exactly where the producer would have quantized.
//!
//! Each `ignore` (or `exclude_modules`) entry is matched against a module's name as
//! tests/fixtures/make_nvfp4_fixtures.py (and the two packages) match it:
//! - `re:PATTERN`: a regular expression matched at the start of the name (compressed-tensors'
//!   `re.match`; not anchored at the end unless the pattern says `$`);
//! - anything else: a shell glob over the whole name (ModelOpt's `fnmatch`: `*`, `?`,
//!   `[seq]`, `[!seq]`), so a plain module name matches itself only.
//!
//! compressed-tensors also accepts a module class name (`"Linear"`); a dummy source has no
//! classes, so such an entry matches no module here (noted in docs/nvfp4.md).

/// The compiled ignore list of an [`super::Nvfp4Config`].
#[derive(Debug, Clone, Default)]
pub struct IgnoreList {
    globs: Vec<Vec<char>>,
    regexes: Vec<regex::Regex>,
}

impl IgnoreList {
    /// Compile `patterns`; a `re:` entry that is not a valid regular expression is an error
    /// that names it.
    pub fn new(patterns: &[String]) -> Result<Self, String> {
        let mut list = Self::default();
        for p in patterns {
            match p.strip_prefix("re:") {
                Some(re) => list
                    .regexes
                    .push(regex::Regex::new(&format!("^(?:{re})")).map_err(|e| {
                    format!(
                        "quantization_config ignore entry {p:?} is not a regular expression: {e}"
                    )
                })?),
                None => list.globs.push(p.chars().collect()),
            }
        }
        Ok(list)
    }

    /// Whether the module `module` (a weight's name without `.weight`) is left unquantized.
    pub fn ignores(&self, module: &str) -> bool {
        let name: Vec<char> = module.chars().collect();
        self.globs.iter().any(|g| glob(g, &name)) || self.regexes.iter().any(|r| r.is_match(module))
    }
}

/// Whether `name` matches the whole glob `p` (Python's `fnmatch.fnmatchcase`).
fn glob(p: &[char], name: &[char]) -> bool {
    match p.first() {
        None => name.is_empty(),
        // A run of stars is one star; try every split (the patterns are short).
        Some('*') => {
            let rest = &p[p.iter().take_while(|c| **c == '*').count()..];
            rest.is_empty() || (0..=name.len()).any(|i| glob(rest, &name[i..]))
        }
        Some('?') => !name.is_empty() && glob(&p[1..], &name[1..]),
        Some('[') => match (name.first(), class(p)) {
            (Some(&c), Some((len, members))) => members(c) && glob(&p[len..], &name[1..]),
            (None, Some(_)) => false,
            // No closing bracket: a literal '['.
            (_, None) => name.first() == Some(&'[') && glob(&p[1..], &name[1..]),
        },
        Some(c) => name.first() == Some(c) && glob(&p[1..], &name[1..]),
    }
}

/// The bracket expression at the start of `p` (`p[0] == '['`): its length and a test for its
/// members (`!` first negates; a `]` right after the opening is a member; `a-z` a range), or
/// `None` when it has no closing bracket.
fn class(p: &[char]) -> Option<(usize, impl Fn(char) -> bool + '_)> {
    let negate = p.get(1) == Some(&'!');
    let start = if negate { 2 } else { 1 };
    let mut end = start + usize::from(p.get(start) == Some(&']'));
    while end < p.len() && p[end] != ']' {
        end += 1;
    }
    if end >= p.len() {
        return None;
    }
    let set = &p[start..end];
    let members = move |c: char| {
        let mut k = 0;
        let mut hit = false;
        while k < set.len() {
            if k + 2 < set.len() && set[k + 1] == '-' {
                hit |= set[k] <= c && c <= set[k + 2];
                k += 3;
            } else {
                hit |= set[k] == c;
                k += 1;
            }
        }
        hit != negate
    };
    Some((end + 1, members))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(p: &[&str]) -> IgnoreList {
        IgnoreList::new(&p.iter().map(|s| s.to_string()).collect::<Vec<_>>()).expect("valid")
    }

    #[test]
    fn globs_match_whole_names_as_fnmatch_does() {
        let l = list(&[
            "lm_head",
            "model.layers.3*",
            "*linear_attn.conv1d",
            "mtp.?.fc",
            "x[!0-4]y",
        ]);
        for hit in [
            "lm_head",
            "model.layers.3",
            "model.layers.31.mlp.down_proj",
            "model.layers.0.linear_attn.conv1d",
            "mtp.0.fc",
            "x7y",
        ] {
            assert!(l.ignores(hit), "{hit}");
        }
        for miss in [
            "model.lm_head",
            "lm_head.x",
            "model.layers.13.mlp.down_proj",
            "model.layers.0.linear_attn.conv1d.bias",
            "mtp.10.fc",
            "x3y",
            "model.layers.0.linear_attn.in_proj_qkv",
        ] {
            assert!(!l.ignores(miss), "{miss}");
        }
        assert!(list(&["a[]]b"]).ignores("a]b"));
        assert!(
            list(&["a[b"]).ignores("a[b"),
            "an unclosed bracket is literal"
        );
        assert!(!list(&[]).ignores("lm_head"));
    }

    #[test]
    fn regexes_match_at_the_start_as_re_match_does() {
        let l = list(&["re:.*mlp.gate$", "re:model\\.layers\\.[5-9]\\."]);
        assert!(l.ignores("model.layers.0.mlp.gate"));
        assert!(
            !l.ignores("model.layers.0.mlp.gate_proj"),
            "anchored at the end by $"
        );
        assert!(l.ignores("model.layers.5.self_attn.q_proj"));
        assert!(
            !l.ignores("x.model.layers.5.self_attn.q_proj"),
            "anchored at the start"
        );
        let bad = IgnoreList::new(&["re:(".to_string()]).expect_err("invalid");
        assert!(bad.contains("\"re:(\""), "{bad}");
    }
}
