//! [`ContextFiles`]: the snapshot of a `--context DIR` directory that travels in a
//! [`crate::DebateSpec`].
//!
//! The CLI reads the directory on the submitting machine (text files only, relative paths,
//! size caps) and sends the texts; the agents' tools (`list_files`, `file_read`,
//! `context_search`) read only this snapshot. No service ever opens a path that came in a
//! message: a path here is a name in the snapshot, nothing more.
//!
//! Where it lives: in the spec, which is stored once per debate (the embedded checkpoint
//! file; Redis `parley:{<id>}:spec` in a cluster). Tasks do not copy it: an agent worker
//! whose task's agent has tools reads the snapshot from the stored spec of the task's
//! debate (see `parley-worker`), so a task body stays as small as before whatever the
//! snapshot's size.

use serde::{Deserialize, Serialize};

use crate::limits;
use crate::spec::Check;

/// The text files of a context directory, sorted by path.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ContextFiles {
    pub files: Vec<ContextFile>,
}

/// One text file of a snapshot.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ContextFile {
    /// Relative to the context directory, `/`-separated, without `.` or `..` components.
    pub path: String,
    pub content: String,
}

/// Why `path` is not a snapshot path, if it is not: empty, absolute, `\`, a `.`, `..` or
/// empty component, a control character (NUL included), or too long.
pub fn snapshot_path_problem(path: &str) -> Option<String> {
    if path.is_empty() {
        return Some("is empty".into());
    }
    if path.len() > limits::MAX_CONTEXT_PATH_BYTES {
        return Some(format!(
            "{} bytes, the limit is {}",
            path.len(),
            limits::MAX_CONTEXT_PATH_BYTES
        ));
    }
    if path.chars().any(char::is_control) {
        return Some("contains a control character".into());
    }
    if path.starts_with('/') || path.contains('\\') || path.contains(':') {
        return Some("must be a relative path with / separators".into());
    }
    if path
        .split('/')
        .any(|c| c.is_empty() || c == "." || c == "..")
    {
        return Some("must not have empty, . or .. components".into());
    }
    None
}

impl ContextFiles {
    /// The file at `path`, if the snapshot has it.
    pub fn get(&self, path: &str) -> Option<&ContextFile> {
        self.files
            .binary_search_by(|f| f.path.as_str().cmp(path))
            .ok()
            .map(|i| &self.files[i])
    }

    /// Bytes of all contents together.
    pub fn total_bytes(&self) -> usize {
        self.files.iter().map(|f| f.content.len()).sum()
    }

    /// Checks the caps and every path (see [`snapshot_path_problem`]); paths must be sorted
    /// and unique.
    pub(crate) fn check(&self, field: &str, c: &mut Check) {
        if self.files.len() > limits::MAX_CONTEXT_FILES {
            c.push(
                format!("{field}.files"),
                format!(
                    "{} files, the limit is {}",
                    self.files.len(),
                    limits::MAX_CONTEXT_FILES
                ),
            );
            return;
        }
        let total = self.total_bytes();
        if total > limits::MAX_CONTEXT_TOTAL_BYTES {
            c.push(
                format!("{field}.files"),
                format!(
                    "{total} bytes of files, the limit is {}",
                    limits::MAX_CONTEXT_TOTAL_BYTES
                ),
            );
        }
        let mut problems = 0;
        for (i, f) in self.files.iter().enumerate() {
            if problems >= 16 {
                break;
            }
            let here = format!("{field}.files[{i}]");
            if let Some(p) = snapshot_path_problem(&f.path) {
                c.push(
                    format!("{here}.path"),
                    format!("{:?} {p}", crate::preview(&f.path, 80)),
                );
                problems += 1;
            }
            if f.content.len() > limits::MAX_CONTEXT_FILE_BYTES {
                c.push(
                    format!("{here}.content"),
                    format!(
                        "{} bytes, the limit is {}",
                        f.content.len(),
                        limits::MAX_CONTEXT_FILE_BYTES
                    ),
                );
                problems += 1;
            }
            if i > 0 && self.files[i - 1].path >= f.path {
                c.push(
                    format!("{here}.path"),
                    "paths must be unique and sorted".to_string(),
                );
                problems += 1;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn files(paths: &[&str]) -> ContextFiles {
        ContextFiles {
            files: paths
                .iter()
                .map(|p| ContextFile {
                    path: p.to_string(),
                    content: "x".into(),
                })
                .collect(),
        }
    }

    fn problems(f: &ContextFiles) -> Vec<String> {
        let mut c = Check::default();
        f.check("contextFiles", &mut c);
        c.0.iter().map(ToString::to_string).collect()
    }

    #[test]
    fn escaping_paths_are_refused_naming_the_file() {
        for bad in [
            "../x",
            "a/../../x",
            "/etc/passwd",
            "./a",
            "a//b",
            "a\\b",
            "C:/x",
            "a\0b",
            "",
        ] {
            let p = problems(&files(&[bad]));
            assert!(
                p.iter()
                    .any(|e| e.starts_with("contextFiles.files[0].path")),
                "{bad:?}: {p:?}"
            );
        }
        assert!(problems(&files(&["README.md", "src/main.rs"])).is_empty());
        let p = problems(&files(&["b", "a"]));
        assert!(p.iter().any(|e| e.contains("sorted")), "{p:?}");
    }

    #[test]
    fn caps_are_enforced() {
        let mut f = files(&["a"]);
        f.files[0].content = "x".repeat(limits::MAX_CONTEXT_FILE_BYTES + 1);
        let p = problems(&f);
        assert!(p.iter().any(|e| e.contains("files[0].content")), "{p:?}");
        let many: Vec<String> = (0..=limits::MAX_CONTEXT_FILES)
            .map(|i| format!("f{i:05}"))
            .collect();
        let refs: Vec<&str> = many.iter().map(String::as_str).collect();
        let p = problems(&files(&refs));
        assert!(p[0].contains("1001 files, the limit is 1000"), "{p:?}");
    }

    #[test]
    fn get_finds_by_path() {
        let f = files(&["a", "b/c", "d"]);
        assert!(f.get("b/c").is_some());
        assert!(f.get("b").is_none());
    }
}
