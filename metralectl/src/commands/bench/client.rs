//! Talking to the server under test: its model list, prompts of an exact token length (through
//! its own `POST /tokenize`), and one streamed request measured from the wire.

use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use futures_util::StreamExt as _;
use rand::rngs::StdRng;
use rand::{Rng as _, SeedableRng as _};
use serde_json::{Value, json};

use super::args::Endpoint;

/// Words the prompts are drawn from; any text would do, these tokenize to about a token each.
const WORDS: &[&str] = &[
    "the", "river", "stone", "light", "north", "garden", "paper", "window", "silver", "market",
    "cloud", "engine", "quiet", "orange", "bridge", "winter", "table", "signal", "forest",
    "number", "letter", "harbor", "music", "circle", "yellow", "valley", "planet", "pocket",
    "summer", "candle", "mirror", "ladder", "copper", "island", "thread", "button", "meadow",
    "rocket", "basket", "violet",
];

/// The server under test.
#[derive(Debug, Clone)]
pub struct Server {
    http: reqwest::Client,
    base: String,
    api_key: Option<String>,
    /// `response_format` sent with every measured request (`--response-format`).
    response_format: Option<Value>,
}

/// A prompt ready to send.
#[derive(Debug, Clone)]
pub enum Prompt {
    Text(String),
    Tokens(Vec<u32>),
}

/// What one request came to.
#[derive(Debug, Clone)]
pub enum Outcome {
    Ok {
        ttft: Duration,
        latency: Duration,
        output_tokens: u64,
    },
    Err(String),
}

impl Server {
    pub fn new(base: &str, api_key: Option<String>, timeout: Duration) -> anyhow::Result<Self> {
        let base = base.trim_end_matches('/');
        if !(base.starts_with("http://") || base.starts_with("https://")) {
            bail!("--url {base} is not an http:// or https:// URL");
        }
        let http = reqwest::Client::builder()
            .timeout(timeout)
            .pool_max_idle_per_host(1024)
            .tcp_nodelay(true)
            .build()
            .context("failed to build the HTTP client")?;
        Ok(Self {
            http,
            base: base.trim_end_matches("/v1").to_owned(),
            api_key,
            response_format: None,
        })
    }

    /// Send `format` as `response_format` with every measured request (`--response-format`).
    pub fn with_response_format(mut self, format: Option<Value>) -> Self {
        self.response_format = format;
        self
    }

    pub fn base(&self) -> &str {
        &self.base
    }

    fn request(&self, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        let req = self.http.request(method, format!("{}{path}", self.base));
        match &self.api_key {
            Some(key) => req.bearer_auth(key),
            None => req,
        }
    }

    async fn json(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<&Value>,
    ) -> anyhow::Result<Value> {
        let mut req = self.request(method, path);
        if let Some(body) = body {
            req = req.json(body);
        }
        let resp = req
            .send()
            .await
            .with_context(|| format!("cannot reach {}{path}", self.base))?;
        let status = resp.status();
        let text = resp
            .text()
            .await
            .with_context(|| format!("failed to read {path}"))?;
        if !status.is_success() {
            bail!("{}{path} answered {status}: {}", self.base, text.trim());
        }
        serde_json::from_str(&text)
            .with_context(|| format!("{}{path} did not answer JSON", self.base))
    }

    /// `GET /v1/models`, as the server sent it.
    pub async fn models(&self) -> anyhow::Result<Value> {
        self.json(reqwest::Method::GET, "/v1/models", None).await
    }

    /// `GET /version` as the server sent it (met: build, git commit, flags and settings; vLLM:
    /// its version), or `null` where the server has no such route.
    pub async fn version(&self) -> Value {
        self.json(reqwest::Method::GET, "/version", None)
            .await
            .unwrap_or(Value::Null)
    }

    /// What the record keeps of the server: `{"models": GET /v1/models, "version": GET
    /// /version or null}`.
    pub async fn describe(&self) -> anyhow::Result<(Value, Value)> {
        let models = self.models().await?;
        let version = self.version().await;
        let described = serde_json::json!({"models": models.clone(), "version": version});
        Ok((models, described))
    }

