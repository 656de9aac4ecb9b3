//! The streams' setup (`shared/messaging/src/setup.rs`) against a real nats-server: the deltas
//! stream keeps its fragments in memory by default, bounded in bytes, and a deployment whose
//! deltas stream was made in files gets it made again in memory at its next start (JetStream
//! cannot change a stream's storage in place), losing only live fragments; every other stream
//! and what it holds is left alone, and several services setting up at once agree.

use async_nats::jetstream::{self, stream::StorageType};
use maestro_messaging::Subjects;
use maestro_messaging::setup::{self, DELTAS, EVENTS, StreamSettings};
use maestro_testkit::NatsServer;

async fn storage_and_count(js: &jetstream::Context, name: &str) -> (StorageType, u64, i64) {
    let mut stream = js.get_stream(name).await.expect("the stream exists");
    let info = stream.info().await.expect("stream info");
    (
        info.config.storage,
        info.state.messages,
        info.config.max_bytes,
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_deltas_stream_moves_to_memory_and_the_others_keep_what_they_hold() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = NatsServer::start(dir.path()).await.expect("nats-server");
    let client = server.client().await.expect("connect");
    let js = jetstream::new(client.clone());
    let subjects = Subjects::new("setup").expect("prefix");
    let in_files = StreamSettings {
        deltas_storage: StorageType::File,
        ..StreamSettings::default()
    };
    setup::ensure_streams(&js, &subjects, &in_files)
        .await
        .expect("streams in files");
    for subject in ["setup.deltas.t.j.1", "setup.events.t"] {
        js.publish(subject, "x".into())
            .await
            .expect("publish")
            .await
            .expect("stored");
    }
    let deltas = subjects.stream(DELTAS);
    let events = subjects.stream(EVENTS);
    assert_eq!(storage_and_count(&js, &deltas).await.0, StorageType::File);

    // Three services start at once with the defaults.
    let defaults = StreamSettings::default();
    let starts = (0..3).map(|_| setup::ensure_streams(&js, &subjects, &defaults));
    for started in futures::future::join_all(starts).await {
        started.expect("every service's setup succeeds");
    }
    assert_eq!(
        storage_and_count(&js, &deltas).await,
        (StorageType::Memory, 0, defaults.deltas_max_bytes),
        "the deltas stream is in memory, bounded, and its old fragments are gone"
    );
    assert_eq!(
        storage_and_count(&js, &events).await,
        (StorageType::File, 1, -1),
        "the events stream is untouched"
    );

    // Once in memory, a restart with the same settings changes nothing; a new bound applies
    // in place.
    js.publish("setup.deltas.t.j.2", "y".into())
        .await
        .expect("publish")
        .await
        .expect("stored");
    let smaller = StreamSettings {
        deltas_max_bytes: 1 << 20,
        ..StreamSettings::default()
    };
    setup::ensure_streams(&js, &subjects, &smaller)
        .await
        .expect("setup again");
    assert_eq!(
        storage_and_count(&js, &deltas).await,
        (StorageType::Memory, 1, 1 << 20)
    );
}
