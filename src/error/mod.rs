//! The one error type of the crate. The bindings map it once onto the Python hierarchy
//! (`DefiLensError` and its subclasses); the `kind` strings are the ones in the `log` frame.

mod status;

use std::fmt;

use crate::model::Endpoint;
pub use status::{carries_retry_after, is_retryable_status, StatusClass};

#[derive(Clone, Debug, PartialEq)]
pub enum Error {
    /// The service answered with a non-2xx status.
    Api {
        status: u16,
        token: String,
        endpoint: Endpoint,
        /// A short excerpt of the response body.
        body: String,
        /// Seconds from a `Retry-After` header, on the statuses that carry one
        /// (`status::carries_retry_after`).
        retry_after: Option<f64>,
        /// Whether the request carried an API key (a 401 then means the key was rejected).
        key_sent: bool,
    },
    /// No response within the timeout.
    Timeout { token: String, endpoint: Endpoint, message: String },
    /// The connection failed, was dropped, or the body was cut short.
    Connection { token: String, endpoint: Endpoint, message: String },
    /// A 2xx body that is not the documented JSON shape.
    Decode { token: Option<String>, endpoint: Endpoint, field: Option<String>, offset: Option<usize>, message: String },
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
            Error::Api { status, .. } => StatusClass::of(*status).meaning().kind,
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
            Error::Api { token, .. } | Error::Timeout { token, .. } | Error::Connection { token, .. } => Some(token),
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
            Error::Api { status, .. } => is_retryable_status(*status),
            Error::Timeout { .. } | Error::Connection { .. } => true,
            _ => false,
        }
    }

    /// The name of the exception class `error` is raised as (in `defilens._exceptions`);
    /// invalid arguments are the caller's `ValueError` and have none.
    pub fn exception_class(&self) -> Option<&'static str> {
        Some(match self {
            Error::Api { status, .. } => StatusClass::of(*status).meaning().exception,
            Error::Timeout { .. } => "TimeoutError",
            Error::Connection { .. } => "ConnectionError",
            Error::Decode { .. } => "DecodeError",
            Error::Internal(_) => "DefiLensError",
            Error::InvalidArgument(_) => return None,
        })
    }

    pub fn with_token(mut self, new_token: &str) -> Self {
        if let Error::Decode { token, .. } = &mut self {
            *token = Some(new_token.to_string());
        }
        self
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Api { status, token, endpoint, body, retry_after, key_sent } => {
                write!(
                    f,
                    "{} for token {:?} ({}): HTTP {}",
                    StatusClass::of(*status).meaning().hint,
                    token,
                    endpoint.as_str(),
                    status
                )?;
                if *status == 401 {
                    f.write_str(if *key_sent {
                        " (the service rejected the API key that was sent: check it)"
                    } else {
                        " (no API key was sent: set DEFILENS_API_KEY, or pass api_key= in Python or --api-key on \
                         the command line)"
                    })?;
                }
                if let Some(seconds) = retry_after {
                    write!(f, ", retry after {seconds}s")?;
                }
                let hint = StatusClass::of(*status).meaning().hint;
                match service_says(body) {
                    // The service's "not found" after our "not found (no such token)" says nothing more.
                    Some(said) if !hint.to_lowercase().starts_with(&said.to_lowercase()) => write!(f, ": {said}"),
                    _ => Ok(()),
                }
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

impl std::error::Error for Error {}

/// What an error body says, for a message: the text of a JSON object's `error`, `message` or
/// `detail` (`{"error": "not found (did you mean ethereum?)"}` says the part after the colon), or
/// the excerpt as it came when it is something else; `None` for an empty one. `APIError.body`
/// keeps the excerpt itself.
fn service_says(body: &str) -> Option<String> {
    let body = body.trim();
    if body.is_empty() {
        return None;
    }
    let said = serde_json::from_str::<serde_json::Value>(body).ok().and_then(|value| {
        ["error", "message", "detail"]
            .iter()
            .find_map(|key| value.get(key)?.as_str().map(|text| text.trim().to_string()))
    });
    Some(said.unwrap_or_else(|| body.to_string())).filter(|text| !text.is_empty())
}

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
            key_sent: false,
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

    #[test]
    fn an_error_body_is_said_in_words_not_as_json() {
        let not_found = |body: &str| {
            Error::Api {
                status: 404,
                token: "etherum".into(),
                endpoint: Endpoint::Listing,
                body: body.into(),
                retry_after: None,
                key_sent: true,
            }
            .to_string()
        };
        let plain = "not found (no such token) for token \"etherum\" (listing): HTTP 404";
        assert_eq!(not_found(r#"{"error": "not found"}"#), plain);
        assert_eq!(not_found(""), plain);
        assert_eq!(
            not_found(r#"{"error": "not found (did you mean ethereum?)"}"#),
            format!("{plain}: not found (did you mean ethereum?)")
        );
        assert_eq!(not_found(r#"{"message": "no such coin"}"#), format!("{plain}: no such coin"));
        assert_eq!(not_found("<html>gone</html>"), format!("{plain}: <html>gone</html>"));
        assert_eq!(not_found(r#"{"code": 7}"#), format!("{plain}: {{\"code\": 7}}"));
    }
}
