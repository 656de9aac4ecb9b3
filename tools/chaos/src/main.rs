//! `maestro-chaos`: run the chaos harness and print its report (exit 1 if an invariant broke).
//!
//! `cargo build --workspace --bins && target/debug/maestro-chaos [--jobs N] [--actions N] [--seed N] [--no-infra]`
//!
//! `maestro-chaos --cluster [--jobs N] [--node-down SECONDS]`: the cluster form (a 3-node
//! JetStream cluster and several copies of every service through a fixed script of faults).

use maestro_chaos::{ChaosOptions, ClusterOptions};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    if std::env::args().nth(1).as_deref() == Some("--cluster") {
        return cluster().await;
    }
    let mut options = ChaosOptions::long();
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        match flag.as_str() {
            "--jobs" => options.jobs = next(&mut args, &flag)?,
            "--actions" => options.actions = next(&mut args, &flag)?,
            "--seed" => options.seed = next(&mut args, &flag)?,
            "--no-infra" => options.restart_infrastructure = false,
            other => anyhow::bail!(
                "unknown flag {other}; flags: --jobs N --actions N --seed N --no-infra"
            ),
        }
    }
    let report = maestro_chaos::run(options).await?;
    println!("{report}");
    if !report.holds() {
        std::process::exit(1);
    }
    Ok(())
}

async fn cluster() -> anyhow::Result<()> {
    let mut options = ClusterOptions::default();
    let mut args = std::env::args().skip(2);
    while let Some(flag) = args.next() {
        match flag.as_str() {
            "--jobs" => options.jobs = next(&mut args, &flag)?,
            "--node-down" => {
                options.node_down = std::time::Duration::from_secs(next(&mut args, &flag)?)
            }
            other => anyhow::bail!("unknown flag {other}; flags: --cluster --jobs N --node-down S"),
        }
    }
    let report = maestro_chaos::run_cluster(options).await?;
    println!("{report}");
    if !report.holds() {
        std::process::exit(1);
    }
    Ok(())
}

fn next<T: std::str::FromStr>(
    args: &mut impl Iterator<Item = String>,
    flag: &str,
) -> anyhow::Result<T>
where
    T::Err: std::fmt::Display,
{
    let value = args
        .next()
        .ok_or_else(|| anyhow::anyhow!("{flag} needs a value"))?;
    value.parse().map_err(|e| anyhow::anyhow!("{flag}: {e}"))
}
