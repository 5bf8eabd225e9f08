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
//! 1. `units` (CPU and memory as written: `parse_cpu`, `parse_size`), `template` (the
//!    `connect` templates: `expand` and the `{host}`/`{port}`/`{port:N}` placeholders),
//!    `interpolate` (`${VAR}` references, Compose's and berth.toml's) and `envfile` (the files a
//!    project names, read as a hostile one could be written; text made safe to print), which
//!    use nothing else here; `presets` (the services `berth init --with` knows, and the tables
//!    `berth add` writes), whose tests alone use `checker`;
//! 2. `definition`: `Scope`, `ReadyDef`, `InstanceDef`, the defaults and the field list, and what
//!    an instance becomes (its spec, the field a decoder problem names, its `connect` values);
//!    uses `template`;
//! 3. `reading`: the `Checker` that collects problems at their lines, the typed reads of a value
//!    and `ProjectErrors`; `fields`: the check of each instance field, a `Checker` method each,
//!    over `reading`, `definition` and `units`; `checker`: `parse` and `parse_project` (the
//!    instances, then each with the contract's decoder, and `[retention]`), over all of the
//!    above;
//! 4. `file`: `Project`, loaded from disk, its `env_file` and `${VAR}` references resolved for
//!    the spec, and selected from by name; uses `checker`, `definition`, `envfile` and
//!    `interpolate`.
//!
//! Beside them, `compose` (a Compose file read as instances for `berth init --from`, with what
//! it leaves out and why) uses `presets` (a known image's ready check), `interpolate` and
//! `envfile`: what it writes is checked by `checker` as any berth.toml is, by the command that
//! writes it.
//!
//! This file only declares them and re-exports what the rest of the binary uses as
//! `crate::project::...`; the other `pub` items (`parse`, `ReadyDef`, the defaults, `FIELDS`,
//! `expand`, `parse_cpu`, `parse_size`) are public to the files here, and a re-export of them
//! would be an unused import until something outside needs one.

mod checker;
pub mod compose;
mod definition;
pub mod envfile;
mod fields;
mod file;
mod interpolate;
pub mod presets;
mod reading;
mod template;
mod units;

pub use checker::parse;
pub use definition::{InstanceDef, MAX_KEEP_ARCHIVED_DAYS, MAX_KEEP_BEFORE_RESTORE, Scope};
pub use file::Project;
pub use reading::ProjectErrors;
