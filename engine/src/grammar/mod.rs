//! Grammar-constrained decoding: a request's JSON schema (`json_object`, a regex, a choice, a
//! Lark grammar, a tool-call format) compiled once, in the HTTP handler, into a [`Constraint`]
//! that rides in its `SamplingParams`; the sampler asks it for each constrained row's mask and
//! sets every token the grammar forbids to -inf. With a reasoning parser the grammar starts
//! after the reasoning section ([`Think`]): thinking stays free.
//!
//! The grammar engine is llguidance (an Earley parser over a derivative-based lexer, masks
//! computed lazily per step against a token trie; see docs/structured-outputs.md for why it and
//! not outlines-core). Its per-sequence state (a `Matcher`) advances with the sequence's output
//! (`matcher.rs`); a row's mask is a bitmask ([`TokenMask`]), which the CPU sampler applies on
//! the host and the CUDA sampler uploads and applies on the device. The runner has each
//! sequence's next masks computed on worker threads (`workers.rs`) while the step runs.
//!
//! Fixed text the server's own grammars write (a call format's markers, `<think>`/`</think>`)
//! is the tokenizer's special token wherever it is one (`marks.rs`), as the model writes it.
//!
//! When the grammar is complete only end-of-sequence is allowed, so a finished value ends with
//! `stop`; a value still open at `max_tokens` ends with `length` like any other.

mod marks;
mod matcher;
mod schema;
mod token_mask;
pub mod tools;
mod vocab;
mod workers;
mod xml_call;

use std::sync::Arc;

use llguidance::api::{GrammarWithLexer, TopLevelGrammar};
use llguidance::{Matcher, ParserFactory};
use serde_json::Value;
use toktrie::{ApproximateTokEnv, TokRxInfo, TokTrie};

pub use marks::Specials;
pub use matcher::{Constraint, MaskStats};
pub use schema::SchemaError;
pub use token_mask::{RowMask, TokenMask};
#[cfg(test)]
pub(crate) use workers::hold::hold as hold_workers;

#[derive(Debug, thiserror::Error)]
pub enum GrammarError {
    /// The checkpoint's tokenizer cannot be read as bytes (an unknown decoder).
    #[error("constrained decoding is unavailable for this model: {0}")]
    Vocabulary(String),
    /// A schema llguidance refused, or one our own checks refused (`path` names the part).
    #[error("{0}")]
    Schema(#[from] SchemaError),
    /// A call format written with special tokens (DeepSeek's), on a tokenizer without one.
    #[error(
        "{format} calls are written with the special token `{token}`, which this model's \
         tokenizer does not have, so no call could be held to the format: start met serve \
         with this model's own --tool-call-parser (or --disable-tool-grammar to read calls as \
         written)"
    )]
    MissingMarker {
        format: &'static str,
        token: &'static str,
    },
}

/// What a request's output must match.
#[derive(Debug, Clone, PartialEq)]
pub enum Spec {
    /// Any JSON object (`response_format: {"type": "json_object"}`).
    JsonObject,
    /// A JSON schema; `strict` makes every object's unlisted properties forbidden unless the
    /// schema says otherwise (`additionalProperties` defaults to false), as OpenAI's strict
    /// mode requires.
    JsonSchema { schema: Value, strict: bool },
    /// A Lark grammar (llguidance's dialect, `%json {...}` for JSON values): the tool-call
    /// formats (`tools.rs`), vLLM's `guided_grammar`.
    Lark(String),
    /// A regular expression the whole reply must match (vLLM's `guided_regex`).
    Regex(String),
    /// One of these strings exactly (vLLM's `guided_choice`).
    Choice(Vec<String>),
}

impl Spec {
    /// A JSON value: it cannot start with a newline, so one or two may come first after a
    /// reasoning section.
    fn is_json(&self) -> bool {
        matches!(self, Self::JsonObject | Self::JsonSchema { .. })
    }
}

/// Where the grammar starts in a reasoning model's reply (`--reasoning-parser`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Think {
    /// No reasoning section: the grammar holds the whole reply.
    Off,
    /// The prompt opened `<think>`: the reply is free up to `</think>`, then the grammar's.
    Open,
    /// The reply may open with `<think>…</think>` (free), then the grammar's.
    Optional,
}

/// The compiler of a model's grammars: its token trie and llguidance's parser factory. Built
/// once (the trie of a 150k vocabulary takes a few hundred milliseconds) and shared.
pub struct Grammars {
    factory: ParserFactory,
    eos: u32,
    /// The tokenizer's special tokens, which grammars name by id (`marks.rs`).
    specials: Specials,
}

impl std::fmt::Debug for Grammars {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Grammars").finish_non_exhaustive()
    }
}

