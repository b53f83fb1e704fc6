//! The settings reference page, `docs/src/reference/settings.md`, is generated from the
//! services' settings structs (`parley_cluster::settings::reference`) and committed; this
//! test fails when the committed page differs from what the structs say now. Regenerate it
//! with
//!
//! ```sh
//! PARLEY_BLESS=1 cargo test -p parley-cluster --test settings_page
//! ```

use std::path::{Path, PathBuf};

const REGENERATE: &str = "PARLEY_BLESS=1 cargo test -p parley-cluster --test settings_page";

fn page_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/src/reference/settings.md")
}

#[test]
fn the_committed_settings_page_is_current() {
    let page = parley_cluster::settings::reference::page(REGENERATE);
    let path = page_path();
    if std::env::var_os("PARLEY_BLESS").is_some() {
        std::fs::write(&path, &page).unwrap();
        return;
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        committed == page,
        "{} is stale: regenerate it with `{REGENERATE}`",
        path.display()
    );
}

/// Every key the page lists appears with its variable and flag, and the page says which
/// service takes it.
#[test]
fn the_page_lists_every_key_with_its_variable_and_flag() {
    let page = parley_cluster::settings::reference::page(REGENERATE);
    for key in parley_cluster::settings::reference::all_keys() {
        let row = format!("| `{}` |", key.name);
        assert!(page.contains(&row), "{} missing", key.name);
        assert!(page.contains(&format!("`{}`", key.env())), "{}", key.env());
        assert!(page.contains(&key.flag()), "{}", key.flag());
    }
    for service in ["Every service", "Coordinator", "Workers"] {
        assert!(page.contains(&format!("## {service}")), "{service}");
    }
}
