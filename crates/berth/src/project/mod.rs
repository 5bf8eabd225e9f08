//! `berth.toml`: the instances a repository runs, one `[instances.NAME]` table each.
//!
//! The file is read with spans kept for every key and value, so each problem is reported as
//! `berth.toml:LINE: instances.NAME.FIELD ...`, all of them at once, before anything is sent to
//! the daemon. Each instance is then turned into the contract's spec and checked with the same
//! decoder the daemon runs ([`berth_core::spec::decode_spec`]), its refusals mapped back to the
//! field they came from.
//!
//! Layers, bottom up; a file uses only files below it, never one above:
//!
//! 1. `units` (CPU and memory as written: `parse_cpu`, `parse_size`) and `template` (the
//!    `connect` templates: `expand` and the `{host}`/`{port}`/`{port:N}` placeholders), which
//!    use neither each other nor anything else here; `presets` (the services `berth init
//!    --with` knows, and the tables `berth add` writes), whose tests alone use `checker`;
//! 2. `definition`: `Scope`, `ReadyDef`, `InstanceDef`, the defaults and the field list, and what
//!    an instance becomes (its spec, the field a decoder problem names, its `connect` values);
//!    uses `template`;
//! 3. `checker`: `parse`, the field-by-field checks and `ProjectErrors`; uses all of the above;
//! 4. `file`: `Project`, loaded from disk and selected from by name; uses `checker` and
//!    `definition`.
//!
//! Beside them, `compose` (a Compose file read as instances for `berth init --from`, with what
//! it leaves out and why) uses only `presets` (a known image's ready check): what it writes is
//! checked by `checker` as any berth.toml is, by the command that writes it.
//!
//! This file only declares them and re-exports what the rest of the binary uses as
//! `crate::project::...`; the other `pub` items (`parse`, `ReadyDef`, the defaults, `FIELDS`,
//! `expand`, `parse_cpu`, `parse_size`) are public to the files here, and a re-export of them
//! would be an unused import until something outside needs one.

mod checker;
pub mod compose;
mod definition;
pub mod envfile;
mod file;
mod interpolate;
pub mod presets;
mod template;
mod units;

pub use checker::{ProjectErrors, parse};
pub use definition::{InstanceDef, Scope};
pub use file::Project;
