//! Timestamps: milliseconds since the Unix epoch inside berth, ISO-8601 UTC with milliseconds on
//! the wire (`2026-11-29T18:10:03.123Z`).

use std::fmt;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A point in time, to the millisecond.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Timestamp(i64);

impl Timestamp {
    /// Now, by the system clock.
    pub fn now() -> Self {
        let ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() as i64)
            .unwrap_or(0);
        Self(ms)
    }

    /// From milliseconds since the epoch.
    pub fn from_millis(ms: i64) -> Self {
        Self(ms)
    }

    /// Milliseconds since the epoch.
    pub fn millis(self) -> i64 {
        self.0
    }

    /// This time plus `d`.
    pub fn plus(self, d: Duration) -> Self {
        Self(self.0.saturating_add(d.as_millis() as i64))
    }

    /// How long after `earlier` this is (zero if it is not after).
    pub fn since(self, earlier: Timestamp) -> Duration {
        Duration::from_millis(self.0.saturating_sub(earlier.0).max(0) as u64)
    }

    /// Parses an RFC 3339 time such as Docker reports (`2026-11-29T18:10:03.123456789Z`).
    pub fn parse(text: &str) -> Option<Self> {
        let t = humantime::parse_rfc3339(text).ok()?;
        let ms = t.duration_since(UNIX_EPOCH).ok()?.as_millis() as i64;
        Some(Self(ms))
    }
}

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let t = UNIX_EPOCH + Duration::from_millis(self.0.max(0) as u64);
        write!(f, "{}", humantime::format_rfc3339_millis(t))
    }
}

impl Serialize for Timestamp {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Timestamp {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        Timestamp::parse(&text).ok_or_else(|| serde::de::Error::custom("not an RFC 3339 time"))
    }
}

#[cfg(feature = "openapi")]
impl utoipa::PartialSchema for Timestamp {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        utoipa::openapi::ObjectBuilder::new()
            .schema_type(utoipa::openapi::schema::Type::String)
            .format(Some(utoipa::openapi::SchemaFormat::KnownFormat(
                utoipa::openapi::KnownFormat::DateTime,
            )))
            .into()
    }
}

#[cfg(feature = "openapi")]
impl utoipa::ToSchema for Timestamp {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_iso_utc_with_milliseconds_and_parses_back() {
        let t = Timestamp::from_millis(1_796_062_203_123);
        assert_eq!(t.to_string(), "2026-11-30T18:10:03.123Z");
        assert_eq!(Timestamp::parse(&t.to_string()), Some(t));
        assert_eq!(
            Timestamp::parse("2026-11-30T18:10:03.123456789Z"),
            Some(t),
            "Docker's nanoseconds are cut to milliseconds"
        );
    }
}
