//! The one tokio runtime of the process, built on first use and shared by every client and
//! every Sandbox.

use std::sync::LazyLock;

use tokio::runtime::{Builder, Runtime};

static RUNTIME: LazyLock<Runtime> = LazyLock::new(|| {
    Builder::new_multi_thread()
        .enable_all()
        .thread_name("defilens-io")
        .build()
        .expect("could not start the tokio runtime")
});

pub fn runtime() -> &'static Runtime {
    &RUNTIME
}
