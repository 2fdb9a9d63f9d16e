//! Grammar-constrained decoding: a request's JSON schema (`json_object`, a regex, a choice, a
//! Lark grammar, a tool-call format) compiled once, in the HTTP handler, into a [`Constraint`]
//! that rides in its `SamplingParams`; the sampler asks it for each constrained row's mask and
//! sets every token the grammar forbids to -inf. With a reasoning parser the grammar starts
//! after the reasoning section ([`Think`]): thinking stays free.
//!
//! The grammar engine is llguidance (an Earley parser over a derivative-based lexer, masks
//! computed lazily per step against a token trie; see docs/structured-outputs.md for why it and
//! not outlines-core). Its per-sequence state (a `Matcher`) advances with the sequence's output:
//! before each mask the matcher is brought up to the tokens the row's history holds (new tokens
//! consumed, a shorter history after a preemption rolled back), so the sampler needs no hook in
//! the scheduler and a recomputed sequence gets the same masks.
//!
//! When the grammar is complete only end-of-sequence is allowed, so a finished value ends with
//! `stop`; a value still open at `max_tokens` ends with `length` like any other.
//!
//! Speculative decoding samples a sequence's draft rows one after another, row `j` seeing the
//! drafts before it; a draft the grammar forbids leaves the rows after it unmasked (their
//! tokens are never used: the row before the draft, masked, cannot have drawn it, so the draft
//! is rejected there), and the next step's shorter output rolls the matcher back.

mod schema;
pub mod tools;
mod vocab;
mod xml_call;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use llguidance::api::{GrammarWithLexer, TopLevelGrammar};
use llguidance::{Matcher, ParserFactory};
use serde_json::Value;
use toktrie::{ApproximateTokEnv, TokRxInfo, TokTrie};

pub use schema::SchemaError;

#[derive(Debug, thiserror::Error)]
pub enum GrammarError {
    /// The checkpoint's tokenizer cannot be read as bytes (an unknown decoder).
    #[error("constrained decoding is unavailable for this model: {0}")]
    Vocabulary(String),
    /// A schema llguidance refused, or one our own checks refused (`path` names the part).
    #[error("{0}")]
    Schema(#[from] SchemaError),
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
        Ok(Self { factory, eos })
    }

    /// Compile `spec` into a constraint, or name what in it cannot be compiled. `param` is
    /// the request field the schema came from, for the error; `think`: where it starts.
    pub fn compile(
        &self,
        spec: &Spec,
        param: &str,
        think: Think,
    ) -> Result<Constraint, GrammarError> {
        let grammar = grammar(spec, param, think)?;
        let parser = self
            .factory
            .create_parser(grammar)
            .map_err(|e| SchemaError::new(param, format!("{e:#}")))?;
        let template = Matcher::new(Ok(parser));
        if let Some(e) = template.get_error() {
            return Err(SchemaError::new(param, e).into());
        }
        Ok(Constraint(Arc::new(Shared {
            template: Mutex::new(template),
            seqs: Mutex::new(HashMap::new()),
            eos: self.eos,
        })))
    }
}

/// The answer's grammar, after a free reasoning section when `think` says so.
fn grammar(spec: &Spec, param: &str, think: Think) -> Result<TopLevelGrammar, SchemaError> {
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
        Think::Optional => format!("\"<think>\" {body} | @answer"),
    };
    answer.name = Some("answer".into());
    let top = format!("start: {start}\nthink[suffix=\"</think>\"]: /(?s:.*)/\nNL: /\\n{{1,2}}/\n");
    Ok(TopLevelGrammar {
        grammars: vec![GrammarWithLexer::from_lark(top), answer],
        max_tokens: None,
    })
}

/// A compiled grammar and each of its sequences' matcher. Cloning shares them (the `n`
/// choices of one request share one `Constraint`; each sequence gets its own matcher).
#[derive(Clone)]
pub struct Constraint(Arc<Shared>);

