//! The engine's volume sizes as the page last measured them, kept a short while: the engine
//! walks every volume to measure them.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::time::Timestamp;

/// How long measured volume sizes are reused.
pub(super) const SIZE_CACHE_FOR: Duration = Duration::from_secs(10);

/// The engine's volume sizes, measured on demand and kept for [`SIZE_CACHE_FOR`] when every one
/// was measured: the engine walks every volume to measure them.
#[derive(Clone, Default)]
pub(crate) struct SizeCache(pub(super) Arc<tokio::sync::Mutex<Option<Measured>>>);

/// One measurement: when (for its age, and for the answer), and each volume's size.
pub(super) type Measured = (Instant, Timestamp, BTreeMap<String, Option<u64>>);
