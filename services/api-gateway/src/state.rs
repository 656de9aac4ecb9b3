//! What every handler can reach: the database, the bus, the settings, and the shutdown
//! signal long-lived responses end on.

use std::ops::Deref;
use std::sync::Arc;

use maestro_db::PgPool;
use maestro_messaging::Bus;
use maestro_runtime::Infra;
use tokio_util::sync::CancellationToken;

use crate::config::Settings;

/// What every handler can reach (its [`StateParts`], by `Deref`). One reference count to clone,
/// which every request and every SSE client's pump does: a client's waiting pump task holds
/// a pointer, not the parts (~450 bytes, docs/performance.md#streams-maestro-bench-sse).
#[derive(Debug, Clone)]
pub struct AppState(Arc<StateParts>);

impl Deref for AppState {
    type Target = StateParts;

    fn deref(&self) -> &StateParts {
        &self.0
    }
}

/// The database, the bus, the settings and the rest every handler can reach.
#[derive(Debug)]
pub struct StateParts {
    pub pool: PgPool,
    /// NATS, JetStream and the subjects; what follows a commit goes through
    /// [`Bus::after_commit`].
    pub bus: Bus,
    pub settings: Arc<Settings>,
    /// Cancelled at shutdown; long-lived responses (SSE) end on it.
    pub shutdown: CancellationToken,
    /// One live subscription per followed task, shared by its SSE clients.
    pub hubs: Arc<crate::fanout::Hubs>,
    /// Who notifications are published for, shared by the inbox streams.
    pub inbox_wakes: Arc<crate::routes::inbox::InboxWakes>,
    /// Database token lookups, remembered for `TOKEN_CACHE_MS`.
    pub token_cache: Arc<crate::auth::TokenCache>,
    /// OIDC/JWT tokens' checker, when `OIDC_JWKS_URL` is set.
    pub oidc: Option<Arc<crate::oidc::Oidc>>,
}

impl AppState {
    /// Connect to Postgres and NATS (migrating and creating streams when asked).
    pub async fn connect(settings: Settings, shutdown: CancellationToken) -> anyhow::Result<Self> {
        let Infra { pool, bus } = Infra::connect(&settings.common, "maestro-api-gateway").await?;
        let oidc = settings
            .oidc
            .clone()
            .map(crate::oidc::Oidc::new)
            .transpose()?
            .map(Arc::new);
        Ok(Self(Arc::new(StateParts {
            pool,
            bus,
            settings: Arc::new(settings),
            shutdown,
            hubs: Arc::default(),
            inbox_wakes: Arc::default(),
            token_cache: Arc::default(),
            oidc,
        })))
    }
}