impl Grammars {
    /// The compiler for `tokenizer`'s vocabulary padded to the model's `vocab_size` logits,
    /// with `eos` the token that ends a value.
    pub fn new(
        tokenizer: &tokenizers::Tokenizer,
        vocab_size: usize,
        eos: u32,
    ) -> Result<Self, GrammarError> {
        let words = vocab::token_bytes(tokenizer, vocab_size)?;
        let info = TokRxInfo::new(vocab_size as u32, eos);
        let env: toktrie::TokEnv = Arc::new(ApproximateTokEnv::new(TokTrie::from(&info, &words)));
        let mut factory = ParserFactory::new_simple(&env)
            .map_err(|e| GrammarError::Vocabulary(format!("{e:#}")))?;
        // Warnings and errors come back as values; nothing goes to stderr.
        factory.quiet();
        Ok(Self {
            factory,
            eos,
            specials: Specials::new(tokenizer, vocab_size),
        })
    }

    /// The tokenizer's special tokens, for the call grammars (`tools::call_grammar`).
    pub fn specials(&self) -> &Specials {
        &self.specials
    }

    /// Compile `spec` into a constraint, or name what in it cannot be compiled. `param` is
    /// the request field the schema came from, for the error; `think`: where it starts.
    pub fn compile(
        &self,
        spec: &Spec,
        param: &str,
        think: Think,
    ) -> Result<Constraint, GrammarError> {
        self.build(grammar(spec, param, think, &self.specials)?, param, false)
    }

    /// Compile `spec` for a benchmark's `ignore_eos` request: one value after another, never
    /// ending (end-of-sequence is never allowed), so the reply runs to `max_tokens` with every
    /// token under the grammar.
    pub fn compile_repeated(&self, spec: &Spec, param: &str) -> Result<Constraint, GrammarError> {
        let TopLevelGrammar { mut grammars, .. } =
            grammar(spec, param, Think::Off, &self.specials)?;
        let Some(answer) = grammars.first_mut() else {
            return Err(SchemaError::new(param, "an empty grammar").into());
        };
        answer.name = Some("answer".into());
        grammars.insert(
            0,
            GrammarWithLexer::from_lark("start: answer+\nanswer: @answer\n".into()),
        );
        let top = TopLevelGrammar {
            grammars,
            max_tokens: None,
        };
        self.build(top, param, true)
    }

    fn build(
        &self,
        grammar: TopLevelGrammar,
        param: &str,
        endless: bool,
    ) -> Result<Constraint, GrammarError> {
        let parser = self
            .factory
            .create_parser(grammar)
            .map_err(|e| SchemaError::new(param, format!("{e:#}")))?;
        let template = Matcher::new(Ok(parser));
        if let Some(e) = template.get_error() {
            return Err(SchemaError::new(param, e).into());
        }
        Ok(Constraint::new(template, self.eos, endless))
    }
}

/// The answer's grammar, after a free reasoning section when `think` says so. The section's
/// tags are written as `specials` says: a `</think>` that is a special token ends the free
/// text where the model writes it (a lazy text lexeme could never end on it).
fn grammar(
    spec: &Spec,
    param: &str,
    think: Think,
    specials: &Specials,
) -> Result<TopLevelGrammar, SchemaError> {
    let mut answer = match spec {
        Spec::Lark(g) => GrammarWithLexer::from_lark(g.clone()),
        Spec::Regex(rx) => {
            GrammarWithLexer::from_lark(format!("start: /{}/", xml_call::rx_body(rx, "")))
        }
        Spec::Choice(choices) => {
            if choices.is_empty() {
                return Err(SchemaError::new(param, "give at least one choice"));
            }
            let alts: Vec<String> = choices
                .iter()
                .map(String::as_str)
                .map(tools::lark_str)
                .collect();
            GrammarWithLexer::from_lark(format!("start: {}", alts.join(" | ")))
        }
        Spec::JsonObject | Spec::JsonSchema { .. } => {
            GrammarWithLexer::from_json_schema(schema::prepare(spec, param)?)
        }
    };
    let body = if spec.is_json() {
        "think NL? @answer"
    } else {
        "think @answer"
    };
    let start = match think {
        Think::Off => return Ok(TopLevelGrammar::from_grammar(answer)),
        Think::Open => body.to_owned(),
        Think::Optional => format!("{} {body} | @answer", specials.lark("<think>")),
    };
    answer.name = Some("answer".into());
    let think = match specials.id("</think>") {
        Some(id) => format!("think: THINK <[{id}]>\nTHINK: /(?s:.*)/"),
        None => "think[suffix=\"</think>\"]: /(?s:.*)/".to_owned(),
    };
    let top = format!("start: {start}\n{think}\nNL: /\\n{{1,2}}/\n");
    Ok(TopLevelGrammar {
        grammars: vec![GrammarWithLexer::from_lark(top), answer],
        max_tokens: None,
    })
}

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_calls;
#[cfg(test)]
mod tests_marks;
