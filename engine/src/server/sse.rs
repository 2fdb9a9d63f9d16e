//! Server-sent events: `data: {json}` chunks, an error event if the stream fails after its
//! headers went out, then `data: [DONE]`. The body stream owns the choices, so a client that
//! goes away drops them, which aborts their engine requests.

use std::convert::Infallible;
use std::time::Duration;

use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures_util::future;
use futures_util::stream::{self, Stream, StreamExt};

use super::InFlight;
use metrale_protocol::openai::{StreamOptions, Usage};

use super::generate::{self, Event, PromptIds};
use super::output::Delta;

/// A comment line this often keeps proxies from closing an idle stream and lets us notice a
/// client that left while its request waits in the queue.
pub const KEEP_ALIVE: Duration = Duration::from_secs(5);

/// Stream `first` (opening chunks), then the chunks `on_delta` renders for each delta (none,
/// one or several), then `on_done(completion_tokens, cached_tokens)`'s chunk if any, then `[DONE]`.
pub fn respond<S, F, I, U>(
    first: Vec<String>,
    events: S,
    mut on_delta: F,
    on_done: U,
    in_flight: InFlight,
) -> Response
where
    S: Stream<Item = Event> + Send + 'static,
    F: FnMut(u32, usize, Delta) -> I + Send + 'static,
    I: IntoIterator<Item = String>,
    U: FnOnce(usize, usize) -> Option<String> + Send + 'static,
{
    let mut on_done = Some(on_done);
    let chunks = events.flat_map(move |ev| {
        let out: Vec<String> = match ev {
            Event::Delta {
                index,
                prompt,
                delta,
            } => on_delta(index, prompt, delta).into_iter().collect(),
            Event::Done {
                completion_tokens,
                cached,
            } => on_done
                .take()
                .and_then(|f| f(completion_tokens, cached))
                .into_iter()
                .collect(),
            Event::Error(e) => serde_json::to_string(&e.body()).ok().into_iter().collect(),
        };
        stream::iter(out)
    });
    let body = stream::iter(first)
        .chain(chunks)
        .chain(stream::once(future::ready("[DONE]".to_owned())))
        .map(move |data| {
            // The stream holds the in-flight count until it ends or the client leaves.
            let _held = &in_flight;
            Ok::<_, Infallible>(SseEvent::default().data(data))
        });
    Sse::new(body)
        .keep_alive(KeepAlive::new().interval(KEEP_ALIVE))
        .into_response()
}

/// JSON text of a chunk (serializing our own types cannot fail; an empty object if it did).
pub fn json<T: serde::Serialize>(v: &T) -> String {
    serde_json::to_string(v).unwrap_or_else(|_| "{}".into())
}

/// `stream_options.include_usage`.
pub fn include_usage(options: Option<&StreamOptions>) -> bool {
    options.and_then(|o| o.include_usage).unwrap_or(false)
}

/// `stream_options.continuous_usage_stats` (with `include_usage`): usage in every chunk and a
/// chunk for every token.
pub fn continuous_usage(options: Option<&StreamOptions>) -> bool {
    include_usage(options)
        && options
            .and_then(|o| o.continuous_usage_stats)
            .unwrap_or(false)
}

/// The closing usage chunk, rendered by `chunk`, when the client asked for it.
pub fn usage_chunk<C>(
    include: bool,
    prompts: Vec<PromptIds>,
    chunk: C,
) -> impl FnOnce(usize, usize) -> Option<String> + Send + 'static
where
    C: FnOnce(Usage) -> String + Send + 'static,
{
    move |completion_tokens, cached| {
        include.then(|| chunk(generate::usage(&prompts, completion_tokens, cached)))
    }
}