    async fn tokenize(&self, body: Value) -> anyhow::Result<Vec<u32>> {
        let v = self
            .json(reqwest::Method::POST, "/tokenize", Some(&body))
            .await
            .context(
                "prompts are built with the server's POST /tokenize (met and vLLM serve it)",
            )?;
        let tokens = v["tokens"]
            .as_array()
            .context("/tokenize answered without a `tokens` list")?;
        tokens
            .iter()
            .map(|t| t.as_u64().and_then(|t| u32::try_from(t).ok()))
            .collect::<Option<Vec<u32>>>()
            .context("/tokenize answered a token that is not a u32")
    }

    async fn detokenize(&self, model: &str, tokens: &[u32]) -> anyhow::Result<String> {
        let v = self
            .json(
                reqwest::Method::POST,
                "/detokenize",
                Some(&json!({"model": model, "tokens": tokens})),
            )
            .await?;
        v["prompt"]
            .as_str()
            .map(str::to_owned)
            .context("/detokenize answered without a `prompt` string")
    }

    /// A prompt of exactly `isl` tokens for `endpoint`, from seeded words (`seed` picks them).
    pub async fn prompt(
        &self,
        model: &str,
        endpoint: Endpoint,
        isl: u32,
        seed: u64,
    ) -> anyhow::Result<Prompt> {
        let isl = isl as usize;
        let mut rng = StdRng::seed_from_u64(seed);
        let mut words = String::new();
        for _ in 0..isl + 16 {
            if !words.is_empty() {
                words.push(' ');
            }
            words.push_str(WORDS[rng.random_range(0..WORDS.len())]);
        }
        let text_tokens = self
            .tokenize(json!({"model": model, "prompt": words, "add_special_tokens": false}))
            .await?;
        if text_tokens.len() < isl {
            bail!(
                "the server tokenized {} words into only {} tokens, fewer than --isl {isl}",
                isl + 16,
                text_tokens.len()
            );
        }
        match endpoint {
            Endpoint::Completions => Ok(Prompt::Tokens(text_tokens[..isl].to_vec())),
            Endpoint::Chat => {
                // The chat template adds its own tokens: find how many of the words' tokens
                // make the whole rendered prompt exactly `isl`, correcting by the difference.
                let overhead = self.chat_len(model, "").await?;
                if overhead >= isl {
                    bail!(
                        "the chat template alone is {overhead} tokens: --isl {isl} must be larger (or use --endpoint completions)"
                    );
                }
                let mut n = isl - overhead;
                for _ in 0..8 {
                    let text = self.detokenize(model, &text_tokens[..n]).await?;
                    let len = self.chat_len(model, &text).await?;
                    if len == isl {
                        return Ok(Prompt::Text(text));
                    }
                    let next = (n + isl)
                        .checked_sub(len)
                        .filter(|m| *m > 0 && *m <= text_tokens.len());
                    match next {
                        Some(m) if m != n => n = m,
                        _ => break,
                    }
                }
                bail!(
                    "cannot build a chat prompt of exactly {isl} tokens with this tokenizer; try another --isl or --endpoint completions"
                )
            }
        }
    }

    async fn chat_len(&self, model: &str, content: &str) -> anyhow::Result<usize> {
        let tokens = self
            .tokenize(json!({
                "model": model,
                "messages": [{"role": "user", "content": content}],
                "add_generation_prompt": true,
            }))
            .await?;
        Ok(tokens.len())
    }

