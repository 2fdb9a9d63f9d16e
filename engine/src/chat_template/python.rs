//! The pieces of Python that transformers' chat-template environment leans on, redone for
//! minijinja values: `json.dumps` (behind the `tojson` filter) and `str()` (what `{{ x }}` prints
//! in Jinja2). `strftime` is in `strftime.rs`.

use std::fmt::Write as _;

use minijinja::value::{Kwargs, Value, ValueKind};
use minijinja::{Error, ErrorKind, Output, State};

/// Options of Python's `json.dumps` that transformers' `tojson` passes through.
#[derive(Debug, Clone)]
pub(super) struct Dumps {
    pub ensure_ascii: bool,
    /// `None`: one line. `Some(s)`: one item a line, each level indented by `s`.
    pub indent: Option<String>,
    pub item_separator: String,
    pub key_separator: String,
    pub sort_keys: bool,
}

impl Dumps {
    /// transformers' `tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False)`.
    /// Positional arguments follow that order; keywords may name any of them.
    pub fn from_filter_args(positional: &[Option<Value>], kwargs: &Kwargs) -> Result<Dumps, Error> {
        let arg = |i: usize, name: &str| -> Result<Option<Value>, Error> {
            let kw: Option<Value> = kwargs.get(name)?;
            Ok(kw.or_else(|| positional.get(i).cloned().flatten()))
        };
        let ensure_ascii = arg(0, "ensure_ascii")?.is_some_and(|v| v.is_true());
        let indent = match arg(1, "indent")? {
            None => None,
            Some(v) if v.is_none() => None,
            Some(v) if v.kind() == ValueKind::String => Some(v.as_str().unwrap_or("").to_string()),
            Some(v) => match v.as_i64() {
                // Python: ' ' * n, so a negative indent means newlines without indentation.
                Some(n) => Some(" ".repeat(usize::try_from(n).unwrap_or(0))),
                None => return Err(invalid("tojson: indent must be an integer or a string")),
            },
        };
        let (item_separator, key_separator) = match arg(2, "separators")? {
            Some(v) if !v.is_none() => {
                let parts: Vec<Value> = v.try_iter()?.collect();
                match parts.as_slice() {
                    [a, b] if a.as_str().is_some() && b.as_str().is_some() => (
                        a.as_str().unwrap_or("").to_string(),
                        b.as_str().unwrap_or("").to_string(),
                    ),
                    _ => return Err(invalid("tojson: separators must be a pair of strings")),
                }
            }
            // json.dumps: ", " on one line, "," when indenting (no trailing spaces).
            _ if indent.is_some() => (",".to_string(), ": ".to_string()),
            _ => (", ".to_string(), ": ".to_string()),
        };
        let sort_keys = arg(3, "sort_keys")?.is_some_and(|v| v.is_true());
        kwargs.assert_all_used()?;
        Ok(Dumps {
            ensure_ascii,
            indent,
            item_separator,
            key_separator,
            sort_keys,
        })
    }

    pub fn dumps(&self, value: &Value) -> Result<String, Error> {
        let mut out = String::new();
        self.write(&mut out, value, 0)?;
        Ok(out)
    }

    fn newline(&self, out: &mut String, depth: usize) {
        if let Some(indent) = &self.indent {
            out.push('\n');
            for _ in 0..depth {
                out.push_str(indent);
            }
        }
    }

