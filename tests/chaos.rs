//! The chaos harness's short form: 20 jobs through the whole stack while 10 disruptions hit
//! it (SIGKILLed services, a worker paused past its lease, NATS and Postgres restarts); every
//! invariant must hold. The long form is `maestro-chaos` (see docs/reliability.md).

use maestro_chaos::ChaosOptions;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_survive_killed_services_paused_workers_and_restarted_infrastructure() {
    let report = maestro_chaos::run(ChaosOptions::short())
        .await
        .expect("the harness runs");
    println!("{report}");
    assert!(report.holds(), "an invariant broke:\n{report}");
    assert_eq!(
        report.succeeded + report.paused_unknown,
        20 + report.follow_ups,
        "every job succeeded, or paused with its side effect at most once:\n{report}"
    );
}

/// The cluster form: a 3-node JetStream cluster (R3) and several copies of every service,
/// under load, through the JOBS stream's leader, the meta leader and a whole node (30 s) going
/// down and a Postgres restart, with services killed alongside (docs/scaling.md).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_survive_a_clusters_leaders_and_a_node_going_down_with_copies_of_every_service() {
    let report = maestro_chaos::run_cluster(maestro_chaos::ClusterOptions::default())
        .await
        .expect("the harness runs");
    println!("{report}");
    assert!(report.holds(), "an invariant broke:\n{report}");
    assert_eq!(
        report.base.succeeded + report.base.paused_unknown,
        report.base.jobs as i64 + report.base.follow_ups,
        "every job succeeded, or paused with its side effect at most once:\n{report}"
    );
}
