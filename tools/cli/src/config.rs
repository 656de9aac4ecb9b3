//! Where the CLI finds the gateway and its token: a flag, else the environment
//! (`MAESTRO_URL`, `MAESTRO_TOKEN`; clap reads both into the flags), else the config file
//! (`--config`, `MAESTRO_CONFIG`, or `$XDG_CONFIG_HOME/maestro/config.toml`, falling back to
//! `~/.config/maestro/config.toml`), else `http://127.0.0.1:8080` and no token.

use std::path::PathBuf;

use anyhow::Context as _;
use serde::Deserialize;

/// The gateway the scripts and the demo start.
pub const DEFAULT_URL: &str = "http://127.0.0.1:8080";

/// `config.toml`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct File {
    pub url: Option<String>,
    pub token: Option<String>,
}

/// What a command talks to.
#[derive(Debug, Clone)]
pub struct Config {
    pub url: String,
    pub token: Option<String>,
}

impl Config {
    pub fn resolve(
        url: Option<String>,
        token: Option<String>,
        file: Option<PathBuf>,
    ) -> anyhow::Result<Self> {
        let explicit = file.is_some();
        let file = match file.or_else(default_path) {
            Some(path) => read(&path, explicit)?,
            None => File::default(),
        };
        let url = url
            .or(file.url)
            .unwrap_or_else(|| DEFAULT_URL.to_owned())
            .trim_end_matches('/')
            .to_owned();
        anyhow::ensure!(
            url.starts_with("http://") || url.starts_with("https://"),
            "the gateway URL must start with http:// or https:// (got {url:?})"
        );
        Ok(Self {
            url,
            token: token.or(file.token).filter(|t| !t.is_empty()),
        })
    }
}

fn default_path() -> Option<PathBuf> {
    let base = std::env::var_os("XDG_CONFIG_HOME")
        .filter(|d| !d.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".config")))?;
    Some(base.join("maestro").join("config.toml"))
}

/// A file named on purpose must exist; the default one may be missing.
fn read(path: &std::path::Path, explicit: bool) -> anyhow::Result<File> {
    match std::fs::read_to_string(path) {
        Ok(text) => toml::from_str(&text).with_context(|| format!("reading {}", path.display())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && !explicit => Ok(File::default()),
        Err(e) => Err(e).with_context(|| format!("reading {}", path.display())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_win_over_the_file_which_wins_over_the_default() {
        let dir = std::env::temp_dir().join(format!("maestro-cli-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("a temporary folder");
        let path = dir.join("config.toml");
        let write = |text: &str| std::fs::write(&path, text).expect("the config file");
        write("url = \"http://gw:9/\"\ntoken = \"from-file\"\n");
        let from_file = Config::resolve(None, None, Some(path.clone())).expect("it reads");
        assert_eq!(from_file.url, "http://gw:9");
        assert_eq!(from_file.token.as_deref(), Some("from-file"));
        let flags = Config::resolve(
            Some("https://x".into()),
            Some("t".into()),
            Some(path.clone()),
        )
        .expect("flags");
        assert_eq!(
            (flags.url.as_str(), flags.token.as_deref()),
            ("https://x", Some("t"))
        );
        write("tokn = \"typo\"\n");
        assert!(
            Config::resolve(None, None, Some(path.clone())).is_err(),
            "unknown keys"
        );
        assert!(Config::resolve(None, None, Some(dir.join("missing.toml"))).is_err());
        assert!(Config::resolve(Some("gw:8080".into()), None, Some(path.clone())).is_err());
        std::fs::remove_dir_all(dir).expect("cleaned up");
    }
}
