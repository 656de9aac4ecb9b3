//! The project's scripted OpenAI-compatible server, as a process.

use std::path::Path;

use serde_json::Value;

use crate::process::Process;

/// A running `scripted-llm`.
#[derive(Debug)]
pub struct ScriptedLlm {
    pub process: Process,
    /// Base URL with the API version, e.g. `http://127.0.0.1:41234/v1`.
    pub base_url: String,
    http: reqwest::Client,
}

impl ScriptedLlm {
    /// Start it with `scenarios` (the JSON of a scenario file).
    pub async fn start(scenarios: &Value, dir: &Path) -> anyhow::Result<Self> {
        Self::start_with(scenarios, dir, None).await
    }

    /// Start it, reporting the usage of a real server at `upstream` when given (see
    /// `docs/scripted-llm.md`).
    pub async fn start_with(
        scenarios: &Value,
        dir: &Path,
        upstream: Option<&str>,
    ) -> anyhow::Result<Self> {
        let file = dir.join("scenarios.json");
        std::fs::write(&file, serde_json::to_vec_pretty(scenarios)?)?;
        let mut args = vec![
            "--addr".to_owned(),
            "127.0.0.1:0".to_owned(),
            "--scenarios".to_owned(),
            file.display().to_string(),
        ];
        if let Some(upstream) = upstream {
            args.extend(["--upstream".to_owned(), upstream.to_owned()]);
        }
        let process = Process::start(
            "scripted-llm",
            &crate::binary("scripted-llm"),
            &args,
            &[],
            dir,
        )
        .await?;
        let addr = process
            .addr()
            .ok_or_else(|| anyhow::anyhow!("scripted-llm announced no address"))?;
        Ok(Self {
            process,
            base_url: format!("http://{addr}/v1"),
            http: crate::http_client(),
        })
    }

    /// Every chat request received so far: `[{scenario, turn, body}]`.
    pub async fn requests(&self) -> anyhow::Result<Vec<Value>> {
        let url = format!("{}/_scripted/requests", self.root());
        let body: Value = self
            .http
            .get(url)
            .send()
            .await?
            .error_for_status()?
            .json()
            .await?;
        Ok(body["requests"].as_array().cloned().unwrap_or_default())
    }

    /// The scenario turn each chat request received so far was answered with, in order (-1
    /// for a request no turn answered).
    pub async fn turns(&self) -> anyhow::Result<Vec<i64>> {
        let requests = self.requests().await?;
        Ok(requests
            .iter()
            .map(|r| r["turn"].as_i64().unwrap_or(-1))
            .collect())
    }

    /// Replace the scenarios.
    pub async fn load(&self, scenarios: &Value) -> anyhow::Result<()> {
        let url = format!("{}/_scripted/scenarios", self.root());
        self.http
            .post(url)
            .json(scenarios)
            .send()
            .await?
            .error_for_status()?;
        Ok(())
    }

    /// Forget the requests, failure counters and cache state.
    pub async fn reset(&self) -> anyhow::Result<()> {
        let url = format!("{}/_scripted/reset", self.root());
        self.http.post(url).send().await?.error_for_status()?;
        Ok(())
    }

    fn root(&self) -> &str {
        self.base_url.trim_end_matches("/v1")
    }
}
