//! JSON as Python writes it. `json.dump` writes infinities and NaN as the bare words
//! `Infinity`, `-Infinity` and `NaN`, which JSON does not have (Nemotron-H's released configs:
//! `"time_step_limit": [0.0, Infinity]`), and transformers 5 writes them as
//! `{"__float__": "Infinity"}`. [`parse_json`] reads the first as the strings `"Infinity"`,
//! `"-Infinity"`, `"NaN"`; [`float_of`] reads a number in any of the three spellings.

use serde_json::Value;

/// Parse `text`, reading Python's bare `Infinity`, `-Infinity` and `NaN` as strings.
pub fn parse_json(text: &str) -> Result<Value, String> {
    match serde_json::from_str(text) {
        Ok(v) => Ok(v),
        Err(e) => match quote_python_constants(text) {
            Some(fixed) => serde_json::from_str(&fixed).map_err(|_| e.to_string()),
            None => Err(e.to_string()),
        },
    }
}

/// `text` with every bare `Infinity`, `-Infinity` and `NaN` outside a string quoted, or
/// `None` when it has none.
fn quote_python_constants(text: &str) -> Option<String> {
    const WORDS: [&str; 3] = ["-Infinity", "Infinity", "NaN"];
    let mut out = String::with_capacity(text.len() + 16);
    let (mut in_string, mut escaped, mut changed) = (false, false, false);
    let mut rest = text;
    while let Some(c) = rest.chars().next() {
        if in_string {
            match c {
                _ if escaped => escaped = false,
                '\\' => escaped = true,
                '"' => in_string = false,
                _ => {}
            }
        } else if c == '"' {
            in_string = true;
        } else if let Some(word) = WORDS.iter().find(|w| rest.starts_with(**w)) {
            out.push('"');
            out.push_str(word);
            out.push('"');
            rest = &rest[word.len()..];
            changed = true;
            continue;
        }
        out.push(c);
        rest = &rest[c.len_utf8()..];
    }
    changed.then_some(out)
}

/// A number written as JSON, as Python's bare constants (read by [`parse_json`] as strings),
/// or as transformers 5's `{"__float__": "Infinity"}`.
pub fn float_of(v: &Value) -> Option<f64> {
    let word = |s: &str| match s {
        "Infinity" | "inf" => Some(f64::INFINITY),
        "-Infinity" | "-inf" => Some(f64::NEG_INFINITY),
        "NaN" | "nan" => Some(f64::NAN),
        _ => None,
    };
    match v {
        Value::Number(n) => n.as_f64(),
        Value::String(s) => word(s),
        Value::Object(o) if o.len() == 1 => {
            o.get("__float__").and_then(Value::as_str).and_then(word)
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn python_constants_read_as_floats_outside_strings_only() {
        let v =
            parse_json(r#"{"a": [0.0, Infinity], "b": -Infinity, "c": "Infinity NaN", "d": NaN}"#)
                .expect("python json");
        assert_eq!(float_of(&v["a"][0]), Some(0.0));
        assert_eq!(float_of(&v["a"][1]), Some(f64::INFINITY));
        assert_eq!(float_of(&v["b"]), Some(f64::NEG_INFINITY));
        assert!(float_of(&v["d"]).is_some_and(f64::is_nan));
        assert_eq!(v["c"], "Infinity NaN", "a string's words are its own");
        let t5 = parse_json(r#"{"x": {"__float__": "Infinity"}}"#).expect("transformers 5");
        assert_eq!(float_of(&t5["x"]), Some(f64::INFINITY));
        assert!(parse_json(r#"{"a": Infinit}"#).is_err());
        assert!(
            parse_json(r#"{"a": "\"", "b": Infinity}"#).is_ok(),
            "an escaped quote"
        );
    }
}
