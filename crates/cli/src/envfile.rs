//! `--env-file F` and `./.env`: environment variables (API keys) for `run` and `eval`.
//!
//! Loaded in `main` before the async runtime and telemetry start (so no other thread reads
//! the environment while it changes). A variable already set in the environment is never
//! overridden. Values are never printed; `--verbose` names the variables set.
//!
//! Format (dotenv's common subset): `KEY=VALUE` lines, optional `export ` prefix, `#`
//! comments on their own line or after an unquoted value, values in single quotes (kept
//! verbatim) or double quotes (`\n`, `\"`, `\\` escapes), blank lines ignored.

use std::path::{Path, PathBuf};

use crate::CliError;

/// The file read when no `--env-file` is given (silently skipped when absent).
pub const DEFAULT_ENV_FILE: &str = ".env";

/// Loads `explicit` (an error when missing) or `./.env` (when present). Returns the names
/// of the variables it set.
pub fn load(explicit: Option<&Path>, verbose: bool) -> Result<Vec<String>, CliError> {
    let path = match explicit {
        Some(p) => p.to_path_buf(),
        None => {
            let p = PathBuf::from(DEFAULT_ENV_FILE);
            if !p.is_file() {
                if verbose {
                    eprintln!("No {DEFAULT_ENV_FILE} file in the working directory");
                }
                return Ok(Vec::new());
            }
            p
        }
    };
    let text = std::fs::read_to_string(&path).map_err(|e| {
        CliError::usage(format!(
            "cannot read environment file {}: {e}",
            path.display()
        ))
    })?;
    let vars = parse(&text).map_err(|(line, why)| {
        CliError::usage(format!(
            "environment file {} line {line}: {why}",
            path.display()
        ))
    })?;
    let mut set = Vec::new();
    let mut kept = 0;
    for (k, v) in vars {
        if std::env::var_os(&k).is_none() {
            std::env::set_var(&k, v);
            set.push(k);
        } else {
            kept += 1;
        }
    }
    if verbose {
        let names = if set.is_empty() {
            "no variables".to_string()
        } else {
            set.join(", ")
        };
        eprintln!(
            "Loaded {names} from {} ({kept} already set in the environment were kept)",
            path.display()
        );
    }
    Ok(set)
}

/// The `(name, value)` pairs of an env file, in order; `Err((line, reason))` on a line that
/// is not `NAME=VALUE` (the reason never quotes the value).
pub fn parse(text: &str) -> Result<Vec<(String, String)>, (usize, String)> {
    let mut out = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let line = line.strip_prefix("export ").unwrap_or(line).trim_start();
        let Some((key, value)) = line.split_once('=') else {
            return Err((i + 1, "expected NAME=VALUE".into()));
        };
        let key = key.trim();
        if key.is_empty()
            || !key
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.')
            || key.starts_with(|c: char| c.is_ascii_digit())
        {
            return Err((i + 1, format!("invalid variable name {key:?}")));
        }
        let value = value.trim();
        let value = if let Some(rest) = value.strip_prefix('"') {
            let mut v = String::new();
            let mut chars = rest.chars();
            let mut closed = false;
            while let Some(c) = chars.next() {
                match c {
                    '"' => {
                        closed = true;
                        break;
                    }
                    '\\' => match chars.next() {
                        Some('n') => v.push('\n'),
                        Some('t') => v.push('\t'),
                        Some(other) => v.push(other),
                        None => v.push('\\'),
                    },
                    c => v.push(c),
                }
            }
            if !closed {
                return Err((i + 1, format!("{key}: unterminated double quote")));
            }
            v
        } else if let Some(rest) = value.strip_prefix('\'') {
            match rest.find('\'') {
                Some(end) => rest[..end].to_string(),
                None => return Err((i + 1, format!("{key}: unterminated single quote"))),
            }
        } else {
            match value.find(" #") {
                Some(at) => value[..at].trim_end().to_string(),
                None => value.to_string(),
            }
        };
        out.push((key.to_string(), value));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_common_dotenv_forms() {
        let text =
            "# keys\nA=1\nexport B = two words # note\nC=\"x\\ny # kept\"\nD='$raw \\n'\n\nE=\n";
        let vars = parse(text).unwrap();
        let get = |k: &str| vars.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
        assert_eq!(get("A"), Some("1"));
        assert_eq!(get("B"), Some("two words"));
        assert_eq!(get("C"), Some("x\ny # kept"));
        assert_eq!(get("D"), Some("$raw \\n"));
        assert_eq!(get("E"), Some(""));
    }

    #[test]
    fn bad_lines_name_the_line_not_the_value() {
        let e = parse("A=1\nnot a pair\n").unwrap_err();
        assert_eq!(e.0, 2);
        let e = parse("KEY=\"secret-value\n").unwrap_err();
        assert!(
            e.1.contains("KEY") && !e.1.contains("secret-value"),
            "{}",
            e.1
        );
    }
}