    fn write(&self, out: &mut String, value: &Value, depth: usize) -> Result<(), Error> {
        match value.kind() {
            ValueKind::None => out.push_str("null"),
            ValueKind::Bool => out.push_str(if value.is_true() { "true" } else { "false" }),
            ValueKind::Number => write_number(out, value),
            ValueKind::String => {
                write_json_string(out, value.as_str().unwrap_or(""), self.ensure_ascii)
            }
            ValueKind::Seq | ValueKind::Iterable => {
                let items: Vec<Value> = value.try_iter()?.collect();
                if items.is_empty() {
                    out.push_str("[]");
                    return Ok(());
                }
                out.push('[');
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        out.push_str(&self.item_separator);
                    }
                    self.newline(out, depth + 1);
                    self.write(out, item, depth + 1)?;
                }
                self.newline(out, depth);
                out.push(']');
            }
            ValueKind::Map => {
                let mut entries = Vec::new();
                for key in value.try_iter()? {
                    let item = value.get_item(&key)?;
                    entries.push((json_key(&key)?, item));
                }
                if self.sort_keys {
                    entries.sort_by(|a, b| a.0.cmp(&b.0));
                }
                if entries.is_empty() {
                    out.push_str("{}");
                    return Ok(());
                }
                out.push('{');
                for (i, (key, item)) in entries.iter().enumerate() {
                    if i > 0 {
                        out.push_str(&self.item_separator);
                    }
                    self.newline(out, depth + 1);
                    write_json_string(out, key, self.ensure_ascii);
                    out.push_str(&self.key_separator);
                    self.write(out, item, depth + 1)?;
                }
                self.newline(out, depth);
                out.push('}');
            }
            kind => {
                return Err(invalid(format!(
                    "tojson: a value of type {kind} is not JSON serializable"
                )));
            }
        }
        Ok(())
    }
}

fn invalid(message: impl Into<std::borrow::Cow<'static, str>>) -> Error {
    Error::new(ErrorKind::InvalidOperation, message)
}

/// Python turns non-string keys into strings: `1` -> "1", `True` -> "true", `None` -> "null".
fn json_key(key: &Value) -> Result<String, Error> {
    match key.kind() {
        ValueKind::String => Ok(key.as_str().unwrap_or("").to_string()),
        ValueKind::Bool => Ok(if key.is_true() { "true" } else { "false" }.to_string()),
        ValueKind::None => Ok("null".to_string()),
        ValueKind::Number => {
            let mut s = String::new();
            write_number(&mut s, key);
            Ok(s)
        }
        kind => Err(invalid(format!(
            "tojson: keys must be str, int, float, bool or None, not {kind}"
        ))),
    }
}

fn write_number(out: &mut String, value: &Value) {
    if value.is_integer() {
        let _ = write!(out, "{value}");
    } else {
        match f64::try_from(value.clone()) {
            Ok(f) => out.push_str(&float_repr(f)),
            Err(_) => {
                let _ = write!(out, "{value}");
            }
        }
    }
}

