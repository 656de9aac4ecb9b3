//! `sqlx::migrate!` embeds `migrations/` at compile time; on stable Rust cargo does not know the
//! macro read that folder, so a new or changed migration would not rebuild this crate (what
//! `sqlx migrate build-script` writes).
fn main() {
    println!("cargo:rerun-if-changed=../../migrations");
}
