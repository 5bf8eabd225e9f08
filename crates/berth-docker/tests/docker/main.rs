//! berth-docker against the real Docker engine and the fixture registry.
//!
//! Needs a running engine and the fixtures that `scripts/test` prepares (a local registry and
//! images pushed to it, named by the `BERTH_TEST_*` variables). Every object a test makes is
//! named `<BERTH_TEST_PREFIX>-drv-<test>.<what>`, labelled `berth.prefix=<BERTH_TEST_PREFIX>`,
//! and removed when the test ends, whether it passed or not.

mod common;

mod connect;
mod containers;
mod events;
mod exec;
mod images;
mod layers;
mod networks;
mod probe;
mod volumes;
