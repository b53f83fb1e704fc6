//! `--context DIR`: the snapshot of a directory the agents' tools read.
//!
//! Read on this machine, once, before the debate starts; the snapshot travels in the
//! debate's spec (`contextFiles`), so an embedded run, a resume and every cluster worker
//! read the same files and nothing opens a path later.
//!
//! What is taken: every regular file under DIR, recursively, in path order, by its path
//! relative to DIR with `/` separators. Skipped: `.git` directories, files that are not text
//! (a NUL byte, or not UTF-8), symbolic links to directories (no cycles), and files that
//! commonly hold secrets ([`holds_secrets`]: `.env` and `.env.*` but the `.example` /
//! `.sample` / `.template` ones, `.netrc`, `.npmrc`, `.pypirc`, private keys) — those are
//! named in a warning on stderr, since the snapshot goes into prompts sent to providers. A
//! symbolic link to a file is taken when its target is inside DIR and not inside a `.git`
//! directory nor a secrets file; a link whose target is outside DIR is refused with an
//! error naming it. Caps (from `parley_protocol::limits`): 256 KiB per file,
//! 2 MiB in all, 1,000 files; a tree over them is cut, not refused: a file over the
//! per-file cap, and every file once the total or the count is reached (in path order), is
//! left out and named in a warning on stderr.

use std::path::{Component, Path, PathBuf};

use parley_protocol::{limits, snapshot_path_problem, ContextFile, ContextFiles};

use crate::CliError;

/// Directories never taken.
const SKIPPED_DIRS: &[&str] = &[".git"];

/// Why `--context DIR` was refused (a usage error: exit 2), naming the directory.
#[derive(Debug, thiserror::Error)]
#[error("--context {}: {problem}", dir.display())]
pub struct ContextDirError {
    pub dir: PathBuf,
    pub problem: ContextProblem,
}

impl From<ContextDirError> for CliError {
    fn from(e: ContextDirError) -> Self {
        CliError::usage(e.to_string())
    }
}

