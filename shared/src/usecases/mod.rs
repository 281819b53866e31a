//! Use cases: what threadbox does, written against the ports only.
