//! `--reasoning-parser qwen3`: `<think>…</think>` at the start of a reply is reasoning, the
//! rest is the answer.
//!
//! Qwen3 writes `<think>\n…\n</think>\n\n` before its answer when thinking is on; with
//! `enable_thinking=false` the template closes an empty block in the prompt and the reply has
//! no tags. Templates that open the block in the prompt (`…assistant\n<think>\n`) make the
//! model start inside it: the server says so with `open`. The newlines just inside the tags
//! and just after `</think>` are the template's layout and are dropped. A reply cut off
//! inside the block is all reasoning.

use super::{ParseEvent, partial_tag_len};

const OPEN: &str = "<think>";
const CLOSE: &str = "</think>";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Before the first non-whitespace text: does the reply open a block?
    Start,
    Thinking,
    Answer,
}

#[derive(Debug)]
pub struct ReasoningSplitter {
    state: State,
    /// Text held back: a possible partial tag and trailing newlines.
    pending: String,
    /// Drop newlines here (just inside `<think>`, just after `</think>`).
    strip_leading: bool,
}

impl ReasoningSplitter {
    pub fn new(open: bool) -> Self {
        Self {
            state: if open { State::Thinking } else { State::Start },
            pending: String::new(),
            strip_leading: open,
        }
    }

    pub fn push(&mut self, text: &str) -> Vec<ParseEvent> {
        let mut out = Vec::new();
        self.pending.push_str(text);
        loop {
            if self.strip_leading {
                let kept = self.pending.trim_start_matches('\n').len();
                if kept == 0 {
                    self.pending.clear();
                    return out;
                }
                self.pending.drain(..self.pending.len() - kept);
                self.strip_leading = false;
            }
            match self.state {
                State::Start => {
                    let t = self.pending.trim_start();
                    if let Some(rest) = t.strip_prefix(OPEN) {
                        self.pending = rest.to_owned();
                        self.state = State::Thinking;
                        self.strip_leading = true;
                    } else if OPEN.starts_with(t) {
                        return out;
                    } else {
                        self.state = State::Answer;
                    }
                }
                State::Thinking => {
                    if let Some(end) = self.pending.find(CLOSE) {
                        let reasoning = self.pending[..end].trim_end_matches('\n').to_owned();
                        out.push(ParseEvent::Reasoning(reasoning));
                        self.pending.drain(..end + CLOSE.len());
                        self.state = State::Answer;
                        self.strip_leading = true;
                    } else {
                        let keep = partial_tag_len(&self.pending, CLOSE);
                        let cut = self.pending.len() - keep;
                        let cut = self.pending[..cut].trim_end_matches('\n').len();
                        out.push(ParseEvent::Reasoning(self.pending.drain(..cut).collect()));
                        return out;
                    }
                }
                State::Answer => {
                    out.push(ParseEvent::Text(std::mem::take(&mut self.pending)));
                    return out;
                }
            }
        }
    }

    pub fn finish(&mut self) -> Vec<ParseEvent> {
        let rest = std::mem::take(&mut self.pending);
        match self.state {
            State::Thinking => vec![ParseEvent::Reasoning(rest)],
            State::Start | State::Answer => vec![ParseEvent::Text(rest)],
        }
    }
}