struct Shared {
    /// The grammar before any token, cloned for each new sequence.
    template: Mutex<Matcher>,
    /// Each running sequence's matcher, by `SampleRow::seq`.
    seqs: Mutex<HashMap<u64, Arc<Mutex<SeqMatcher>>>>,
    /// The end-of-sequence id the trie knows.
    eos: u32,
}

/// A matcher and the output tokens it has consumed.
struct SeqMatcher {
    matcher: Matcher,
    consumed: Vec<u32>,
}

impl std::fmt::Debug for Constraint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Constraint")
    }
}

/// Two params are equal when they hold the same compiled grammar.
impl PartialEq for Constraint {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Constraint {
    fn fresh(&self) -> SeqMatcher {
        let template = self
            .0
            .template
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        SeqMatcher {
            matcher: template.deep_clone(),
            consumed: Vec::new(),
        }
    }

    /// Set every token of `logits` the grammar does not allow after `output` to -inf; where
    /// it allows ending, every id of `eos_ids` stays allowed. `seq` keys the sequence's
    /// matcher (`None`: a fresh one that reads the whole output).
    pub fn mask(&self, seq: Option<u64>, output: &[u32], logits: &mut [f32], eos_ids: &[u32]) {
        let entry = seq.map(|id| {
            let mut seqs = self.0.seqs.lock().unwrap_or_else(PoisonError::into_inner);
            seqs.entry(id)
                .or_insert_with(|| Arc::new(Mutex::new(self.fresh())))
                .clone()
        });
        let mut own;
        let mut guard;
        let m: &mut SeqMatcher = match &entry {
            Some(e) => {
                guard = e.lock().unwrap_or_else(PoisonError::into_inner);
                &mut guard
            }
            None => {
                own = self.fresh();
                &mut own
            }
        };
        let mask = match self.sync(m, output) {
            // A speculative row after a draft the grammar forbids: never used.
            Ok(false) => return,
            Ok(true) if m.matcher.is_stopped() => None,
            Ok(true) => m.matcher.compute_mask().map(Some).unwrap_or_else(|e| {
                tracing::warn!("grammar matcher failed, ending the sequence: {e:#}");
                None
            }),
            Err(e) => {
                // Only a bug gets here (the sampler only draws allowed tokens): end the
                // sequence rather than write past what the grammar accepts.
                tracing::warn!("grammar matcher failed, ending the sequence: {e:#}");
                None
            }
        };
        let Some(mask) = mask else {
            // The grammar is complete: end-of-sequence is the only choice.
            logits.fill(f32::NEG_INFINITY);
            for &e in eos_ids {
                if let Some(l) = logits.get_mut(e as usize) {
                    *l = 0.0;
                }
            }
            return;
        };
        // Ending is allowed where the value could be complete; the mask only knows the first
        // end-of-sequence id, so every one keeps its logit then.
        let eos_ok = mask.is_allowed(self.0.eos);
        for (t, l) in logits.iter_mut().enumerate() {
            let t = t as u32;
            if !((t as usize) < mask.len() && mask.is_allowed(t) || eos_ok && eos_ids.contains(&t))
            {
                *l = f32::NEG_INFINITY;
            }
        }
    }

    /// Bring `m` up to `output`: roll back what it consumed past the common prefix (a
    /// preempted, recomputed sequence, rejected drafts), then consume the new tokens. `false`:
    /// `output` holds a token the grammar forbids (a draft); `m` stands before it.
    fn sync(&self, m: &mut SeqMatcher, output: &[u32]) -> anyhow::Result<bool> {
        let common = m
            .consumed
            .iter()
            .zip(output)
            .take_while(|(a, b)| a == b)
            .count();
        if common < m.consumed.len() {
            let back = m.consumed.len() - common;
            if m.matcher.rollback(back).is_err() {
                *m = self.fresh();
            } else {
                m.consumed.truncate(common);
            }
        }
        let new = &output[m.consumed.len()..];
        if new.is_empty() {
            return Ok(true);
        }
        let ok = m.matcher.try_consume_tokens(new)?;
        m.consumed.extend_from_slice(&new[..ok]);
        Ok(ok == new.len())
    }
}

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_calls;
