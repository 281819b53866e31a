//! Test support, compiled only for tests and the `testing` feature.
