//! The connections a service works with: Postgres (migrated when asked), NATS and JetStream
//! (with MAESTRO's streams in place), and the deployment's subject names.

use maestro_db::PgPool;
use maestro_messaging::setup::{self, SetupError};
use maestro_messaging::{Bus, InvalidPrefix, Subjects};

use crate::env::CommonSettings;

/// Why a service could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("SUBJECT_PREFIX: {0}")]
    Prefix(#[from] InvalidPrefix),
    #[error("cannot connect to Postgres (check DATABASE_URL): {0}")]
    Postgres(#[source] sqlx::Error),
    #[error("cannot apply migrations: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
    #[error("cannot connect to NATS (check NATS_URL): {0}")]
    Nats(#[from] async_nats::ConnectError),
    #[error(transparent)]
    Streams(#[from] SetupError),
}

/// Connected infrastructure: the database, and the bus (NATS, JetStream and the subjects).
#[derive(Debug, Clone)]
pub struct Infra {
    pub pool: PgPool,
    pub bus: Bus,
}

impl Infra {
    /// Connect, migrate if `MIGRATE_ON_START`, and make sure the streams exist.
    /// `client_name` shows up in the NATS server's connection list.
    pub async fn connect(common: &CommonSettings, client_name: &str) -> Result<Self, StartError> {
        let subjects = Subjects::new(&common.subject_prefix)?;
        let pool = maestro_db::connect(&common.database_url, common.db_max_connections)
            .await
            .map_err(StartError::Postgres)?;
        if common.migrate_on_start {
            maestro_db::migrate(&pool).await?;
        }
        let nats = maestro_messaging::connect(&common.nats_url, client_name).await?;
        let bus = Bus::new(nats, subjects);
        setup::ensure_streams(&bus.js, &bus.subjects, &common.streams).await?;
        Ok(Self { pool, bus })
    }
}
