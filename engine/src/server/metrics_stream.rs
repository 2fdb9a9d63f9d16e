//! `GET /v1/metrics/stream`: the metrics socket's events as server-sent events, one `data:`
//! line each, for remote and container use. Behind the API key like the rest of `/v1`.
//! A client that falls behind is dropped by the hub; its stream then ends.

use std::convert::Infallible;
use std::sync::Arc;

use axum::extract::State;
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures_util::stream;

use super::AppState;

pub async fn stream(State(state): State<Arc<AppState>>) -> Response {
    let sub = state.hub.subscribe();
    let events = stream::unfold(sub, |mut sub| async move {
        let line = tokio::select! {
            biased;
            _ = &mut sub.kicked => None,
            line = sub.lines.recv() => line,
        }?;
        Some((
            Ok::<_, Infallible>(SseEvent::default().data(line.as_ref())),
            sub,
        ))
    });
    Sse::new(events)
        .keep_alive(KeepAlive::default())
        .into_response()
}
