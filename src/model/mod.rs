//! What the service's responses mean, independent of how they are read or stored: the two
//! endpoints, the candle intervals, the field catalogue, and the conversion of JSON values and
//! timestamps to column types.

pub mod duration;
pub mod fields;
pub mod indicators;
pub mod interval;
pub mod timestamp;
pub mod value;

#[cfg_attr(not(any(feature = "python", feature = "sandbox")), allow(unused_imports))]
pub use interval::INTERVAL_MS;
pub use interval::{Interval, INTERVALS};

/// The header that carries the API key on every request.
pub const KEY_HEADER: &str = "x-partner-key";

/// The service's two GET endpoints.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Endpoint {
    Listing,
    Markets,
}

impl Endpoint {
    /// The name in the `log` frame and in `Frames.raw`.
    pub fn as_str(self) -> &'static str {
        match self {
            Endpoint::Listing => "listing",
            Endpoint::Markets => "markets",
        }
    }

    pub fn from_name(name: &str) -> Option<Self> {
        match name {
            "listing" => Some(Endpoint::Listing),
            "markets" => Some(Endpoint::Markets),
            _ => None,
        }
    }

    /// The path before the token id.
    pub fn path_prefix(self) -> &'static str {
        match self {
            Endpoint::Listing => "/listings/",
            Endpoint::Markets => "/listings/market/",
        }
    }
}

/// One body of each endpoint with every key of the wire format in the service's order: seeds
/// for the tests.
#[cfg(test)]
pub mod samples {
    pub const LISTING: &[u8] = include_bytes!("samples/listing.json");
    pub const MARKETS: &[u8] = include_bytes!("samples/markets.json");
}
