//! Listing bodies into the listing frames.
//!
//! One reader (`reader.rs` and `general_info.rs`, on the byte scanner) reads every valid body
//! whole, looking at each key once and routing it by the field catalogue (`routing.rs`): scalar
//! fields converted to their column type, interval-suffixed fields routed by the JSON type of
//! their value into the long frames, everything else skipped without being built. A value of
//! the wrong type becomes a null cell and a drift row; only a body that is not JSON fails, its
//! error worded by serde_json (`document.rs`). The rows of one body are collected first
//! (borrowing strings from the body) and appended here only when the whole body was read, so
//! a malformed body leaves no partial rows behind.

mod general_info;
mod pending;
mod reader;
#[cfg(test)]
pub(super) mod reference;
mod routing;

use std::borrow::Cow;

use super::document::DecodeContext;
use super::scanner::Scanner;
use crate::error::Error;
use crate::frames::{DriftRow, ListingColumns, ListingFrames, ListingRows};
use crate::model::value::{excerpt, Mismatch, Typed};
use crate::model::Endpoint;
use pending::PendingListing;
use reader::{read_listing, KeyShape};

/// One listing response body and what is known about it.
#[derive(Clone, Copy, Debug)]
pub struct ListingBody<'a> {
    pub body: &'a [u8],
    /// The id the caller asked for; `None` takes the body's `data.id`.
    pub token: Option<&'a str>,
    pub fetched_at: Option<i64>,
}

/// Parses listing bodies into the columns of the listing frames.
pub struct ListingBuilder {
    columns: ListingColumns,
    /// The row buffers of the last body, emptied, for the next.
    spare_rows: Option<ListingRows<'static>>,
    shape: KeyShape,
    /// See `misrouted`.
    misrouted: Option<String>,
}

impl ListingBuilder {
    /// `tokens` is a capacity hint: the number of bodies expected.
    pub fn new(tokens: usize) -> Self {
        Self { columns: ListingColumns::new(tokens), spare_rows: None, shape: KeyShape::default(), misrouted: None }
    }

    /// Parses one listing body and appends its rows. Returns the token the rows carry.
    /// On error nothing is appended.
    pub fn append(&mut self, input: &ListingBody<'_>) -> Result<String, Error> {
        let context = DecodeContext { endpoint: Endpoint::Listing, token: input.token, body: input.body };
        let rows = self.spare_rows.take().map_or_else(ListingRows::default, ListingRows::recycle);
        let mut pending = PendingListing::new(rows);
        let mut scanner = Scanner::new(input.body);
        if read_listing(&mut scanner, &mut pending, &mut self.shape).is_none() {
            let error = context.invalid(scanner.failure(), &pending.field);
            self.spare_rows = Some(pending.rows.recycle());
            return Err(error);
        }
        self.finish_body(&context, input, pending)
    }