/// What is wrong with the context directory or a file in it (`path`: relative to it,
/// `/`-separated).
#[derive(Debug, thiserror::Error)]
pub enum ContextProblem {
    #[error("cannot read it: {0}")]
    Unreadable(#[source] std::io::Error),
    #[error("not a directory")]
    NotADirectory,
    #[error("cannot resolve it: {0}")]
    Unresolvable(#[source] std::io::Error),
    #[error("cannot list {}: {source}", dir.display())]
    List {
        dir: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot read {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("{path} is a symbolic link that cannot be resolved: {source}")]
    BrokenLink {
        path: String,
        source: std::io::Error,
    },
    #[error(
        "{path} is a symbolic link to {}, outside the context directory; links out of the \
         directory are refused",
        target.display()
    )]
    LinkOutside { path: String, target: PathBuf },
    /// A path a snapshot cannot carry ([`snapshot_path_problem`]).
    #[error("the path {path:?} cannot be taken: {problem}")]
    BadPath { path: String, problem: String },
    #[error("{} is outside the context directory", path.display())]
    Outside { path: PathBuf },
    #[error("{} has a name that is not UTF-8", path.display())]
    NotUtf8Name { path: PathBuf },
    #[error("{} is not a plain relative path", path.display())]
    NotPlain { path: PathBuf },
}

/// Snapshots `dir` (see the module doc); the error names the directory and the problem.
pub fn snapshot(dir: &Path) -> Result<ContextFiles, ContextDirError> {
    let err = |problem| ContextDirError {
        dir: dir.to_path_buf(),
        problem,
    };
    let meta = std::fs::metadata(dir).map_err(|e| err(ContextProblem::Unreadable(e)))?;
    if !meta.is_dir() {
        return Err(err(ContextProblem::NotADirectory));
    }
    let root = dir
        .canonicalize()
        .map_err(|e| err(ContextProblem::Unresolvable(e)))?;
    let mut taken = Taken::default();
    walk(&root, &root, &mut taken).map_err(err)?;
    if !taken.left_out.is_empty() {
        eprintln!(
            "warning: --context {}: left out {} file(s) that may hold secrets or belong to \
             git: {}",
            dir.display(),
            taken.left_out.len(),
            taken.left_out.join(", ")
        );
    }
    if !taken.cut.is_empty() {
        eprintln!(
            "warning: --context {}: the snapshot is cut at its caps ({} bytes per file, {} \
             bytes and {} files in all); left out {} file(s): {}",
            dir.display(),
            limits::MAX_CONTEXT_FILE_BYTES,
            limits::MAX_CONTEXT_TOTAL_BYTES,
            limits::MAX_CONTEXT_FILES,
            taken.cut.len(),
            named(&taken.cut, 20)
        );
    }
    let mut files = taken.files;
    files.sort_by(|a: &ContextFile, b| a.path.cmp(&b.path));
    Ok(ContextFiles { files })
}

/// What a walk took and left out.
#[derive(Default)]
struct Taken {
    files: Vec<ContextFile>,
    /// Bytes of the files taken.
    total: usize,
    /// Files left out because they may hold secrets or belong to git.
    left_out: Vec<String>,
    /// Files left out at the caps.
    cut: Vec<String>,
}

/// The first `n` names, then how many more.
fn named(names: &[String], n: usize) -> String {
    let shown = names.iter().take(n).cloned().collect::<Vec<_>>().join(", ");
    match names.len().saturating_sub(n) {
        0 => shown,
        more => format!("{shown} and {more} more"),
    }
}

/// Whether a file of this name commonly holds secrets (credentials, keys) and so is never
/// put into a snapshot that travels into prompts.
pub fn holds_secrets(name: &str) -> bool {
    let lower = name.to_ascii_lowercase();
    let template = [".example", ".sample", ".template", ".dist"]
        .iter()
        .any(|s| lower.ends_with(s));
    (lower == ".env" || (lower.starts_with(".env.") && !template))
        || matches!(
            lower.as_str(),
            ".netrc" | ".npmrc" | ".pypirc" | ".pgpass" | "credentials" | ".git-credentials"
        )
        || ["id_rsa", "id_dsa", "id_ecdsa", "id_ed25519"]
            .iter()
            .any(|k| lower == *k)
        || [".pem", ".key", ".p12", ".pfx", ".jks", ".keystore"]
            .iter()
            .any(|ext| lower.ends_with(ext))
}

/// Why a file at `rel` (relative to the root, `/`-separated) is left out, if it is.
fn left_out_reason(rel: &str) -> Option<&'static str> {
    let mut parts = rel.split('/');
    let name = parts.next_back().unwrap_or("");
    if parts.any(|p| SKIPPED_DIRS.contains(&p)) {
        Some("inside .git")
    } else if holds_secrets(name) {
        Some("may hold secrets")
    } else {
        None
    }
}

