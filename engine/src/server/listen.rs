//! The accept loop and each connection's life (issue 37: no socket may be held forever).
//!
//! `axum::serve` sets no timer, so hyper's header read timeout never fired, and it has no idle
//! timeout or connection cap; about 20,000 idle sockets exhausted the descriptors and stopped
//! all service. Here:
//!
//! - `--max-connections` open at once; one more is answered 503 with the API's JSON error and
//!   closed. The cap is lowered at start-up to what `RLIMIT_NOFILE` allows (raised first to its
//!   hard limit), so the process never runs out of descriptors for the connections it keeps.
//! - `--header-read-timeout`: hyper's, from when it starts waiting for a request head.
//! - `--keep-alive-timeout`: a connection with no request in progress and no bytes either way
//!   for that long is closed (a request in progress, say a long non-streamed generation, is
//!   never idle).
//! - `--body-read-timeout` is the body extractor's (`body.rs`).
//! - hyper answers a head it cannot parse itself (400, 414, 431) with an empty body; the
//!   connection's writer puts the API's JSON error in its place (`Watched::substitute`).
//! - A connection closes lingering: an answer sent before its request body was read (413, a
//!   body too large for the context, 408) reaches the client instead of a reset.
//!
//! HTTP/1.1 only: hyper hands a connection's socket back (for the lingering close) only for
//! HTTP/1, and no client of ours speaks HTTP/2 without TLS.

use std::convert::Infallible;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::task::{Context, Poll, ready};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Body;
use axum::http::Request;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tower_service::Service;

use super::error::ApiError;
use super::limits::{HttpLimits, RESERVED_FDS};

/// Largest request head (request line and headers) hyper buffers; past it, 431.
pub const MAX_HEAD_BYTES: usize = 64 * 1024;
/// Most headers in a request; past it, 431.
pub const MAX_HEADERS: usize = 100;
/// How long a refused connection is read from before its 503 (so the close does not reset
/// the client's unread request away with the answer).
const REFUSE_LINGER: Duration = Duration::from_millis(500);

/// Connections the kernel completes and holds for `accept` (capped by `net.core.somaxconn`):
/// a burst of new connections larger than this while the accept loop is busy is dropped by
/// the kernel (tokio's default is 1,024; uvicorn's is 2,048).
pub const LISTEN_BACKLOG: u32 = 4096;

/// Listen on the first of `host`'s addresses that binds, as `TcpListener::bind` does, with
/// [`LISTEN_BACKLOG`].
pub async fn bind(host: &str, port: u16) -> io::Result<TcpListener> {
    let mut last = None;
    for addr in tokio::net::lookup_host((host, port)).await? {
        let socket = if addr.is_ipv4() {
            tokio::net::TcpSocket::new_v4()?
        } else {
            tokio::net::TcpSocket::new_v6()?
        };
        #[cfg(unix)]
        socket.set_reuseaddr(true)?;
        match socket
            .bind(addr)
            .and_then(|()| socket.listen(LISTEN_BACKLOG))
        {
            Ok(l) => return Ok(l),
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{host} has no address"),
        )
    }))
}

/// Connections over the cap answered at once; more are closed unanswered.
const MAX_REFUSING: usize = 256;

/// Raise the soft descriptor limit to the hard one; the limit now in force.
#[cfg(unix)]
pub fn raise_fd_limit() -> Option<u64> {
    use rustix::process::{Resource, getrlimit, setrlimit};
    let limit = getrlimit(Resource::Nofile);
    if limit.current != limit.maximum {
        let raised = rustix::process::Rlimit {
            current: limit.maximum,
            maximum: limit.maximum,
        };
        if let Err(e) = setrlimit(Resource::Nofile, raised) {
            tracing::warn!("could not raise the open-file limit to its hard limit: {e}");
        }
    }
    getrlimit(Resource::Nofile).current
}

#[cfg(not(unix))]
pub fn raise_fd_limit() -> Option<u64> {
    None
}

/// `--max-connections`, lowered to what `fd_limit` leaves once [`RESERVED_FDS`] are kept.
pub fn connection_cap(wanted: usize, fd_limit: Option<u64>) -> usize {
    match fd_limit {
        Some(l) => wanted.min(l.saturating_sub(RESERVED_FDS).max(1) as usize),
        None => wanted,
    }
}

