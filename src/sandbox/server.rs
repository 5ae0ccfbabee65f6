//! The Sandbox's HTTP/1.1 wire layer, on hyper's server, plus the two faults that need control
//! of the bytes: a connection closed before any response (the service future fails, so hyper
//! drops the connection unanswered), and a body cut short after a full `content-length` (the
//! body fails halfway, so hyper aborts the connection).

use std::fmt;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::{mpsc, Arc};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use hyper::body::Incoming;
use hyper::header::{HeaderValue, ALLOW, CONNECTION, CONTENT_LENGTH, CONTENT_TYPE, DATE, RETRY_AFTER};
use hyper::{Method, Request, Response, Version};
use hyper_util::rt::TokioIo;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

use super::precise_timer;
use super::responses::{decide, Delivery, Reply, Shared};
use crate::client::clock::SANDBOX_CLOCK_HEADER;

/// Longest request head accepted (hyper answers 431 beyond); real clients send a few hundred
/// bytes.
const MAX_HEAD_BYTES: usize = 16 * 1024;

pub(super) async fn accept_loop(
    listener: TcpListener,
    shared: Arc<Shared>,
    mut stop_requested: watch::Receiver<bool>,
    closed_sender: mpsc::Sender<()>,
) {
    loop {
        let accepted = tokio::select! {
            biased;
            // Also ends when the Sandbox (the sender) is gone.
            _ = stop_requested.wait_for(|stop| *stop) => break,
            accepted = listener.accept() => accepted,
        };
        match accepted {
            Ok((stream, _)) => {
                // Responses are written in one piece; Nagle would only add delay.
                let _ = stream.set_nodelay(true);
                let shared = shared.clone();
                let mut stop_requested = stop_requested.clone();
                let closed_sender = closed_sender.clone();
                tokio::spawn(async move {
                    tokio::select! {
                        _ = serve_connection(stream, shared) => {}
                        _ = stop_requested.wait_for(|stop| *stop) => {}
                    }
                    // The stream is closed by now (dropped with the finished future above).
                    drop(closed_sender);
                });
            }
            // Typically out of file descriptors: back off instead of spinning on the error.
            Err(_) => tokio::time::sleep(Duration::from_millis(10)).await,
        }
    }
    drop(listener);
    drop(closed_sender);
}

async fn serve_connection(stream: TcpStream, shared: Arc<Shared>) {
    let service = hyper::service::service_fn(move |request| answer(shared.clone(), request));
    // Errors here are the peer's (a malformed request, a reset) or a fault of our own making;
    // either way the connection is over.
    let _ = hyper::server::conn::http1::Builder::new()
        .keep_alive(true)
        .pipeline_flush(true)
        // A client may send its last request and shut down its side at once; it still gets the answer.
        .half_close(true)
        .max_buf_size(MAX_HEAD_BYTES)
        .serve_connection(TokioIo::new(stream), service)
        .await;
}

/// Returned by the service to make hyper close the connection without a response.
#[derive(Debug)]
struct DropConnection;

impl fmt::Display for DropConnection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a Sandbox fault: the connection is dropped before any response")
    }
}

impl std::error::Error for DropConnection {}

async fn answer(shared: Arc<Shared>, request: Request<Incoming>) -> Result<Response<ReplyBody>, DropConnection> {
    let arrived = Instant::now();
    shared.requests.fetch_add(1, Ordering::Relaxed);
    let read_only = matches!(*request.method(), Method::GET | Method::HEAD);
    let target = request.uri().path_and_query().map_or("/", |target| target.as_str());
    let partner_key = request.headers().get(crate::model::KEY_HEADER).map(HeaderValue::as_bytes);
    let reply = decide(&shared, read_only, target, partner_key);
    let keep_alive = wants_keep_alive(&request) && reply.delivery == Delivery::Complete;
    // Read any request body to its end, so the next request on the connection starts cleanly.
    discard(request.into_body()).await;
    precise_timer::sleep_until(arrived + shared.config.latency).await;
    let mut answer = response(reply, keep_alive)?;
    let now_ms = shared.clock.now_ms();
    if shared.clock.is_simulated() {
        // The `Date` a server sends is its own clock's: a simulated one's here (hyper would send
        // the wall clock's).
        answer.headers_mut().insert(DATE, http_date(now_ms));
    }
    // The clock to the millisecond, with its speed, for a client asked to follow it (a `Date`
    // has whole seconds and no speed).
    let clock = format!("now_ms={now_ms}, speed={}", shared.clock.speed());
    answer.headers_mut().insert(SANDBOX_CLOCK_HEADER, HeaderValue::from_str(&clock).expect("digits and ASCII"));
    Ok(answer)
}

