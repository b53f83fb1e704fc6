//! Prices of models: what a call costs, in US dollars.
//!
//! Prices are operator settings, never part of a submission. They come from a price file in
//! the format operators already maintain for LiteLLM (`model_prices_and_context_window.json`:
//! an object whose keys are `model` or `provider/model`, each entry with
//! `input_cost_per_token`, `output_cost_per_token`, optionally
//! `cache_read_input_token_cost`, `max_input_tokens`, `max_output_tokens`; other fields are
//! ignored) and from inline entries in the operator config
//! (`providers.<p>.models.<m>.price`, the same fields), which win over the file.
//!
//! A model with no price has cost *unknown* ([`None`]): never a guess. The `local` provider
//! (the in-process model) costs 0.
//!
//! Lookup of `(provider, model)`: `provider/model` first, then `model`.

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

/// The largest price file read (LiteLLM's own file is about 1.5 MB).
pub const MAX_PRICE_FILE_BYTES: u64 = 16 * 1024 * 1024;
/// Entries in a price file.
pub const MAX_PRICE_ENTRIES: usize = 100_000;
/// The highest price per token taken as real (a dollar per token is far beyond any model's).
pub const MAX_PRICE_PER_TOKEN: f64 = 1.0;

/// One model's price (LiteLLM's field names).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ModelPrice {
    /// Dollars per prompt token.
    pub input_cost_per_token: f64,
    /// Dollars per completion token.
    pub output_cost_per_token: f64,
    /// Dollars per cached prompt token (absent: cached tokens cost as other prompt tokens).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_read_input_token_cost: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_input_tokens: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_output_tokens: Option<u64>,
}

impl ModelPrice {
    /// Dollars for one call's usage; `cached` of the `prompt` tokens were read from the
    /// provider's prompt cache.
    pub fn cost(&self, prompt: u64, cached: u64, completion: u64) -> f64 {
        let cached = cached.min(prompt);
        let cache_rate = self
            .cache_read_input_token_cost
            .unwrap_or(self.input_cost_per_token);
        (prompt - cached) as f64 * self.input_cost_per_token
            + cached as f64 * cache_rate
            + completion as f64 * self.output_cost_per_token
    }

    /// Problems with this entry (negative, not finite, absurd), each naming `field.<name>`.
    pub fn problems(&self, field: &str) -> Vec<String> {
        let mut out = Vec::new();
        let rates = [
            ("input_cost_per_token", Some(self.input_cost_per_token)),
            ("output_cost_per_token", Some(self.output_cost_per_token)),
            (
                "cache_read_input_token_cost",
                self.cache_read_input_token_cost,
            ),
        ];
        for (name, v) in rates {
            if let Some(v) = v {
                if !(0.0..=MAX_PRICE_PER_TOKEN).contains(&v) {
                    out.push(format!(
                        "{field}.{name}: {v} is not a price per token (0 to {MAX_PRICE_PER_TOKEN} dollars)"
                    ));
                }
            }
        }
        out
    }
}

/// A price file or entry that cannot be used, naming the file and the key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("price file {file}: {message}")]
pub struct PriceError {
    pub file: String,
    pub message: String,
}

/// The operator's prices: `provider/model` or `model` → price.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PriceTable {
    /// Entries as keyed in the file or config.
    entries: BTreeMap<String, ModelPrice>,
}

impl PriceTable {
    /// An empty table: every model but `local` has an unknown cost.
    pub fn new() -> Self {
        Self::default()
    }

    /// Reads a LiteLLM-format price file (at most [`MAX_PRICE_FILE_BYTES`]).
    pub fn load(path: &Path) -> Result<Self, PriceError> {
        use std::io::Read as _;
        let name = path.display().to_string();
        let err = |message: String| PriceError {
            file: name.clone(),
            message,
        };
        let file = std::fs::File::open(path).map_err(|e| err(format!("cannot open: {e}")))?;
        let mut text = String::new();
        file.take(MAX_PRICE_FILE_BYTES + 1)
            .read_to_string(&mut text)
            .map_err(|e| err(format!("cannot read (not UTF-8 text?): {e}")))?;
        if text.len() as u64 > MAX_PRICE_FILE_BYTES {
            return Err(err(format!(
                "larger than {MAX_PRICE_FILE_BYTES} bytes; not a price file"
            )));
        }
        Self::parse(&name, &text)
    }

