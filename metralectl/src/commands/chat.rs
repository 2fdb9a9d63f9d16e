//! `metralectl chat NAME`: talk to a model. NAME is a running engine (as `ps` lists it) or a
//! recipe, started in the background when no engine of that name runs (it keeps running;
//! `metralectl stop NAME` ends it). `--url` talks to any OpenAI-compatible server instead.
//!
//! The conversation is kept and sent with each message; `/reset` forgets it. Replies stream
//! as they are generated (Ctrl-C stops one). In a terminal the prompt has a line editor with a
//! history kept across sessions (`editor.rs`); with stdin from a pipe, each line is a message.

use std::io::{BufRead as _, IsTerminal as _, Write as _};
use std::path::PathBuf;
use std::process::{Command, ExitCode};

use anyhow::Context as _;
use futures_util::StreamExt as _;
use serde_json::{Value, json};

use super::{find_engine, load_registry, runtime};
use crate::cli::ChatArgs;
use crate::error::UserError;
use crate::printer::{Printer, Style};

mod editor;

use editor::{Editor, Read};

/// Messages kept in the prompt's history file.
const HISTORY_LINES: usize = 500;

const HELP: &str = "Enter sends; Alt-Enter, Ctrl-J or a trailing \\ starts a new line; ↑↓ walk \
the history. /reset forgets the conversation, /exit (or Ctrl-D) ends the chat, Ctrl-C stops a reply.";

pub fn chat(args: &ChatArgs, printer: &Printer) -> anyhow::Result<ExitCode> {
    let base = match (&args.url, &args.name) {
        (Some(url), _) => url.trim_end_matches('/').trim_end_matches("/v1").to_owned(),
        (None, Some(name)) => engine_url(name, args, printer)?,
        (None, None) => anyhow::bail!("pass an engine or recipe NAME, or --url"),
    };
    let rt = runtime()?;
    let client = reqwest::Client::builder()
        .no_proxy()
        .build()
        .context("failed to make an HTTP client")?;
    let chat = Chat {
        client,
        base: base.clone(),
        api_key: args.api_key.clone(),
        system: args.system.clone(),
        max_tokens: args.max_tokens,
        temperature: args.temperature,
    };
    let model = match &args.model {
        Some(m) => m.clone(),
        None => rt.block_on(chat.first_model())?,
    };
    let interactive = std::io::stdin().is_terminal();
    if interactive {
        printer.note(format!("talking to {model} at {base}/v1. {HELP}"));
    }
    rt.block_on(talk(&chat, &model, interactive, printer))?;
    Ok(ExitCode::SUCCESS)
}

/// The base URL of the engine NAME names, starting the recipe NAME when no engine runs.
fn engine_url(name: &str, args: &ChatArgs, printer: &Printer) -> anyhow::Result<String> {
    if let Some(engine) = find_engine(name)? {
        return engine
            .url()
            .ok_or_else(|| anyhow::anyhow!("the engine {} publishes no port", engine.name));
    }
    // Not running: a recipe of that name is started in the background.
    let registry = load_registry()?;
    registry.get(name).map_err(|e| {
        anyhow::Error::new(e).context(UserError::new(
            format!("no engine named {} runs, and no recipe has that name", name),
            "`metralectl ps` lists the running engines, `metralectl list` the recipes; or pass --url",
        ))
    })?;
    printer.note(format!(
        "no engine named {0} runs: starting it (`metralectl stop {0}` ends it)",
        name
    ));
    let me = std::env::current_exe().context("cannot find the metralectl executable")?;
    let mut run = Command::new(me);
    run.args(["run", name, "--detach"]);
    if let Some(port) = args.port {
        run.args(["--port", &port.to_string()]);
    }
    if let Some(key) = &args.api_key {
        run.env("MET_API_KEY", key);
    }
    // Its progress and errors go to this terminal; only its outcome matters here.
    let status = run
        .stdout(std::process::Stdio::null())
        .status()
        .context("failed to start `metralectl run`")?;
    if !status.success() {
        return Err(UserError::new(
            format!("could not start {} (see above)", name),
            format!("fix what `metralectl run {}` says, then chat again", name),
        )
        .into());
    }
    let engine = find_engine(name)?
        .with_context(|| format!("{} started but `ps` does not list it", name))?;
    engine
        .url()
        .with_context(|| format!("the engine {} publishes no port", engine.name))
}

struct Chat {
    client: reqwest::Client,
    base: String,
    api_key: Option<String>,
    system: Option<String>,
    max_tokens: Option<u32>,
    temperature: Option<f64>,
}

impl Chat {
    fn request(&self, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        let r = self.client.request(method, format!("{}{path}", self.base));
        match &self.api_key {
            Some(k) => r.bearer_auth(k),
            None => r,
        }
    }

    async fn first_model(&self) -> anyhow::Result<String> {
        let url = format!("{}/v1/models", self.base);
        let resp = self
            .request(reqwest::Method::GET, "/v1/models")
            .send()
            .await
            .map_err(|e| {
                anyhow::Error::new(e).context(UserError::new(
                    format!("cannot reach {url}"),
                    "check that the engine runs (`metralectl ps`) and the URL",
                ))
            })?;
        check_status(&resp, &url)?;
        let v: Value = resp.json().await.context("GET /v1/models is not JSON")?;
        v["data"][0]["id"]
            .as_str()
            .map(str::to_owned)
            .with_context(|| format!("{url} lists no model"))
    }

