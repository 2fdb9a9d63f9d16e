//! The scanner of formats whose calls take the rest of the message, with no closing tag:
//! Llama 3's JSON calls (the whole message is the calls when it starts with `{`) and Mistral's
//! (everything after `[TOOL_CALLS]`). Text before the calls streams as it comes; the calls are
//! held to the end of the stream, parsed whole, and released as call events, or as the text
//! they were if they do not parse.

use super::{ParseEvent, ToolCallFormat, ToolSpec, llama3_json, mistral};

#[derive(Debug)]
pub(super) struct TailScanner {
    pub(super) format: ToolCallFormat,
    pub(super) tools: Vec<ToolSpec>,
    pub(super) id_prefix: String,
    /// Text not yet released: a possible start of the calls, or (held) the calls so far.
    pub(super) pending: String,
    /// Everything from `pending` on is calls (released at the end).
    pub(super) held: bool,
    /// Llama 3: the message's start has shown whether it is a call.
    pub(super) decided: bool,
    pub(super) calls: usize,
}

impl TailScanner {
    pub(super) fn new(format: ToolCallFormat, tools: Vec<ToolSpec>, id_prefix: &str) -> Self {
        Self {
            format,
            tools,
            id_prefix: id_prefix.to_owned(),
            pending: String::new(),
            held: false,
            decided: false,
            calls: 0,
        }
    }

    pub(super) fn push(&mut self, text: &str, out: &mut Vec<ParseEvent>) {
        self.pending.push_str(text);
        if self.held {
            return;
        }
        match self.format {
            ToolCallFormat::Mistral => {
                if let Some(at) = self.pending.find(mistral::TOOL_CALLS) {
                    // Whitespace between the text and the calls is dropped.
                    let before = self.pending[..at].trim_end().to_owned();
                    self.pending.drain(..at);
                    self.held = true;
                    text_event(before, out);
                } else {
                    let keep = super::partial_tag_len(&self.pending, mistral::TOOL_CALLS);
                    let cut = self.pending.len() - keep;
                    let cut = self.pending[..cut].trim_end().len();
                    let text: String = self.pending.drain(..cut).collect();
                    text_event(text, out);
                }
            }
            _ => {
                if !self.decided {
                    match llama3_json::starts_call(&self.pending) {
                        None => return,
                        Some(call) => {
                            self.decided = true;
                            self.held = call;
                        }
                    }
                }
                if !self.held {
                    text_event(std::mem::take(&mut self.pending), out);
                }
            }
        }
    }

    pub(super) fn finish(&mut self, out: &mut Vec<ParseEvent>) {
        let rest = std::mem::take(&mut self.pending);
        if !self.held {
            text_event(rest, out);
            return;
        }
        let parsed = match self.format {
            ToolCallFormat::Mistral => rest
                .strip_prefix(mistral::TOOL_CALLS)
                .and_then(|after| mistral::parse_calls(after, &self.tools)),
            _ => llama3_json::parse_calls(&rest, &self.tools),
        };
        match parsed {
            Some(calls) => {
                for call in calls {
                    super::emit_call(call, &self.id_prefix, &mut self.calls, out);
                }
            }
            None => text_event(rest, out),
        }
    }
}

fn text_event(text: String, out: &mut Vec<ParseEvent>) {
    if !text.is_empty() {
        out.push(ParseEvent::Text(text));
    }
}

#[cfg(test)]
mod tests {
    use super::super::{OutputParser, coalesce};
    use super::*;
    use serde_json::json;

    fn tools() -> Vec<ToolSpec> {
        vec![ToolSpec {
            name: "get_weather".into(),
            parameters: json!({"type": "object", "properties": {"city": {"type": "string"}},
                               "required": ["city"]}),
        }]
    }

    /// Every split of `text` into two deltas gives the same events.
    fn events(format: ToolCallFormat, text: &str) -> Vec<ParseEvent> {
        let whole = {
            let mut p = OutputParser::new(None, false, Some((format, tools())), "call_");
            let mut ev = p.push(text);
            ev.extend(p.finish());
            coalesce(ev)
        };
        for cut in (0..=text.len()).filter(|&i| text.is_char_boundary(i)) {
            let mut p = OutputParser::new(None, false, Some((format, tools())), "call_");
            let mut ev = p.push(&text[..cut]);
            ev.extend(p.push(&text[cut..]));
            ev.extend(p.finish());
            assert_eq!(coalesce(ev), whole, "split at {cut} of {text:?}");
        }
        whole
    }

    fn call(name: &str) -> ParseEvent {
        ParseEvent::ToolCallStart {
            index: 0,
            id: "call_0".into(),
            name: name.into(),
        }
    }

    #[test]
    fn llama3_calls_and_text() {
        let ev = events(
            ToolCallFormat::Llama3Json,
            r#" {"name": "get_weather", "parameters": {"city": "Lisbon"}}"#,
        );
        assert_eq!(ev[0], call("get_weather"), "{ev:?}");
        assert!(matches!(
            ev.last(),
            Some(ParseEvent::ToolCallEnd { index: 0 })
        ));
        let text = "Sure: {\"name\": \"get_weather\"}";
        assert_eq!(
            events(ToolCallFormat::Llama3Json, text),
            [ParseEvent::Text(text.into())]
        );
        // Not a call after all: the held text comes back as it was.
        let bad = r#"{"name": "unknown", "parameters": {}}"#;
        assert_eq!(
            events(ToolCallFormat::Llama3Json, bad),
            [ParseEvent::Text(bad.into())]
        );
    }

    #[test]
    fn mistral_text_then_calls() {
        let ev = events(
            ToolCallFormat::Mistral,
            "Checking. [TOOL_CALLS]get_weather[ARGS]{\"city\": \"Lisbon\"}",
        );
        assert_eq!(ev[0], ParseEvent::Text("Checking.".into()));
        assert_eq!(ev[1], call("get_weather"));
        let plain = "No calls [TOOL here.";
        assert_eq!(
            events(ToolCallFormat::Mistral, plain),
            [ParseEvent::Text(plain.into())]
        );
    }
}