    /// One greedy, unstreamed completion of `prompt`: its text, special tokens left in.
    pub async fn greedy_text(
        &self,
        endpoint: Endpoint,
        model: &str,
        prompt: &Prompt,
        osl: u32,
    ) -> anyhow::Result<String> {
        let mut body = json!({
            "model": model,
            "max_tokens": osl,
            "temperature": 0.0,
            "skip_special_tokens": true,
        });
        let (path, pointer) = match (endpoint, prompt) {
            (Endpoint::Chat, Prompt::Text(text)) => {
                body["messages"] = json!([{"role": "user", "content": text}]);
                ("/v1/chat/completions", "/choices/0/message/content")
            }
            (_, Prompt::Tokens(ids)) => {
                body["prompt"] = json!(ids);
                ("/v1/completions", "/choices/0/text")
            }
            (Endpoint::Completions, Prompt::Text(text)) => {
                body["prompt"] = json!(text);
                ("/v1/completions", "/choices/0/text")
            }
        };
        let v = self.json(reqwest::Method::POST, path, Some(&body)).await?;
        v.pointer(pointer)
            .and_then(Value::as_str)
            .map(str::to_owned)
            .with_context(|| format!("{path} answered without text at {pointer}"))
    }

    /// Sends one streamed request and measures it from the wire. Every way it can go wrong is
    /// an `Outcome::Err`, never a success.
    #[allow(clippy::too_many_arguments)]
    pub async fn run(
        &self,
        endpoint: Endpoint,
        model: &str,
        prompt: &Prompt,
        isl: u32,
        osl: u32,
        temperature: f64,
        seed: u64,
    ) -> Outcome {
        self.run_traced(endpoint, model, prompt, isl, osl, temperature, seed)
            .await
            .0
    }

    /// [`Server::run`], also returning when each token-carrying chunk arrived (for per-token
    /// gaps: the mixed load). The trace is empty when the request failed before its stream.
    #[allow(clippy::too_many_arguments)]
    pub async fn run_traced(
        &self,
        endpoint: Endpoint,
        model: &str,
        prompt: &Prompt,
        isl: u32,
        osl: u32,
        temperature: f64,
        seed: u64,
    ) -> (Outcome, Vec<Arrival>) {
        let mut body = json!({
            "model": model,
            "max_tokens": osl,
            "min_tokens": osl,
            "ignore_eos": true,
            "temperature": temperature,
            "seed": seed,
            "stream": true,
            "stream_options": {"include_usage": true, "continuous_usage_stats": true},
        });
        if let Some(format) = &self.response_format {
            body["response_format"] = format.clone();
        }
        let path = match (endpoint, prompt) {
            (Endpoint::Chat, Prompt::Text(text)) => {
                body["messages"] = json!([{"role": "user", "content": text}]);
                "/v1/chat/completions"
            }
            (_, Prompt::Tokens(ids)) => {
                body["prompt"] = json!(ids);
                "/v1/completions"
            }
            (Endpoint::Completions, Prompt::Text(text)) => {
                body["prompt"] = json!(text);
                "/v1/completions"
            }
        };
        let start = Instant::now();
        match self.stream(path, &body, start).await {
            Ok(mut m) => {
                let arrivals = std::mem::take(&mut m.arrivals);
                (m.judge(start, isl, osl), arrivals)
            }
            Err(e) => (Outcome::Err(format!("{e:#}")), Vec::new()),
        }
    }

    async fn stream(&self, path: &str, body: &Value, start: Instant) -> anyhow::Result<Measured> {
        let resp = self
            .request(reqwest::Method::POST, path)
            .json(body)
            .send()
            .await
            .context("request failed")?;
        let status = resp.status();
        if !status.is_success() {
            let text = resp.text().await.unwrap_or_default();
            bail!("server answered {status}: {}", text.trim());
        }
        let mut m = Measured::default();
        let mut buf: Vec<u8> = Vec::new();
        let mut chunks = resp.bytes_stream();
        while let Some(chunk) = chunks.next().await {
            let chunk = chunk.context("the stream broke")?;
            buf.extend_from_slice(&chunk);
            while let Some(end) = buf.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = buf.drain(..=end).collect();
                let line = String::from_utf8_lossy(&line);
                if let Some(data) = line.trim_end().strip_prefix("data:") {
                    m.event(data.trim(), start)?;
                }
            }
        }
        Ok(m)
    }
}