fn http_date(ms: i64) -> HeaderValue {
    let at = std::time::UNIX_EPOCH + Duration::from_millis(ms.max(0) as u64);
    HeaderValue::from_str(&httpdate::fmt_http_date(at)).expect("an HTTP date is a valid header value")
}

/// HTTP/1.1 keeps the connection unless asked to close; HTTP/1.0 closes unless asked to keep.
fn wants_keep_alive(request: &Request<Incoming>) -> bool {
    let has = |option: &str| {
        request.headers().get_all(CONNECTION).iter().any(|value| {
            value.to_str().is_ok_and(|value| value.split(',').any(|o| o.trim().eq_ignore_ascii_case(option)))
        })
    };
    if request.version() == Version::HTTP_10 {
        has("keep-alive")
    } else {
        !has("close")
    }
}

async fn discard(mut body: Incoming) {
    while let Some(frame) = std::future::poll_fn(|cx| Pin::new(&mut body).poll_frame(cx)).await {
        if frame.is_err() {
            break;
        }
    }
}

fn response(reply: Reply, keep_alive: bool) -> Result<Response<ReplyBody>, DropConnection> {
    let body = reply.body;
    let body = match reply.delivery {
        Delivery::Dropped => return Err(DropConnection),
        Delivery::Truncated => ReplyBody::truncated(body),
        Delivery::Complete => ReplyBody::complete(body),
    };
    let length = body.length;
    let mut response = Response::new(body);
    *response.status_mut() = hyper::StatusCode::from_u16(reply.status).expect("the Sandbox's statuses are valid");
    let headers = response.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    headers.insert(CONTENT_LENGTH, HeaderValue::from(length));
    if let Some(attempt) = reply.attempt {
        headers.insert("x-sandbox-attempt", HeaderValue::from(attempt));
    }
    if let Some(seconds) = reply.retry_after {
        headers.insert(RETRY_AFTER, HeaderValue::from(seconds));
    }
    if let Some((limit, remaining, reset)) = reply.rate_headers {
        headers.insert("x-ratelimit-limit", HeaderValue::from(limit));
        headers.insert("x-ratelimit-remaining", HeaderValue::from(remaining));
        headers.insert("x-ratelimit-reset", HeaderValue::from(reset));
    }
    if reply.status == 405 {
        headers.insert(ALLOW, HeaderValue::from_static("GET, HEAD"));
    }
    headers.insert(CONNECTION, HeaderValue::from_static(if keep_alive { "keep-alive" } else { "close" }));
    Ok(response)
}

/// A response body that is sent whole, or (the truncate fault) half of it and then an error,
/// while `content-length` promises all of it.
struct ReplyBody {
    data: Option<Bytes>,
    /// The truncate fault: after the data, wait for this (so hyper flushes the head and the half
    /// body to the socket), then fail, which makes hyper abort the connection.
    cut: Option<Pin<Box<tokio::time::Sleep>>>,
    /// The full length, as declared.
    length: u64,
}

/// Long enough for hyper to flush what it has before the body fails.
const CUT_AFTER: Duration = Duration::from_millis(5);

impl ReplyBody {
    fn complete(body: Bytes) -> Self {
        Self { length: body.len() as u64, data: Some(body), cut: None }
    }

    fn truncated(body: Bytes) -> Self {
        let length = body.len() as u64;
        Self { data: Some(body.slice(..body.len() / 2)), cut: Some(Box::pin(tokio::time::sleep(CUT_AFTER))), length }
    }
}

impl Body for ReplyBody {
    type Data = Bytes;
    type Error = io::Error;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, io::Error>>> {
        let this = self.get_mut();
        if let Some(data) = this.data.take() {
            return Poll::Ready(Some(Ok(Frame::data(data))));
        }
        if let Some(cut) = &mut this.cut {
            if cut.as_mut().poll(cx).is_pending() {
                return Poll::Pending;
            }
            this.cut = None;
            let error = io::Error::new(io::ErrorKind::ConnectionAborted, "a Sandbox fault: the body is cut short");
            return Poll::Ready(Some(Err(error)));
        }
        Poll::Ready(None)
    }

    fn is_end_stream(&self) -> bool {
        self.data.is_none() && self.cut.is_none()
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact(self.length)
    }
}
