//! The `log` frame: one row per HTTP exchange.

use polars::prelude::*;

use super::columns::{bool_column, f64_column, frame, i64_column, millis_column, str_builder};

/// One HTTP exchange as recorded in the `log` frame.
#[derive(Clone, Debug)]
pub struct LogRecord {
    pub token: String,
    pub endpoint: &'static str,
    pub ok: bool,
    pub status: Option<u16>,
    pub kind: Option<&'static str>,
    pub message: Option<String>,
    pub attempts: u32,
    pub elapsed_ms: f64,
    pub total: Option<i64>,
    pub fetched_at: Option<i64>,
    /// Served from the client's cache; `fetched_at` is then the time of the reused response.
    pub cached: bool,
}

pub fn log_frame(records: &[LogRecord]) -> DataFrame {
    let n = records.len();
    let mut token = str_builder("token", n);
    let mut endpoint = str_builder("endpoint", n);
    let mut kind = str_builder("kind", n);
    let mut message = str_builder("message", n);
    for r in records {
        token.append_value(&r.token);
        endpoint.append_value(r.endpoint);
        kind.append_option(r.kind);
        message.append_option(r.message.as_deref());
    }
    frame(vec![
        token.finish().into_column(),
        endpoint.finish().into_column(),
        bool_column("ok", records.iter().map(|r| r.ok).collect()),
        i64_column("status", records.iter().map(|r| r.status.map(i64::from)).collect()),
        kind.finish().into_column(),
        message.finish().into_column(),
        i64_column("attempts", records.iter().map(|r| Some(i64::from(r.attempts))).collect()),
        f64_column("elapsed_ms", records.iter().map(|r| Some(r.elapsed_ms)).collect()),
        i64_column("total", records.iter().map(|r| r.total).collect()),
        millis_column("fetched_at", records.iter().map(|r| r.fetched_at).collect()),
        bool_column("cached", records.iter().map(|r| r.cached).collect()),
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_log_has_its_schema() {
        let log = log_frame(&[]);
        assert_eq!(log.height(), 0);
        assert_eq!(log.width(), 11);
        assert_eq!(
            log.column("fetched_at").unwrap().dtype(),
            &DataType::Datetime(TimeUnit::Milliseconds, Some(TimeZone::UTC))
        );
    }
}