/// A chunk of a stream that carried generated tokens: when it arrived and how many it carried
/// (more than one with speculative decoding).
#[derive(Debug, Clone, Copy)]
pub struct Arrival {
    pub at: Instant,
    pub tokens: u64,
}

/// What the stream said, before it is judged.
#[derive(Debug, Default)]
struct Measured {
    /// Every token-carrying chunk, in order, and the tokens they carried so far.
    arrivals: Vec<Arrival>,
    traced: u64,
    first: Option<Duration>,
    /// Chunks that carried text.
    text_chunks: u64,
    completion_tokens: Option<u64>,
    prompt_tokens: Option<u64>,
    done: bool,
}

impl Measured {
    fn event(&mut self, data: &str, start: Instant) -> anyhow::Result<()> {
        if data == "[DONE]" {
            self.done = true;
            return Ok(());
        }
        if self.done {
            bail!("the stream went on after [DONE]");
        }
        let v: Value = serde_json::from_str(data)
            .with_context(|| format!("the stream sent an event that is not JSON: {data}"))?;
        if let Some(err) = v.get("error") {
            let msg = err["message"]
                .as_str()
                .map_or_else(|| err.to_string(), str::to_owned);
            bail!("the stream carried an error: {msg}");
        }
        let at = Instant::now();
        let now = at.duration_since(start);
        let has_text = v["choices"].as_array().is_some_and(|cs| {
            cs.iter().any(|c| {
                ["text", "content", "reasoning_content"].iter().any(|k| {
                    c.get(*k)
                        .or_else(|| c["delta"].get(*k))
                        .and_then(Value::as_str)
                        .is_some_and(|s| !s.is_empty())
                })
            })
        });
        if has_text {
            self.first.get_or_insert(now);
            self.text_chunks += 1;
        }
        if let Some(usage) = v.get("usage").filter(|u| u.is_object()) {
            self.completion_tokens = usage["completion_tokens"].as_u64();
            self.prompt_tokens = usage["prompt_tokens"].as_u64();
            // With continuous usage (met, vLLM) a chunk that reports a generated token times
            // the first token even when its text is still empty (a partial UTF-8 sequence, a
            // special token), as the text alone would time it late.
            let has_choice = v["choices"].as_array().is_some_and(|c| !c.is_empty());
            if has_choice && self.completion_tokens.is_some_and(|n| n > 0) {
                self.first.get_or_insert(now);
            }
        }
        // Tokens this chunk carried: by the running usage count where the server sends one
        // with its choices, else one a text chunk (a final usage-only chunk carries none).
        let has_choice = v["choices"].as_array().is_some_and(|c| !c.is_empty());
        let counted = v["usage"]["completion_tokens"]
            .as_u64()
            .filter(|_| has_choice);
        let tokens = match counted {
            Some(n) => n.saturating_sub(self.traced),
            None => u64::from(has_text),
        };
        if tokens > 0 {
            self.traced += tokens;
            self.arrivals.push(Arrival { at, tokens });
        }
        Ok(())
    }

    fn judge(self, start: Instant, isl: u32, osl: u32) -> Outcome {
        let latency = start.elapsed();
        if !self.done {
            return Outcome::Err("the stream ended without [DONE]".into());
        }
        let Some(ttft) = self.first else {
            return Outcome::Err("the stream carried no text".into());
        };
        // The server's own count when it reports usage, else one token a text chunk.
        let tokens = self.completion_tokens.unwrap_or(self.text_chunks);
        if tokens != u64::from(osl) {
            return Outcome::Err(format!(
                "generated {tokens} tokens, not the --osl {osl} asked for"
            ));
        }
        if let Some(p) = self.prompt_tokens.filter(|p| *p != u64::from(isl)) {
            return Outcome::Err(format!(
                "the prompt was {p} tokens, not the --isl {isl} asked for"
            ));
        }
        Outcome::Ok {
            ttft,
            latency,
            output_tokens: tokens,
        }
    }
}
