//! A Compose file read as berth.toml instances, for `berth init --from compose.yaml`: each
//! service with an image becomes an instance (its environment and env files as references, its
//! named volumes, command, healthcheck as an exec ready check, the ports it publishes as
//! connect variables), and everything the contract refuses or berth.toml has no place for is
//! left out, named with why. A service that cannot be converted (an env file missing or
//! outside the repository, a key of the wrong type) is left out on its own; the rest is
//! converted. The caller pins the images.
//!
//! The file is read as a hostile one could be written (`bounds` first, `envfile` for every file
//! read), parsed as YAML with its `<<` merge keys applied, then interpolated as Compose does
//! (`${VAR}` from the shell and `.env`) except where berth.toml keeps a reference instead of a
//! value (`environment`, `command`, a healthcheck's test): no value of the shell, `.env` or an
//! env file is written into berth.toml.
//!
//! Files, bottom up: `names` (instance and volume names, the rename rule), `bounds` (nesting),
//! `reasons` (why a key is left out), `environment` (a service's environment), `service` (one
//! service), `connect` (its connect variables), `table` (an instance as berth.toml's table),
//! `convert` (the whole file), on `model` (what a conversion is made of). This file only
//! declares them and re-exports what the command uses.

mod bounds;
mod connect;
mod convert;
mod environment;
mod model;
mod names;
mod reasons;
mod service;
mod table;

pub use convert::convert;
pub use model::{COMPOSE_FILES, Inputs, LeftOut, Ready};
