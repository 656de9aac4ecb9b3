//! A migrated database of its own for each test, dropped afterwards.

use sqlx::PgPool;
use sqlx::postgres::PgPoolOptions;

/// A fresh, migrated database. `TEST_DATABASE_URL` (default
/// `postgres://postgres@127.0.0.1:5432/postgres`) names the server and an admin database.
#[derive(Debug)]
pub struct TestDb {
    pub name: String,
    pub url: String,
    pub pool: PgPool,
    admin_url: String,
}

impl TestDb {
    pub async fn create() -> anyhow::Result<Self> {
        Self::create_on(&Self::shared_admin_url()).await
    }

    /// The shared server's admin database: `TEST_DATABASE_URL`, by default
    /// `postgres://postgres@127.0.0.1:5432/postgres`.
    pub fn shared_admin_url() -> String {
        std::env::var("TEST_DATABASE_URL")
            .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".to_owned())
    }

    /// A fresh, migrated database on the server of `admin_url`.
    pub async fn create_on(admin_url: &str) -> anyhow::Result<Self> {
        let admin_url = admin_url.to_owned();
        let name = crate::unique("maestro_test_");
        let admin = PgPoolOptions::new()
            .max_connections(1)
            .connect(&admin_url)
            .await?;
        // `name` is generated here from [a-z0-9_]: safe to splice.
        sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
            .execute(&admin)
            .await?;
        admin.close().await;
        let base = admin_url
            .rsplit_once('/')
            .map_or(admin_url.as_str(), |(base, _)| base);
        let url = format!("{base}/{name}");
        let pool = PgPoolOptions::new()
            .max_connections(5)
            .connect(&url)
            .await?;
        maestro_db::migrate(&pool).await?;
        Ok(Self {
            name,
            url,
            pool,
            admin_url,
        })
    }
}

impl TestDb {
    /// A task of `owner` with its queued first job (as the API creates one, default piece and
    /// profile, three attempts), written straight to the database: the ids of both.
    pub async fn queued_task(
        &self,
        owner: &str,
        instruction: &str,
    ) -> anyhow::Result<(maestro_domain::TaskId, maestro_domain::JobId)> {
        let publish = maestro_db::jobs::Publish::ByRelay;
        let (id, job_id, _) = self
            .queued_task_publishing(owner, instruction, publish)
            .await?;
        Ok((id, job_id))
    }

    /// [`TestDb::queued_task`], saying who publishes its `queued` event (as the gateway does:
    /// [`maestro_db::tasks::create_publishing`]); what the caller is to publish comes back too.
    pub async fn queued_task_publishing(
        &self,
        owner: &str,
        instruction: &str,
        publish: maestro_db::jobs::Publish,
    ) -> anyhow::Result<(
        maestro_domain::TaskId,
        maestro_domain::JobId,
        Vec<maestro_domain::topic::Direct>,
    )> {
        let owner = maestro_domain::Owner::parse(owner)?;
        let (id, job_id) = (maestro_domain::TaskId::new(), maestro_domain::JobId::new());
        let new = maestro_db::tasks::NewTask {
            id,
            job_id,
            owner: &owner,
            instruction,
            piece: "chat",
            start_movement: None,
            model: None,
            idempotency_key: None,
            request_hash: "h",
            profile: "default",
            space_id: None,
            visibility: maestro_domain::Visibility::Private,
            max_attempts: 3,
            context_id: None,
            message_id: None,
            push: None,
            attachments: &[],
        };
        let (_, direct) = maestro_db::tasks::create_publishing(&self.pool, &new, publish)
            .await?
            .ok_or_else(|| anyhow::anyhow!("the task was not created"))?;
        Ok((id, job_id, direct))
    }
}

impl Drop for TestDb {
    fn drop(&mut self) {
        let admin_url = self.admin_url.clone();
        let name = self.name.clone();
        // Drop runs outside any runtime guarantee; use a small runtime on its own thread.
        let dropped = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .ok()?;
            runtime.block_on(async {
                let admin = PgPoolOptions::new()
                    .max_connections(1)
                    .connect(&admin_url)
                    .await
                    .ok()?;
                sqlx::query(sqlx::AssertSqlSafe(format!(
                    "DROP DATABASE IF EXISTS {name} WITH (FORCE)"
                )))
                .execute(&admin)
                .await
                .ok()
            })
        })
        .join();
        if !matches!(dropped, Ok(Some(_))) {
            eprintln!("note: test database {} was not dropped", self.name);
        }
    }
}