    /// Parses a LiteLLM-format price file's text; `file` names it in errors.
    ///
    /// Entries without `input_cost_per_token` and `output_cost_per_token` (images, audio,
    /// LiteLLM's `sample_spec`) are skipped: those models have no per-token price.
    pub fn parse(file: &str, text: &str) -> Result<Self, PriceError> {
        let err = |message: String| PriceError {
            file: file.to_string(),
            message,
        };
        let v: serde_json::Value =
            serde_json::from_str(text).map_err(|e| err(format!("not JSON: {e}")))?;
        let obj = v
            .as_object()
            .ok_or_else(|| err("not a JSON object of model → price".into()))?;
        if obj.len() > MAX_PRICE_ENTRIES {
            return Err(err(format!(
                "{} entries, the limit is {MAX_PRICE_ENTRIES}",
                obj.len()
            )));
        }
        let mut table = Self::new();
        let mut problems = Vec::new();
        for (key, entry) in obj {
            if key == "sample_spec" {
                continue;
            }
            let key_shown = crate::preview(key, 80);
            let Some(e) = entry.as_object() else {
                problems.push(format!("{key_shown:?}: not an object"));
                continue;
            };
            let rate = |name: &str, problems: &mut Vec<String>| -> Option<f64> {
                let v = e.get(name)?;
                match v.as_f64() {
                    Some(x) => Some(x),
                    None => {
                        problems.push(format!("{key_shown:?}.{name}: {v} is not a number"));
                        None
                    }
                }
            };
            let count = |name: &str, problems: &mut Vec<String>| -> Option<u64> {
                let v = e.get(name)?;
                match v.as_u64() {
                    Some(x) => Some(x),
                    None => {
                        problems.push(format!(
                            "{key_shown:?}.{name}: {v} is not a whole number of tokens"
                        ));
                        None
                    }
                }
            };
            let input = rate("input_cost_per_token", &mut problems);
            let output = rate("output_cost_per_token", &mut problems);
            let cache = rate("cache_read_input_token_cost", &mut problems);
            let max_input_tokens = count("max_input_tokens", &mut problems);
            let max_output_tokens = count("max_output_tokens", &mut problems);
            let (Some(input), Some(output)) = (input, output) else {
                continue;
            };
            let price = ModelPrice {
                input_cost_per_token: input,
                output_cost_per_token: output,
                cache_read_input_token_cost: cache,
                max_input_tokens,
                max_output_tokens,
            };
            problems.extend(price.problems(&format!("{key_shown:?}")));
            table.entries.insert(key.clone(), price);
            if problems.len() > 20 {
                break;
            }
        }
        if !problems.is_empty() {
            problems.truncate(20);
            return Err(err(problems.join("; ")));
        }
        Ok(table)
    }

    /// Adds the inline prices of the operator config (`providers.<p>.models.<m>.price`),
    /// which win over the file's.
    pub fn with_inline(mut self, providers: &BTreeMap<String, crate::ProviderLimits>) -> Self {
        for (p, limits) in providers {
            for (m, model) in &limits.models {
                if let Some(price) = model.price {
                    self.entries.insert(format!("{p}/{m}"), price);
                }
            }
        }
        self
    }

    /// The price of `model` on `provider`: `provider/model`, else `model`.
    pub fn lookup(&self, provider: &str, model: &str) -> Option<&ModelPrice> {
        self.entries
            .get(&format!("{provider}/{model}"))
            .or_else(|| self.entries.get(model))
    }

