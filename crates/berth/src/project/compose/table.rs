//! A converted service as its `[instances.NAME]` table.

use super::model::{Converted, Ready};

/// A TOML string.
fn toml_str(text: &str) -> String {
    toml_edit::Value::from(text).to_string().trim().to_owned()
}

fn toml_list(items: &[String]) -> String {
    format!(
        "[{}]",
        items
            .iter()
            .map(|i| toml_str(i))
            .collect::<Vec<_>>()
            .join(", ")
    )
}

fn toml_key(key: &str) -> String {
    toml_edit::Key::new(key).display_repr().into_owned()
}

fn toml_inline(pairs: &[(String, String)]) -> String {
    format!(
        "{{ {} }}",
        pairs
            .iter()
            .map(|(k, v)| format!("{} = {}", toml_key(k), toml_str(v)))
            .collect::<Vec<_>>()
            .join(", ")
    )
}

impl Converted {
    /// The `[instances.NAME]` table, with `image` the pinned reference.
    pub fn table(&self, image: &str) -> String {
        let mut t = format!(
            "# From the Compose service {}.\n[instances.{}]\nimage = {}\n",
            toml_str(&super::super::envfile::printable(&self.service)),
            toml_key(&self.name),
            toml_str(image)
        );
        if let Some(command) = &self.command {
            t.push_str(&format!("command = {}\n", toml_list(command)));
        }
        if !self.env_file.is_empty() {
            t.push_str(&format!("env_file = {}\n", toml_list(&self.env_file)));
        }
        if !self.env.is_empty() {
            t.push_str(&format!("env = {}\n", toml_inline(&self.env)));
        }
        if !self.volumes.is_empty() {
            t.push_str(&format!("volumes = {}\n", toml_inline(&self.volumes)));
        }
        match &self.ready {
            Ready::Tcp(port) => t.push_str(&format!("ready = {{ tcp = {port} }}\n")),
            Ready::Exec(argv) => {
                t.push_str(&format!("ready = {{ exec = {} }}\n", toml_list(argv)));
            }
            Ready::Preset(table) => t.push_str(&format!("ready = {table}\n")),
            // Never written: the command reads the image's ports first (without one, the
            // checker names the missing ready check).
            Ready::FromImage { .. } => {}
        }
        if !self.connect.is_empty() {
            t.push_str(&format!("\n[instances.{}.connect]\n", toml_key(&self.name)));
            for (k, v) in &self.connect {
                t.push_str(&format!("{} = {}\n", toml_key(k), toml_str(v)));
            }
        }
        t
    }
}