    /// The rows of a body that was read whole, appended.
    fn finish_body(
        &mut self,
        context: &DecodeContext<'_>,
        input: &ListingBody<'_>,
        mut pending: PendingListing<'_>,
    ) -> Result<String, Error> {
        if !pending.saw_data {
            return Err(context.error(None, None, "the response has no `data` object"));
        }
        let token: Cow<'_, str> = match (input.token, pending.rows.id()) {
            (Some(token), _) => Cow::Borrowed(token),
            (None, Typed::Str(id)) if !id.is_empty() => id.clone(),
            (None, _) => {
                return Err(context.error(
                    Some("data.id".into()),
                    None,
                    "the body has no `data.id`, so pass token_id= to name the token",
                ))
            }
        };
        let token = token.into_owned();
        self.misrouted = None;
        if let (Some(asked), Typed::Str(id)) = (input.token, pending.rows.id()) {
            // The body names another token than the one asked for (a proxy or cache answered
            // for the wrong path): the rows are kept under the id asked for, and a drift row and
            // the log say so, so it is never recorded silently under the wrong token.
            let same = |other: &Typed<'_>| matches!(other, Typed::Str(text) if text.eq_ignore_ascii_case(asked));
            if !id.is_empty() && !same(pending.rows.id()) && !same(pending.rows.symbol_id()) {
                self.misrouted = Some(id.to_string());
                let mismatch = Mismatch { expected: "the id that was asked for", found: excerpt(id) };
                pending.rows.drift.push(DriftRow { field: "data.id".into(), mismatch });
            }
        }
        self.columns.append(&token, input.fetched_at, &mut pending.rows);
        self.spare_rows = Some(pending.rows.recycle());
        Ok(token)
    }

    /// Appends rows read another way (the reference of the property tests), as `append` would.
    #[cfg(test)]
    pub(super) fn append_rows(
        &mut self,
        input: &ListingBody<'_>,
        saw_data: bool,
        rows: ListingRows<'_>,
    ) -> Result<String, Error> {
        let context = DecodeContext { endpoint: Endpoint::Listing, token: input.token, body: input.body };
        let mut pending = PendingListing::new(rows);
        pending.saw_data = saw_data;
        self.finish_body(&context, input, pending)
    }

    pub fn finish(self) -> ListingFrames {
        self.columns.finish()
    }

    /// The `data.id` of the body just appended when it names another token than the one asked
    /// for (its rows went under the id asked for, with a drift row).
    pub fn misrouted(&self) -> Option<&str> {
        self.misrouted.as_deref()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frames::test_columns::{floats, strings};
    use crate::model::fields::SNAPSHOT_FIELDS;

    const LISTING: &str = r#"{
      "data": {
        "id": "bitcoin", "symbol": "BTC", "name": "Bitcoin",
        "categories": ["Layer 1", "PoW"], "is_active": true,
        "last_updated": "2024-05-01T12:34:56.789Z", "ohlc_updated_time": "",
        "current_price": "64000.5", "market_cap_rank": 1, "number_of_holders": null,
        "price_percent_change_1h": 0.25, "open_interest_change_4h": -1.5,
        "rsi14_1h": 55.5, "rsi7_5m": null, "sma20_24h": "63000",
        "macd_1h": "Cross Above", "macd_5m": 0.5,
        "tripple_pattern_1h": ["three_white_soldiers"], "single_pattern_1h": [],
        "wedge_pattern_4h": ["Wedge Up", null, "Falling Wedge"],
        "ta_1h_updated_at": "2024-05-01 12:00:00+00",
        "ema50_1h": 61000.0, "trend_1w": "up", "flag_pattern_15m": ["Bull Flag"],
        "mystery_1h": true, "something_else": {"nested": [1, 2]}
      },
      "generalInfo": {
        "description": "Digital gold.", "websites": ["https://bitcoin.org"],
        "explorers": [], "community": {"twitter": "https://x.com/bitcoin", "reddit": null},
        "chains": [{"name": "bitcoin"}], "categories": ["Layer 1"]
      }
    }"#;

    fn parse(body: &str, token: Option<&str>) -> Result<ListingFrames, Error> {
        let mut builder = ListingBuilder::new(1);
        builder.append(&ListingBody { body: body.as_bytes(), token, fetched_at: Some(7) })?;
        Ok(builder.finish())
    }

    #[test]
    fn snapshot_holds_typed_scalars_and_market_figures() {
        let frames = parse(LISTING, None).unwrap();
        let snapshot = &frames.snapshot;
        assert_eq!(snapshot.height(), 1);
        assert_eq!(strings(snapshot, "token"), vec![Some("bitcoin".into())]);
        assert_eq!(floats(snapshot, "current_price"), vec![Some(64000.5)]);
        assert_eq!(floats(snapshot, "price_percent_change_1h"), vec![Some(0.25)]);
        assert_eq!(floats(snapshot, "open_interest_change_4h"), vec![Some(-1.5)]);
        assert_eq!(floats(snapshot, "number_of_holders"), vec![None]);
        assert_eq!(snapshot.column("market_cap_rank").unwrap().i64().unwrap().get(0), Some(1));
        let updated = snapshot.column("last_updated").unwrap().datetime().unwrap().physical().get(0);
        assert_eq!(updated, Some(1_714_566_896_789));
        assert_eq!(snapshot.column("ohlc_updated_time").unwrap().null_count(), 1);
        assert_eq!(snapshot.column("fetched_at").unwrap().datetime().unwrap().physical().get(0), Some(7));
        assert_eq!(snapshot.width(), 2 + SNAPSHOT_FIELDS.len());
    }

    #[test]
    fn suffixed_fields_are_routed_by_json_type() {
        let frames = parse(LISTING, Some("btc")).unwrap();
        let indicators = &frames.indicators;
        assert_eq!(
            strings(indicators, "indicator"),
            ["rsi14", "rsi7", "sma20", "macd", "ema50"].map(|s| Some(s.to_string())).to_vec()
        );
        assert_eq!(
            strings(indicators, "interval"),
            ["1h", "5m", "24h", "5m", "1h"].map(|s| Some(s.to_string())).to_vec()
        );
        assert_eq!(floats(indicators, "value"), vec![Some(55.5), None, Some(63000.0), Some(0.5), Some(61000.0)]);
        assert_eq!(strings(indicators, "token")[0].as_deref(), Some("btc"));

        let signals = &frames.signals;
        assert_eq!(strings(signals, "indicator"), vec![Some("macd".into()), Some("trend".into())]);
        assert_eq!(strings(signals, "value"), vec![Some("Cross Above".into()), Some("up".into())]);

        let patterns = &frames.patterns;
        assert_eq!(
            strings(patterns, "family"),
            ["triple", "wedge", "wedge", "flag"].map(|s| Some(s.to_string())).to_vec()
        );
        assert_eq!(
            strings(patterns, "pattern"),
            ["three_white_soldiers", "Wedge Up", "Falling Wedge", "Bull Flag"].map(|s| Some(s.to_string())).to_vec()
        );
        assert_eq!(strings(&frames.ta_updated, "interval"), vec![Some("1h".into())]);
    }

    #[test]
    fn info_has_one_row_with_links_and_compact_chains() {
        let frames = parse(LISTING, None).unwrap();
        let info = &frames.info;
        assert_eq!(info.height(), 1);
        assert_eq!(strings(info, "twitter"), vec![Some("https://x.com/bitcoin".into())]);
        assert_eq!(strings(info, "reddit"), vec![None]);
        assert_eq!(strings(info, "telegram"), vec![None]);
        let chains = info.column("chains").unwrap().list().unwrap().get_as_series(0).unwrap();
        assert_eq!(chains.str().unwrap().get(0), Some(r#"{"name":"bitcoin"}"#));
    }

    #[test]
    fn malformed_bodies_name_the_field_and_leave_no_rows() {
        let mut builder = ListingBuilder::new(2);
        let bad = r#"{"data": {"id": "x", "rsi14_1h": 50, "current_price": tru}}"#;
        let error = builder.append(&ListingBody { body: bad.as_bytes(), token: None, fetched_at: None }).unwrap_err();
        match &error {
            Error::Decode { field, offset, .. } => {
                assert_eq!(field.as_deref(), Some("data.current_price"));
                assert!(offset.is_some());
            }
            other => panic!("unexpected {other:?}"),
        }
        let truncated = &LISTING[..LISTING.len() / 2];
        assert!(builder
            .append(&ListingBody { body: truncated.as_bytes(), token: Some("t"), fetched_at: None })
            .is_err());
        for body in ["[]", "null", "{}", r#"{"data": null}"#, r#"{"data": []}"#, r#"{"data": "bitcoin"}"#] {
            assert!(
                builder.append(&ListingBody { body: body.as_bytes(), token: Some("t"), fetched_at: None }).is_err(),
                "{body}"
            );
        }
        let frames = builder.finish();
        assert_eq!(frames.snapshot.height(), 0);
        assert_eq!(frames.indicators.height(), 0);
    }

    #[test]
    fn values_that_do_not_fit_become_drift_rows_and_the_rest_lands() {
        let body = r#"{"data": {"id": "x", "current_price": "N/A", "github_commit": 12.5, "market_cap_rank": 933.0,
            "categories": "Layer 1", "last_updated": "yesterday", "rsi14_1h": true, "rsi7_1h": 55,
            "single_pattern_1h": [3, "doji"], "macd_1h": ["a"], "rsi14_1m": 40, "ta_2h_updated_at": "x",
            "ta_1h_updated_at": 5},
            "generalInfo": {"description": 5, "community": "none", "chains": {"a": 1}, "websites": ["w"]}}"#;
        let frames = parse(body, None).unwrap();
        assert_eq!(frames.snapshot.height(), 1);
        assert_eq!(floats(&frames.snapshot, "current_price"), vec![None]);
        assert_eq!(frames.snapshot.column("market_cap_rank").unwrap().i64().unwrap().get(0), Some(933));
        assert_eq!(frames.snapshot.column("github_commit").unwrap().null_count(), 1);
        assert_eq!(floats(&frames.indicators, "value"), vec![Some(55.0)]);
        assert_eq!(frames.ta_updated.height(), 1);
        // A number where text belongs is kept as its text: nothing is lost.
        assert_eq!(strings(&frames.info, "description"), vec![Some("5".into())]);
        assert_eq!(frames.info.column("websites").unwrap().list().unwrap().get_as_series(0).unwrap().len(), 1);
        let fields: Vec<_> = strings(&frames.drift, "field").into_iter().flatten().collect();
        assert_eq!(
            fields,
            [
                "data.current_price",
                "data.github_commit",
                "data.categories",
                "data.last_updated",
                "data.rsi14_1h",
                "data.single_pattern_1h",
                "data.macd_1h",
                "data.rsi14_1m",
                "data.ta_2h_updated_at",
                "data.ta_1h_updated_at",
                "generalInfo.community",
                "generalInfo.chains",
            ]
        );
        let found: Vec<_> = strings(&frames.drift, "found").into_iter().flatten().collect();
        assert_eq!(&found[..3], ["\"N/A\"", "12.5", "\"Layer 1\""]);
        assert_eq!(found[7], "the interval \"1m\"");
        assert_eq!(strings(&frames.drift, "token")[0].as_deref(), Some("x"));
        let fetched_at = frames.drift.column("fetched_at").unwrap().datetime().unwrap().physical().get(0);
        assert_eq!(fetched_at, Some(7));
    }

    #[test]
    fn chains_keep_the_services_text_and_key_order() {
        let body = r#"{"data": {"id": "x"}, "generalInfo": {"chains": [{"z": 1, "a": "b c"}, {"name": "eth"}]}}"#;
        let frames = parse(body, None).unwrap();
        let chains = frames.info.column("chains").unwrap().list().unwrap().get_as_series(0).unwrap();
        let chains: Vec<_> = chains.str().unwrap().iter().flatten().collect();
        assert_eq!(chains, [r#"{"z":1,"a":"b c"}"#, r#"{"name":"eth"}"#]);
    }

    #[test]
    fn a_body_without_id_needs_a_token() {
        let body = r#"{"data": {"rsi14_1h": 50}}"#;
        assert!(parse(body, None).is_err());
        assert_eq!(parse(body, Some("x")).unwrap().indicators.height(), 1);
    }
}