fn walk(root: &Path, dir: &Path, taken: &mut Taken) -> Result<(), ContextProblem> {
    let list = |source| ContextProblem::List {
        dir: dir.to_path_buf(),
        source,
    };
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(list)?
        .map(|e| e.map(|e| e.path()))
        .collect::<Result<_, _>>()
        .map_err(list)?;
    entries.sort();
    for path in entries {
        let rel = relative(root, &path)?;
        let read = |source| ContextProblem::Read {
            path: rel.clone(),
            source,
        };
        let link = std::fs::symlink_metadata(&path)
            .map_err(read)?
            .file_type()
            .is_symlink();
        let target = if link {
            let t = path
                .canonicalize()
                .map_err(|source| ContextProblem::BrokenLink {
                    path: rel.clone(),
                    source,
                })?;
            if !t.starts_with(root) {
                return Err(ContextProblem::LinkOutside {
                    path: rel,
                    target: t,
                });
            }
            t
        } else {
            path.clone()
        };
        let meta = std::fs::metadata(&target).map_err(read)?;
        if meta.is_dir() {
            let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
            if !link && !SKIPPED_DIRS.contains(&name) {
                walk(root, &path, taken)?;
            }
            continue;
        }
        if !meta.is_file() {
            continue;
        }
        // The file itself, and what a link points at (a link into .git, or to a .env).
        let target_rel = relative(root, &target)?;
        if let Some(why) = left_out_reason(&rel).or_else(|| left_out_reason(&target_rel)) {
            taken.left_out.push(if target_rel == rel {
                format!("{rel} ({why})")
            } else {
                format!("{rel} -> {target_rel} ({why})")
            });
            continue;
        }
        if taken.files.len() >= limits::MAX_CONTEXT_FILES {
            taken.cut.push(format!("{rel} (the file cap was reached)"));
            continue;
        }
        if meta.len() > limits::MAX_CONTEXT_FILE_BYTES as u64 {
            taken.cut.push(format!("{rel} ({} bytes)", meta.len()));
            continue;
        }
        // Read at most one byte past the cap (the file may have grown since).
        let mut bytes = Vec::new();
        std::io::Read::read_to_end(
            &mut std::io::Read::take(
                std::fs::File::open(&target).map_err(read)?,
                limits::MAX_CONTEXT_FILE_BYTES as u64 + 1,
            ),
            &mut bytes,
        )
        .map_err(read)?;
        if bytes.len() > limits::MAX_CONTEXT_FILE_BYTES {
            taken
                .cut
                .push(format!("{rel} (over {} bytes)", bytes.len() - 1));
            continue;
        }
        if bytes.contains(&0) {
            continue;
        }
        let Ok(content) = String::from_utf8(bytes) else {
            continue;
        };
        if let Some(p) = snapshot_path_problem(&rel) {
            return Err(ContextProblem::BadPath {
                path: rel,
                problem: p,
            });
        }
        if taken.total + content.len() > limits::MAX_CONTEXT_TOTAL_BYTES {
            taken.cut.push(format!("{rel} (the total cap was reached)"));
            continue;
        }
        taken.total += content.len();
        taken.files.push(ContextFile { path: rel, content });
    }
    Ok(())
}

