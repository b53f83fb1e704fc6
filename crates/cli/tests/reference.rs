//! The CLI reference page, `docs/src/reference/cli.md`, is generated from the `parley`
//! binary's own `--help` (clap) and committed; this test fails when the committed page
//! differs from what the binary prints now. Regenerate it with
//!
//! ```sh
//! PARLEY_BLESS=1 cargo test -p parley-cli --test reference
//! ```
//!
//! The binary runs with an empty environment, so no `[env: NAME=value]` of the machine that
//! generates the page ends up in it.

use std::path::{Path, PathBuf};
use std::process::Command;

const PARLEY: &str = env!("CARGO_BIN_EXE_parley");
const BLESS: &str = "PARLEY_BLESS";
const REGENERATE: &str = "PARLEY_BLESS=1 cargo test -p parley-cli --test reference";

fn page_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/src/reference/cli.md")
}

/// `parley <args>` in an empty environment: its stdout (help goes there, status 0).
fn help(args: &[&str]) -> String {
    let out = Command::new(PARLEY)
        .args(args)
        .env_clear()
        .output()
        .expect("run parley");
    assert!(
        out.status.success(),
        "parley {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("help is UTF-8")
}

/// The visible subcommands, in the order `parley --help` lists them (`help` left out).
fn subcommands(top: &str) -> Vec<String> {
    let mut lines = top.lines().skip_while(|l| l.trim_end() != "Commands:");
    lines.next();
    lines
        .take_while(|l| l.starts_with("  "))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|name| *name != "help")
        .map(str::to_string)
        .collect()
}

fn render() -> String {
    let top = help(&["--help"]);
    let commands = subcommands(&top);
    assert!(
        commands.iter().any(|c| c == "run"),
        "no `run` among the subcommands of:\n{top}"
    );
    let mut page = String::new();
    page.push_str("# CLI reference\n\n");
    page.push_str(&format!(
        "<!-- Generated from `parley --help`: do not edit. Regenerate with `{REGENERATE}`. -->\n\n"
    ));
    page.push_str(
        "This page is generated from the `parley` binary's own help, so it is what the \
         binary you build says. The guide explains each command at length: \
         [`parley run`](../guide/embedded-runs.md), \
         [running a cluster](../operations/deploying.md) (`submit`, `watch`, `status`, \
         `retry`, `cancel`, `answer`), [reports](../guide/report.md), \
         [evaluations](../guide/evals.md), [comparisons](../guide/compare.md), \
         [the web page](../guide/web-page.md); exit codes are in \
         [Exit codes](exit-codes.md).\n\n",
    );
    page.push_str("Commands: ");
    let links: Vec<String> = commands
        .iter()
        .map(|c| format!("[`{c}`](#parley-{c})"))
        .collect();
    page.push_str(&links.join(", "));
    page.push_str(".\n\n## `parley`\n\n```text\n");
    page.push_str(top.trim_end());
    page.push_str("\n```\n");
    for c in &commands {
        page.push_str(&format!("\n## `parley {c}`\n\n```text\n"));
        page.push_str(help(&[c, "--help"]).trim_end());
        page.push_str("\n```\n");
    }
    page
}

#[test]
fn the_cli_reference_page_is_current() {
    let fresh = render();
    let path = page_path();
    if std::env::var_os(BLESS).is_some() {
        std::fs::write(&path, &fresh).expect("write docs/src/reference/cli.md");
        return;
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    if committed != fresh {
        let first = committed
            .lines()
            .zip(fresh.lines())
            .position(|(a, b)| a != b)
            .map_or(committed.lines().count().min(fresh.lines().count()), |i| i)
            + 1;
        panic!(
            "docs/src/reference/cli.md is stale (first difference at line {first}: \
             committed {:?}, now {:?}); regenerate it with `{REGENERATE}`",
            committed.lines().nth(first - 1).unwrap_or("<end>"),
            fresh.lines().nth(first - 1).unwrap_or("<end>"),
        );
    }
}

#[test]
fn subcommands_are_read_from_the_commands_section() {
    let top = "Usage: parley <COMMAND>\n\nCommands:\n  run     Run a debate\n  watch   Follow\n  help    Print this message\n\nOptions:\n  -h, --help  Print help\n";
    assert_eq!(subcommands(top), ["run", "watch"]);
}