/// Milliseconds since the process's first connection: a clock an atomic can hold.
fn now_ms() -> u64 {
    static START: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    START.get_or_init(Instant::now).elapsed().as_millis() as u64
}

/// What a connection's watchdog reads: its last traffic, and its requests in progress.
#[derive(Debug, Default)]
struct Activity {
    last_ms: AtomicU64,
    requests: AtomicUsize,
}

impl Activity {
    fn touch(&self) {
        self.last_ms.store(now_ms(), Ordering::Relaxed);
    }
}

/// A request in progress on a connection, until its response body is done or dropped.
struct InProgress(Arc<Activity>);

impl InProgress {
    fn new(a: &Arc<Activity>) -> Self {
        a.requests.fetch_add(1, Ordering::SeqCst);
        a.touch();
        Self(a.clone())
    }
}

impl Drop for InProgress {
    fn drop(&mut self) {
        self.0.touch();
        self.0.requests.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A response body that keeps its request counted as in progress while it is sent.
struct Tracked {
    inner: Body,
    _in_progress: InProgress,
}

impl http_body::Body for Tracked {
    type Data = axum::body::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

/// A connection's socket: notes every byte's time, and replaces hyper's empty answers to
/// heads it cannot parse with the API's JSON error.
struct Watched {
    inner: TcpStream,
    activity: Arc<Activity>,
    /// A substituted answer being written: its bytes, how many are out, and the length of
    /// hyper's buffer it stands for (reported written once ours is).
    pending: Option<(Vec<u8>, usize, usize)>,
}

/// hyper's own answers to an unparsable head: a status line and headers, no body, no
/// content type (every answer of ours has one).
fn hyper_error_answer(buf: &[u8]) -> Option<ApiError> {
    // Cheap first: every other write (bodies, our own answers) fails here.
    let status = [b"HTTP/1.1 400 ", b"HTTP/1.1 414 ", b"HTTP/1.1 431 "];
    if !status.iter().any(|s| buf.starts_with(*s)) {
        return None;
    }
    let head_end = buf.windows(4).position(|w| w == b"\r\n\r\n")?;
    let head = &buf[..head_end];
    if head.len() + 4 != buf.len()
        || head
            .to_ascii_lowercase()
            .windows(14)
            .any(|w| w == b"content-type: ")
    {
        return None;
    }
    if head.starts_with(b"HTTP/1.1 431 ") {
        Some(ApiError::HeadersTooLarge {
            limit: MAX_HEAD_BYTES,
            max_headers: MAX_HEADERS,
        })
    } else if head.starts_with(b"HTTP/1.1 414 ") {
        Some(ApiError::UriTooLong)
    } else if head.starts_with(b"HTTP/1.1 400 ") {
        Some(ApiError::MalformedHttp)
    } else {
        None
    }
}

/// A whole HTTP/1.1 answer with `e`'s JSON envelope, closing the connection.
fn raw_answer(e: &ApiError) -> Vec<u8> {
    let body = serde_json::to_vec(&e.body()).unwrap_or_default();
    let status = e.status();
    let mut out = format!(
        "HTTP/1.1 {} {}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\
         connection: close\r\n\r\n",
        status.as_u16(),
        status.canonical_reason().unwrap_or(""),
        body.len()
    )
    .into_bytes();
    out.extend(body);
    out
}

impl Watched {
    /// Write the substitute for `buf` if it is one of hyper's empty error answers (or one is
    /// under way); `None` when `buf` is an ordinary write.
    fn substitute(&mut self, cx: &mut Context<'_>, buf: &[u8]) -> Option<Poll<io::Result<usize>>> {
        if self.pending.is_none() {
            let e = hyper_error_answer(buf)?;
            self.pending = Some((raw_answer(&e), 0, buf.len()));
        }
        let (bytes, sent, stands_for) = self.pending.as_mut()?;
        while *sent < bytes.len() {
            match Pin::new(&mut self.inner).poll_write(cx, &bytes[*sent..]) {
                Poll::Ready(Ok(0)) => {
                    return Some(Poll::Ready(Err(io::ErrorKind::WriteZero.into())));
                }
                Poll::Ready(Ok(n)) => *sent += n,
                Poll::Ready(Err(e)) => return Some(Poll::Ready(Err(e))),
                Poll::Pending => return Some(Poll::Pending),
            }
        }
        let n = *stands_for;
        self.pending = None;
        Some(Poll::Ready(Ok(n)))
    }
}

impl AsyncRead for Watched {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let r = ready!(Pin::new(&mut self.inner).poll_read(cx, buf));
        if buf.filled().len() > before {
            self.activity.touch();
        }
        Poll::Ready(r)
    }
}

impl AsyncWrite for Watched {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        if let Some(p) = self.substitute(cx, buf) {
            return p;
        }
        let r = ready!(Pin::new(&mut self.inner).poll_write(cx, buf));
        self.activity.touch();
        Poll::Ready(r)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        if let Some(first) = bufs.iter().find(|b| !b.is_empty())
            && let Some(p) = self.substitute(cx, first)
        {
            return p;
        }
        let r = ready!(Pin::new(&mut self.inner).poll_write_vectored(cx, bufs));
        self.activity.touch();
        Poll::Ready(r)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// One fewer open (or refusing) connection when dropped.
struct Open(Arc<AtomicUsize>);

impl Drop for Open {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Whether an accept error is the process (or system) running out of descriptors.
fn out_of_descriptors(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(23 | 24)) // ENFILE, EMFILE
}

/// Accept and serve connections until `stop` turns true, then ask every connection to finish
/// its request and close; returns once all are closed.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    limits: HttpLimits,
    max_connections: usize,
    mut stop: watch::Receiver<bool>,
) {
    let open = Arc::new(AtomicUsize::new(0));
    let refusing = Arc::new(AtomicUsize::new(0));
    loop {
        let accepted = tokio::select! {
            r = listener.accept() => r,
            _ = stop.wait_for(|s| *s) => break,
        };
        let tcp = match accepted {
            Ok((tcp, _)) => tcp,
            Err(e) => {
                // A connection reset before it was accepted is nothing; running out of
                // descriptors passes as connections close, so wait a moment, don't spin.
                if out_of_descriptors(&e) {
                    tracing::error!("accept failed: {e}; lower --max-connections");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                continue;
            }
        };
        // Streamed tokens are small writes: without TCP_NODELAY, Nagle holds each one until
        // the client ACKs the last, and a delayed ACK (~40 ms) then stalls the stream.
        let _ = tcp.set_nodelay(true);
        if open.load(Ordering::SeqCst) >= max_connections {
            // Answered while few are being answered; under a flood, closed at once (each
            // answer holds a descriptor for up to a second).
            if refusing.load(Ordering::SeqCst) < MAX_REFUSING {
                refusing.fetch_add(1, Ordering::SeqCst);
                tokio::spawn(refuse(tcp, max_connections, Open(refusing.clone())));
            }
            continue;
        }
        open.fetch_add(1, Ordering::SeqCst);
        let guard = Open(open.clone());
        tokio::spawn(connection(tcp, router.clone(), limits, stop.clone(), guard));
    }
    drop(listener);
    while open.load(Ordering::SeqCst) > 0 {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Answer a connection over the cap with 503 and the JSON envelope, then close it.
async fn refuse(mut tcp: TcpStream, max: usize, _refusing: Open) {
    // Read the request's head first (briefly): closing a socket with unread bytes resets it,
    // and the client could lose the answer.
    let mut head = Vec::new();
    let mut buf = [0u8; 4096];
    let _ = tokio::time::timeout(REFUSE_LINGER, async {
        while head.len() < MAX_HEAD_BYTES && !head.windows(4).any(|w| w == b"\r\n\r\n") {
            match tcp.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => head.extend_from_slice(&buf[..n]),
            }
        }
    })
    .await;
    let answer = raw_answer(&ApiError::TooManyConnections { max });
    let _ = tokio::time::timeout(REFUSE_LINGER, async {
        let _ = tcp.write_all(&answer).await;
        let _ = tcp.shutdown().await;
    })
    .await;
}

/// How long a closing connection is still read from (and what is read thrown away), so
/// that an answer sent before the request's body was read (413, 400, 408) reaches the client
/// instead of being reset away with the unread bytes (nginx's lingering close).
const LINGER: Duration = Duration::from_secs(2);

/// Serve one connection (HTTP/1.1) under the limits, until the client closes it, a timeout
/// cuts it, or shutdown finishes it; then close it lingering.
async fn connection(
    tcp: TcpStream,
    router: Router,
    limits: HttpLimits,
    mut stop: watch::Receiver<bool>,
    _open: Open,
) {
    let activity = Arc::new(Activity::default());
    activity.touch();
    let io = TokioIo::new(Watched {
        inner: tcp,
        activity: activity.clone(),
        pending: None,
    });
    let service = {
        let activity = activity.clone();
        hyper::service::service_fn(move |req: Request<Incoming>| {
            let mut router = router.clone();
            let in_progress = InProgress::new(&activity);
            // Boxed: hyper polls a connection it can hand back only with an `Unpin` future.
            Box::pin(async move {
                let resp = match router.call(req.map(Body::new)).await {
                    Ok(r) => r,
                    Err(never) => match never {},
                };
                Ok::<_, Infallible>(resp.map(|inner| Tracked {
                    inner,
                    _in_progress: in_progress,
                }))
            })
        })
    };
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout)
        .max_header_size(MAX_HEAD_BYTES)
        .max_headers(MAX_HEADERS);
    let mut conn = builder.serve_connection(io, service);
    let idle_ms = limits.keep_alive_timeout.as_millis() as u64;
    let mut stopping = false;
    loop {
        let last = activity.last_ms.load(Ordering::Relaxed);
        let wake = tokio::time::Instant::now()
            + Duration::from_millis((last + idle_ms).saturating_sub(now_ms()));
        tokio::select! {
            r = std::future::poll_fn(|cx| conn.poll_without_shutdown(cx)) => {
                if let Err(e) = r {
                    tracing::debug!("connection ended: {e}");
                }
                break;
            }
            _ = tokio::time::sleep_until(wake) => {
                let quiet = now_ms().saturating_sub(activity.last_ms.load(Ordering::Relaxed));
                if activity.requests.load(Ordering::SeqCst) == 0 && quiet >= idle_ms {
                    break; // idle past --keep-alive-timeout
                }
                if activity.requests.load(Ordering::SeqCst) > 0 {
                    // Busy: look again a timeout from now.
                    activity.touch();
                }
            }
            _ = stop.wait_for(|s| *s), if !stopping => {
                stopping = true;
                Pin::new(&mut conn).graceful_shutdown();
            }
        }
    }
    let mut tcp = conn.into_parts().io.into_inner().inner;
    linger(&mut tcp).await;
}

/// Close our side, then read and drop what the client still sends for at most [`LINGER`].
async fn linger(tcp: &mut TcpStream) {
    let _ = tokio::time::timeout(LINGER, async {
        let _ = tcp.shutdown().await;
        let mut buf = [0u8; 16 * 1024];
        while let Ok(n) = tcp.read(&mut buf).await {
            if n == 0 {
                break;
            }
        }
    })
    .await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_hypers_empty_error_answers_are_replaced() {
        let ours = b"HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\n\
                     content-length: 2\r\n\r\n";
        assert!(hyper_error_answer(ours).is_none());
        let hypers = b"HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-length: 0\r\n\
                       date: Fri, 04 Dec 2026 09:00:00 GMT\r\n\r\n";
        assert!(matches!(
            hyper_error_answer(hypers),
            Some(ApiError::HeadersTooLarge { .. })
        ));
        let uri = b"HTTP/1.1 414 URI Too Long\r\ncontent-length: 0\r\n\r\n";
        assert_eq!(hyper_error_answer(uri), Some(ApiError::UriTooLong));
        let ok = b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n";
        assert!(hyper_error_answer(ok).is_none());
        let answer = String::from_utf8(raw_answer(&ApiError::UriTooLong)).expect("utf8");
        assert!(
            answer.starts_with("HTTP/1.1 414 URI Too Long\r\n"),
            "{answer}"
        );
        assert!(answer.contains("\"code\":\"uri_too_long\""), "{answer}");
    }

    #[test]
    fn the_cap_leaves_room_for_the_process() {
        assert_eq!(connection_cap(8192, Some(1024)), 768);
        assert_eq!(connection_cap(100, Some(1 << 20)), 100);
        assert_eq!(connection_cap(100, None), 100);
        assert_eq!(connection_cap(100, Some(10)), 1);
    }
}
