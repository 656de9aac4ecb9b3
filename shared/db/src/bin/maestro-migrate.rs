//! `maestro-migrate`: apply MAESTRO's migrations to `DATABASE_URL` (creating the database if
//! it does not exist yet).

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
    Ok(())
}
