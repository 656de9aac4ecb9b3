//! `maestro-migrate`: apply MAESTRO's migrations to `DATABASE_URL` (creating the database if
//! it does not exist yet). `maestro-migrate --reseal` then seals every stored secret again
//! under the first key of `SECRETS_KEYS` (a key rotation's step; docs/spaces.md).

use sqlx::migrate::MigrateDatabase;

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::var("DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/maestro".to_owned());
    if !sqlx::Postgres::database_exists(&url).await? {
        sqlx::Postgres::create_database(&url).await?;
        eprintln!("created database");
    }
    let pool = maestro_db::connect(&url, 1).await?;
    maestro_db::migrate(&pool).await?;
    eprintln!("migrations applied");
    if std::env::args().any(|a| a == "--reseal") {
        let keys = std::env::var("SECRETS_KEYS").map_err(|_| "--reseal needs SECRETS_KEYS")?;
        maestro_db::sealed::install(Some(maestro_db::sealed::Keyring::parse(&keys)?));
        let rewritten = maestro_db::sealed::reseal_all(&pool).await?;
        eprintln!("resealed {rewritten} secrets under the first key of SECRETS_KEYS");
    }
    Ok(())
}
