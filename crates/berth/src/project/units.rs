//! The units berth.toml writes limits in: CPU as cores or millicores, memory as a size.
//!
//! Pure text to number; the checker says what is wrong with a value these refuse.

pub(super) fn cores_to_millis(cores: f64) -> Option<i64> {
    let millis = cores * 1000.0;
    (cores.is_finite() && millis >= 0.0 && (millis - millis.round()).abs() < 1e-6 && millis < 1e12)
        .then(|| millis.round() as i64)
}

/// `"1"`, `"0.5"` (cores) or `"500m"` (millicores) as millicores.
pub fn parse_cpu(text: &str) -> Option<i64> {
    let text = text.trim();
    if let Some(m) = text.strip_suffix('m') {
        return m.parse::<i64>().ok();
    }
    if text.is_empty() || !text.chars().all(|c| c.is_ascii_digit() || c == '.') {
        return None;
    }
    cores_to_millis(text.parse::<f64>().ok()?)
}

/// A size: a number and a unit (`B`; `K`/`Ki`/`KiB`, `M`/`Mi`/`MiB`, `G`/`Gi`/`GiB`,
/// `T`/`Ti`/`TiB` in powers of 1024, as Docker counts them; `KB`, `MB`, `GB`, `TB` in powers of
/// 1000). Units are case-insensitive except that `kb`-style units are read as `KB`.
pub fn parse_size(text: &str) -> Option<i64> {
    let text = text.trim();
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    if number.is_empty() {
        return None;
    }
    let factor: f64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1.0,
        "k" | "ki" | "kib" => 1024.0,
        "m" | "mi" | "mib" => 1024.0 * 1024.0,
        "g" | "gi" | "gib" => 1024.0 * 1024.0 * 1024.0,
        "t" | "ti" | "tib" => 1024.0 * 1024.0 * 1024.0 * 1024.0,
        "kb" => 1e3,
        "mb" => 1e6,
        "gb" => 1e9,
        "tb" => 1e12,
        _ => return None,
    };
    let bytes = number.parse::<f64>().ok()? * factor;
    (bytes.is_finite() && bytes < 9.0e15 && (bytes - bytes.round()).abs() < 1e-3)
        .then(|| bytes.round() as i64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_and_cpus() {
        assert_eq!(parse_size("512MiB"), Some(512 * 1024 * 1024));
        assert_eq!(parse_size("512m"), Some(512 * 1024 * 1024));
        assert_eq!(parse_size("1.5GiB"), Some(1536 * 1024 * 1024));
        assert_eq!(parse_size("100MB"), Some(100_000_000));
        assert_eq!(parse_size("12"), Some(12));
        assert_eq!(parse_size("lots"), None);
        assert_eq!(parse_size("1 parsec"), None);
        assert_eq!(parse_cpu("1"), Some(1000));
        assert_eq!(parse_cpu("0.25"), Some(250));
        assert_eq!(parse_cpu("500m"), Some(500));
        assert_eq!(parse_cpu("-1"), None);
        assert_eq!(parse_cpu("one"), None);
    }

    #[test]
    fn sizes_take_units_of_1024_and_of_1000() {
        assert_eq!(parse_size("1KB"), Some(1000));
        assert_eq!(parse_size("1kb"), Some(1000));
        assert_eq!(parse_size("1k"), Some(1024));
        assert_eq!(parse_size(" 2 GiB "), Some(2 * 1024 * 1024 * 1024));
        assert_eq!(parse_size("1TB"), Some(1_000_000_000_000));
        assert_eq!(parse_size("16B"), Some(16));
        assert_eq!(parse_size("1.5"), None);
        assert_eq!(parse_size("MiB"), None);
        assert_eq!(parse_size(""), None);
        assert_eq!(parse_size("9000TiB"), None);
    }

    #[test]
    fn cores_become_whole_millicores() {
        assert_eq!(cores_to_millis(2.0), Some(2000));
        assert_eq!(cores_to_millis(0.001), Some(1));
        assert_eq!(cores_to_millis(0.0005), None);
        assert_eq!(cores_to_millis(-0.5), None);
        assert_eq!(cores_to_millis(f64::NAN), None);
        assert_eq!(cores_to_millis(f64::INFINITY), None);
        assert_eq!(parse_cpu(" 2 "), Some(2000));
        assert_eq!(parse_cpu("1e3"), None);
        assert_eq!(parse_cpu(""), None);
        assert_eq!(parse_cpu("m"), None);
    }
}