/// `path` relative to `root`, `/`-separated; an error for a name that is not UTF-8.
fn relative(root: &Path, path: &Path) -> Result<String, ContextProblem> {
    let rel = path
        .strip_prefix(root)
        .map_err(|_| ContextProblem::Outside {
            path: path.to_path_buf(),
        })?;
    let mut parts = Vec::new();
    for c in rel.components() {
        match c {
            Component::Normal(s) => parts.push(
                s.to_str()
                    .ok_or_else(|| ContextProblem::NotUtf8Name {
                        path: path.to_path_buf(),
                    })?
                    .to_string(),
            ),
            _ => {
                return Err(ContextProblem::NotPlain {
                    path: rel.to_path_buf(),
                })
            }
        }
    }
    Ok(parts.join("/"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn takes_text_files_by_relative_path_and_skips_the_rest() {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(d.path().join("src/deep")).unwrap();
        std::fs::create_dir_all(d.path().join(".git")).unwrap();
        std::fs::write(d.path().join("README.md"), "# hi\n").unwrap();
        std::fs::write(d.path().join("src/deep/a.rs"), "fn a() {}\n").unwrap();
        std::fs::write(d.path().join("logo.png"), [0x89, b'P', 0, 1]).unwrap();
        std::fs::write(d.path().join("latin1.txt"), [b'c', 0xe9]).unwrap();
        std::fs::write(d.path().join(".git/HEAD"), "ref").unwrap();
        #[cfg(unix)]
        std::os::unix::fs::symlink(d.path().join("README.md"), d.path().join("link.md")).unwrap();
        let s = snapshot(d.path()).unwrap();
        let paths: Vec<&str> = s.files.iter().map(|f| f.path.as_str()).collect();
        #[cfg(unix)]
        assert_eq!(paths, ["README.md", "link.md", "src/deep/a.rs"]);
        assert_eq!(s.get("src/deep/a.rs").unwrap().content, "fn a() {}\n");
    }

    #[cfg(unix)]
    #[test]
    fn a_link_out_of_the_directory_is_refused() {
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("secret.txt"), "s3cr3t").unwrap();
        let d = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink(outside.path().join("secret.txt"), d.path().join("x")).unwrap();
        let e = snapshot(d.path()).unwrap_err();
        assert!(
            matches!(&e.problem, ContextProblem::LinkOutside { path, .. } if path == "x"),
            "{e}"
        );
        let e = CliError::from(e);
        assert_eq!(e.code, 2);
        assert!(e.message.contains("--context") && e.message.contains("x is a symbolic link"));
        assert!(
            e.message.contains("outside the context directory"),
            "{}",
            e.message
        );
        // A linked directory out of it too.
        let d = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink(outside.path(), d.path().join("out")).unwrap();
        let e = snapshot(d.path()).unwrap_err();
        assert!(
            matches!(&e.problem, ContextProblem::LinkOutside { path, .. } if path == "out"),
            "{e}"
        );
    }

    #[test]
    fn secrets_and_links_into_git_are_left_out() {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(d.path().join(".git")).unwrap();
        std::fs::create_dir_all(d.path().join("deploy")).unwrap();
        std::fs::write(
            d.path().join(".git/config"),
            "[remote] url=https://tok@host",
        )
        .unwrap();
        for name in [
            ".env",
            ".env.local",
            "deploy/.env.production",
            "server.pem",
            "id_ed25519",
        ] {
            std::fs::write(d.path().join(name), "OPENAI_API_KEY=sk-live").unwrap();
        }
        std::fs::write(d.path().join(".env.example"), "OPENAI_API_KEY=").unwrap();
        std::fs::write(d.path().join("main.rs"), "fn main() {}").unwrap();
        #[cfg(unix)]
        {
            std::os::unix::fs::symlink(d.path().join(".git/config"), d.path().join("cfg")).unwrap();
            std::os::unix::fs::symlink(d.path().join(".env"), d.path().join("settings.txt"))
                .unwrap();
        }
        let s = snapshot(d.path()).unwrap();
        let paths: Vec<&str> = s.files.iter().map(|f| f.path.as_str()).collect();
        assert_eq!(paths, [".env.example", "main.rs"]);
        assert!(s.files.iter().all(|f| !f.content.contains("sk-live")));
        assert!(!holds_secrets("README.md") && !holds_secrets("keys.rs"));
        assert!(holds_secrets(".ENV") && holds_secrets("tls.key"));
    }

    #[test]
    fn a_tree_over_the_caps_is_cut_not_refused() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(
            d.path().join("big.txt"),
            "x".repeat(limits::MAX_CONTEXT_FILE_BYTES + 1),
        )
        .unwrap();
        std::fs::write(d.path().join("small.txt"), "ok").unwrap();
        let s = snapshot(d.path()).unwrap();
        let paths: Vec<&str> = s.files.iter().map(|f| f.path.as_str()).collect();
        assert_eq!(paths, ["small.txt"]);

        // Nine files of the per-file cap: the total cap takes the first eight (in path
        // order), the ninth is left out.
        let d = tempfile::tempdir().unwrap();
        for i in 0..9 {
            std::fs::write(
                d.path().join(format!("f{i}.txt")),
                "x".repeat(limits::MAX_CONTEXT_FILE_BYTES),
            )
            .unwrap();
        }
        let s = snapshot(d.path()).unwrap();
        assert_eq!(s.files.len(), 8);
        assert!(s.files.iter().all(|f| f.path != "f8.txt"));
        let total: usize = s.files.iter().map(|f| f.content.len()).sum();
        assert!(total <= limits::MAX_CONTEXT_TOTAL_BYTES);
        let e = snapshot(&d.path().join("f0.txt")).unwrap_err();
        assert!(matches!(e.problem, ContextProblem::NotADirectory), "{e}");
        assert!(e.to_string().contains("not a directory"), "{e}");
        assert_eq!(
            named(&["a".into(), "b".into(), "c".into()], 2),
            "a, b and 1 more"
        );
    }
}
