//! Only for CI's shared build: when DEFILENS_TEST_LIBPYTHON names a libpython, the crate's test
//! binary links it, so the Rust tests can be built with the wheel's features and environment
//! (and reuse every dependency maturin compiled, polars included) instead of compiling polars a
//! second time. The tests never start Python; the library only resolves pyo3's symbols.
fn main() {
    println!("cargo::rerun-if-env-changed=DEFILENS_TEST_LIBPYTHON");
    if let Ok(library) = std::env::var("DEFILENS_TEST_LIBPYTHON") {
        let path = std::path::Path::new(&library);
        if let Some(dir) = path.parent() {
            println!("cargo::rustc-link-arg=-Wl,-rpath,{}", dir.display());
        }
        println!("cargo::rustc-link-arg={library}");
    }
}
