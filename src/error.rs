//! The one error type of the crate. The bindings map it once onto the Python hierarchy
//! (`DefiLensError` and its subclasses); the `kind` strings are the ones in the `log` frame.

use std::fmt;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Endpoint {
    Listing,
    Markets,
}

impl Endpoint {
    pub fn as_str(self) -> &'static str {
        match self {
            Endpoint::Listing => "listing",
            Endpoint::Markets => "markets",
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub enum Error {
    /// The service answered with a non-2xx status.
    Api {
        status: u16,
        token: String,
        endpoint: Endpoint,
        /// A short excerpt of the response body.
        body: String,
        /// Seconds from a `Retry-After` header, on 429s.
        retry_after: Option<f64>,
    },
    /// No response within the timeout.
    Timeout { token: String, endpoint: Endpoint, message: String },
    /// The connection failed, was dropped, or the body was cut short.
    Connection { token: String, endpoint: Endpoint, message: String },
    /// A 2xx body that is not the documented JSON shape.
    Decode {
        token: Option<String>,
        endpoint: Endpoint,
        field: Option<String>,
        offset: Option<usize>,
        message: String,
    },
    /// A caller's mistake found before any request (maps to `ValueError`).
    InvalidArgument(String),
    /// A bug: a caught panic or a broken invariant. Maps to `DefiLensError`.
    Internal(String),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// The `kind` column of the `log` frame.
    pub fn kind(&self) -> &'static str {
        match self {
            Error::Api { status, .. } => status_kind(*status),
            Error::Timeout { .. } => "timeout",
            Error::Connection { .. } => "connection",
            Error::Decode { .. } => "decode",
            Error::InvalidArgument(_) => "invalid_argument",
            Error::Internal(_) => "internal",
        }
    }

    pub fn status(&self) -> Option<u16> {
        match self {
            Error::Api { status, .. } => Some(*status),
            _ => None,
        }
    }

    pub fn token(&self) -> Option<&str> {
        match self {
            Error::Api { token, .. } | Error::Timeout { token, .. } | Error::Connection { token, .. } => {
                Some(token)
            }
            Error::Decode { token, .. } => token.as_deref(),
            _ => None,
        }
    }

    pub fn endpoint(&self) -> Option<Endpoint> {
        match self {
            Error::Api { endpoint, .. }
            | Error::Timeout { endpoint, .. }
            | Error::Connection { endpoint, .. }
            | Error::Decode { endpoint, .. } => Some(*endpoint),
            _ => None,
        }
    }

    /// Worth another attempt: 429, 500/502/503/504, timeouts and connection failures.
    pub fn is_retryable(&self) -> bool {
        match self {
            Error::Api { status, .. } => matches!(status, 429 | 500 | 502 | 503 | 504),
            Error::Timeout { .. } | Error::Connection { .. } => true,
            _ => false,
        }
    }

    pub fn with_token(mut self, new_token: &str) -> Self {
        if let Error::Decode { token, .. } = &mut self {
            *token = Some(new_token.to_string());
        }
        self
    }
}

pub fn status_kind(status: u16) -> &'static str {
    match status {
        400 => "bad_request",
        401 => "auth",
        402 => "request_failed",
        403 => "forbidden",
        404 => "not_found",
        409 => "conflict",
        429 => "rate_limited",
        500..=599 => "server",
        // Other 4xx have no class of their own in the contract; they are the caller's side.
        _ => "bad_request",
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Api { status, token, endpoint, body, retry_after } => {
                write!(f, "{} for token {:?} ({}): HTTP {}", status_hint(*status), token, endpoint.as_str(), status)?;
                if let Some(seconds) = retry_after {
                    write!(f, ", retry after {seconds}s")?;
                }
                if !body.is_empty() {
                    write!(f, ": {body}")?;
                }
                Ok(())
            }
            Error::Timeout { token, endpoint, message } => {
                write!(f, "timed out fetching token {:?} ({}): {message}", token, endpoint.as_str())
            }
            Error::Connection { token, endpoint, message } => {
                write!(f, "connection failed for token {:?} ({}): {message}", token, endpoint.as_str())
            }
            Error::Decode { token, endpoint, field, offset, message } => {
                write!(f, "could not decode the {} response", endpoint.as_str())?;
                if let Some(token) = token {
                    write!(f, " for token {token:?}")?;
                }
                if let Some(field) = field {
                    write!(f, " at field {field:?}")?;
                }
                if let Some(offset) = offset {
                    write!(f, " (byte {offset})")?;
                }
                write!(f, ": {message}")
            }
            Error::InvalidArgument(message) => f.write_str(message),
            Error::Internal(message) => write!(f, "internal error in defilens (please report it): {message}"),
        }
    }
}

fn status_hint(status: u16) -> &'static str {
    match status {
        400 => "bad request (a required parameter is missing)",
        401 => "authentication failed (no valid API key: set DEFILENS_API_KEY or pass api_key=)",
        402 => "request failed (parameters were valid but the request failed)",
        403 => "permission denied (the API key lacks permission)",
        404 => "not found (no such token)",
        409 => "conflict",
        429 => "rate limited (too many requests)",
        500..=599 => "server error (the service's fault)",
        _ => "unexpected status",
    }
}

impl std::error::Error for Error {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_and_retryability() {
        let api = |status| Error::Api {
            status,
            token: "t".into(),
            endpoint: Endpoint::Listing,
            body: String::new(),
            retry_after: None,
        };
        assert_eq!(api(401).kind(), "auth");
        assert_eq!(api(502).kind(), "server");
        assert!(api(429).is_retryable());
        assert!(api(503).is_retryable());
        assert!(!api(501).is_retryable());
        assert!(!api(404).is_retryable());
        let decode = Error::Decode {
            token: Some("eth".into()),
            endpoint: Endpoint::Markets,
            field: Some("price".into()),
            offset: Some(12),
            message: "bad".into(),
        };
        assert!(!decode.is_retryable());
        assert_eq!(
            decode.to_string(),
            "could not decode the markets response for token \"eth\" at field \"price\" (byte 12): bad"
        );
    }
}
