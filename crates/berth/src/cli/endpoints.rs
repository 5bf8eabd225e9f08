//! Host endpoints as the commands show them: in a table (`berth up`, `berth ps`) and in
//! `--json`.

use serde_json::Value;

/// Host endpoints as a table shows them: `host:host port->container port`, space-separated, or
/// `-` when there is none.
pub(super) fn endpoints_text(endpoints: &[(u16, String, u16)]) -> String {
    if endpoints.is_empty() {
        return "-".to_owned();
    }
    endpoints
        .iter()
        .map(|(port, host, host_port)| format!("{host}:{host_port}->{port}"))
        .collect::<Vec<_>>()
        .join(" ")
}

/// Host endpoints as `--json` adds them to an instance: `[{port, host, hostPort}]`.
pub(super) fn endpoints_json(endpoints: &[(u16, String, u16)]) -> Value {
    Value::Array(
        endpoints
            .iter()
            .map(|(port, host, host_port)| {
                serde_json::json!({"port": port, "host": host, "hostPort": host_port})
            })
            .collect(),
    )
}
