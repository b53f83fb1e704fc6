//! What a tool call chooses beyond the page's form ([`parley_web::SubmitRequest`]): the
//! termination, the mode, the budget and the context text; and how those reach the spec
//! source that builds the debate.
//!
//! [`parley_web::Backend::submit`] takes the form's request only. A tool call's options
//! travel beside it under a one-time [`Ticket`]: the server registers the options in
//! [`Tickets`] under a random key, submits the request with that key as its idempotency key,
//! and the spec source (which builds every spec, embedded or in front of a cluster) looks
//! the key up with [`Tickets::options`] and applies them before it validates the spec and
//! admits its budget. The ticket is withdrawn when the submission returns. A request
//! whose key names no ticket (the page's, the HTTP API's) builds as before.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use parley_protocol::{Budget, DebateMode, DebateSpec, TerminationCondition};

/// Prefix of the keys [`Tickets::issue`] makes (then 32 hex digits).
pub const TICKET_PREFIX: &str = "mcp-";

/// A tool call's choices that the form's request has no field for.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DebateOptions {
    /// Replaces the config's `debate.terminationCondition`.
    pub termination: Option<TerminationCondition>,
    /// Replaces the config's `debate.mode`.
    pub mode: Option<DebateMode>,
    /// Replaces the config's `debate.budget`.
    pub budget: Option<Budget>,
    /// Background every prompt carries (the spec's `context`).
    pub context: Option<String>,
}

impl DebateOptions {
    /// Writes the chosen settings into `spec` (before its validation).
    pub fn apply(&self, spec: &mut DebateSpec) {
        if let Some(t) = &self.termination {
            spec.debate.termination_condition = t.clone();
        }
        if let Some(m) = self.mode {
            spec.debate.mode = m;
        }
        if let Some(b) = self.budget {
            spec.debate.budget = Some(b);
        }
        if let Some(c) = &self.context {
            spec.context = Some(c.clone().into());
        }
    }

    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }
}

/// The options of submissions in flight, by ticket key. Cheap to clone (shared).
#[derive(Debug, Clone, Default)]
pub struct Tickets {
    /// Key → options; an entry lives while its submission runs (see [`Ticket`]).
    pending: Arc<Mutex<HashMap<String, DebateOptions>>>,
}

impl Tickets {
    /// Registers `options` under a fresh random key until the ticket is dropped.
    pub fn issue(&self, options: DebateOptions) -> Ticket {
        let key = format!("{TICKET_PREFIX}{:032x}", rand::random::<u128>());
        self.lock().insert(key.clone(), options);
        Ticket {
            key,
            tickets: self.clone(),
        }
    }

    /// The options registered under a request's idempotency key, if any.
    pub fn options(&self, key: Option<&str>) -> Option<DebateOptions> {
        let key = key?;
        if !key.starts_with(TICKET_PREFIX) {
            return None;
        }
        self.lock().get(key).cloned()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, DebateOptions>> {
        // A panic while holding the lock leaves a plain map behind: still usable.
        self.pending.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// One submission's registration in [`Tickets`]; withdrawn on drop.
#[derive(Debug)]
pub struct Ticket {
    key: String,
    tickets: Tickets,
}

impl Ticket {
    /// The key the submission carries as its idempotency key.
    pub fn key(&self) -> &str {
        &self.key
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        self.tickets.lock().remove(&self.key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ticket_names_its_options_while_it_lives() {
        let t = Tickets::default();
        let opts = DebateOptions {
            context: Some("We run on ARM".into()),
            ..Default::default()
        };
        let ticket = t.issue(opts.clone());
        assert!(ticket.key().starts_with(TICKET_PREFIX));
        assert!(ticket.key().len() <= parley_protocol::limits::MAX_IDEMPOTENCY_KEY_BYTES);
        assert_eq!(t.options(Some(ticket.key())), Some(opts));
        assert_eq!(t.options(Some("mcp-unknown")), None);
        assert_eq!(t.options(Some("page-key")), None);
        assert_eq!(t.options(None), None);
        let key = ticket.key().to_string();
        drop(ticket);
        assert_eq!(t.options(Some(&key)), None, "withdrawn on drop");
    }

    #[test]
    fn options_replace_the_configs_settings() {
        let mut spec: DebateSpec = serde_json::from_value(serde_json::json!({
            "problem": "P",
            "agents": [{"id": "a", "name": "A", "role": "architect", "model": "m"}],
            "judge": {"id": "j", "name": "J", "role": "generalist", "model": "m"},
        }))
        .unwrap();
        let opts = DebateOptions {
            termination: Some(TerminationCondition {
                kind: parley_protocol::TerminationType::Convergence,
                threshold: Some(70.0),
                max_rounds: None,
            }),
            mode: Some(DebateMode::Adaptive),
            budget: Some(Budget {
                usd: Some(0.5),
                tokens: None,
            }),
            context: Some("ctx".into()),
        };
        opts.apply(&mut spec);
        assert_eq!(spec.debate.termination_condition.threshold, Some(70.0));
        assert_eq!(spec.debate.mode, DebateMode::Adaptive);
        assert_eq!(spec.debate.budget.unwrap().usd, Some(0.5));
        assert_eq!(spec.context.as_deref(), Some("ctx"));
        assert!(DebateOptions::default().is_empty());
    }
}
