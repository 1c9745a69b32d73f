//! The client packages (`clients/python`, `clients/typescript`) against the real `sked`
//! binary: each installed as its users install it (a fresh virtualenv, an npm project), its
//! own tests and its README's quick start, and traces through it; and the repository README's
//! quick start, which builds and installs `sked`. A binary of its own, after
//! the `cli` tests: the installs from the package registries load the machine, and the `cli`
//! tests measure read times.

#[path = "../common/mod.rs"]
mod common;

mod client_packages;
mod otel;
mod python_client;
mod readme_quick_start;
mod typescript_client;
