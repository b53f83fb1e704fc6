//! The problem set: a directory of Markdown files, one problem each. The text before a
//! `## Requirements` heading is the problem; the `- ` items under it are what a good answer
//! meets. Strategies see the whole file; evaluators get the list as the major requirements.

use std::path::Path;

use crate::CliError;

/// Most bytes read from one problem file.
pub const MAX_PROBLEM_BYTES: usize = 64 * 1024;

#[derive(Debug, Clone)]
pub struct Problem {
    /// The file name without `.md`: the problem's id in file names, the CSV and the report.
    pub id: String,
    /// The whole file: what every strategy is asked.
    pub text: String,
    /// The items under `## Requirements`.
    pub requirements: Vec<String>,
}

/// Reads every `*.md` file of `dir`, sorted by name. A file without a `## Requirements`
/// list, empty, too large or with an unusable name is refused, naming it.
pub fn load_dir(dir: &Path) -> Result<Vec<Problem>, CliError> {
    let entries = std::fs::read_dir(dir).map_err(|e| {
        CliError::usage(format!(
            "cannot list problem directory {}: {e}",
            dir.display()
        ))
    })?;
    let mut files: Vec<_> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_file() && p.extension().is_some_and(|x| x == "md"))
        .collect();
    files.sort();
    if files.is_empty() {
        return Err(CliError::usage(format!(
            "problem directory {} holds no *.md problem file",
            dir.display()
        )));
    }
    files.iter().map(|f| load_file(f)).collect()
}

pub fn load_file(path: &Path) -> Result<Problem, CliError> {
    let shown = path.display();
    let id = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    if !is_safe_id(&id) {
        return Err(CliError::usage(format!(
            "problem file {shown}: its name must be letters, digits, '-' or '_' (it names output files)"
        )));
    }
    let bytes = std::fs::read(path)
        .map_err(|e| CliError::usage(format!("cannot read problem file {shown}: {e}")))?;
    if bytes.len() > MAX_PROBLEM_BYTES {
        return Err(CliError::usage(format!(
            "problem file {shown} is {} bytes, over the {MAX_PROBLEM_BYTES}-byte limit",
            bytes.len()
        )));
    }
    let text = String::from_utf8(bytes)
        .map_err(|_| CliError::usage(format!("problem file {shown} is not UTF-8 text")))?;
    let requirements = parse_requirements(&text);
    if requirements.is_empty() {
        return Err(CliError::usage(format!(
            "problem file {shown}: no `## Requirements` heading followed by `- ` items"
        )));
    }
    let statement = text
        .lines()
        .take_while(|l| !is_requirements_heading(l))
        .filter(|l| !l.trim_start().starts_with('#'))
        .any(|l| !l.trim().is_empty());
    if !statement {
        return Err(CliError::usage(format!(
            "problem file {shown}: no problem text before `## Requirements`"
        )));
    }
    Ok(Problem {
        id,
        text: text.trim().to_string(),
        requirements,
    })
}

/// Names used in output paths: ASCII letters, digits, `-`, `_`; 1 to 80 of them.
pub fn is_safe_id(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 80
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
}

fn is_requirements_heading(line: &str) -> bool {
    let t = line.trim();
    t.starts_with("##")
        && t.trim_start_matches('#')
            .trim()
            .eq_ignore_ascii_case("requirements")
}

/// The `- ` / `* ` items after the `## Requirements` heading, up to the next heading.
fn parse_requirements(text: &str) -> Vec<String> {
    let mut lines = text.lines();
    if !lines.by_ref().any(is_requirements_heading) {
        return Vec::new();
    }
    lines
        .take_while(|l| !l.trim_start().starts_with('#'))
        .filter_map(|l| {
            let t = l.trim();
            t.strip_prefix("- ")
                .or_else(|| t.strip_prefix("* "))
                .map(|r| r.trim().to_string())
        })
        .filter(|r| !r.is_empty())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requirements_are_the_items_under_the_heading() {
        let text = "# Cache\nDesign a cache.\n- not a requirement\n\n## Requirements\n- p99 under 5 ms\n* survives a restart\n  continuation\n## Notes\n- ignored";
        assert_eq!(
            parse_requirements(text),
            vec!["p99 under 5 ms", "survives a restart"]
        );
        assert!(parse_requirements("# X\n- a\n").is_empty());
    }

    #[test]
    fn ids_that_could_escape_the_out_dir_are_refused() {
        assert!(is_safe_id("url-shortener_2"));
        assert!(!is_safe_id("../x"));
        assert!(!is_safe_id("a b"));
        assert!(!is_safe_id(""));
    }

    #[test]
    fn the_shipped_problem_set_loads() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../problems");
        let problems = load_dir(&dir).expect("the repository's problems/ loads");
        assert!(problems.len() >= 20, "{} problems", problems.len());
        for p in &problems {
            assert!(p.requirements.len() >= 3, "{}: few requirements", p.id);
        }
    }
}
