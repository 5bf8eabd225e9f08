//! What starts the daemon at login and again when it dies: a systemd user unit on Linux, a
//! launchd agent on macOS, rendered from this binary's path, the `serve` flags and the
//! environment the person runs it with. Pure text; `cli/service.rs` writes and loads it.

use std::path::{Path, PathBuf};

/// The unit's (and the agent's) name.
pub const UNIT_NAME: &str = "berth.service";
/// The launchd agent's label.
pub const AGENT_LABEL: &str = "dev.berth.daemon";

/// The variables a service file carries from the installing shell: berth's own (except the
/// service keys, which stay out of a file: the daemon keeps its key file in its data directory)
/// and the ones that say where Docker is.
pub fn carried_env(vars: impl Iterator<Item = (String, String)>) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = vars
        .filter(|(name, _)| {
            (name.starts_with("BERTH_") && name != "BERTH_SERVICE_KEYS" && name != "BERTH_URL")
                || matches!(
                    name.as_str(),
                    "DOCKER_HOST"
                        | "DOCKER_CONTEXT"
                        | "DOCKER_CERT_PATH"
                        | "DOCKER_TLS_VERIFY"
                        | "DOCKER_CONFIG"
                        | "RUST_LOG"
                )
        })
        .collect();
    out.sort();
    out
}

/// What the daemon runs as: the binary, `serve` and its flags, and its environment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Daemon {
    pub binary: PathBuf,
    pub serve_args: Vec<String>,
    pub env: Vec<(String, String)>,
}

impl Daemon {
    fn argv(&self) -> Vec<String> {
        let mut argv = vec![self.binary.display().to_string(), "serve".to_owned()];
        argv.extend(self.serve_args.iter().cloned());
        argv
    }

    /// The systemd user unit: started at login (`default.target`), restarted when it fails.
    pub fn systemd_unit(&self) -> String {
        let exec = self
            .argv()
            .iter()
            .map(|a| systemd_quoted(a))
            .collect::<Vec<_>>()
            .join(" ");
        let mut env = String::new();
        for (name, value) in &self.env {
            env.push_str(&format!(
                "Environment={}\n",
                systemd_quoted(&format!("{name}={value}"))
            ));
        }
        format!(
            "# Written by `berth service install`; `berth service uninstall` removes it.\n\
             [Unit]\n\
             Description=berth: developers' service containers on Docker\n\
             After=network.target\n\
             \n\
             [Service]\n\
             Type=exec\n\
             ExecStart={exec}\n\
             {env}\
             Restart=on-failure\n\
             RestartSec=2s\n\
             # berth stops its work within --stop-timeout (10s) and exits by 4s after it.\n\
             TimeoutStopSec=30s\n\
             \n\
             [Install]\n\
             WantedBy=default.target\n"
        )
    }

    /// The launchd agent: loaded at login (`RunAtLoad`), started again when it exits with a
    /// failure (`KeepAlive.SuccessfulExit = false`), its output in `log`.
    pub fn launchd_plist(&self, log: &Path) -> String {
        let args: String = self
            .argv()
            .iter()
            .map(|a| format!("    <string>{}</string>\n", xml(a)))
            .collect();
        let env: String = self
            .env
            .iter()
            .map(|(k, v)| {
                format!(
                    "    <key>{}</key>\n    <string>{}</string>\n",
                    xml(k),
                    xml(v)
                )
            })
            .collect();
        let log = xml(&log.display().to_string());
        format!(
            r#"<?xml version="1.0" encoding="UTF-8"?>
<!DOCTYPE plist PUBLIC "-//Apple//DTD PLIST 1.0//EN" "http://www.apple.com/DTDs/PropertyList-1.0.dtd">
<!-- Written by `berth service install`; `berth service uninstall` removes it. -->
<plist version="1.0">
<dict>
  <key>Label</key>
  <string>{AGENT_LABEL}</string>
  <key>ProgramArguments</key>
  <array>
{args}  </array>
  <key>EnvironmentVariables</key>
  <dict>
{env}  </dict>
  <key>RunAtLoad</key>
  <true/>
  <key>KeepAlive</key>
  <dict>
    <key>SuccessfulExit</key>
    <false/>
  </dict>
  <key>StandardOutPath</key>
  <string>{log}</string>
  <key>StandardErrorPath</key>
  <string>{log}</string>
</dict>
</plist>
"#
        )
    }
}

/// One word of a unit file's command line or assignment, double-quoted: `\` and `"` escaped,
/// `%` (a specifier) and `$` (a variable) doubled, control characters as `\xNN`.
fn systemd_quoted(text: &str) -> String {
    let mut out = String::from("\"");
    for c in text.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '%' => out.push_str("%%"),
            '$' => out.push_str("$$"),
            c if (c as u32) < 0x20 || c == '\u{7f}' => {
                out.push_str(&format!("\\x{:02x}", c as u32))
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// Text in an XML element.
fn xml(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn daemon() -> Daemon {
        Daemon {
            binary: PathBuf::from("/opt/my tools/berth"),
            serve_args: vec!["--listen".into(), "127.0.0.1:2400".into()],
            env: vec![("BERTH_DATA_DIR".into(), "/srv/100% \"data\"$".into())],
        }
    }

    #[test]
    fn the_unit_runs_serve_with_the_flags_and_env_and_restarts_on_failure() {
        let unit = daemon().systemd_unit();
        assert!(
            unit.contains(
                "ExecStart=\"/opt/my tools/berth\" \"serve\" \"--listen\" \"127.0.0.1:2400\"\n"
            ),
            "{unit}"
        );
        assert!(
            unit.contains("Environment=\"BERTH_DATA_DIR=/srv/100%% \\\"data\\\"$$\"\n"),
            "{unit}"
        );
        assert!(unit.contains("Restart=on-failure\n"), "{unit}");
        assert!(unit.contains("WantedBy=default.target\n"), "{unit}");
    }

    #[test]
    fn the_plist_keeps_the_daemon_alive_with_escaped_values() {
        let plist = daemon().launchd_plist(Path::new("/Users/a/Library/Logs/berth.log"));
        assert!(plist.contains("<string>/opt/my tools/berth</string>\n    <string>serve</string>\n    <string>--listen</string>"), "{plist}");
        assert!(
            plist.contains("<string>/srv/100% &quot;data&quot;$</string>"),
            "{plist}"
        );
        assert!(
            plist.contains("<key>SuccessfulExit</key>\n    <false/>"),
            "{plist}"
        );
        assert!(plist.contains("<key>RunAtLoad</key>\n  <true/>"), "{plist}");
    }

    #[test]
    fn only_berths_and_dockers_variables_are_carried_and_never_the_keys() {
        let vars = [
            ("BERTH_DATA_DIR", "/d"),
            ("BERTH_SERVICE_KEYS", "secret"),
            ("BERTH_URL", "http://x"),
            ("DOCKER_HOST", "unix:///run/docker.sock"),
            ("HOME", "/home/a"),
        ]
        .map(|(k, v)| (k.to_owned(), v.to_owned()));
        assert_eq!(
            carried_env(vars.into_iter()),
            [
                ("BERTH_DATA_DIR".to_owned(), "/d".to_owned()),
                (
                    "DOCKER_HOST".to_owned(),
                    "unix:///run/docker.sock".to_owned()
                )
            ]
        );
    }
}
