//! What an HTTP status from the service means. The one table of it: the `kind` in the `log`
//! frame, the hint in the error message, the exception class of the contract's hierarchy, and
//! whether a request that got it is tried again.

/// The classes of non-2xx status the contract tells apart.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StatusClass {
    BadRequest,
    Authentication,
    RequestFailed,
    PermissionDenied,
    NotFound,
    Conflict,
    RateLimited,
    Server,
    /// Any other status (another 4xx, a 3xx): the caller's side, without a class of its own.
    Unexpected,
}

/// What one class means; see `StatusClass::meaning`.
pub struct Meaning {
    /// The `kind` column of the `log` frame.
    pub kind: &'static str,
    /// Opens the error message; says what to do where there is something to do.
    pub hint: &'static str,
    /// The exception class raised for it (in `defilens._exceptions`).
    pub exception: &'static str,
}

impl StatusClass {
    pub fn of(status: u16) -> Self {
        match status {
            400 => Self::BadRequest,
            401 => Self::Authentication,
            402 => Self::RequestFailed,
            403 => Self::PermissionDenied,
            404 => Self::NotFound,
            409 => Self::Conflict,
            429 => Self::RateLimited,
            500..=599 => Self::Server,
            _ => Self::Unexpected,
        }
    }

    pub fn meaning(self) -> Meaning {
        let (kind, hint, exception) = match self {
            Self::BadRequest => ("bad_request", "bad request (a required parameter is missing)", "BadRequestError"),
            Self::Authentication => ("auth", "authentication failed", "AuthenticationError"),
            Self::RequestFailed => (
                "request_failed",
                "request failed (parameters were valid but the request failed)",
                "RequestFailedError",
            ),
            Self::PermissionDenied => {
                ("forbidden", "permission denied (the API key lacks permission)", "PermissionDeniedError")
            }
            Self::NotFound => ("not_found", "not found (no such token)", "NotFoundError"),
            Self::Conflict => ("conflict", "conflict", "ConflictError"),
            Self::RateLimited => ("rate_limited", "rate limited (too many requests)", "RateLimitError"),
            Self::Server => ("server", "server error (the service's fault)", "ServerError"),
            Self::Unexpected => ("bad_request", "unexpected status", "APIError"),
        };
        Meaning { kind, hint, exception }
    }
}

/// Worth another attempt: 429 and the 5xx that mean "try again later".
pub fn is_retryable_status(status: u16) -> bool {
    matches!(status, 429 | 500 | 502 | 503 | 504)
}

/// Whether a response with this status may say when to try again (`Retry-After`): 429 (RFC 6585)
/// and 503 (RFC 9110). The one rule: the client waits for it on these and the exception carries
/// it (`APIError.retry_after`); on any other status the header is not read.
pub fn carries_retry_after(status: u16) -> bool {
    matches!(status, 429 | 503)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes_of_statuses() {
        assert_eq!(StatusClass::of(401).meaning().kind, "auth");
        assert_eq!(StatusClass::of(502).meaning().exception, "ServerError");
        assert_eq!(StatusClass::of(418).meaning().kind, "bad_request");
        assert_eq!(StatusClass::of(302).meaning().exception, "APIError");
        assert!(is_retryable_status(429) && is_retryable_status(503));
        assert!(!is_retryable_status(501) && !is_retryable_status(404));
        assert!(carries_retry_after(429) && carries_retry_after(503));
        assert!(!carries_retry_after(500) && !carries_retry_after(200));
    }
}