/// `json.dumps` string escaping: `"`, `\` and control characters; everything else as is, or as
/// `\uXXXX` (surrogate pairs past the BMP) with `ensure_ascii`.
fn write_json_string(out: &mut String, s: &str, ensure_ascii: bool) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c if ensure_ascii && !c.is_ascii() => {
                let mut units = [0u16; 2];
                for unit in c.encode_utf16(&mut units) {
                    let _ = write!(out, "\\u{unit:04x}");
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// Python's `repr(float)`: the shortest digits that round-trip, written positionally when the
/// exponent is in [-4, 16), otherwise as `d.ddde+XX`; always with a `.0` or an exponent.
pub(super) fn float_repr(f: f64) -> String {
    if f.is_nan() {
        return "NaN".to_string();
    }
    if f.is_infinite() {
        return if f > 0.0 { "Infinity" } else { "-Infinity" }.to_string();
    }
    // Rust's `{:e}` gives the same shortest round-trip digits: "-1.2345e-7".
    let sci = format!("{f:e}");
    let (mantissa, exponent) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exponent: i32 = exponent.parse().unwrap_or(0);
    let (sign, mantissa) = match mantissa.strip_prefix('-') {
        Some(m) => ("-", m),
        None => ("", mantissa),
    };
    let digits: String = mantissa.chars().filter(|c| *c != '.').collect();
    // Value = 0.DIGITS x 10^point.
    let point = exponent + 1;
    let n = digits.len() as i32;
    let mut out = String::from(sign);
    if (-3..=16).contains(&point) {
        if point <= 0 {
            out.push_str("0.");
            out.push_str(&"0".repeat((-point) as usize));
            out.push_str(&digits);
        } else if point < n {
            out.push_str(&digits[..point as usize]);
            out.push('.');
            out.push_str(&digits[point as usize..]);
        } else {
            out.push_str(&digits);
            out.push_str(&"0".repeat((point - n) as usize));
            out.push_str(".0");
        }
    } else {
        out.push_str(&digits[..1]);
        if n > 1 {
            out.push('.');
            out.push_str(&digits[1..]);
        }
        let _ = write!(
            out,
            "e{}{:02}",
            if exponent < 0 { '-' } else { '+' },
            exponent.abs()
        );
    }
    out
}

/// What Jinja2 prints for `{{ value }}`: Python's `str(value)`. Strings as they are, `None`,
/// `True`/`False`, floats as `repr`, lists and dicts as their `repr`. Undefined prints nothing.
pub(super) fn format_value(
    out: &mut Output,
    _state: &mut State,
    value: &Value,
) -> Result<(), Error> {
    let text = match value.kind() {
        ValueKind::Undefined => return Ok(()),
        ValueKind::String => {
            return out
                .write_str(value.as_str().unwrap_or(""))
                .map_err(write_error);
        }
        _ => python_repr(value),
    };
    out.write_str(&text).map_err(write_error)
}

fn write_error(e: std::fmt::Error) -> Error {
    Error::new(ErrorKind::WriteFailure, "failed to write template output").with_source(e)
}

/// Python's `repr` for the value kinds JSON data can hold; other values use minijinja's text.
fn python_repr(value: &Value) -> String {
    let mut out = String::new();
    write_repr(&mut out, value);
    out
}

fn write_repr(out: &mut String, value: &Value) {
    match value.kind() {
        ValueKind::None | ValueKind::Undefined => out.push_str("None"),
        ValueKind::Bool => out.push_str(if value.is_true() { "True" } else { "False" }),
        ValueKind::Number if !value.is_integer() => match f64::try_from(value.clone()) {
            Ok(f) if f.is_nan() => out.push_str("nan"),
            Ok(f) if f.is_infinite() => out.push_str(if f > 0.0 { "inf" } else { "-inf" }),
            Ok(f) => out.push_str(&float_repr(f)),
            Err(_) => {
                let _ = write!(out, "{value}");
            }
        },
        ValueKind::String => write_str_repr(out, value.as_str().unwrap_or("")),
        ValueKind::Seq => write_items(out, ('[', ']'), value, |out, item| write_repr(out, &item)),
        ValueKind::Map => write_items(out, ('{', '}'), value, |out, key| {
            write_repr(out, &key);
            out.push_str(": ");
            write_repr(out, &value.get_item(&key).unwrap_or_default());
        }),
        _ => {
            let _ = write!(out, "{value}");
        }
    }
}

/// `open item, item, ... close` over what iterating `value` yields (items, or a map's keys).
fn write_items(
    out: &mut String,
    (open, close): (char, char),
    value: &Value,
    mut each: impl FnMut(&mut String, Value),
) {
    out.push(open);
    for (i, item) in value.try_iter().into_iter().flatten().enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        each(out, item);
    }
    out.push(close);
}

/// Python's `repr(str)`: single quotes unless the text has `'` and no `"`; backslash escapes for
/// the quote, `\`, `\n`, `\r`, `\t` and other control characters.
fn write_str_repr(out: &mut String, s: &str) {
    let quote = if s.contains('\'') && !s.contains('"') {
        '"'
    } else {
        '\''
    };
    out.push(quote);
    for c in s.chars() {
        match c {
            c if c == quote => {
                out.push('\\');
                out.push(c);
            }
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c.is_control() => {
                let code = c as u32;
                let _ = if code < 0x100 {
                    write!(out, "\\x{code:02x}")
                } else {
                    write!(out, "\\u{code:04x}")
                };
            }
            c => out.push(c),
        }
    }
    out.push(quote);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Python's `repr` of floats, recorded by tests/fixtures/make_chat_cases.py.
    #[test]
    fn float_repr_matches_python() {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../tests/fixtures/chat_template/float_repr.json"
        );
        let text = std::fs::read_to_string(path).expect("fixture float_repr.json");
        let cases: Vec<(String, String)> = serde_json::from_str(&text).expect("pairs of strings");
        assert!(cases.len() > 20);
        for (bits, expected) in cases {
            let bits = u64::from_str_radix(&bits, 16).expect("hex bits");
            assert_eq!(
                float_repr(f64::from_bits(bits)),
                expected,
                "bits {bits:016x}"
            );
        }
    }
}