    /// Dollars for one call: 0 on `local`, `None` (unknown) without a price.
    pub fn cost(
        &self,
        provider: &str,
        model: &str,
        prompt: u64,
        cached: u64,
        completion: u64,
    ) -> Option<f64> {
        if provider == "local" {
            return Some(0.0);
        }
        self.lookup(provider, model)
            .map(|p| p.cost(prompt, cached, completion))
    }

    /// The price `provider`/`model` is charged at (`local`: all zero), if known.
    pub fn price_of(&self, provider: &str, model: &str) -> Option<ModelPrice> {
        if provider == "local" {
            return Some(ModelPrice::default());
        }
        self.lookup(provider, model).copied()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

/// Sums two costs: unknown when either is.
pub fn add_cost(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    Some(a? + b?)
}

/// A cost as shown to people: `$0.0123`, or `unknown`.
pub fn format_cost(c: Option<f64>) -> String {
    match c {
        None => "unknown".into(),
        Some(0.0) => "$0".into(),
        Some(v) if v < 0.01 => format!("${v:.6}"),
        Some(v) => format!("${v:.4}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn litellm_entries_are_read_and_looked_up_by_provider_then_model() {
        let text = r#"{
            "sample_spec": {"max_tokens": "LEGACY", "input_cost_per_token": 0.0},
            "gpt-4o": {"input_cost_per_token": 2.5e-6, "output_cost_per_token": 1e-5,
                       "cache_read_input_token_cost": 1.25e-6, "max_input_tokens": 128000,
                       "litellm_provider": "openai", "mode": "chat"},
            "openrouter/gpt-4o": {"input_cost_per_token": 3e-6, "output_cost_per_token": 1.2e-5},
            "dall-e-3": {"output_cost_per_pixel": 0.0}
        }"#;
        let t = PriceTable::parse("p.json", text).unwrap();
        assert_eq!(
            t.lookup("openai", "gpt-4o").unwrap().input_cost_per_token,
            2.5e-6
        );
        assert_eq!(
            t.lookup("openrouter", "gpt-4o")
                .unwrap()
                .input_cost_per_token,
            3e-6
        );
        assert!(t.lookup("openai", "dall-e-3").is_none());
        // 1000 prompt tokens of which 400 cached, 100 completion tokens.
        let c = t.cost("openai", "gpt-4o", 1000, 400, 100).unwrap();
        assert!((c - (600.0 * 2.5e-6 + 400.0 * 1.25e-6 + 100.0 * 1e-5)).abs() < 1e-12);
        assert_eq!(t.cost("openai", "unpriced", 10, 0, 10), None);
        assert_eq!(t.cost("local", "anything", 10, 0, 10), Some(0.0));
    }

    #[test]
    fn bad_files_name_the_file_and_the_key() {
        let e = PriceTable::parse("p.json", "not json").unwrap_err();
        assert!(e.to_string().contains("p.json") && e.to_string().contains("not JSON"));
        let e = PriceTable::parse(
            "p.json",
            r#"{"m": {"input_cost_per_token": -1e-6, "output_cost_per_token": 1e-6}}"#,
        )
        .unwrap_err();
        assert!(e.message.contains("\"m\".input_cost_per_token"), "{e}");
        let e = PriceTable::parse(
            "p.json",
            r#"{"m": {"input_cost_per_token": "cheap", "output_cost_per_token": 1e-6}}"#,
        )
        .unwrap_err();
        assert!(e.message.contains("\"m\".input_cost_per_token"), "{e}");
        let e = PriceTable::parse("p.json", "[1,2]").unwrap_err();
        assert!(e.message.contains("not a JSON object"), "{e}");
    }

    #[test]
    fn a_huge_file_is_refused_without_reading_it_all() {
        let dir = std::env::temp_dir().join(format!("parley-prices-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("junk.json");
        let junk = vec![b'x'; (MAX_PRICE_FILE_BYTES + 10) as usize];
        std::fs::write(&path, junk).unwrap();
        let e = PriceTable::load(&path).unwrap_err();
        assert!(e.message.contains("larger than"), "{e}");
        let e = PriceTable::load(&dir.join("missing.json")).unwrap_err();
        assert!(e.message.contains("cannot open"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
