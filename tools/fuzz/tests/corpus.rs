//! Every fuzz target over the corpus kept in `fuzz/corpus/<target>/` (the inputs libFuzzer
//! found that reach new code, and the seeds), so the test run checks every invariant on
//! them without a fuzzer — and every target has a corpus.

use std::path::Path;

#[test]
fn every_target_holds_on_its_corpus() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus");
    for (name, target) in maestro_fuzz::TARGETS {
        let dir = root.join(name);
        let entries = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("{}: {e} (each target keeps a corpus)", dir.display()));
        let mut inputs = 0;
        for entry in entries {
            let path = entry.expect("corpus entry").path();
            let data = std::fs::read(&path).expect("corpus file");
            let outcome = std::panic::catch_unwind(|| target(&data));
            assert!(outcome.is_ok(), "{name} fails on {}", path.display());
            inputs += 1;
        }
        assert!(inputs > 0, "{name} has inputs in {}", dir.display());
    }
}

#[test]
fn every_target_has_a_fuzz_binary() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz");
    let manifest = std::fs::read_to_string(root.join("Cargo.toml")).expect("fuzz/Cargo.toml");
    for (name, _) in maestro_fuzz::TARGETS {
        let source = root.join(format!("fuzz_targets/{name}.rs"));
        let text = std::fs::read_to_string(&source).expect("a fuzz target source");
        assert!(
            text.contains(&format!("maestro_fuzz::{name}(")),
            "{} calls maestro_fuzz::{name}",
            source.display()
        );
        assert!(
            manifest.contains(&format!("name = \"{name}\"")),
            "fuzz/Cargo.toml lists {name}"
        );
    }
}
