//! The copy controller: finishes the copy operations the service records (snapshot, branch,
//! restore), and after a crash redoes them from the start or cleans up after them.
//!
//! A copy writes only into volumes it makes fresh, labelled with its id. Before it writes, it
//! removes any volume of those names that a previous attempt of the same copy left (they carry
//! its id: no instance ever mounted them) and makes them again, empty. The instance a branch
//! or a restore fills mounts them only once the copy is recorded done, and the instance
//! controller does not start an instance while a copy fills it. So a half-written volume is
//! never used.
//!
//! A running source is frozen (`pause`) for exactly as long as its volumes are copied, which
//! leaves them as a power cut would (crash-consistent); its state stays `running`. With one
//! volume, the runtime holds the freeze only while the bytes move (its helpers are made before
//! and removed after); with several, one freeze is held around them all, so they agree with each
//! other. A running source that stands on layers already is frozen only while its upper layers
//! are copied (`uppers`); one that does not moves onto layers with a stop (`moves`).
//!
//! Copies are scheduled fairly. Copies of different instances run side by side, at most
//! `slots::COPIES_AT_ONCE` of them; copies that touch the same instance (as source or target) run one
//! at a time, in the order they were asked. When a slot frees, the next copy to begin is the
//! first one asked of the domain with the fewest copies running, and among those the one served
//! least recently: one domain's long queue delays another domain's copy by at most one copy's
//! start. A copy waiting for its turn has begun nothing: a restore's instance keeps running until
//! its copy begins (the instance controller holds a restore's target stopped only once this
//! controller says it began).

mod controller;
mod flatten;
mod give_up;
mod kinds;
mod layers;
mod moves;
mod slots;
mod uppers;
mod volumes;

pub(crate) use controller::*;
