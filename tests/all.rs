//! One integration test binary (faster to build and to copy for the
//! unprivileged pass in `scripts/test`).

mod suite;
