//! The `log` frame: one row per HTTP exchange.

use polars::prelude::*;

use super::columns::{f64_builder, finish_millis, finish_primitive, frame, i64_builder, str_builder};

/// One HTTP exchange as recorded in the `log` frame.
#[derive(Clone, Debug)]
pub struct LogRecord<'a> {
    pub token: &'a str,
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

/// The columns of the `log` frame, a row appended per exchange as it is parsed: a batch of
/// 20,000 ids never holds its records and the frame at once.
pub struct LogColumns {
    token: StringChunkedBuilder,
    endpoint: StringChunkedBuilder,
    ok: BooleanChunkedBuilder,
    status: PrimitiveChunkedBuilder<Int64Type>,
    kind: StringChunkedBuilder,
    message: StringChunkedBuilder,
    attempts: PrimitiveChunkedBuilder<Int64Type>,
    elapsed_ms: PrimitiveChunkedBuilder<Float64Type>,
    total: PrimitiveChunkedBuilder<Int64Type>,
    fetched_at: PrimitiveChunkedBuilder<Int64Type>,
    cached: BooleanChunkedBuilder,
}

impl LogColumns {
    /// `capacity` is a hint: the number of exchanges expected.
    pub fn new(capacity: usize) -> Self {
        Self {
            token: str_builder("token", capacity),
            endpoint: str_builder("endpoint", capacity),
            ok: BooleanChunkedBuilder::new(PlSmallStr::from_static("ok"), capacity),
            status: i64_builder("status", capacity),
            kind: str_builder("kind", capacity),
            message: str_builder("message", capacity),
            attempts: i64_builder("attempts", capacity),
            elapsed_ms: f64_builder("elapsed_ms", capacity),
            total: i64_builder("total", capacity),
            fetched_at: i64_builder("fetched_at", capacity),
            cached: BooleanChunkedBuilder::new(PlSmallStr::from_static("cached"), capacity),
        }
    }

    pub fn push(&mut self, record: &LogRecord<'_>) {
        self.token.append_value(record.token);
        self.endpoint.append_value(record.endpoint);
        self.ok.append_value(record.ok);
        self.status.append_option(record.status.map(i64::from));
        self.kind.append_option(record.kind);
        self.message.append_option(record.message.as_deref());
        self.attempts.append_value(i64::from(record.attempts));
        self.elapsed_ms.append_value(record.elapsed_ms);
        self.total.append_option(record.total);
        self.fetched_at.append_option(record.fetched_at);
        self.cached.append_value(record.cached);
    }

    pub fn finish(self) -> DataFrame {
        frame(vec![
            self.token.finish().into_column(),
            self.endpoint.finish().into_column(),
            self.ok.finish().into_column(),
            finish_primitive(self.status).into_column(),
            self.kind.finish().into_column(),
            self.message.finish().into_column(),
            finish_primitive(self.attempts).into_column(),
            finish_primitive(self.elapsed_ms).into_column(),
            finish_primitive(self.total).into_column(),
            finish_millis(self.fetched_at),
            self.cached.finish().into_column(),
        ])
    }
}

/// The `log` frame of `records`.
pub fn log_frame(records: &[LogRecord<'_>]) -> DataFrame {
    let mut columns = LogColumns::new(records.len());
    for record in records {
        columns.push(record);
    }
    columns.finish()
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

    #[test]
    fn rows_read_back_as_recorded() {
        let record = |token: &'static str, ok: bool| LogRecord {
            token,
            endpoint: "listing",
            ok,
            status: ok.then_some(200),
            kind: (!ok).then_some("timeout"),
            message: (!ok).then(|| "timed out".into()),
            attempts: 2,
            elapsed_ms: 1.5,
            total: None,
            fetched_at: Some(7),
            cached: false,
        };
        let log = log_frame(&[record("a", true), record("b", false)]);
        let column = |name: &str| log.column(name).unwrap().as_materialized_series().clone();
        assert_eq!(column("token").str().unwrap().iter().collect::<Vec<_>>(), [Some("a"), Some("b")]);
        assert_eq!(column("ok").bool().unwrap().iter().collect::<Vec<_>>(), [Some(true), Some(false)]);
        assert_eq!(column("status").i64().unwrap().iter().collect::<Vec<_>>(), [Some(200), None]);
        assert_eq!(column("kind").str().unwrap().iter().collect::<Vec<_>>(), [None, Some("timeout")]);
        assert_eq!(column("message").str().unwrap().iter().collect::<Vec<_>>(), [None, Some("timed out")]);
        assert_eq!(column("attempts").i64().unwrap().iter().collect::<Vec<_>>(), [Some(2), Some(2)]);
        assert_eq!(column("elapsed_ms").f64().unwrap().iter().collect::<Vec<_>>(), [Some(1.5), Some(1.5)]);
        assert_eq!(column("total").null_count(), 2);
        assert_eq!(column("cached").bool().unwrap().iter().collect::<Vec<_>>(), [Some(false), Some(false)]);
    }
}
