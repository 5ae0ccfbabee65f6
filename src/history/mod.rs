//! The history a `collect` writes on disk: what needs the operating system rather than polars.

pub mod swap;