    /// Streams one reply to stdout as it comes; returns its text (`None` when stopped).
    async fn reply(&self, body: &Value, printer: &Printer) -> anyhow::Result<Option<String>> {
        let url = format!("{}/v1/chat/completions", self.base);
        let resp = self
            .request(reqwest::Method::POST, "/v1/chat/completions")
            .json(body)
            .send()
            .await
            .with_context(|| format!("cannot reach {url}"))?;
        check_status(&resp, &url)?;
        let mut stream = resp.bytes_stream();
        let mut pending = Vec::new();
        let mut text = String::new();
        let mut thinking = false;
        let mut out = std::io::stdout();
        loop {
            let chunk = tokio::select! {
                c = stream.next() => c,
                _ = tokio::signal::ctrl_c() => {
                    writeln!(out)?;
                    printer.note("stopped");
                    return Ok(None);
                }
            };
            let Some(chunk) = chunk else { break };
            pending.extend_from_slice(&chunk.context("the reply stream broke")?);
            while let Some(end) = pending.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = pending.drain(..=end).collect();
                let line = String::from_utf8_lossy(&line);
                let Some(data) = line.trim().strip_prefix("data:") else {
                    continue;
                };
                let data = data.trim();
                if data == "[DONE]" {
                    continue;
                }
                let v: Value = serde_json::from_str(data)
                    .with_context(|| format!("the reply stream sent {data}"))?;
                if let Some(msg) = v["error"]["message"].as_str() {
                    anyhow::bail!("the engine refused the message: {msg}");
                }
                let delta = &v["choices"][0]["delta"];
                if let Some(r) = delta["reasoning_content"].as_str() {
                    thinking = true;
                    write!(out, "{}", printer.paint(Style::Dim, r))?;
                }
                if let Some(c) = delta["content"].as_str() {
                    if thinking {
                        thinking = false;
                        writeln!(out)?;
                    }
                    text.push_str(c);
                    write!(out, "{c}")?;
                }
                out.flush()?;
            }
        }
        writeln!(out)?;
        Ok(Some(text))
    }
}

fn check_status(resp: &reqwest::Response, url: &str) -> anyhow::Result<()> {
    match resp.status().as_u16() {
        200..=299 => Ok(()),
        401 => Err(UserError::new(
            format!("{url} answered 401: it needs an API key"),
            "pass the engine's key with --api-key KEY (or MET_API_KEY)",
        )
        .into()),
        s => anyhow::bail!("{url} answered {s}"),
    }
}

/// The conversation loop.
async fn talk(
    chat: &Chat,
    model: &str,
    interactive: bool,
    printer: &Printer,
) -> anyhow::Result<()> {
    let mut messages: Vec<Value> = Vec::new();
    if let Some(system) = &chat.system {
        messages.push(json!({"role": "system", "content": system}));
    }
    let history_file = crate::dirs::state_dir().map(|d| d.join("chat_history"));
    let mut editor = Editor::new(load_history(history_file.as_deref()));
    let mut piped = std::io::stdin().lock().lines();
    loop {
        let message = if interactive {
            match tokio::task::block_in_place(|| editor.read())? {
                Read::Message(m) => m,
                Read::End => return Ok(()),
            }
        } else {
            match piped.next() {
                Some(line) => line.context("failed to read stdin")?,
                None => return Ok(()),
            }
        };
        let message = message.trim().to_owned();
        if message.is_empty() {
            continue;
        }
        if interactive {
            remember(&mut editor.history, history_file.as_deref(), &message);
        }
        match message.as_str() {
            "/exit" | "/quit" => return Ok(()),
            "/reset" => {
                messages.retain(|m| m["role"] == "system");
                printer.note("the conversation is forgotten; the next message starts a new one");
                continue;
            }
            "/help" | "/?" => {
                printer.note(HELP);
                continue;
            }
            m if m.starts_with('/') && !m.contains(' ') => {
                printer.warn(format!(
                    "unknown command {m}: /reset, /exit and /help are known"
                ));
                continue;
            }
            _ => {}
        }
        messages.push(json!({"role": "user", "content": message}));
        let mut body = json!({"model": model, "messages": messages, "stream": true});
        if let Some(n) = chat.max_tokens {
            body["max_tokens"] = json!(n);
        }
        if let Some(t) = chat.temperature {
            body["temperature"] = json!(t);
        }
        match chat.reply(&body, printer).await {
            Ok(Some(text)) => messages.push(json!({"role": "assistant", "content": text})),
            Ok(None) => {
                messages.pop();
            }
            Err(e) if interactive => {
                messages.pop();
                printer.error(
                    &e,
                    Some("the conversation goes on; /reset starts a new one"),
                );
            }
            Err(e) => return Err(e),
        }
    }
}

fn load_history(path: Option<&std::path::Path>) -> Vec<String> {
    let Some(text) = path.and_then(|p| std::fs::read_to_string(p).ok()) else {
        return Vec::new();
    };
    // One message a line, its own new lines escaped.
    text.lines().map(|l| l.replace("\\n", "\n")).collect()
}

/// Adds `message` to the history (not twice in a row) and to its file, best effort.
fn remember(history: &mut Vec<String>, path: Option<&std::path::Path>, message: &str) {
    if history.last().is_some_and(|l| l == message) {
        return;
    }
    history.push(message.to_owned());
    let start = history.len().saturating_sub(HISTORY_LINES);
    history.drain(..start);
    let Some(path) = path else { return };
    if let Some(dir) = path.parent() {
        let _ = std::fs::create_dir_all(dir);
    }
    let text: String = history
        .iter()
        .map(|m| format!("{}\n", m.replace('\n', "\\n")))
        .collect();
    let _ = std::fs::write(PathBuf::from(path), text);
}
